"""Which values a fit records to make its answers exact: those the recording GPU is expected to hold, judged by the
least room the default runs in at each value, not by its unlimited peak (given less room, the allocator frees its
cache and the recording runs: on an H100 the unlimited curve put Mask R-CNN's batch 12 beyond the card, which ran
it within a 53 GiB budget)."""
from __future__ import annotations

from alloctune.settings.conf import AllocConf
from alloctune.sim.points import Replayed
from alloctune.sweeper.fitexact import _todo
from alloctune.sweeper.fitting import FitRequest, Replays, recording_curve

GiB = 2**30


def replays(points: list[tuple[int, int, int | None]]) -> Replays:
    """The default replayed at each (value, unlimited peak reserved GiB, least room GiB), on an 80 GiB card with a
    1 GiB context, answering for a 40 GiB budget."""
    out = Replays(FitRequest("batch", [AllocConf()], [], [("40GiB", 40 * GiB)], 2, GiB, True, 80 * GiB))
    for value, reserved, room in points:
        out._by_value[value] = [Replayed(value, reserved * GiB, reserved * GiB // 2, (True,),
                                         None if room is None else room * GiB)]
        out.names[value] = f"trace.batch-{value}"
    return out


def test_a_value_whose_unlimited_peak_is_beyond_the_card_but_its_least_room_is_not_is_recorded():
    fits = replays([(2, 20, 10), (4, 40, 15), (6, 60, 20)])   # unlimited: 80 GiB at 8; least room: 25 GiB
    assert recording_curve(fits).at(8) == 25 * GiB
    assert _todo(fits, []) == ([8], [])


def test_a_value_whose_least_room_is_beyond_the_card_is_not_tried_and_an_unknown_room_counts_its_peak():
    fits = replays([(2, 20, 30), (4, 40, 55), (6, 80, None)])   # 6: no least room found, its peak (80) stands in
    assert recording_curve(fits).at(8) > 79 * GiB
    assert _todo(fits, []) == ([], [8])
