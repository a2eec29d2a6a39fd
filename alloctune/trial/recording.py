"""Record a workload's allocation trace once (on a GPU), to replay it under any setting through the simulator.

A workload file runs in a trial child with torch's allocation history on (no stack frames); a user's own command
runs with the start-up hook (`hook/sitecustomize.py`) in every Python process, and each process that used CUDA
leaves its own trace (one per rank of a torchrun job). Either way a trace is a PyTorch snapshot pickle with an
`alloctune` key holding the measured peaks and the environment, plain values only; other file names get the
compact format.
"""
from __future__ import annotations

import glob
import os
import sys
from pathlib import Path
from typing import Callable, Sequence

from ..errors import AlloctuneError, CommandFailed, OptionText, TraceError
from ..files import copy_whole
from ..processes import temp_folder
from ..runtime.peaks import ProcessReport
from ..settings.conf import AllocConf
from ..sim.trace import Trace, load_trace, save_trace
from ..workload.command import CommandSpec, check_command, command_python
from ..workload.loader import load_workload
from ..workload.spec import DEFAULT_TIMEOUT_S, DEFAULT_WARMUP_STEPS
from .job import traced
from .launch import run_trial
from .probe import ProbeFn, ProbeResult, probe
from .task import TrialTask, child_environment

# What works without a GPU where a command's recording or measuring needs one: record, fit and sweep all take it
# (a message's `{dry_run}` names it as the caller's front end does: --dry-run, dry_run=True).
DRY_RUN_INSTEAD = ("run this again with {dry_run=True}, which traces the command with fake tensors standing for "
                   "CUDA's (nothing is measured)")


def record_workload(workload: str | os.PathLike, output: str | os.PathLike, *, preset: str | None = None,
                    conf: AllocConf = AllocConf(), gpu: int = 0, python: str | None = None,
                    timeout_s: float | None = None) -> Trace:
    spec = load_workload(workload, preset)
    target = _with_gpu(probe(python or sys.executable))
    with temp_folder("alloctune-record-") as tmp:   # gone even if this process is killed at any moment
        snapshot = os.path.join(tmp, "snapshot.pickle")
        task = TrialTask(spec.to_dict(), spec.digest(), conf, 0, target.python, target.env_id,
                         timeout_s=timeout_s or spec.timeout_s or DEFAULT_TIMEOUT_S, record_trace=snapshot)
        record = run_trial(task, gpu)
        if record.state.value != "ok" or not os.path.exists(snapshot):
            raise AlloctuneError(f"recording {spec.name} under {task.conf.label} failed "
                                 f"({record.state.value}): {record.error}")
        return _keep(snapshot, output)


def record_command(command: list[str], output: str | os.PathLike, *, gpus: int | Sequence[int] | None = 0,
                   conf: AllocConf = AllocConf(), timeout_s: float | None = None,
                   warmup_steps: int = DEFAULT_WARMUP_STEPS, steps: int = 0,
                   env: dict[str, str] | None = None, dry_run: str | None = None,
                   meta: dict | None = None, cwd: str | None = None,
                   notice: Callable[[str], None] = lambda _: None,
                   probes: ProbeFn = probe) -> list[tuple[Path, Trace]]:
    """Run the user's command once with allocation recording in every Python process that uses CUDA; one trace
    per such process: `output` itself for one, else `<stem>.rank<N><suffix>` (`.pid<N>` without a rank).
    `steps`: end it after this many steps past `warmup_steps`, as a sweep's --steps window does, so that the
    recording covers the window a sweep measures (0: the whole run). `env`: variables added to the command's
    environment. `dry_run`: the card a dry run stands for (alloctune/dryrun: no GPU is used, any GPU is hidden).
    `meta`: keys added to each trace's metadata (a fit's stamp). `cwd`: the folder it runs in (default: this
    process's). `notice`: told when the command ended before its window. `probes`: how its interpreter is probed
    (`refuse_without_gpu`'s). A command that fails raises CommandFailed: its trace is not kept."""
    from .command import hook_environment, run_command

    spec = check_dry_run(command, dry_run) if dry_run else refuse_without_gpu(command, probes=probes)
    with temp_folder("alloctune-record-") as tmp:   # gone even if this process is killed at any moment
        base = {**os.environ, **(env or {})}
        env = hook_environment(child_environment(conf, None if dry_run else gpus, base), str(conf), record=True,
                               warmup_steps=warmup_steps, window_steps=steps)
        if dry_run:
            env.update(ALLOCTUNE_HOOK_DRYRUN=dry_run, CUDA_VISIBLE_DEVICES="")
        run = run_command(list(spec.argv), env, cwd, timeout_s, tmp, capture=False)
        if dry_run and (refused := refusals(os.path.join(tmp, "procs"))):
            raise AlloctuneError(f"the dry run cannot trace {command[0]}: {refused}")
        if run.timed_out:
            raise CommandFailed(OptionText("{program} did not finish within {limit:g} s: a trace of a killed run is "
                                           "not kept" + ("" if steps else "; {steps} N ends it after N steps past "
                                                         "the warm-up"), program=command[0], limit=timeout_s))
        if run.returncode != 0:
            raise CommandFailed(f"{command[0]} exited with status {run.returncode}: a trace of a failed run is "
                                f"not kept")
        if steps and not any(p.window_ended for p in run.processes):
            notice(_before_window(command[0], run.processes, warmup_steps, steps))
        if run.damage:
            raise AlloctuneError(f"cannot read what the start-up hook wrote: {run.damage}")
        procs = os.path.join(tmp, "procs")
        traces = traced(procs, run.processes, Path(output))   # by rank, then pid
        if not traces:
            raise AlloctuneError(f"{command[0]} exited with status 0 and recorded no trace: is it a Python "
                                 f"program that uses CUDA through torch?")
        return [(target, _keep(trace, target, meta)) for trace, target in traces]


def _before_window(program: str, processes: Sequence[ProcessReport], warmup_steps: int, steps: int) -> OptionText:
    """The command ended on its own before the end of the --steps window its recording was to cover."""
    ran = max((c.count for p in processes for c in p.counted), default=0)
    return OptionText("{program} ended after {ran} steps, before the end of its {steps} window ({warmup} warm-up "
                      "steps + {window}): the trace covers its whole run", program=program, ran=ran,
                      warmup=warmup_steps, window=steps)


def refuse_without_gpu(command: list[str], dry_run_instead: bool = True,
                       probes: ProbeFn = probe) -> CommandSpec:
    """The checked command, refused before it runs (it may take hours) when its interpreter cannot import torch
    (ProbeError, as a sweep refuses it) or sees no GPU: saying that a dry run needs none, where the caller takes one
    (`dry_run_instead`; record's and fit's recordings, not a fit's --confirm). A command whose interpreter cannot be
    told (a shell script) passes, and its recording says what it recorded. `probes`: how the interpreter is probed
    (a fit's `probe.Probes`, once for all its runs)."""
    spec = check_command(command)
    if (python := command_python(spec)) is not None:
        _with_gpu(probes(python), DRY_RUN_INSTEAD if dry_run_instead else "")
    return spec


def dry_run_card(arch: str | None) -> str:
    """The card a dry run stands for: `arch` (a card or an architecture the table knows), else the default card;
    an unknown one refused before anything runs."""
    from ..dryrun.cards import ARCHES, CARDS, DEFAULT_CARD, card

    name = DEFAULT_CARD if arch is None else arch
    if card(name) is None:
        raise AlloctuneError(f"--arch {name!r}: a dry run knows {', '.join([*CARDS, *ARCHES])}")
    return name


def card_name(arch: str) -> str:
    """The name of the card a dry run for `arch` stands for, as its trace says it (its `dry_run` record's `card`)."""
    from ..dryrun.cards import card

    found = card(dry_run_card(arch))
    assert found is not None   # dry_run_card refused an unknown one
    return found.name


def check_dry_run(command: list[str], card: str) -> CommandSpec:
    """The checked command of a dry run standing for `card`."""
    dry_run_card(card)
    return check_command(command)


def refusals(folder: str) -> str | None:
    """What a dry run refused, in the line its process wrote (alloctune/dryrun/refusal.py), if it refused."""
    from ..dryrun.refusal import refusal_path

    found = sorted(glob.glob(refusal_path(glob.escape(folder), "*")))
    return Path(found[0]).read_text().strip() if found else None


def _with_gpu(target: ProbeResult, instead: str = "") -> ProbeResult:
    """`target`, refused where it sees no GPU; `instead`: what works without one."""
    if not (target.cuda_available and target.device_count):
        raise AlloctuneError(OptionText("recording needs a CUDA GPU, and {python} sees none"
                                        + (f"; without one, {instead}" if instead else ""), python=target.python))
    return target


def _keep(snapshot: str, output, meta: dict | None = None) -> Trace:
    """Write the snapshot where the user asked: as is for .pickle/.pkl (where `meta` cannot go), else in the
    compact format, with `meta` added to its metadata."""
    output = Path(output)
    try:
        trace = load_trace(snapshot)
    except TraceError:
        # Keep what was recorded, so that a loader problem costs no second GPU run.
        copy_whole(snapshot, output.with_name(output.name + ".raw.pickle"))
        raise
    trace.meta.update(meta or {})
    output.parent.mkdir(parents=True, exist_ok=True)
    if output.suffix in (".pickle", ".pkl"):
        copy_whole(snapshot, output)
    else:
        save_trace(trace, output)
    return trace
