"""What a job of several processes needs per GPU, from one trace per process (rank) replayed under the same
settings (`alloctune replay` of several traces): per setting, the trace with the highest simulated peak reserved,
and the OOMs of every trace (the job fails where any rank does), as a sweep's replay counts them. Pure."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable

from ..results.order import by_memory
from ..settings.conf import AllocConf


@dataclass(frozen=True)
class TraceFigures:
    """One setting simulated on one trace (a setting not simulated has none)."""

    trace: str                                  # the trace's path, as given
    setting: AllocConf
    peak_reserved_bytes: int
    num_ooms: int | None
    measured_peak_reserved_bytes: int | None = None   # what the GPU measured, where the trace holds it


@dataclass(frozen=True)
class Highest:
    """One setting over the traces: the trace that needs the most, its figures, and the OOMs of all (None: no trace
    counted them)."""

    setting: AllocConf
    peak_reserved_bytes: int
    num_ooms: int | None
    trace: str
    measured_peak_reserved_bytes: int | None

    @property
    def conf(self) -> str:
        """The setting as tables show it ('default' for the default)."""
        return self.setting.label

    def to_json(self) -> dict[str, Any]:
        return {"conf": self.conf, "peak_reserved_bytes": self.peak_reserved_bytes, "num_ooms": self.num_ooms,
                "trace": self.trace, "measured_peak_reserved_bytes": self.measured_peak_reserved_bytes}


def maximum(figures: Iterable[TraceFigures]) -> list[Highest]:
    """Per setting, the trace of `figures` with the highest peak reserved (the first of equals) and the OOMs summed
    over every trace; in the order of settings by memory (`results/order.by_memory`)."""
    best: dict[AllocConf, Highest] = {}
    ooms: dict[AllocConf, list[int]] = {}
    for f in figures:
        ooms.setdefault(f.setting, []).extend([] if f.num_ooms is None else [f.num_ooms])
        if f.setting not in best or f.peak_reserved_bytes > best[f.setting].peak_reserved_bytes:
            best[f.setting] = Highest(f.setting, f.peak_reserved_bytes, None, f.trace, f.measured_peak_reserved_bytes)
    out = [replace(h, num_ooms=sum(ooms[s]) if ooms[s] else None) for s, h in best.items()]
    return sorted(out, key=lambda h: by_memory(h.setting, not h.num_ooms, h.peak_reserved_bytes))
