"""`summary.md`: a sweep's report, one section per decision, from its record (its ranked table is `ranked.py`'s),
then what the trials say (the prediction against the measurement, each process, what was skipped, the
environments, how it was measured) and the statistics behind the decisions."""
from __future__ import annotations

import re
import shlex
from collections import Counter
from pathlib import Path

from ..decide.choice import something_to_export
from ..decide.parameters import DEFAULT_TIE, max_slowdown_of
from ..decide.stats import ALPHA, OUTLIER_Z
from ..decide.summary import SettingResult
from ..errors import printable
from ..files import write_file
from ..results.calibration import Calibration
from ..results.choices import ChoiceRecord
from ..results.names import CALIBRATION_FILE, SUMMARY_FILE
from ..results.folder import ResultsFolder, SweepInfo
from ..results.provenance import provenance
from ..results.records import measured_env_id, peak_row, process_name
from ..units import format_bytes
from ..settings.conf import conf_label
from ..settings.known import Feature, features_phrase
from .predicted import prediction
from .provenance import origin
from .ranked import incomplete_note, markdown_ranked, title
from .tables import markdown_table
from .words import TIME_SOURCES, auto_window_line, skipped_words

# Environment facts in the order a reader looks for them; any other scalar facts follow, sorted.
_ENV_ORDER = ("gpu", "gpu_memory_bytes", "torch", "torch_git", "cuda", "driver", "python", "host", "platform")


def _env_facts(env: dict) -> list[tuple[str, str]]:
    keys = [k for k in _ENV_ORDER if k in env] + sorted(k for k in env if k not in _ENV_ORDER)
    facts = []
    for key in keys:
        value = env[key]
        if value is None or isinstance(value, dict):
            continue
        if isinstance(value, (list, tuple)):
            value = ", ".join(map(str, value))
        elif key.endswith("_bytes") and isinstance(value, (int, float)):
            value = format_bytes(value)
        facts.append((key, str(value)))
    return facts


def _dates(settings: list[SettingResult]) -> str:
    stamps = sorted(r.started_at for s in settings for r in s.trials if r.started_at)
    if not stamps:
        return "-"
    return stamps[0] if stamps[0] == stamps[-1] else f"{stamps[0]} to {stamps[-1]}"


def _recommendation(choice: ChoiceRecord) -> str:
    if choice.conf is None:
        return "**Nothing fits**: no setting ran without failing; see the table and the reasons."
    if choice.is_default:
        return "**Keep the default**: leave `PYTORCH_CUDA_ALLOC_CONF` unset."
    return f"**Recommended:** `PYTORCH_CUDA_ALLOC_CONF={choice.conf}`"


def _choice_section(choice: ChoiceRecord) -> list[str]:
    lines = [f"## {title(choice)}", ""]
    if note := incomplete_note(choice):
        lines += [f"**{note}**", ""]
    lines += [_recommendation(choice), ""]
    if choice.simulated and not (source := provenance(choice.env)).measured:
        lines += [f"Replayed from {origin(source)}: memory only, the trace it made run through the allocator "
                  f"simulator; nothing was measured on a GPU.", ""]
    elif choice.simulated:
        env = choice.env
        when = f" on {env['recorded_at']}" if env.get("recorded_at") else ""
        torch = env.get("torch") or env.get("trace_torch")   # older command traces say their torch only there
        lines += [f"Replayed from a trace recorded on {env.get('gpu') or 'an unrecorded GPU'} "
                  f"with torch {torch or '(unrecorded version)'}{when}: memory only, the trace run "
                  f"through the allocator simulator; throughput was not measured.", ""]
    lines += ["Why:", ""] + [f"- {r}" for r in choice.reasons] + [""]
    if choice.features:   # what the table of known problems was consulted for
        features = features_phrase(Feature(f) for f in choice.features)
        lines += [f"Observed in the job (the start-up hook, every trial): it {features}.", ""]
    if choice.precision:
        lines += [f"Precision: {choice.precision}.", ""]
    lines += [markdown_ranked(choice), ""]
    if choice.runners_up:
        lines += ["Runners-up and what they cost:", ""]
        lines += [f"- `{conf_label(u.conf)}`: {u.why}" for u in choice.runners_up] + [""]
    return lines


def _statistics(info: SweepInfo, choices: list[ChoiceRecord], recording: bool = False) -> list[str]:
    """`recording`: a trial that recorded the allocation trace is among those counted (summary.counted)."""
    tie = next((c.tie for c in choices if c.tie is not None), DEFAULT_TIE)
    # `report` may override the sweep's max slowdown: the choices hold the one applied
    max_slowdown = next((c.max_slowdown for c in choices if c.max_slowdown is not None),
                        max_slowdown_of(None, info.max_slowdown))
    recorded = ["- The default's first trial also recorded the allocation trace (hybrid sweep) and counts as its "
                "repeat 1: recording covers the first pass only, whose peak reserved matched an unrecorded "
                "default's to the byte on the H200, and stops before the timed pass that gives its throughput. "
                "The outlier rule above applies to it as to any default run."] if recording else []
    return [
        "## Statistics", "",
        "- Memory: peaks over the whole process, median over the repeats that ran; a disagreement between "
        "repeats is flagged. reserved/allocated = peak reserved / peak allocated; fragmentation = 1 - peak "
        "allocated / peak reserved.",
        "- Throughput: median of the repeats; 95% interval = t-interval on log throughput (geometric mean), "
        f"samples with a modified z-score above {OUTLIER_Z} left out as outliers.",
        "- Throughput per trial: the workload's measured steps are run twice in the same process, and the second "
        "pass (the same shapes, now warm) is timed in CUDA-synchronised blocks; the first-seen cost of new shapes "
        "stays out of the figure.",
        "- Against the default: per round, the setting's throughput over the default's interpolated between the "
        "default's runs before and after it; a t-test and 95% interval on the log ratios (paired). With fewer than "
        f"2 such rounds, Welch's t-test on log throughput. alpha = {ALPHA}; a setting significantly slower than the "
        f"default by more than the max slowdown ({max_slowdown:.0%}, one-sided test) is refused; with a single "
        "repeat throughput is not tested and does not refuse a setting. ±x% after a ratio is the half-width of its "
        "95% interval: the smallest difference the sweep could detect.",
        f"- Ties: peaks within {tie:.0%} of each other tie; the tie goes to a native-allocator setting over a backend "
        "switch, then to a peak that repeated exactly over one that moved, then to fewer keys. Where backends "
        "differ, memory is the peak device memory the driver reports, for every setting.",
        *recorded,
        "",
    ]


def _repeats(info: SweepInfo) -> str:
    if info.confirm:
        return (f"confirm (speed predicted from each replay's driver calls, the winner confirmed by one paired run; "
                f"rounds, at most {info.repeats}, only where the prediction cannot answer)")
    if not info.auto_repeats:
        return str(info.repeats)
    budget = f", time budget {info.time_budget_s:g} s" if info.time_budget_s else ""
    return f"auto (rounds until each answer is known, at most {info.repeats}{budget})"


def _predicted_vs_measured(settings: list[SettingResult]) -> list[str]:
    """A hybrid sweep's check of the simulator: each setting both replayed and measured, side by side."""
    sim = {(measured_env_id(s.env_id), s.budget_bytes, s.conf): s for s in settings if s.simulated}
    rows = []
    for s in settings:
        p = sim.get((s.env_id, s.budget_bytes, s.conf))
        if s.simulated or p is None or not (s.peak_reserved_bytes and p.peak_reserved_bytes):
            continue
        error = p.peak_reserved_bytes / s.peak_reserved_bytes - 1
        rows.append((s.label, format_bytes(p.peak_reserved_bytes), format_bytes(s.peak_reserved_bytes),
                     f"{error:+.2%}"))
    if not rows:
        return []
    return ["## Replayed against measured (GPU)", "",
            markdown_table(("setting", "replayed peak reserved", "measured peak reserved", "error"), rows), ""]


def _per_process(settings: list[SettingResult]) -> list[str]:
    """A command's trials of several processes: each process's peak reserved, and which one peaked (a replay: each
    process's trace replayed)."""
    rows = []
    for s in settings:
        for r in s.trials:
            procs = r.processes or []
            if len(procs) < 2:
                continue
            top = peak_row(procs)
            assert top is not None
            each = "; ".join(f"{process_name(p)} (GPU {p.get('device')}): {format_bytes(p.get('peak_reserved_bytes'))}"
                             for p in procs)
            rows.append((s.label + (" (replayed)" if s.simulated else ""), str(r.repeat + 1), r.state.value,
                         process_name(top), each))
    if not rows:
        return []
    return ["## Per process", "",
            "The trial's peak is the highest of its processes' peaks (the process that needs the most memory "
            "decides whether the job fits).", "",
            markdown_table(("setting", "repeat", "state", "peaked", "peak reserved per process"), rows), ""]


def _time_and_window(info: SweepInfo, settings: list[SettingResult]) -> list[str]:
    """Where the measured trials' throughput came from, and, for a command's automatic or --steps window, what
    their memory covers and whether its peak was still rising at the end."""
    measured = [(s.label, m) for s in settings if not s.simulated for r in s.trials if (m := r.measurement)]
    sources = Counter(m.throughput_source for _, m in measured if m.throughput_source is not None)
    lines = [f"- Where the time came from: {TIME_SOURCES[source]}"
             + (f" ({count} of {len(measured)} trials)" if count < len(measured) else "")
             for source, count in sources.most_common()]
    auto = [(name, m) for name, m in measured if m.auto_window]
    if auto:
        lines.append(auto_window_line(sorted({name for name, _ in auto}), len(auto), len(measured),
                                      all(m.held_to_step for _, m in auto)))
    window = int(info.workload.get("steps") or 0) if info.workload.get("command") else 0
    if window and measured:
        ended = sum(m.ended_by_window and not m.auto_window for _, m in measured)
        lines.append(f"- Window: --steps {window} after {info.workload.get('warmup_steps')} warm-up steps; the "
                     f"start-up hook ended {ended} of {len(measured)} trials there, every process at the same step "
                     f"(the others ended first): memory covers the warm-up and the window, not the rest of the job.")
        rising = sorted({name for name, m in measured if m.peak_rising})
        if rising:
            lines.append(f"- **Peak reserved was still rising in the window's last fifth** for {', '.join(rising)}: "
                         f"later steps may need more memory than measured; a longer window shows whether it levels "
                         f"off.")
    return lines


def _calibration(cal: Calibration | None, choices: list[ChoiceRecord]) -> list[str]:
    """What the predicted speeds rest on: the calibration the sweep kept, and the default's measured step."""
    steps = sorted({p.default_step_seconds for c in choices for conf in c.predictions
                    if (p := prediction(c, conf)) is not None and p.default_step_seconds})
    if cal is None or not steps:
        return []
    step = ", ".join(f"{v * 1e3:.3g} ms" for v in steps)
    return [f"- Predicted slowdown: each setting's driver calls per steady step, counted by its replay, priced by "
            f"the calibration in {CALIBRATION_FILE} ({cal.gpu}, driver {cal.driver or 'unknown'}, torch {cal.torch}, "
            f"measured {cal.measured_at}), against the default's measured step ({step}): a prediction, not a "
            f"measurement."]


def _code(text: str) -> str:
    """`text` as Markdown inline code, whatever backticks it holds: fenced by a longer run of them."""
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or fence != "`" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def write_summary(folder: ResultsFolder, info: SweepInfo, settings: list[SettingResult],
                  choices: list[ChoiceRecord], calibration: Calibration | None = None) -> Path:
    """Write `summary.md` in the results folder and return its path: a section per decision, from its record
    (`choices`), then what the trials say (`settings`); `calibration`: the one the predicted speeds rest on (the
    decision's)."""
    settings = list(settings)
    budget = (format_bytes(info.budget_bytes) if info.budget_bytes
              else f"{info.budget_fraction:g} of the device" if info.budget_fraction else "none (whole device)")
    lines = [f"# alloctune: {info.workload_name}", ""]
    for choice in choices:
        lines += _choice_section(choice)
    lines += _predicted_vs_measured(settings)
    lines += _per_process(settings)
    if info.skipped:
        lines += ["## Skipped settings", "",
                  markdown_table(("setting", "environment", "reason"),
                                 ((conf_label(s.conf), s.env_id or "all", skipped_words(s)) for s in info.skipped)), ""]
    lines += ["## Environment", ""]
    env_ids = sorted({s.env_id for s in settings} | set(info.envs))
    for env_id in env_ids:
        ours = [s for s in settings if s.env_id == env_id]
        env = dict(info.envs.get(env_id, {}))
        env.update(next((r.env for s in ours for r in s.trials if r.env), {}))
        lines += [f"### {env_id}", ""] + [f"- {k}: {v}" for k, v in _env_facts(env)]
        lines += [f"- trials run: {_dates(ours)}", ""]
    lines += ["## How this was measured", "",
              f"- Command: {_code(info.command or '(not recorded)')}",
              f"- Workload: {info.workload_name} (definition hash {info.workload_hash})",
              f"- Backend: {info.backend}; repeats per setting: {_repeats(info)}; memory budget: {budget}",
              *_time_and_window(info, settings), *_calibration(calibration, choices),
              f"- Settings in the grid: {len(info.grid)}; skipped: {len(info.skipped)} (see above); "
              f"trials recorded: {sum(len(s.trials) for s in settings)}"]
    if something_to_export(choices):
        lines.append(f"- Export the choice: {_code('alloctune export ' + shlex.quote(folder.path.name))} (from the "
                     f"folder holding it)")
    lines.append("")
    lines += _statistics(info, choices, recording=any(r.recording for s in settings for r in s.trials))
    folder.path.mkdir(parents=True, exist_ok=True)
    write_file(folder.file(SUMMARY_FILE), printable("\n".join(lines)))   # a GPU's name or a path may hold controls
    return folder.path / SUMMARY_FILE
