"""`alloctune sweep WORKLOAD.yaml`: measure (or replay) a grid of allocator settings and choose the best."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from dataclasses import fields, replace

from rich.text import Text

from ..decide.parameters import DEFAULT_MAX_SLOWDOWN
from ..decide.rounds import DEFAULT_MAX_REPEATS
from ..report.progress import Phases, estimate_text
from ..report.tables import driver_phrase
from ..results.folder import DEFAULT_RESULTS_ROOT
from ..results.names import BEST_FILE, PLOT_FILE, SUMMARY_FILE, TRIALS_FILE
from ..results.records import Backend, TrialRecord
from ..settings.conf import conf_label
from ..sim.limits import DEFAULT_MAX_SETTINGS
from ..sweeper.options import (AUTO_REPEATS, CONFIRM_REPEATS, HYBRID_FINALISTS, Estimate, ExecutorKind, SweepCallbacks,
                               SweepOptions)
from ..units import format_bytes, format_number, plural
from ..workload.spec import DEFAULT_TIMEOUT_S, DEFAULT_WARMUP_STEPS
from .args import add_dry_run, console, flagged, fraction, gpu_list, positive_int, seconds, written

# The options this command passes on, as its flags: SweepOptions fields, a command's last (workload/command.py).
# Each flag's dest is its field's name, so the options are built from this table; and a library message that names
# a field shows its flag here.
FLAGS = {
    "preset": "--preset", "grid": "--conf", "repeats": "--repeats", "max_repeats": "--max-repeats",
    "time_budget_s": "--time-budget", "gpus": "--gpus", "gpus_per_trial": "--gpus-per-trial", "budget": "--budget",
    "max_slowdown": "--max-slowdown", "timeout_s": "--timeout", "pythons": "--python", "backend": "--backend",
    "executor": "--executor", "ray_address": "--ray-address", "ray_accelerator": "--ray-accelerator",
    "trace": "--trace", "search": "--search", "finalists": "--finalists", "results_root": "--results",
    "out": "--out", "fresh": "--fresh", "check_growth": "--check-growth",
    "metric_regex": "--metric-regex", "unit": "--unit", "warmup_steps": "--warmup-steps", "steps": "--steps",
    "step_on": "--step-on", "name": "--name", "cwd": "--cwd", "isolate_cwd": "--isolate-cwd",
    "dry_run": "--dry-run", "arch": "--arch",
}


# What an interrupted sweep leaves: nothing before a trial is saved (a resumed folder's, or this run's first)
STARTING = "no trial had finished; running the same command again starts the sweep"
RESUME = "finished trials are saved, run the same command again to resume"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="measure a workload under a grid of allocator settings and choose the best",
        description="Run WORKLOAD under each allocator setting of a grid, each trial in a fresh process (or replay "
                    "its recorded allocation trace through the simulator), and write "
                    f"{DEFAULT_RESULTS_ROOT}/<workload>-<preset>-<time>/ with {TRIALS_FILE}, {SUMMARY_FILE}, "
                    f"{BEST_FILE} and {PLOT_FILE}. Running the same sweep again resumes it. "
                    "Or sweep your own command as it is: alloctune sweep [options] -- python3 train.py ... "
                    "(every Python process of it that uses CUDA is measured; the peak is the maximum over them).")
    _what(p)
    _command(p.add_argument_group("your own command (sweep -- COMMAND ...)"))
    _how(p)
    _output(p)
    p.set_defaults(func=run, flags=FLAGS, interrupted=STARTING)


def _what(p) -> None:
    """The workload, its settings and how often each runs, on which GPUs."""
    p.add_argument("target", nargs="*", metavar="WORKLOAD.yaml | - | -- COMMAND",
                   help="workload file (YAML, see workloads/README.md; - reads it from standard input, and its "
                        "relative paths (entry, trace, cwd) are then relative to the current folder), or after "
                        "'--' your own command")
    p.add_argument("--preset", help="workload preset, e.g. 24gib or h200 (default: the file's default_preset)")
    p.add_argument("--conf", action="append", metavar="CONF", dest="grid",
                   help="a setting to include instead of the default grid (repeatable); the default is always added")
    p.add_argument("--grid", dest="grid_file", metavar="FILE",
                   help="a file listing the settings to sweep (- reads standard input)")
    p.add_argument("--repeats", type=_repeats, default=CONFIRM_REPEATS,
                   help="fresh processes per setting, interleaved across settings: confirm (default): a hybrid "
                        "sweep predicts each setting's speed from the driver calls its replay makes and confirms "
                        "the winner in one paired run (the default, then it), with rounds only where the "
                        "prediction cannot answer (elsewhere: as auto); auto: rounds of the default and each "
                        "setting still in contention until a sequential test at --max-slowdown answers; or a "
                        "number")
    p.add_argument("--max-repeats", type=_repeats_limit, default=DEFAULT_MAX_REPEATS,
                   help=f"with rounds (auto, confirm): at most this many (default: {DEFAULT_MAX_REPEATS})")
    p.add_argument("--time-budget", type=seconds, metavar="S", dest="time_budget_s",
                   help="with rounds (auto, confirm): start no round that would end after S seconds of measuring")
    p.add_argument("--gpus", type=gpu_list,
                   help="comma-separated GPU indices; one trial runs on each at a time (default: 0)")
    p.add_argument("--gpus-per-trial", type=int, default=SweepOptions.gpus_per_trial, metavar="N",
                   help="GPUs each trial gets (CUDA_VISIBLE_DEVICES), disjoint across trials running at once, e.g. "
                        "--gpus 0,1,2,3 --gpus-per-trial 2 for a 2-rank torchrun command (default: %(default)s)")


def _command(command) -> None:
    """How the user's own command is run and measured (workload/command.py)."""
    command.add_argument("--metric-regex", metavar="REGEX",
                         help="read throughput from the command's output: the number in group 1 (or group "
                              "'value'), averaged over the matches after the first (default: alloctune.step() "
                              "marks, else --step-on calls, else optimizer steps, else one run = one unit of wall "
                              "time)")
    command.add_argument("--unit", help="what the throughput counts, optionally with what one counted step is worth: "
                                        "samples, or '32 samples' (default: runs, units or steps)")
    command.add_argument("--warmup-steps", type=int, metavar="N",
                         help="steps (marks, --step-on calls or optimizer steps) left out of the throughput as "
                              f"warm-up (default: {DEFAULT_WARMUP_STEPS})")
    command.add_argument("--steps", type=positive_int, default=0, metavar="N",
                         help="end each trial after N steps past the warm-up, every process at the same step: a "
                              "window of a long job (memory then covers the warm-up and the window)")
    command.add_argument("--step-on", metavar="forward | MODULE:QUALNAME",
                         help="for a job without an optimizer: count steps as calls of the top-level model "
                              "(forward), or as returns of a named callable, e.g. "
                              "transformers.generation.utils:GenerationMixin.generate")
    command.add_argument("--name", help="name of the results folder stem (default: cmd-<script name>)")
    command.add_argument("--cwd", help="working folder to run the command in (default: this one)")
    command.add_argument("--isolate-cwd", action="store_true",
                         help="run each trial in its own empty working folder (for commands that write files)")
    add_dry_run(command, "without a GPU: trace the command once with fake tensors standing for CUDA tensors (as "
                         "'record --dry-run'), replay every setting on that trace, and show the plan a hybrid sweep "
                         "would run on the GPU; every figure is replayed from that trace, nothing is measured")
    command.add_argument("--check-growth", type=positive_int, metavar="K",
                         help="a longer check, for what a short trial cannot show: sample reserved and allocated "
                              "memory at steps K and 2K of each trial (the job must run 2K steps) and refuse a "
                              "setting whose reserved memory keeps rising while allocated does not")


def _how(p) -> None:
    """How settings are judged: limits, interpreters, backend and executor, replay and search."""
    p.add_argument("--budget", help="memory budget per trial: a size (24GiB) or a fraction of the device (0.5)")
    p.add_argument("--max-slowdown", type=fraction, default=DEFAULT_MAX_SLOWDOWN,
                   help="reject settings significantly slower than the default by more than this fraction "
                        f"(default: {DEFAULT_MAX_SLOWDOWN})")
    p.add_argument("--timeout", type=seconds, metavar="TIMEOUT", dest="timeout_s",
                   help=f"per-trial time limit in seconds (default: the workload's, or {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--python", action="append", dest="pythons", metavar="PATH",
                   help="interpreter to run trials with (repeatable: the same grid under each, e.g. two torches)")
    p.add_argument("--backend", choices=[b.value for b in Backend], default=Backend.AUTO.value,
                   help="cuda: measure on the GPU; sim: replay the recorded trace; hybrid: record the trace (in a "
                        "command's extra first trial, or a workload's first default trial), replay every setting, "
                        "measure the best few; auto (default): with a GPU, hybrid for '-- COMMAND' and cuda for a "
                        "workload file; else sim")
    p.add_argument("--executor", choices=[e.value for e in ExecutorKind], default=ExecutorKind.LOCAL.value,
                   help="where measured trials run: local (default) child processes on this machine's GPUs, or ray: "
                        "one Ray task per trial across a cluster (pip install 'alloctune[ray]')")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="Ray cluster to use with --executor ray (default: RAY_ADDRESS, else the cluster 'ray start' "
                        "runs here, else a new local one)")
    p.add_argument("--ray-accelerator", metavar="TYPE",
                   help="GPU model to sweep on with --executor ray, as Ray names it (e.g. H100, A100); default: "
                        "that of the node where the interpreter is probed")
    p.add_argument("--trace", help="allocation trace to replay: for --backend sim (default: the workload's) or "
                                   "hybrid (default: recorded during the default's first trial on the GPU); one "
                                   "recorded from another workload is refused")
    p.add_argument("--search", nargs="?", type=positive_int, const=DEFAULT_MAX_SETTINGS, metavar="N",
                   help="with --backend sim or hybrid: instead of the grid, search the settings space of the "
                        "target torch by replaying up to N settings (default %(const)s), and sweep its Pareto front "
                        "and any --conf settings (see 'alloctune search')")
    p.add_argument("--finalists", type=positive_int, default=HYBRID_FINALISTS, metavar="N",
                   help="--backend hybrid: how many of the best replayed settings to measure on the GPU beside "
                        "the default (default: %(default)s)")


def _output(p) -> None:
    """Where the results go, and what is printed."""
    p.add_argument("--results", default=DEFAULT_RESULTS_ROOT, metavar="RESULTS", dest="results_root",
                   type=written("a folder of results folders"),
                   help=f"folder under which results folders are created (default: {DEFAULT_RESULTS_ROOT}, in the "
                        f"current folder)")
    p.add_argument("--out", type=written("a results folder"), help="exact results folder to write (or resume)")
    p.add_argument("--fresh", action="store_true", help="start a new results folder instead of resuming")
    p.add_argument("--json", action="store_true",
                   help="print one JSON document instead of the tables: the results folder, its decisions (as "
                        "'report --json' prints them) and the settings skipped, with why; progress stays on "
                        "standard error")


def run(args) -> int:
    from ..api.sweep import sweep

    target, options = _target(args), _options(args)
    with Phases(console(stderr=True)) as shown:
        outcome = sweep(target, options, callbacks=_callbacks(shown, args))
    # From here on every file is written: an interrupt stops the printing alone, and says where the results are.
    args.interrupted = (f"the sweep had finished; its results are in {outcome.folder.path}/ ({SUMMARY_FILE}, "
                        f"{BEST_FILE}, {PLOT_FILE}, {TRIALS_FILE})")
    if args.json:   # the notices as the text says them: options by this command's flags
        flagged_notices = tuple(flagged(notice, FLAGS) for notice in outcome.notices)
        print(json.dumps(replace(outcome, notices=flagged_notices).to_json(), indent=2))
    else:
        _print(outcome, args)
    return 0


def _options(args):
    """The sweep's options from the flags (each flag's dest is its field's name), with --grid's settings."""
    from ..settings.grid import load_grid_file

    grid = list(args.grid or [])
    if args.grid_file:
        grid += load_grid_file(args.grid_file)
    return SweepOptions(**{field.name: getattr(args, field.name) for field in fields(SweepOptions)
                           if field.name in FLAGS and field.name != "grid"}, grid=grid or None,
                        started_as=command_line())


def _callbacks(shown: Phases, args):
    """What the sweep tells as it goes, on standard error: each trial (with Ray: its node), the search's progress,
    the GPU trials' estimate, notices naming flags, phases; and, once a trial is saved, what an interrupt leaves."""
    where = args.executor == ExecutorKind.RAY

    def progress(record: TrialRecord, done: int, total: int) -> None:
        args.interrupted = RESUME
        shown.advance(done, total)
        shown.print(_trial_line(record, where=where))

    def search_progress(env_id: str, done: int, total: int, best: str) -> None:
        # the best so far when it is short: a setting is never cut
        shown.phase(f"search {env_id}" + (f" (best: {best})" if best and len(best) <= 40 else ""), (done, total))

    said: set[bool] = set()   # printed once untimed, once with a time (after the first trial)

    def estimate(e: Estimate) -> None:
        args.interrupted = RESUME if e.done else args.interrupted   # trials saved: a resumed folder's, or this run's
        timed = e.seconds_left is not None
        if timed not in said:
            said.update({False, timed})
            whole = (e.seconds_done or 0) + (e.seconds_left or 0) if timed else None
            shown.print(f"estimate: {estimate_text(e.trials, whole)}")
        shown.note(estimate_text(e.trials, e.seconds_left, left=True))

    return SweepCallbacks(progress=progress, search_progress=search_progress,
                          notice=lambda text: shown.print(Text.assemble(("notice:", "yellow"), " ",
                                                                        flagged(text, FLAGS))),
                          phase=shown.phase, estimate=estimate)


def _print(outcome, args) -> None:
    """The finished sweep on standard output: what was skipped, each choice's table and reasons, the GPU time, where
    the results are and what to run next."""
    from rich.text import Text

    from ..report.layout import INDENT, command, say
    from ..decide.choice import something_to_export
    from ..report.analysis import choice_record
    from ..report.ranked import print_choice
    from ..report.words import skipped_words

    out = console()
    for skip in outcome.skipped:
        say(out, Text(f"skipped {conf_label(skip.conf)} ({skip.env_id}): {skipped_words(skip)}", style="dim"))
    for choice in outcome.choices:
        print_choice(out, choice_record(choice))
    if gpu := _gpu_lines(outcome) + _plan_lines(outcome):
        out.print()
        for line in gpu:
            say(out, Text(line))
    folder = outcome.folder.path
    # The folder is one word (never broken); the commands are to copy: quoted for a shell, broken between words only,
    # with '\'; nothing of them read as rich markup (a folder may be named '[bold]').
    written = [name for name in (SUMMARY_FILE, BEST_FILE, PLOT_FILE, TRIALS_FILE) if (folder / name).exists()]
    out.print()
    say(out, Text(f"Results: {folder}/ ({', '.join(written)})"))
    closing = []
    if something_to_export(outcome.choices):
        closing.append(("Next:", ["alloctune", "export", str(folder), "--format", "env", "-o", "alloc.env"]))
    # This run's own command, whose options the tables above used: sweep.json keeps that of the run that made the
    # folder, which may have printed --json or decided with another --max-slowdown.
    if outcome.backend == Backend.SIM:
        closing.append(("Confirm on a GPU:", _on_gpu(command_line())))
    for label, words in closing:
        for line in command(label, words, out.width):
            out.print(Text(line), soft_wrap=True)
    if outcome.backend == Backend.SIM and (piped := _from_stdin(args)):
        say(out, Text(f"{INDENT}(needs {piped} on standard input again, as this sweep had it)"))
    if outcome.backend == Backend.SIM and outcome.provenance.dry_run is not None:   # a command, run here
        say(out, Text(f"{INDENT}(in the same environment: variables your command reads are not in the line above)"))


def _from_stdin(args) -> str | None:
    """What this sweep read from standard input, which the same command on the GPU reads again (no file names it):
    the workload (`sweep -`) or the settings (`--grid -`)."""
    if args.target[:1] == ["-"]:
        return "the workload"
    return "the settings list" if args.grid_file == "-" else None


def _gpu_lines(outcome) -> list[str]:
    """What the sweep spent on the GPU; for a hybrid sweep, how it got there."""
    trials = [r for r in outcome.folder.trials() if r.backend != Backend.SIM]
    if not trials:
        return []
    minutes = sum(r.wall_seconds or 0 for r in trials) / 60
    lines = [f"GPU trials: {len(trials)}, {minutes:.1f} min in all"]
    if outcome.backend == Backend.HYBRID:
        replayed = {r.conf for r in outcome.folder.trials() if r.backend == Backend.SIM}
        measured = {r.conf for r in trials if not r.extra}
        recorded = sum(r.recording for r in trials)
        lines.append(f"hybrid: {recorded} recorded the trace, {len(replayed)} settings replayed, "
                     f"{len(measured)} measured on the GPU")
    return lines


def _plan_lines(outcome) -> list[str]:
    """A dry run's sweep: every figure above is replayed from its trace, and what a hybrid sweep would run on the GPU
    instead."""
    from ..report.provenance import origin

    plan = outcome.gpu_plan
    if plan is None:
        return []
    beside = sorted({c for confs in plan.measured.values() for c in confs if c})   # the default ('') said first
    return [f"Nothing was measured: every figure is replayed from {origin(outcome.provenance)}.",
            f"On a GPU, a hybrid sweep of this command (below) would run about {plural(plan.trials, 'GPU trial')}: "
            f"one records the trace, every setting is replayed as here, then the GPU measures the default"
            + (f" and {', '.join(beside)}" if beside else "") + "."]


def _repeats(text: str) -> int | str:
    """--repeats: 'confirm', 'auto' or a positive count."""
    if text in (AUTO_REPEATS, CONFIRM_REPEATS):
        return text
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(f"expected confirm, auto or a whole number of repeats >= 1, got {text!r}")


def _repeats_limit(text: str) -> int:
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(f"expected auto or a whole number of repeats >= 1, got {text!r}")


def _target(args):
    """What to sweep as the API takes it: the workload file's path, or the command's words."""
    from ..errors import AlloctuneError
    from ..workload.loader import names_workload

    if not args.target:
        raise AlloctuneError("give a workload file, or '-- COMMAND ...' to sweep your own program")
    if not names_workload(args.target):
        return args.target
    if args.target[0] == "-" and args.grid_file == "-":   # checked before --grid - reads it
        raise AlloctuneError("the workload and --grid cannot both come from standard input: give one as a file")
    return args.target[0]


def command_line() -> str:
    """This `alloctune sweep` as the user would type it again: sweep.json's `started_as` (of the run that made the
    folder), and what the GPU confirmation of this run starts from."""
    program = os.path.basename(sys.argv[0])
    return shlex.join(["alloctune" if program in ("__main__.py", "alloctune") else program, *sys.argv[1:]])


def _on_gpu(command: str) -> list[str]:
    """The same sweep command, measured on the GPU: every option kept, the backend and trace swapped, and --out
    dropped (that folder holds the simulated sweep, which a measured one may not resume); so is --fresh (the GPU sweep
    has its own folder anyway, and with it running the command again after an interrupt, as the sweep then says to,
    would start over instead of resuming the GPU trials). A search needs a trace:
    on the GPU, hybrid records one; so does a dry run's command, which --dry-run and --arch leave. The command
    after '--' stays as it was, its own options too. Options are known by their names: the parser takes no
    abbreviation (cli/main._Parser), and no value of one option starts with '--' but as --option=value."""
    words = shlex.split(command)
    end = words.index("--") if "--" in words else len(words)
    valued, alone = ("--backend", "--trace", "--out", "--arch"), ("--dry-run", "--fresh")
    out, skip = [], False
    for word in words[:end]:
        if skip:
            skip = False
        elif word in valued:
            skip = True
        elif word not in alone and not word.startswith(tuple(f"{flag}=" for flag in valued)):
            out.append(word)
    hybrid = any(word in ("--search", "--dry-run") or word.startswith("--search=") for word in words[:end])
    return out + ["--backend", str(Backend.HYBRID if hybrid else Backend.CUDA)] + words[end:]


def _where(record: TrialRecord) -> str:
    """For a command of several processes: which one peaked."""
    from ..results.records import process_name, peak_row

    row = peak_row(record.processes or [])
    if row is None or len(record.processes or []) < 2:
        return ""
    return f" ({process_name(row)}, of {len(record.processes or [])} processes)"


def _trial_line(record: TrialRecord, where: bool = False) -> Text:
    m = record.measurement
    # a replay is not a run: no repeat number, and said, so that it is not read as a GPU trial
    what = (f"{conf_label(record.conf)} (replayed)" if record.backend == Backend.SIM else
            f"{conf_label(record.conf)} #{record.repeat + 1}" + (" (recording the trace)" if record.recording else ""))
    if where and record.node:  # on a cluster, which node and GPUs ran it
        what += f" on {record.node}" + (f" GPU {record.gpus}" if record.gpus else "")
    if record.state.value == "ok" and m:
        speed = f", {format_number(m.throughput)} {m.unit}/s" if m.throughput else ""
        speed += f", {driver_phrase(m.driver_work)}" if m.driver_work else ""
        return Text.assemble("  ", ("ok", "green"), f" {what}: peak reserved {format_bytes(m.peak_reserved_bytes)}"
                                                    f"{speed}{_where(record)}")
    last = (record.error or "").strip().splitlines()
    return Text.assemble("  ", (record.state.value, "red"), f" {what}: {last[-1] if last else ''}")   # a job's words
