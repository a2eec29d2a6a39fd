"""The settings space a target torch offers for one trace, and how to step between its settings.

Per torch version, the keys of `settings/keys.py` that have search values and exist on it (each with the key it
needs, those that need a memory fraction under a budget only), and `roundup_power2_divisions` also as one value per
size interval (only the intervals that hold a request of the trace). The whole space is far too large to replay (the list form alone has 6^12 members on a
trace with requests in 12 size intervals): `search.py` scans it and steps through it best first.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..settings.conf import AllocConf, DivisionList
from ..settings.grid import DEFAULT_GRID, expand
from ..settings.keys import KEYS, SEARCH_ORDER
from ..settings.known import forbidden_combination
from ..settings.versions import behaviour, parse_version
from .blocks import DIVISION_INTERVALS, round_size
from .config import division_table
from .trace import ALLOC, Trace

DIVISIONS = KEYS["roundup_power2_divisions"].search   # also the steps of one size interval's divisions


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
        axes = {key.name: key.search for key in (KEYS[name] for name in SEARCH_ORDER)
                if key.search and key.since <= v and (has_budget or not key.needs_budget)}
        return cls(torch_version, has_budget, tuple(intervals), tuple(distinct), axes)

    def scan(self) -> list[AllocConf]:
        """The default grid and every key alone at each of its values (those that mean something alone)."""
        confs = expand(DEFAULT_GRID)
        for key, values in self.axes.items():
            if KEYS[key].needs is None:
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
    """No key given without the key it needs (`Key.needs`)."""
    return all(KEYS[key].needs is None or KEYS[key].needs in conf.keys for key in conf.keys)


def _interval(size: int) -> int:
    return min(max(size.bit_length() - 1 - 20, 0), DIVISION_INTERVALS - 1)


def _as_list(seq) -> list:
    return seq.tolist() if hasattr(seq, "tolist") else list(seq)
