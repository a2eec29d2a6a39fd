"""Which values a fit records to make its answers exact: those whose tensors the recording GPU can hold at once
(the default's peak allocated), not only those its unlimited peak reserved fits in: given less room the allocator
frees its cache and the recording runs (on an H100 the peak reserved put Mask R-CNN's batch 12 beyond the card,
which then ran it within a 53 GiB budget)."""
from __future__ import annotations

from alloctune.results.fits import OverheadFrom
from alloctune.settings.conf import AllocConf
from alloctune.sim.points import Replayed
from alloctune.sweeper.fitexact import _todo
from alloctune.sweeper.fitting import FitRequest, Replays, recording_curve

GiB = 2**30


def replays(points: list[tuple[int, int, int]]) -> Replays:
    """The default replayed at each (value, unlimited peak reserved GiB, peak allocated GiB), on an 80 GiB card with
    a 1 GiB context, answering for a 40 GiB budget."""
    out = Replays(FitRequest("batch", [AllocConf()], [], [("40GiB", 40 * GiB)], 2, GiB, OverheadFrom.MEASURED,
                              80 * GiB))
    for value, reserved, allocated in points:
        out._by_value[value] = [Replayed(value, reserved * GiB, allocated * GiB, (True,), reserved * GiB)]
        out.names[value] = f"trace.batch-{value}"
    return out


def test_a_value_whose_peak_reserved_is_beyond_the_card_but_whose_tensors_are_not_is_recorded():
    fits = replays([(2, 20, 10), (4, 40, 15), (6, 60, 20)])   # reserved: 80 GiB at 8; allocated: 25 GiB
    assert recording_curve(fits).at(8) == 25 * GiB
    assert _todo(fits, []) == ([8], [])


def test_a_value_whose_tensors_are_beyond_the_card_is_not_tried():
    fits = replays([(2, 40, 30), (4, 70, 55), (6, 99, 80)])   # allocated: 105 GiB at 8
    assert _todo(fits, []) == ([], [8])
