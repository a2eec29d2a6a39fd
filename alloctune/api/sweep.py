"""`sweep()`: workload -> options -> plan -> trials -> choice -> reports, the Python API behind `alloctune sweep`.

The options checked (sweeper/options.py), what will run settled (sweeper/plan.py: interpreters probed, backend
resolved, settings each torch accepts, the trace), the results folder opened or resumed and locked
(sweeper/resume.py: a resumed folder's replays go on under the ids they have), the plan's trials run
(sweeper/sweep.run_plan), then the folder decided and its reports written (analyze.decide_folder). Every notice
the sweep gives is kept in its outcome; where the caller takes none as it goes, each is also a Python warning
(sweeper/options.SweepNotice): a sweep that replays because no GPU is visible says so.
"""
from __future__ import annotations

import contextlib
import enum
import os
import shlex
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Sequence

from ..decide.choice import Choice
from ..decide.finalists import GpuPlan
from ..decide.summary import SettingResult
from ..errors import AlloctuneError, OptionError, OptionText, WorkloadError, options_apply, shown
from ..report.words import skipped_words
from ..results.folder import ResultsFolder, Skipped
from ..results.provenance import Provenance, provenance
from ..results.records import Backend
from ..results.vocabulary import setting_name
from ..settings.conf import AllocConf
from ..sweeper.options import SweepCallbacks, SweepNotice, SweepOptions   # the three: the API's names too
from ..sweeper.plan import make_plan, sweep_info
from ..sweeper.resume import keep_replay_ids, open_folder
from ..sweeper.sweep import dry_run_plan, run_plan
from ..workload.command import check_command, command_workload
from ..workload.loader import load_workload
from ..workload.spec import WorkloadSpec, warmup_steps_or_default
from .analyze import decide_folder, decisions
from .checks import grid_settings
from .options import build, options_given, split

# The SweepOptions of a command alone, refused beside a workload file or a WorkloadSpec (each gives its own) where
# given (api/options.options_given).
_COMMAND_ONLY = ("metric_regex", "unit", "warmup_steps", "steps", "step_on", "name", "cwd", "isolate_cwd")


@dataclass(frozen=True)
class SweepOutcome:
    folder: ResultsFolder
    settings: list[SettingResult]
    choices: list[Choice]
    skipped: list[Skipped]
    backend: Backend            # the one resolved: cuda, sim or hybrid
    notices: tuple[str, ...] = ()   # what the sweep said as it went (as `notice` was told it)
    provenance: Provenance = Provenance()   # where the replayed trace came from (a dry run: `sweep --dry-run`)
    gpu_plan: GpuPlan | None = None      # a dry run's: what a hybrid sweep would run on the GPU after its replays

    def to_json(self) -> dict[str, Any]:
        """As `sweep --json` prints it: the folder, its decisions, the settings skipped, with why, for a dry run
        what it stood for and the plan a hybrid sweep would run on the GPU, and the notices said on the way (the
        torch replayed where it is not the trace's, among them)."""
        return dict(decisions(self.folder, self.choices),
                    skipped=[dict(asdict(skip), conf=setting_name(skip.conf), reason=skipped_words(skip))
                             for skip in self.skipped],
                    dry_run=self.provenance.to_json(), gpu_plan=self.gpu_plan.to_json() if self.gpu_plan else None,
                    notices=list(self.notices))


def sweep(workload: str | os.PathLike | WorkloadSpec | Sequence[str] | None = None,
          options: SweepOptions | None = None, *, callbacks: SweepCallbacks | None = None,
          command: Sequence[str] | None = None, **fields: Any) -> SweepOutcome:
    """Sweep a grid of allocator settings over a workload and choose the best. See `alloctune sweep --help`.

    `workload`: a workload file's path or a WorkloadSpec, or your own command's words, `["python3", "train.py"]`
    (as `record()` takes them; or as `command=`), swept as `alloctune sweep -- python3 train.py` sweeps it.

    `options` (a SweepOptions) and `callbacks` (a SweepCallbacks), or their fields as keyword arguments, which
    win over both: `sweep("w.yaml", preset="h200", repeats=5, notice=print)`. A bad option, or a name that is
    neither, is an OptionError naming the field.

    A command's options, how `sweep -- COMMAND` runs and measures it (`metric_regex`, `unit`, `warmup_steps`,
    `steps`, `step_on`, `name`, `cwd`, `isolate_cwd`), are SweepOptions fields too; a workload file gives its own
    (each is refused beside one), and so does a WorkloadSpec (its preset too: `load_workload` and `command_workload`
    take them).

    `grid`: the settings themselves, `["expandable_segments:True"]` (replay, fleet and fit take them as `confs`,
    and their `grid` is a file listing more); a file given here is refused in one line.

    `search`: instead of the grid, search up to that many settings of each torch's space by replay (backend sim
    or hybrid) and sweep the Pareto front. A hybrid sweep without `trace` records it during the default's first
    trial (for a workload, not a command, that trial counts as the default's repeat 0); it then measures the
    default's other repeats and the `finalists` best simulated settings."""
    chosen = split("sweep", fields, options=SweepOptions, callbacks=SweepCallbacks)
    options = build(SweepOptions, options, chosen["options"], "sweep")
    grid_settings(options.grid)
    told = {name: hook for name, hook in chosen["callbacks"].items() if hook is not None}   # None: the default
    callbacks = build(SweepCallbacks, callbacks, told, "sweep")
    notices: list[str] = []
    callbacks = replace(callbacks, notice=_kept(callbacks.notice, notices))
    if command is not None:   # the words of a command to sweep
        if workload is not None:
            raise OptionError("command", "sweep(): give a workload, or a command's words as {command}, not both")
        workload = command
    spec = _workload(workload, options)
    if options.started_as is None:   # from Python: sweep.json's command is the call (the command line gives its argv)
        options = replace(options, started_as=_python_call(workload, options))
    typed = os.fspath(workload) if isinstance(workload, (str, os.PathLike)) else None   # as shown in hints
    plan = make_plan(spec, options, callbacks, typed)
    with contextlib.ExitStack() as held:  # the folder's lock, for the whole sweep
        folder = open_folder(sweep_info(spec, options, plan), options, callbacks.notice, held)
        earlier = folder.trials()   # a resumed sweep's, read once
        keep_replay_ids(earlier, folder.path, plan)
        folder.write_info(replace(folder.info(), finished=False))   # until its end: a resumed one too
        run_plan(folder, spec, options, plan, callbacks, earlier)
        folder.write_info(replace(folder.info(), finished=True))
        callbacks.phase("choosing and writing the reports", None)
        decision = decide_folder(folder, options.max_slowdown)
        planned = dry_run_plan(folder, spec, options, plan) if plan.dry_run else None
    source = provenance(next((r.env for r in folder.trials() if "dry_run" in r.env), {}))
    return SweepOutcome(folder, decision.settings, decision.choices, folder.info().skipped, plan.backend,
                        tuple(notices), source, planned)


def _workload(given: object, options: SweepOptions) -> WorkloadSpec:
    """What `sweep()` was given to sweep, as a WorkloadSpec: a workload file read (with its `preset`), a command's
    words checked (the program exists and is executable) and run as its options say, or a WorkloadSpec as made."""
    if not isinstance(given, (str, os.PathLike, WorkloadSpec, list, tuple)):
        raise AlloctuneError(f"sweep(): expected a workload file's path, a WorkloadSpec or your command's words, "
                             f"e.g. ['python3', 'train.py'], got {shown(given)}")
    if isinstance(given, (list, tuple)):
        return _command(given, options)
    if isinstance(given, WorkloadSpec):
        if extra := options_given(options, ("preset", *_COMMAND_ONLY)):
            raise OptionError(extra[0], options_apply(extra) + " where a WorkloadSpec is made (load_workload's "
                              "preset, command_workload's arguments); the WorkloadSpec given has its own")
        return given
    _refuse_trace(given)
    if extra := options_given(options, _COMMAND_ONLY):
        raise OptionError(extra[0], options_apply(extra) + " to '-- COMMAND'; a workload file gives its own")
    return load_workload(given, options.preset)


def _command(words: Sequence[str], options: SweepOptions) -> WorkloadSpec:
    """The workload of a command's words, as `sweep -- COMMAND` runs them."""
    if words and isinstance(words[0], str):
        _refuse_trace(words[0])
    if misplaced := options_given(options, ("preset", "trace")):
        raise OptionError(misplaced[0], options_apply(misplaced) + " to a workload file, not to '-- COMMAND'")
    command = check_command(words, options.cwd, None, options.metric_regex, options.isolate_cwd,
                            step_on=options.step_on)
    return command_workload(command, name=options.name, unit=options.unit,
                            warmup_steps=warmup_steps_or_default(options.warmup_steps),
                            steps=options.steps, timeout_s=options.timeout_s)


def _python_call(workload: object, options: SweepOptions) -> str:
    """The call that runs this sweep again: its workload as given and each option that is not its default, e.g.
    `alloctune.sweep('w.yaml', preset='h200', backend='sim')`; a WorkloadSpec, which has no literal, named as
    sweep.json keeps it. Not an `alloctune sweep` line: every option then needs its flag spelled back, and a
    WorkloadSpec has none."""
    given = ("WorkloadSpec.from_dict(<sweep.json's workload>)" if isinstance(workload, WorkloadSpec)
             else _literal(workload))
    chosen = [f"{name}={_literal(getattr(options, name))}" for name in options_given(options) if name != "started_as"]
    return f"alloctune.sweep({', '.join([given, *chosen])})"


def _literal(value: object) -> str:
    """`value` as Python source that `sweep()` takes back: a name by its value ('sim'), a path as a str, a
    sequence as a list, a setting as its text ('default' for the default: AllocConf is no name of the API)."""
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(map(_literal, value))}]"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, AllocConf):
        value = setting_name(str(value))
    return repr(os.fspath(value) if isinstance(value, os.PathLike) else value)


def _refuse_trace(target: str | os.PathLike) -> None:
    """A trace given where a sweep takes a workload file or a command (`alloctune sweep trace.xz`): said as such,
    with the commands that take it, instead of failing as a workload that is not YAML or a program that cannot
    run."""
    from ..sim.trace import is_trace_file

    if is_trace_file(target):
        raise WorkloadError(OptionText("{path} is an allocation trace, not a workload file or a command: replay it "
                                       "(`alloctune replay {path}`), or sweep the workload it was recorded from "
                                       "with {trace=FILE}", path=shlex.quote(os.fspath(target))))


def _kept(notice: Callable[[str], None], kept: list[str]) -> Callable[[str], None]:
    """`notice`, each text also kept: as a Python caller reads it (options by their names), an `OptionText` still,
    which a front end renders with its own names (`sweep --json`: the flags)."""
    def told(text: str) -> None:
        kept.append(text)
        notice(text)
    return told
