"""choice.json of an older schema read as the current one, as asv upgrades its results files: one conversion per
schema version (`UPGRADES`: version N's parsed JSON to version N + 1's), applied in turn before the typed reader
checks the file. A folder an older alloctune wrote so reads, exports and compares as it did; reading never rewrites
it (`alloctune report` writes the current schema when it decides again).

Each conversion reads what it moves through the typed reader first, under the version's own keys, so that damage
stays one line naming the file and the field as the file spells it. `schema1` goes the other way: a current record
as schema 1 kept it, which `--json` keeps printing beside the current keys for the programs that read those.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Annotated, Any, Callable

from ..errors import ResultsError
from .choices import CHOICE_SCHEMA, ChoiceRecord
from .figures import Comparison, MemoryMeasure, SettingFigures, SettingState, Summary
from .records import Bytes, Conf, Count, Rate
from .typed import Check, from_json


# An interval's two ends: the reader checks a tuple's items, not how many there are.
Interval = Annotated[tuple[float, ...], Check(lambda v: None if len(v) == 2 else f"expected 2 numbers, got {len(v)}")]


@dataclass(frozen=True)
class _Figures1:
    """The keys under which schema 1 kept a decision's figures, each checked as schema 1's reader checked it: the
    winner's flat, the default's as `baseline_*`, and what schema 2 derives from the record (`schema1`). Of its
    other keys, which schema 2 keeps as they are, those the conversion reads (`conf`, `throughput_ratio`,
    `max_slowdown`)."""

    conf: Conf | None
    throughput_ratio: Rate | None = None
    max_slowdown: float | None = None
    fits: bool = True
    label: str = ""
    baseline: str = ""
    is_default: bool = False
    simulated: bool = False
    repeats: Count = 0
    memory_measure: MemoryMeasure | None = None
    memory_bytes: Bytes | None = None
    peak_reserved_bytes: Bytes | None = None
    peak_allocated_bytes: Bytes | None = None
    reserved_ratio: float | None = None
    num_alloc_retries: Count | None = None
    device_peak_used_bytes: Bytes | None = None
    throughput_median: Rate | None = None
    throughput_unit: str | None = None
    throughput_p_value: float | None = None
    throughput_ratio_ci: Interval | None = None
    paired_rounds: Count | None = None
    baseline_state: SettingState | None = None
    baseline_memory_bytes: Bytes | None = None
    baseline_peak_reserved_bytes: Bytes | None = None
    baseline_reserved_ratio: float | None = None
    baseline_throughput_median: Rate | None = None


@dataclass(frozen=True)
class _File1:
    choices: tuple[_Figures1, ...]


# Schema 1's keys that schema 2 keeps in `settings`, or derives from the record (`schema1`).
_MOVED_1 = {f.name for f in fields(_Figures1)} - {f.name for f in fields(ChoiceRecord)}


def _summary(median: float | None) -> Summary | None:
    return None if median is None else Summary(None, median, None, None)


def _versus(f: _Figures1) -> Comparison | None:
    """The winner's comparison with the default: schema 1 kept its ratio, interval, p-value and rounds (none where
    the default won, which it compared with nothing)."""
    if not f.conf or f.throughput_ratio is None:
        return None
    low, high = f.throughput_ratio_ci or (None, None)
    return Comparison(f.throughput_ratio, f.throughput_p_value, None, f.max_slowdown, low, high, f.paired_rounds or 0)


def _settings_1(f: _Figures1) -> list[SettingFigures]:
    """The winner's and the default's figures, as far as schema 1 kept them (it kept no one else's)."""
    measure = f.memory_measure or MemoryMeasure.RESERVED   # schema 1 named it where something fitted
    settings = []
    if f.conf is not None:
        settings.append(SettingFigures(
            f.conf, SettingState.FITS, memory_measure=measure, memory=f.memory_bytes,
            peak_reserved_bytes=f.peak_reserved_bytes, peak_allocated_bytes=f.peak_allocated_bytes,
            reserved_ratio=f.reserved_ratio, num_alloc_retries=f.num_alloc_retries,
            device_peak_used_bytes=f.device_peak_used_bytes, throughput=_summary(f.throughput_median),
            unit=f.throughput_unit, vs_default=_versus(f)))
    if f.baseline_state is not None and f.conf != "":   # the default won: its figures are the winner's
        settings.append(SettingFigures(
            "", f.baseline_state, memory_measure=measure, memory=f.baseline_memory_bytes,
            peak_reserved_bytes=f.baseline_peak_reserved_bytes, reserved_ratio=f.baseline_reserved_ratio,
            throughput=_summary(f.baseline_throughput_median)))
    return settings


# Figures a reason has quoted since schema 1, by its code, with the value every schema 1 file means by leaving them
# out: a confirmation's `blocks` (0: a pair of processes, the only confirmation there was then).
_SINCE_1: dict[str, dict[str, Any]] = {"confirmed": {"blocks": 0}, "disagrees": {"blocks": 0}}


def _each_since_1(value: Any, change: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]) -> Any:
    """`value` (a record's JSON) with each reason record in it, wherever it sits, given its figures
    `change(figures, since)` where its code has figures added since schema 1 (`_SINCE_1`)."""
    if isinstance(value, (list, tuple)):
        return [_each_since_1(v, change) for v in value]
    if not isinstance(value, dict):
        return value
    since = _SINCE_1.get(str(value.get("code")), {}) if isinstance(value.get("figures"), dict) else {}
    if since:
        value = dict(value, figures=change(value["figures"], since))
    return {k: v if k == "figures" else _each_since_1(v, change) for k, v in value.items()}


def _reasons_from_1(value: Any) -> Any:
    """Schema 1's reason records with the figures added since, at what schema 1 meant."""
    return _each_since_1(value, lambda figures, since: {**since, **figures})


def _from_1(data: dict[str, Any], where: str) -> dict[str, Any]:
    old = from_json(_File1, data, where)
    choices = [dict({k: _reasons_from_1(v) for k, v in c.items() if k not in _MOVED_1},
                    settings=[asdict(s) for s in _settings_1(f)])
               for c, f in zip(data["choices"], old.choices)]
    return dict(data, choices=choices, schema=2)


UPGRADES: dict[int, Callable[[dict[str, Any], str], dict[str, Any]]] = {1: _from_1}


def upgraded(data: object, where: str) -> object:
    """choice.json's parsed `data` in CHOICE_SCHEMA: each older version's conversion applied in turn (the file itself
    is left as it is). A version this alloctune does not know is one ResultsError line."""
    version = data.get("schema") if isinstance(data, dict) else None
    while version != CHOICE_SCHEMA:
        if type(version) is not int or version not in UPGRADES:
            raise ResultsError(f"{where}: choice schema version {version!r}; this alloctune reads "
                               f"{min(UPGRADES)} to {CHOICE_SCHEMA}")
        assert isinstance(data, dict)
        data = UPGRADES[version](data, where)
        version = data["schema"]
    return data


def schema1(c: ChoiceRecord) -> dict[str, Any]:
    """The current record as schema 1 kept it, each key with the value schema 1 gave it: what `--json` keeps
    printing beside the record's own keys, for the programs that read schema 1's. (A record upgraded from schema 1
    gives the file back, but for `repeats`, which schema 1 kept for the winner and the default together.)"""
    w, d = c.winner, c.default
    cmp = w.vs_default if w is not None else None
    ci = (cmp.ci_low, cmp.ci_high) if cmp is not None and cmp.ci_low is not None and cmp.ci_high is not None else None
    kept = {k: _as_schema1(v) for k, v in c.to_json().items() if k != "settings"}
    return dict(kept, **{
        "fits": c.fits, "label": c.label, "baseline": "", "is_default": c.is_default, "simulated": c.simulated,
        "peak_reserved_bytes": w and w.peak_reserved_bytes, "memory_measure": w and w.memory_measure.value,
        "memory_bytes": w and w.memory, "device_peak_used_bytes": w and w.device_peak_used_bytes,
        "peak_allocated_bytes": w and w.peak_allocated_bytes, "reserved_ratio": w and w.reserved_ratio,
        "num_alloc_retries": w and w.num_alloc_retries,
        "throughput_median": w and w.throughput and w.throughput.median, "throughput_unit": w and w.unit,
        "throughput_p_value": cmp and cmp.p_value, "throughput_ratio_ci": ci, "paired_rounds": cmp and cmp.pairs,
        "baseline_state": d and d.state.value, "baseline_memory_bytes": d and d.memory,
        "baseline_peak_reserved_bytes": d and d.peak_reserved_bytes, "baseline_reserved_ratio": d and d.reserved_ratio,
        "baseline_throughput_median": d and d.throughput and d.throughput.median,
        "repeats": max((s.repeats for s in (w, d) if s is not None), default=0),
    })


def _as_schema1(value: Any) -> Any:
    """Reason records without the figures schema 1 lacked, where they hold what schema 1 meant without them."""
    return _each_since_1(value, lambda figures, since: {k: v for k, v in figures.items()
                                                         if k not in since or since[k] != v})


def schema1_text(records: list[ChoiceRecord]) -> str:
    """choice.json's text for `records` as schema 1 wrote it (folder.py's layout): what a file of schema 1 holds
    where it says what they say (scripts/regenerate_results.py keeps such a file rather than rewrite it)."""
    return json.dumps({"choices": [schema1(r) for r in records], "schema": 1}, indent=2, sort_keys=True) + "\n"
