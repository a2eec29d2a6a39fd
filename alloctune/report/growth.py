"""A growth check's sentences (`--check-growth K`: GROWING, GROWTH_STEADY, GROWTH_UNDECIDED reasons, for
`words.py`): what reserved and allocated memory did between step K and step 2K of each repeat."""
from __future__ import annotations

from ..decide.quoted import GrowthCheck
from ..units import format_bytes


def _rise(f: GrowthCheck) -> str:
    assert f.at_k is not None and f.at_2k is not None
    return (f"reserved memory rose {format_bytes(f.at_2k.reserved - f.at_k.reserved)} from step {f.at_k.step} to "
            f"step {f.at_2k.step} ({format_bytes(f.at_k.reserved)} to {format_bytes(f.at_2k.reserved)}) while "
            f"allocated rose {format_bytes(f.at_2k.allocated - f.at_k.allocated)}")


def growing(f: GrowthCheck) -> str:
    return (f"growth check: {_rise(f)}, in {f.growing} of {f.checked} repeats: it keeps memory it cannot reuse, "
            f"so a longer run would need more than this trial measured")


def steady(f: GrowthCheck) -> str:
    return f"growth check: steady in all {f.checked} repeats compared (the largest change: {_rise(f)})"


def undecided(f: GrowthCheck) -> str:
    return (f"caution: the growth check could not decide: none of the {f.repeats} repeats recorded samples at two "
            f"steps to compare (the job ended before step 2K of --check-growth K)")
