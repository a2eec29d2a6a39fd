"""A snapshot pickle's plain dict, read as alloctune reads one (`sim.pickles.unpickle_snapshot`: nothing in it runs)."""
from __future__ import annotations

from pathlib import Path

from alloctune.sim.pickles import unpickle_snapshot


def read_snapshot(path: Path) -> dict:
    with open(path, "rb") as f:
        return unpickle_snapshot(f.read(1), f, str(path))
