"""A sweep planned by replay: record the allocation trace during the default's first trial (a hybrid sweep without
`--trace`), search the settings space on it (`--search`); which of the settings replayed a hybrid sweep measures on
the GPU is decide/finalists.py's.

The recording trial is the default's repeat 0 (its record is marked `recording`, and counts like any default
trial): recording is on during the first pass only, whose peak reserved matched an unrecorded default's to the
byte in three H200 jobs, and is switched off before the timed pass that gives its throughput (child.py). So with R
repeats the default runs R trials in all, and with one finalist at one repeat a hybrid sweep runs two GPU trials.
A command's recording covers its whole run, so there the recording trial is an extra one, left out of statistics,
and the default is measured with the sweep's repeats (TrialRecord.extra). The trace is kept in the results folder
as `trace.xz`; a command's, one per process that used CUDA, as `trace.rank<N>.xz` (`SweepInfo.trace_paths`), as
ranks differ and each setting is replayed on all of them (`SimExecutor`); the search's full account as
`search.json`. Both are read back on resume, so a resumed sweep neither records nor searches again.
"""
from __future__ import annotations

import glob
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Callable

from ..errors import CommandFailed, OptionText, TraceError
from ..files import write_file
from ..results.folder import ResultsFolder
from ..results.names import SEARCH_FILE, TRACE_FILE
from ..results.records import Backend, TrialRecord
from ..results.typed import load_json
from ..settings.conf import AllocConf
from ..sim.target import Target
from ..sim.trace import Trace, load_trace, save_trace
from ..trial.job import rank_order, trace_targets
from ..trial.probe import ProbeResult, SettingsJudge
from ..trial.recording import record_command
from ..trial.task import TrialTask
from ..workload.command import CommandSpec, is_python
from ..workload.spec import WorkloadSpec


def record_default(folder: ResultsFolder, task: TrialTask, run: Callable[[list[TrialTask]], object]) -> list[Trace]:
    """The traces recorded by `task` (the default's first trial), run through `run` (the sweep's own way of
    running and appending trials), one per process that used CUDA, by rank; the folder's own when an earlier run of
    this sweep recorded them (`SweepInfo.trace_paths`)."""
    if (kept := _kept(folder)) is not None:
        return kept
    assert task.record_trace is not None and task.conf.is_default
    snapshot = Path(task.record_trace)
    run([task])
    record = next((r for r in reversed(folder.trials()) if r.recording), None)
    snapshots = sorted(snapshot.parent.glob(glob.escape(snapshot.stem) + "*" + snapshot.suffix))
    if record is None or record.state.value != "ok" or not snapshots:
        raise _not_recorded(record, task)
    try:
        traces = sorted(map(load_trace, snapshots), key=_by_rank)
    except TraceError:
        raise   # the snapshots stay in the folder: a loader problem costs no second GPU run
    names = trace_targets([(t.meta.get("pid"), t.meta.get("rank")) for t in traces], Path(TRACE_FILE))
    for trace, name in zip(traces, names):
        save_trace(trace, folder.path / name)
    _name_traces(folder, names)
    for path in snapshots:
        os.unlink(path)
    return traces


def dry_run_default(folder: ResultsFolder, spec: WorkloadSpec, card: str, python: str,
                    notice: Callable[[str], None]) -> list[Trace]:
    """`sweep --dry-run -- CMD`: in place of the recording trial, the command traced without a GPU for `card`
    (trial/recording.py; under `python`, the sweep's interpreter, where the command starts with one), one trace per
    process that used CUDA, kept in the folder as a recording's are; the folder's own on resume. `notice`: told
    when the command ended before its --steps window, as record tells it."""
    if (kept := _kept(folder)) is not None:
        return kept
    assert spec.command is not None   # SweepOptions' rule: a dry run sweeps a command
    command = CommandSpec.from_dict(spec.command)
    argv = [python, *command.argv[1:]] if is_python(command.argv[0]) else list(command.argv)
    written = record_command(argv, folder.path / TRACE_FILE, timeout_s=spec.timeout_s,
                             warmup_steps=spec.warmup_steps, steps=spec.steps, env=dict(command.env),
                             dry_run=card, cwd=command.cwd, notice=notice)
    _name_traces(folder, [path.name for path, _ in written])
    return [trace for _, trace in written]


def _kept(folder: ResultsFolder) -> list[Trace] | None:
    """The traces an earlier run of this sweep recorded into its folder (`SweepInfo.trace_paths`), if all are."""
    info = folder.info()
    if info.trace_paths and all((folder.path / name).exists() for name in info.trace_paths):
        return [load_trace(folder.path / name) for name in info.trace_paths]
    return None


def _name_traces(folder: ResultsFolder, names: list) -> None:
    """sweep.json names the traces where there are several; one keeps the shape of every folder before several
    were kept: trace.path alone."""
    if len(names) > 1:
        info = folder.info()   # as the recording trial left it
        folder.write_info(replace(info, trace=dict(info.trace or {}, paths=[str(n) for n in names])))


def _by_rank(trace: Trace) -> tuple:
    return rank_order(trace.meta.get("rank"), trace.meta.get("pid"))


def _not_recorded(record: TrialRecord | None, task: TrialTask) -> CommandFailed:
    """The recording trial ended without a trace: the job failed (exit 1, as record says it), not its input."""
    state = record.state.value if record else "not run"
    error = (record.error or "").strip().splitlines()[-1:] if record else []
    what = "the trial" if task.extra else "the default's first trial"   # a command's is an extra one
    other = ("measure every setting on the GPU with {backend} {cuda}" if task.extra
             else "pass a trace recorded elsewhere with {trace}")
    return CommandFailed(OptionText(what + ", which records the allocation trace for the hybrid sweep, ended "
                                    "{state}{error}; nothing to replay (start again with {fresh=True}, or "
                                    + other + ")", state=state, error=": " + error[0] if error else "",
                                    cuda=Backend.CUDA))


def recording_task(task: TrialTask, folder: ResultsFolder) -> TrialTask:
    """`task` (the default, repeat 0) recording its allocation history into the results folder; it has the key
    of `task` (but for a command: TrialTask.extra), so the sweep does not run the default's repeat 0 again."""
    return replace(task, record_trace=str((folder.path / "trace-recording.pickle").resolve()))


def search_plan(folder: ResultsFolder, probes: list[ProbeResult], targets: dict[str, Target], traces: list[Trace], *,
                device_memory: int, budget_bytes: int | None, max_settings: int, trace_names: list[str],
                progress: Callable[[str, int, int, str], None] | None = None) -> dict[str, list[AllocConf]]:
    """Per interpreter, the default and the Pareto front of a search of the settings space of the torch its replays
    follow (`targets`, by env_id: its own, or the trace's where it does not run the job). Of several
    traces (one per rank), the search runs on the one that peaks highest under the default: judging every candidate
    by its maximum over ranks would cost a replay per rank, and which settings behave alike depends on each trace's
    request sizes; the front is then replayed over every rank like a grid (`SimExecutor`), so that what the GPU
    measures is chosen by the maximum. The search's account goes to `search.json` (every setting replayed, the front
    with reasons, what torch refused); a resumed sweep reads the fronts back from it."""
    from ..sim.search import search

    path = folder.path / SEARCH_FILE
    done: dict = load_json(path) if path.exists() else {}
    planned = {}
    top = 0
    if len(traces) > 1 and any(p.env_id not in done for p in probes):
        top = max(range(len(traces)), key=lambda i: _default_peak(traces[i], device_memory, budget_bytes))
    for p in probes:
        if p.env_id not in done:
            def report(n: int, total: int, best, env_id=p.env_id) -> None:
                if progress:
                    progress(env_id, n, total, best.conf if best is not None and best.fits else "")

            with SettingsJudge(p.python) as judge:   # one child of the interpreter for the whole search
                result = search(traces[top], validate=targets[p.env_id].judge(p.torch_version, judge),
                                trace_name=trace_names[top], device_memory=device_memory, budget_bytes=budget_bytes,
                                max_settings=max_settings, progress=report)
            done[p.env_id] = result.to_json()
            write_file(path, json.dumps(done, indent=2) + "\n")
        front = [AllocConf.parse(m["conf"]) for m in done[p.env_id]["front"]]   # 'default' ('' before) parses
        planned[p.env_id] = [AllocConf(), *(c for c in front if str(c))]   # the default: always, the baseline
    return planned


def _default_peak(trace: Trace, device_memory: int, budget_bytes: int | None) -> tuple[bool, int]:
    """How much `trace` needs under the default, replayed: an OOM first, then peak reserved."""
    from ..sim.replay import replay

    [outcome] = replay(trace, [AllocConf()], device_memory, budget_bytes=budget_bytes, jobs=1)
    return (not outcome.fits, outcome.result.peak_reserved_bytes if outcome.result else 0)
