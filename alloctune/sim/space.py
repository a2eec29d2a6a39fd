"""The settings space a target torch offers for one trace, and how to step between its settings.

Per torch version (`settings/versions.py` says which keys exist and which values it accepts):
`expandable_segments`, `max_split_size_mb`, `max_non_split_rounding_mb` (with max_split_size_mb only: without it
the key changes nothing), `large_segment_size_mb` (2.11+), `garbage_collection_threshold` (under a budget only),
and `roundup_power2_divisions`, as one value or one value per size interval (only the intervals that hold a
request of the trace). The whole space is far too large to replay (the list form alone has 6^12 members on a
trace with requests in 12 size intervals): `search.py` scans it and steps through it best first.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..settings.conf import AllocConf, DivisionList
from ..settings.grid import DEFAULT_GRID
from ..settings.known import forbidden_combination
from ..settings.versions import behaviour, parse_version
from .blocks import DIVISION_INTERVALS, round_size
from .config import division_table
from .trace import ALLOC, Trace

DIVISIONS = (1, 2, 4, 8, 16, 32)
MAX_SPLIT_MB = (20, 32, 64, 128, 256, 512, 1024, 2048, 4096)
NON_SPLIT_ROUNDING_MB = (40, 64, 128, 256, 512, 1024)
# Multiples of 2 MiB: the page of large-pool expandable segments must be whole device pages.
LARGE_SEGMENT_MB = (12, 16, 32, 40, 64, 128)
GC_THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


@dataclass(frozen=True)
class Space:
    """The keys and values a target torch offers for this trace, and how to step between settings."""

    torch_version: str
    has_budget: bool
    intervals: tuple[int, ...]     # size intervals (2^k MiB, k = 0..15) that hold at least one request
    sizes: tuple[int, ...]         # the distinct request sizes: rounding them alike means behaving alike
    axes: dict                     # key -> values (not None), for the keys this torch has

    @classmethod
    def for_trace(cls, trace: Trace, torch_version: str, has_budget: bool) -> "Space":
        kinds, sizes = trace.kinds, trace.sizes
        distinct = sorted({int(s) for k, s in zip(_as_list(kinds), _as_list(sizes)) if k == ALLOC})
        intervals = sorted({_interval(s) for s in distinct})
        v = parse_version(torch_version)
        axes: dict = {"roundup_power2_divisions": DIVISIONS, "max_split_size_mb": MAX_SPLIT_MB}
        if v >= (2, 1, 0):
            axes["expandable_segments"] = (True,)
        if v >= (2, 6, 0):
            axes["max_non_split_rounding_mb"] = NON_SPLIT_ROUNDING_MB
        if v >= (2, 11, 0):
            axes["large_segment_size_mb"] = LARGE_SEGMENT_MB
        if has_budget:
            axes["garbage_collection_threshold"] = GC_THRESHOLDS
        return cls(torch_version, has_budget, tuple(intervals), tuple(distinct), axes)

    def scan(self) -> list[AllocConf]:
        """The default grid and every key alone at each of its values (those that mean something alone)."""
        confs = [AllocConf.parse(c) for c in DEFAULT_GRID]
        for key, values in self.axes.items():
            if key != "max_non_split_rounding_mb":
                confs += [AllocConf(**{key: value}) for value in values]
        return confs

    def neighbours(self, conf: AllocConf) -> list[AllocConf]:
        """Settings one step from `conf`: a key set to another value, added or removed; one size interval's
        divisions changed. Pointless pairs, and those with a known problem on this torch whatever the job does
        (`known.forbidden_combination`), are left out here; torch's parse judges the rest."""
        out = []
        for key, values in self.axes.items():
            current = getattr(conf, key)
            if current is not None:
                unset: dict[str, Any] = {key: None}
                out.append(replace(conf, **unset))
            out += [replace(conf, **{key: value}) for value in values if value != current]
        table = self._table(conf)
        for interval in self.intervals:
            for d in DIVISIONS:
                if table[interval] != d:
                    changed = list(table)
                    changed[interval] = d
                    out.append(replace(conf, roundup_power2_divisions=self._encode(changed)))
        return [c for c in out if _sensible(c) and forbidden_combination(c, self.torch_version) is None]

    def signature(self, conf: AllocConf) -> tuple:
        """Equal signatures behave identically on this trace: the same rounded size for every request size, and
        the same value for every other key."""
        b = behaviour(self.torch_version)
        table = division_table(conf, b.gt_overwrites_last_entry)
        rounded = tuple(round_size(s, table, b.divisions_one_rounds_512) for s in self.sizes)
        return (rounded, str(replace(conf, roundup_power2_divisions=None)))

    def _table(self, conf: AllocConf) -> list[int]:
        table = division_table(conf, behaviour(self.torch_version).gt_overwrites_last_entry)
        return [max(d, 1) for d in table]   # 0 (unset) and 1 both round to 512 bytes (2.4+)

    def _encode(self, table: list[int]) -> int | DivisionList | None:
        """The shortest setting for `table` on the intervals of this trace (the others do not matter): one
        value when they agree, else the list form, with '>' for a run of equal values at the end."""
        used = [table[i] for i in self.intervals]
        if len(set(used)) == 1:
            return None if used[0] == 1 else used[0]
        entries: list[tuple[int | str, int]] = []
        last = len(self.intervals) - 1
        while last > 0 and table[self.intervals[last - 1]] == table[self.intervals[last]]:
            last -= 1
        run = table[self.intervals[last]]   # the value of the run of equal intervals at the end
        explicit = self.intervals if run == 1 else self.intervals[:last + 1]
        for n, i in enumerate(explicit):
            # Gaps between explicit entries are unset (plain rounding): the first entry and divisions > 1 only.
            if n == 0 or table[i] > 1:
                entries.append((1 << i, table[i]))
        if run > 1 and last < len(self.intervals) - 1:
            # '>' covers the intervals after the run's first one (explicit above); before 2.10 it also
            # overwrote that entry, with the same value: both versions read it alike.
            entries.append((">", run))
        return tuple(entries)


def _sensible(conf: AllocConf) -> bool:
    # only oversize blocks (>= max_split_size_mb) are ever judged by max_non_split_rounding_mb
    return not (conf.max_non_split_rounding_mb is not None and conf.max_split_size_mb is None)


def _interval(size: int) -> int:
    return min(max(size.bit_length() - 1 - 20, 0), DIVISION_INTERVALS - 1)


def _as_list(seq) -> list:
    return seq.tolist() if hasattr(seq, "tolist") else list(seq)
