"""`record()`: a workload's or a command's allocation trace recorded once on the GPU (trial/recording.py runs it),
to replay under any setting later; what `alloctune record` runs. It returns a `Recording`: the traces written, one
per process that used CUDA, which replay, search, fit and fleet take as they take trace paths."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..errors import AlloctuneError, OptionError, options_apply, shown
from ..results.provenance import Provenance, provenance
from ..settings.conf import AllocConf
from ..sim.trace import Trace
from ..sweeper.options import check_gpus, check_timeout
from ..trial.recording import dry_run_card, record_command, record_workload
from ..workload.command import check_steps
from ..workload.spec import warmup_steps_or_default
from .checks import path
from .options import options_given, options_of


@dataclass(frozen=True)
class RecordOptions:
    preset: str | None = None           # a workload file's preset
    conf: str = ""                      # the allocator setting to record under
    gpus: Sequence[int] = (0,)          # the GPU; for a command of several ranks, the GPUs it sees
    python: str | None = None           # a workload file's interpreter (default: this one)
    timeout_s: float | None = None      # time limit in seconds
    steps: int = 0                      # a command: end it after this many steps past `warmup_steps` (0: its run)
    warmup_steps: int | None = None     # a command: steps before that window (default: DEFAULT_WARMUP_STEPS)
    dry_run: bool = False               # a command: run it without a GPU, fake tensors standing for CUDA's (dryrun/)
    arch: str | None = None             # with dry_run: the card it stands for (default: trial/recording's)

    def __post_init__(self) -> None:
        if not isinstance(self.conf, str):
            raise OptionError("conf", "{conf}: expected a str such as 'expandable_segments:True', got {got}",
                              got=shown(self.conf))
        AllocConf.parse(self.conf)   # a ConfError naming what is wrong in it
        if not isinstance(self.dry_run, bool):
            raise OptionError("dry_run", "{dry_run}: expected True or False, got {got}", got=self.dry_run)
        if self.arch is not None and not self.dry_run:
            raise OptionError("arch", "{arch} names the GPU a dry run stands for: give {dry_run} with it")
        object.__setattr__(self, "gpus", tuple(self.gpus) if isinstance(self.gpus, (list, tuple)) else (self.gpus,))
        check_gpus(self.gpus)
        check_timeout(self.timeout_s)
        check_steps(warmup_steps_or_default(self.warmup_steps), self.steps)


@dataclass(frozen=True)
class RecordedTrace:
    path: Path
    trace: Trace

    @property
    def measured(self) -> dict[str, Any] | None:
        """The peaks (and throughput) measured in the recorded run, as the trace's metadata keeps them."""
        return (self.trace.meta.get("measured") or [None])[0]

    @property
    def provenance(self) -> Provenance:
        """Measured on the GPU, or a dry run's (the card it stood for, its table row, the values it made up)."""
        return provenance(self.trace.meta)


@dataclass(frozen=True)
class Recording:
    traces: tuple[RecordedTrace, ...]   # one per process that used CUDA, by rank
    notices: tuple[str, ...] = ()       # what the run showed that the traces do not say (it ended before --steps)

    @property
    def paths(self) -> list[Path]:
        return [t.path for t in self.traces]

    def to_json(self) -> list[dict[str, Any]]:
        """As `record --json` prints it: one object per trace written."""
        return [{"trace": str(t.path), "events": len(t.trace.kinds), "allocations": t.trace.num_allocs,
                 "measured": t.measured, "dry_run": t.provenance.to_json()} for t in self.traces]


def record(target: str | os.PathLike | Sequence[str], output: str | os.PathLike,
           options: RecordOptions | None = None, **fields: Any) -> Recording:
    """Run `target` once on the GPU with torch's allocation history recording on, and write the trace to `output`:
    a workload file (a path), or your own command (its words, `["python", "train.py"]`: each process that uses
    CUDA leaves its own trace, `<stem>.rank<N><suffix>` where there are several). `.pickle` keeps PyTorch's
    snapshot format, any other name gets the compact one. `options` (a RecordOptions) or its fields as keywords:
    `record("w.yaml", "t.xz", preset="h200")`."""
    options = options_of("record", RecordOptions, options, fields)
    conf = AllocConf.parse(options.conf)
    # Checked before the run, not after it: a trace that cannot be written is a recording lost.
    if os.path.isdir(output := path(output, "output")):
        raise OptionError("output", "{output}: {got} is a folder; give the trace file's name in it", got=shown(output))
    if isinstance(target, (str, os.PathLike)):
        if options.dry_run:
            raise OptionError("dry_run", "{dry_run} applies to '-- COMMAND' (your own program)")
        if given := options_given(options, ("warmup_steps", "steps")):
            raise OptionError(given[0], options_apply(given) + " to '-- COMMAND'; a workload file says its steps "
                              "itself")
        trace = record_workload(target, output, preset=options.preset, conf=conf, gpu=options.gpus[0],
                                python=options.python, timeout_s=options.timeout_s)
        return Recording((RecordedTrace(Path(output), trace),))
    if not target:
        raise AlloctuneError("give a workload file, or '-- COMMAND ...' to record your own program")
    if given := options_given(options, ("preset", "python")):
        raise OptionError(given[0], options_apply(given) + " to a workload file, not to '-- COMMAND'")
    gpus = options.gpus[0] if len(options.gpus) == 1 else list(options.gpus)
    notices: list[str] = []
    traces = record_command(list(target), output, gpus=gpus, conf=conf, timeout_s=options.timeout_s,
                            warmup_steps=warmup_steps_or_default(options.warmup_steps), steps=options.steps,
                            dry_run=dry_run_card(options.arch) if options.dry_run else None, notice=notices.append)
    return Recording(tuple(RecordedTrace(path, trace) for path, trace in traces), tuple(notices))
