"""`alloctune sweep WORKLOAD.yaml`: measure (or replay) a grid of allocator settings and choose the best."""
from __future__ import annotations

import argparse
import json
import shlex
from dataclasses import asdict

from ..decide.rounds import DEFAULT_MAX_REPEATS
from ..report.progress import Phases
from ..results.records import DEFAULT_MAX_SLOWDOWN, Backend, TrialRecord
from ..units import format_bytes, format_number
from .args import console, fraction, gpu_list, positive_int, seconds
from .report import decisions


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="measure a workload under a grid of allocator settings and choose the best",
        description="Run WORKLOAD under each allocator setting of a grid, each trial in a fresh process (or replay "
                    "its recorded allocation trace through the simulator), and write results/<workload>-<preset>-<time>/ "
                    "with trials.jsonl, summary.md, best.env and plot.png. Running the same sweep again resumes it. "
                    "Or sweep your own command as it is: alloctune sweep [options] -- python3 train.py ... "
                    "(every Python process of it that uses CUDA is measured; the peak is the maximum over them).")
    p.add_argument("target", nargs="*", metavar="WORKLOAD.yaml | - | -- COMMAND ...",
                   help="workload file (YAML, see workloads/README.md; - reads it from standard input, and its "
                        "relative paths (entry, trace, cwd) are then relative to the current folder), or after "
                        "'--' your own command")
    p.add_argument("--preset", help="workload preset, e.g. 24gib or h200 (default: the file's default_preset)")
    p.add_argument("--conf", action="append", metavar="CONF", dest="grid",
                   help="a setting to include instead of the default grid (repeatable); the default is always added")
    p.add_argument("--grid", dest="grid_file", metavar="FILE",
                   help="a file listing the settings to sweep (- reads standard input)")
    p.add_argument("--repeats", type=_repeats, default="auto",
                   help="fresh processes per setting, interleaved across settings: a number, or auto (default): "
                        "rounds of the default and each setting still in contention until the 95%% interval of "
                        "its throughput ratio to the default is within --max-slowdown")
    p.add_argument("--max-repeats", type=_repeats_limit, default=DEFAULT_MAX_REPEATS,
                   help=f"with --repeats auto: at most this many rounds (default: {DEFAULT_MAX_REPEATS})")
    p.add_argument("--time-budget", type=seconds, metavar="S",
                   help="with --repeats auto: start no round that would end after S seconds of measuring")
    p.add_argument("--gpus", type=gpu_list,
                   help="comma-separated GPU indices; one trial runs on each at a time (default: 0)")
    p.add_argument("--gpus-per-trial", type=int, default=1, metavar="N",
                   help="GPUs each trial gets (CUDA_VISIBLE_DEVICES), disjoint across trials running at once, e.g. "
                        "--gpus 0,1,2,3 --gpus-per-trial 2 for a 2-rank torchrun command (default: 1)")
    command = p.add_argument_group("your own command (sweep -- COMMAND ...)")
    command.add_argument("--metric-regex", metavar="REGEX",
                         help="read throughput from the command's output: the number in group 1 (or group "
                              "'value'), averaged over the matches after the first (default: alloctune.step() "
                              "marks, else one run = one unit of wall time)")
    command.add_argument("--unit", help="what the throughput counts (default: runs, or units)")
    command.add_argument("--warmup-steps", type=int, default=2, metavar="N",
                         help="alloctune.step() marks left out of the throughput as warm-up (default: 2)")
    command.add_argument("--name", help="name of the results folder stem (default: cmd-<script name>)")
    command.add_argument("--cwd", help="working folder to run the command in (default: this one)")
    command.add_argument("--isolate-cwd", action="store_true",
                         help="run each trial in its own empty working folder (for commands that write files)")
    p.add_argument("--budget", help="memory budget per trial: a size (24GiB) or a fraction of the device (0.5)")
    p.add_argument("--max-slowdown", type=fraction, default=DEFAULT_MAX_SLOWDOWN,
                   help="reject settings significantly slower than the default by more than this fraction "
                        f"(default: {DEFAULT_MAX_SLOWDOWN})")
    p.add_argument("--timeout", type=seconds, help="per-trial time limit in seconds (default: the workload's, or 600)")
    p.add_argument("--python", action="append", dest="pythons", metavar="PATH",
                   help="interpreter to run trials with (repeatable: the same grid under each, e.g. two torch versions)")
    p.add_argument("--backend", choices=[b.value for b in Backend], default=Backend.AUTO.value,
                   help="cuda: measure on the GPU; sim: replay the recorded trace; hybrid: simulate all, measure the "
                        "best few; auto (default): cuda when a GPU is visible, else sim")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
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
    p.add_argument("--search", nargs="?", type=positive_int, const=400, metavar="N",
                   help="with --backend sim or hybrid: instead of the grid, search the settings space of the "
                        "target torch by replaying up to N settings (default 400), and sweep its Pareto front "
                        "(see 'alloctune search')")
    p.add_argument("--finalists", type=positive_int, default=3, metavar="N",
                   help="--backend hybrid: how many of the best simulated settings to measure on the GPU beside "
                        "the default (default: 3)")
    p.add_argument("--results", default="results", help="folder under which results folders are created (default: results)")
    p.add_argument("--out", help="exact results folder to write (or resume)")
    p.add_argument("--fresh", action="store_true", help="start a new results folder instead of resuming")
    p.add_argument("--json", action="store_true",
                   help="print one JSON document instead of the tables: the results folder, its decisions (as "
                        "'report --json' prints them) and the settings skipped, with why; progress stays on "
                        "standard error")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..report.summary import ranked_table
    from ..settings.grid import load_grid_file
    from ..sweeper.sweep import sweep

    err = console(stderr=True)
    workload = _workload(args)
    grid = list(args.grid or [])
    if args.grid_file:
        grid += load_grid_file(args.grid_file)
    with Phases(err) as shown:
        def progress(record: TrialRecord, done: int, total: int) -> None:
            shown.advance(done, total)
            shown.print(_trial_line(record, where=args.executor == "ray"))

        def search_progress(env_id: str, done: int, total: int, best: str) -> None:
            shown.phase(f"search {env_id}" + (f" (best: {best[:40]})" if best else ""), (done, total))

        outcome = sweep(workload, preset=args.preset, grid=grid or None, repeats=args.repeats,
                        max_repeats=args.max_repeats, time_budget_s=args.time_budget, gpus=args.gpus,
                        budget=args.budget, pythons=args.pythons, backend=args.backend, results_root=args.results,
                        out=args.out, fresh=args.fresh, max_slowdown=args.max_slowdown, timeout_s=args.timeout,
                        trace=args.trace, executor=args.executor, ray_address=args.ray_address,
                        ray_accelerator=args.ray_accelerator, search=args.search, finalists_count=args.finalists,
                        gpus_per_trial=args.gpus_per_trial,
                        progress=progress, search_progress=search_progress,
                        notice=lambda text: shown.print(f"[yellow]notice:[/] {text}"), phase=shown.phase)
    if args.json:
        print(json.dumps(dict(decisions(outcome.folder, outcome.choices),
                              skipped=[asdict(skip) for skip in outcome.skipped]), indent=2))
        return 0
    out = console()
    for skip in outcome.skipped:
        out.print(f"[dim]skipped {skip.conf or 'default'} ({skip.env_id}): {skip.reason}[/]")
    for choice in outcome.choices:
        out.print(ranked_table(outcome.settings, choice))
        for reason in choice.reasons:
            out.print(f"  {reason}")
    folder = outcome.folder.path
    # Commands to copy: one line each, never folded at the terminal's width, quoted for a shell, printed as they are
    # (no rich markup: a folder may be named '[bold]').
    plain = dict(soft_wrap=True, markup=False, highlight=False)
    written = [name for name in ("summary.md", "best.env", "plot.png", "trials.jsonl") if (folder / name).exists()]
    out.print(f"\nResults: {folder}/ ({', '.join(written)})", **plain)
    if any(choice.best is not None for choice in outcome.choices):   # else there is nothing to export
        out.print(f"Next: alloctune export {shlex.quote(str(folder))} --format env -o alloc.env", **plain)
    if outcome.backend == Backend.SIM:
        out.print(f"Confirm on a GPU: {_on_gpu(outcome.folder.info().command)}", **plain)
    return 0


def _repeats(text: str) -> int | str:
    """--repeats: 'auto' or a positive count."""
    if text == "auto":
        return text
    return _repeats_limit(text)


def _repeats_limit(text: str) -> int:
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(f"expected auto or a whole number of repeats >= 1, got {text!r}")


def _workload(args):
    """The workload file's path, or a command's WorkloadSpec (checked: the program exists and is executable)."""
    from ..errors import AlloctuneError
    from ..workload.command import check_command, command_workload

    options = [f"--{name.replace('_', '-')}" for name in ("metric_regex", "unit", "name", "cwd", "isolate_cwd")
               if getattr(args, name)]
    if not args.target:
        raise AlloctuneError("give a workload file, or '-- COMMAND ...' to sweep your own program")
    if len(args.target) == 1 and (args.target[0] == "-" or args.target[0].endswith((".yaml", ".yml"))):
        if args.target[0] == "-" and args.grid_file == "-":
            raise AlloctuneError("the workload and --grid cannot both come from standard input: give one as a file")
        if options:
            raise AlloctuneError(f"{', '.join(options)} apply to '-- COMMAND'; a workload file says these itself")
        return args.target[0]
    if args.preset or args.trace:
        raise AlloctuneError("--preset and --trace apply to a workload file, not to '-- COMMAND'")
    spec = check_command(args.target, args.cwd, None, args.metric_regex, args.isolate_cwd)
    return command_workload(spec, name=args.name, unit=args.unit, warmup_steps=args.warmup_steps,
                            timeout_s=args.timeout)


def _on_gpu(command: str) -> str:
    """The same sweep command, measured on the GPU: every option kept, the backend and trace swapped, and --out
    dropped (that folder holds the simulated sweep, which a measured one may not resume). A search needs a trace:
    on the GPU, hybrid records one."""
    words, out, skip = shlex.split(command), [], False
    for word in words:
        if skip:
            skip = False
        elif word in ("--backend", "--trace", "--out"):
            skip = True
        elif not word.startswith(("--backend=", "--trace=", "--out=")):
            out.append(word)
    searching = any(word == "--search" or word.startswith("--search=") for word in words)
    return shlex.join(out + ["--backend", str(Backend.HYBRID if searching else Backend.CUDA)])


def _where(record: TrialRecord) -> str:
    """For a command of several processes: which one peaked."""
    from ..trial.command import peak_row

    row = peak_row(record.processes or [])
    if row is None or len(record.processes or []) < 2:
        return ""
    who = f"rank {row['rank']}" if row.get("rank") is not None else f"pid {row['pid']}"
    return f" ({who}, of {len(record.processes or [])} processes)"


def _trial_line(record: TrialRecord, where: bool = False) -> str:
    m = record.measurement
    what = f"{record.conf or 'default'} #{record.repeat + 1}" + (" (recording the trace)" if record.recording
                                                                  else "")
    if where and record.node:  # on a cluster, which node and GPUs ran it
        what += f" on {record.node}" + (f" GPU {record.gpus}" if record.gpus else "")
    if record.state.value == "ok" and m:
        speed = f", {format_number(m.throughput)} {m.unit}/s" if m.throughput else ""
        return f"  [green]ok[/] {what}: peak reserved {format_bytes(m.peak_reserved_bytes)}{speed}{_where(record)}"
    last = (record.error or "").strip().splitlines()
    return f"  [red]{record.state.value}[/] {what}: {last[-1] if last else ''}"
