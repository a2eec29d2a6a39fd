"""fit: the largest value of a parameter of a job (batch size, sequence length) each setting allows on each card or
budget, from recordings at a few values: the command recorded at each value on the GPU (sweeper/fitrun.py) or traced by
a dry run without one (`dry_run`), or traces recorded already; replayed, fitted and answered (sweeper/fitting.py); with
a command and a GPU or a dry run, the values that settle each answer recorded (or traced) and replayed too, so that
answers come from replays, not the curve (sweeper/fitexact.py); the answers under each budget confirmed on the GPU where
asked, one value at a time or copies at once (sweeper/fitcopies.py); fit.json and plot.png written to the fit's folder,
held for this fit alone (results/fits.claimed). `alloctune fit` and `alloctune.fit()`. Every option, the folder and the
cards are checked before the first recording or replay: a refused fit costs no GPU run and leaves no folder behind."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..decide.fit import EXACT_RECORDINGS, MAX_VALUES, step_of, values_answered
from ..errors import OptionError, options_apply, shown
from ..results.fits import FitFile
from ..settings.conf import AllocConf
from ..sim.target import REFERENCE, Target
from ..units import GiB, format_bytes
from ..workload.command import check_steps
from ..workload.spec import MAX_TIMEOUT_S, warmup_steps_or_default
from .checks import (Progress, count, device_index, given, grid_file, in_bytes, one_stdin, path, quiet, set_field,
                     settings, size, workers)
from .fitchecks import NAME, card, check_cards, check_marks, wrong
from .inputs import TraceInput, budget_limit, card_words, name_of, once_each, trace_inputs
from .options import options_given, options_of

GIVEN = "as given by {overhead}"   # where a card too small for the context was told it, as the caller named it
# The FitOptions of a command's runs alone, refused beside traces where given (api/options.options_given); confirm,
# confirm_copies and dry_run are refused there by their own checks.
_RUN_ONLY = ("extra_recordings", "gpu", "timeout_s", "warmup_steps", "steps")


@dataclass(frozen=True)
class FitOptions:
    """What to fit: a command to record at each value, or traces recorded at each value; the settings; the cards
    and budgets to answer for; how to record and confirm on the GPU. Sizes are bytes or strings such as '24GiB'."""

    param: str = ""                                  # the parameter's name, a variable's: batch
    values: Sequence[int] = ()                       # with a command: the values to record at, two at least
    traces: Mapping[int, TraceInput] | None = None   # instead of a command: value -> the trace recorded at it
    command: Sequence[str] | None = None             # with {param} where the value goes (else in the variable param)
    confs: Sequence[str | AllocConf] = ()            # settings to answer for (default: the default grid)
    grid: str | os.PathLike | None = None            # a file listing more settings ('-' for stdin; a list: confs)
    cards: Sequence[int | str] | None = None         # card memories (default, without budgets: sim/limits.py's)
    budgets: Sequence[str | int | float] = ()        # budgets on the recording GPU, as a sweep applies them
    step: int | None = None                          # spacing of the values answered (default: their gcd)
    overhead: int | str | None = None                # the CUDA context per process (default: what was recorded)
    confirm: Sequence[str | AllocConf] = ()          # settings whose answers under each budget run on the GPU
    confirm_copies: int | None = None                # ... and whose copies at once at this recorded value do
    extra_recordings: int = EXACT_RECORDINGS         # the most recordings past `values`, to answer from replays
    out: str | os.PathLike | None = None             # the folder (default for a command: a new one under results)
    gpu: int = 0                                     # the GPU to record and confirm on
    timeout_s: float | None = None                   # time limit of each run
    steps: int = 0                                   # end each run after this many steps past the warm-up
    warmup_steps: int | None = None                  # steps before that window (default: DEFAULT_WARMUP_STEPS)
    jobs: int | None = None                          # replay worker processes (default: every usable core)
    device: int | None = None                        # with traces: which device's, where a snapshot has several
    dry_run: bool = False                            # a command traced without a GPU at each value (dryrun/)
    arch: str | None = None                          # with dry_run: the card it stands for (trial/recording's)

    def __post_init__(self) -> None:
        if not isinstance(self.param, str) or not NAME.fullmatch(self.param):
            raise OptionError("param", "{param} {got}: expected a name such as batch", got=shown(self.param))
        self._check_source()
        set_field(self, "confs", settings(self.confs))
        set_field(self, "confirm", settings(self.confirm, "confirm"))
        if self.grid is not None:
            set_field(self, "grid", grid_file(self.grid))
        one_stdin([*(self.traces or {}).values(), self.grid], "traces", "the traces and {grid}")
        self._check_limits()
        if self.confirm and not (self.command and self.budgets):
            raise OptionError("confirm", "{confirm} runs the answers under each {budgets} on the GPU: give a command "
                              "and {budgets}")
        self._check_runs()
        self._check_values()
        self._check_dry_run()

    def _check_source(self) -> None:
        """A command and its values, or traces (at values a command's may not contradict)."""
        if (self.traces is None) == (self.command is None):
            raise OptionError("command", "give {command}, or traces recorded at each value with {traces}")
        if self.command is not None:
            if isinstance(self.command, str) or not self.command or not all(isinstance(w, str) for w in self.command):
                raise OptionError("command", "{command}: expected the command as a list of words, got {got}",
                                  got=shown(self.command))
            set_field(self, "command", tuple(self.command))
            self._check_variable()
        if self.values or self.command is not None:
            values: list = list(self.values) if isinstance(self.values, (list, tuple)) else [self.values]
            if (why := wrong(values)) or len(values) < 2:   # the CLI shows --param as typed for {got}
                raise OptionError("values", "{values} {got}: {why}expected at least two distinct whole numbers above "
                                  "0, e.g. {param}=8,16,32", got=shown(self.values), param=self.param, why=why)
            set_field(self, "values", tuple(sorted(values)))
        if self.traces is not None:
            self._check_traces()

    def _check_traces(self) -> None:
        traces = self.traces
        if not isinstance(traces, Mapping):
            raise OptionError("traces", "{traces}: expected the traces by value (value -> trace), got {got}",
                              got=shown(traces))
        if why := wrong(traces):
            raise OptionError("traces", "{traces}: {why}each trace's value must be a whole number above 0", why=why)
        if len(traces) < 2:
            raise OptionError("traces", "a fit needs traces at two values at least ({traces}), got {got}",
                              got=len(traces))
        ordered = {value: trace_inputs(traces[value], "traces")[0] for value in sorted(traces)}
        once_each(tuple(ordered.values()), "value", "and one recording at two values would fit a flat line")
        if self.values and list(self.values) != list(ordered):
            raise OptionError("values", "{values} gives the values {given} but {traces} the values {keys}: give "
                              "the parameter's name alone with {traces}", given=list(self.values), keys=list(ordered))
        set_field(self, "traces", ordered)

    def _check_variable(self) -> None:
        """A value given in the environment must reach the command: not in a variable alloctune sets itself; nor
        in a misspelt mark (`check_marks`)."""
        from ..sweeper.fitrun import at_value
        from ..trial.task import set_by_alloctune

        check_marks(self.command or (), self.param)
        if at_value(self.command or (), self.param, 1)[1] and set_by_alloctune(self.param):
            raise OptionError("param", "{param} {name}: alloctune sets {name} in your command's environment itself, "
                              "so the command would never see the value; put {mark} in the command where the value "
                              "goes, or name another variable", name=self.param, mark="{" + self.param + "}")

    def _check_limits(self) -> None:
        if self.overhead is not None:
            set_field(self, "overhead", size(self.overhead, "overhead", least=0))
        if self.cards is not None:
            cards = [self.cards] if isinstance(self.cards, (str, int)) else self.cards
            set_field(self, "cards", tuple(card(c) for c in cards))
            check_cards([in_bytes(c) or 0 for c in self.cards], in_bytes(self.overhead), GIVEN)
        budgets = [self.budgets] if isinstance(self.budgets, (str, int, float)) else self.budgets
        for budget in budgets:
            budget_limit(budget)
        set_field(self, "budgets", tuple(budgets))

    def _check_runs(self) -> None:
        if self.step is not None:
            count(self.step, "step")
        count(self.gpu, "gpu", least=0)
        check_steps(self.warmup, self.steps)
        workers(self.jobs)
        device_index(self.device)
        if self.device is not None and self.traces is None:
            raise OptionError("device", "{device} chooses a device of the snapshots given with {traces}; a command "
                              "is recorded on {gpu}")
        if self.out is not None:
            set_field(self, "out", path(self.out, "out"))
        count(self.extra_recordings, "extra_recordings", least=0)
        t = self.timeout_s
        if t is not None and not (isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)
                                  and 0 < t <= MAX_TIMEOUT_S):
            raise OptionError("timeout_s", "{timeout_s} must be a positive number of seconds, at most {most:.0f}, "
                              "got {got}", most=MAX_TIMEOUT_S, got=shown(t))
        if self.traces is not None and (given := options_given(self, _RUN_ONLY)):
            raise OptionError(given[0], options_apply(given) + " to a command's runs; traces given with {traces} "
                              "were recorded already")

    def _check_values(self) -> None:
        """The values answered bounded (decide/fit.MAX_VALUES), and copies confirmed at a value recorded."""
        values = list(self.traces or {}) or list(self.values)
        step = self.step or step_of(values)
        if (n := values_answered(values, step)) > MAX_VALUES:
            raise OptionError("step", "values {low} to {high} in steps of {each} make {n} values to answer, more than "
                              "{most}: give a larger {step}", low=values[0], high=values[-1], each=step, n=f"{n:,}",
                              most=f"{MAX_VALUES:,}")
        if self.confirm_copies is not None:
            if not self.confirm:
                raise OptionError("confirm_copies", "{confirm_copies} runs the copies of the settings {confirm} "
                                  "names: give {confirm}")
            if wrong([self.confirm_copies]) or self.confirm_copies not in values:
                raise OptionError("confirm_copies", "{confirm_copies} {got}: copies at once are predicted at the "
                                  "values recorded, {values}", got=shown(self.confirm_copies), values=values)

    def _check_dry_run(self) -> None:
        """A dry run traces a command, for a card the table knows, and runs nothing on a GPU."""
        if not isinstance(self.dry_run, bool):
            raise OptionError("dry_run", "{dry_run}: expected True or False, got {got}", got=shown(self.dry_run))
        if self.arch is not None and not self.dry_run:
            raise OptionError("arch", "{arch} names the GPU a dry run stands for: give {dry_run} with it")
        if self.dry_run and self.command is None:
            raise OptionError("dry_run", "{dry_run} traces your command at each value; traces given with {traces} "
                              "say themselves whether they are dry runs")
        if self.dry_run and self.confirm:
            raise OptionError("confirm", "{confirm} runs answers on the GPU and {dry_run} uses none: confirm the "
                              "dry run's answers with a fit on the GPU")
        _ = self.card   # an unknown card: refused before anything runs

    @property
    def warmup(self) -> int:
        """The steps before each run's --steps window: `warmup_steps`, else the default."""
        return warmup_steps_or_default(self.warmup_steps)

    @property
    def card(self) -> str | None:
        """The card a dry run stands for (None: recorded on the GPU)."""
        from ..trial.recording import dry_run_card

        return dry_run_card(self.arch) if self.dry_run else None


@dataclass(frozen=True)
class FitResult:
    """The answer as fit.json holds it (results/fits.py: per setting its points and curves, per card or budget
    each setting's largest value, and what the GPU said where confirmed) and the folder it was written to (None:
    none, for traces without `out`)."""

    fit: FitFile
    folder: Path | None
    simulated_torch: str = REFERENCE   # the torch whose allocator the replays followed (sim/target.py)

    def to_json(self) -> dict:
        """fit.json's content under the names every command's --json shares (`FitFile.shared_json`)."""
        return self.fit.shared_json(self.simulated_torch)


def fit(param: str | None = None, options: FitOptions | None = None, *, progress: Progress | None = None,
        **fields: Any) -> FitResult:
    """Answer what fits (see the module docstring). `param`: the parameter's name; `options` (FitOptions) or its
    fields as keywords: `fit("batch", traces={8: "a.xz", 16: "b.xz"}, cards=["24GiB"])`. Every option is checked
    before the first GPU run: a typo costs no recording. `progress` hears a line per run on the GPU."""
    from ..report.fits import plot_fit
    from ..results.fits import claimed
    from ..results.names import PLOT_FILE
    from ..settings.grid import load_grid_file   # loads yaml: not at every command's start-up

    options = options_of("fit", FitOptions, options, given(fields, param=param))
    say = progress or quiet
    entries = [*options.confs, *(load_grid_file(options.grid) if options.grid else [])]
    folder = _folder(options)
    if folder is None:
        answer, simulated = _answered(options, entries, None, say)
        return FitResult(answer, None, simulated)
    with claimed(folder, options.param, list(options.command) if options.command else None):
        answer, simulated = _answered(options, entries, folder, say)
        answer.write(folder)
        plot_fit(answer, folder / PLOT_FILE, simulated)
    return FitResult(answer, folder, simulated)


def _answered(options: FitOptions, entries: list, folder: Path | None, progress: Progress) -> tuple[FitFile, str]:
    """Recorded (or read), replayed, made exact where a command can be recorded, answered and confirmed; and the
    torch the replays followed."""
    from ..sweeper.fitcopies import confirm_copies
    from ..sweeper.fitrun import confirm
    from ..sweeper.fitting import Replays, fit_file
    from ..trial.probe import Probes

    def say(line: str) -> None:
        progress(line, None)

    command, probes = options.command, Probes()   # the command's interpreter probed once, for every run below
    if command is not None and options.confirm:
        from ..trial.recording import refuse_without_gpu

        # before the first recording: confirming needs the GPU, which a dry run cannot stand for
        refuse_without_gpu(list(command), dry_run_instead=False, probes=probes)
    sources, facts = _recorded(options, folder, say, probes)
    # the torch the replays follow (sim/target.py: each trace's own; a fit's traces come from one torch)
    target = Target(next((f.meta.get("torch_version") for _, f in sorted(facts.items())), None))
    replays = Replays(_request(options, facts, entries, target), jobs=options.jobs, device=options.device)
    for value, (name, source) in sorted(sources.items()):
        replays.add(value, name, source)
    answer = fit_file(replays, _settle(options, replays, folder, say, probes))
    if command is not None and options.confirm:
        confs = [AllocConf.parse(c) if isinstance(c, str) else c for c in options.confirm]
        runs = dict(gpu=options.gpu, timeout_s=options.timeout_s, warmup_steps=options.warmup,
                    steps=options.steps, say=say, before=_before(folder), probes=probes)
        answer = confirm(answer, command, confs, **runs)   # type: ignore[arg-type]
        if options.confirm_copies is not None:
            answer = confirm_copies(answer, command, confs, options.confirm_copies, **runs)   # type: ignore[arg-type]
    return answer, target.simulated


def _before(folder: Path | None) -> FitFile | None:
    """The fit.json an earlier run of this fit left in its folder (`claimed` held it to be this fit's), if any."""
    from ..results.names import FIT_FILE
    from ..results.typed import load_json

    path = None if folder is None else folder / FIT_FILE
    return FitFile.from_json(load_json(path), str(path)) if path is not None and path.exists() else None


def _recorded(options: FitOptions, folder: Path | None, say, probes) -> tuple[dict, dict]:
    """Each value's trace, as (name, path or Trace), and what it says of itself (`TraceFacts`): the command's
    recordings, made or kept in `folder`, or the traces given, each read once for its facts and dropped (standard
    input, which reads once, is held)."""
    from ..sweeper.fitrun import record_values
    from ..sweeper.fitting import TraceFacts, load_source

    if options.command is not None:
        assert folder is not None   # a command's recordings are always kept
        recorded = record_values(options.command, options.param, options.values, folder, gpu=options.gpu,
                                 timeout_s=options.timeout_s, warmup_steps=options.warmup,
                                 steps=options.steps, say=say, dry_run=options.card, probes=probes)
        return {v: (name, name) for v, (name, _) in recorded.items()}, {v: f for v, (_, f) in recorded.items()}
    sources, facts = {}, {}
    for i, (value, source) in enumerate((options.traces or {}).items()):
        trace = load_source(source, options.device)   # type: ignore[arg-type]   # a checked path, or a Trace
        facts[value] = TraceFacts.of(trace)
        sources[value] = (name_of(source, i), trace if source == "-" else source)
    return sources, facts


def _settle(options: FitOptions, replays, folder: Path | None, say, probes):
    """The recordings that make answers exact (sweeper/fitexact.py), where a command can be recorded: on the GPU or
    by a dry run, into the fit's folder, at most `extra_recordings`."""
    from ..results.fits import ExactRecord, NotExact
    from ..sweeper.fitexact import settle
    from ..sweeper.fitrun import DRY_RUNNING, gpu_seen, record_value

    command, most = options.command, options.extra_recordings
    if command is None:
        return ExactRecord(most, not_run=NotExact.TRACES)
    if most == 0:
        return ExactRecord(most, not_run=NotExact.NONE)
    card = options.card
    if card is None and not gpu_seen(command, options.param, options.values[0], probes):
        return ExactRecord(most, not_run=NotExact.NO_GPU)
    assert folder is not None

    def record(value: int):
        return record_value(command, options.param, value, folder, gpu=options.gpu, timeout_s=options.timeout_s,
                            warmup_steps=options.warmup, steps=options.steps, dry_run=card, probes=probes)

    return settle(replays, record, most, say, "recording" if card is None else DRY_RUNNING)


def _folder(options: FitOptions) -> Path | None:
    """`out`, or for a command a new folder under the results root (not created here: `results.fits.claimed`)."""
    from datetime import datetime, timezone

    from ..results.folder import DEFAULT_RESULTS_ROOT
    from ..workload.command import command_name

    folder = Path(options.out) if options.out else None
    if folder is None and options.command:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        folder = Path(DEFAULT_RESULTS_ROOT) / f"fit-{command_name(options.command)}-{options.param}-{stamp}"
    return folder


def _request(options: FitOptions, facts: dict, entries: list, target: Target):
    """What is answered: the settings under the sweep's rules for the recordings' torch; the cards (by default,
    unless budgets are given: sim/limits.py's), each above the context, and the budgets on the recording GPU."""
    from ..settings.grid import ranked_settings
    from ..sim.limits import DEFAULT_CARDS_GIB
    from ..sim.points import overhead_of, recording_device
    from ..report.fitwords import OVERHEAD_WORDS
    from ..results.fits import OverheadFrom
    from ..sweeper.fitting import FitRequest, command_warning, dry_run_of
    from ..units import budget_on

    said = [facts[v] for v in sorted(facts)]
    try:
        dry = dry_run_of(said)
    except ValueError as exc:   # a curve through dry runs and GPU recordings together would join two kinds
        raise OptionError("traces", "{traces}: {why}", why=str(exc)) from None
    confs, skipped = ranked_settings(entries, target.version, has_budget=bool(options.budgets))
    device = recording_device(said)
    given_overhead = in_bytes(options.overhead)
    overhead = given_overhead if given_overhead is not None else overhead_of(said)
    source = OverheadFrom.of(given_overhead is not None, any(f.meta.get("overhead_bytes") is not None for f in said),
                             dry is not None)
    budgets = [(str(text), budget_on(*(budget_limit(text) or (None, None)), device) or 0) for text in options.budgets]
    if over := [(text, size) for text, size in budgets if size > device]:   # the card runs out first
        raise OptionError("budgets", "{budgets} {given} ({size}) is more than {gpu}'s {card}: it limits nothing; "
                          "give {cards} for a larger card", given=shown(over[0][0]), size=format_bytes(over[0][1]),
                          gpu=card_words(dry is None), card=format_bytes(device))
    cards = [in_bytes(c) or 0 for c in options.cards] if options.cards is not None else \
        [] if options.budgets else [g * GiB for g in DEFAULT_CARDS_GIB]
    check_cards(cards, overhead, GIVEN if source is OverheadFrom.GIVEN else OVERHEAD_WORDS[source])
    # a setting named and skipped is said, as replay says it; the default grid's skips are the grid's own
    warnings = [skip.said for skip in skipped] if entries else []
    if mixed := command_warning(facts, options.param):
        warnings.append(mixed)
    return FitRequest(options.param, confs, cards, budgets, options.step or step_of(sorted(facts)), overhead, source,
                      device, list(options.command) if options.command else None, warnings)
