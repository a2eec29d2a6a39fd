"""The verdict as data (diagnosis/verdict.py): the cause code and the figures it quotes, decided from the figures at
the OOM; its sentences are made from those alone (diagnosis/words.py), and the Python API reads them as before."""
from __future__ import annotations

from alloctune.diagnosis import words
from alloctune.diagnosis.facts import Cause, Known, Limit, OomFacts
from alloctune.diagnosis.verdict import EXPANDABLE, SPLIT_LIMIT, judge
from alloctune.units import GiB, MiB

CARD = 140 * GiB


def test_fragmentation_on_the_card_and_within_a_budget():
    card = judge(OomFacts(2 * GiB, 60 * GiB, 70 * GiB, device_free=1 * GiB, device_total=73 * GiB, this_process=71 * GiB))
    g = card.figures
    assert (card.cause, card.sure, g.limit, g.margin, g.suggested_conf) == (
        Cause.FRAGMENTATION, True, Limit.CARD, 10 * GiB + 1 * GiB - 2 * GiB, EXPANDABLE)
    assert (g.others, g.known, g.shortfall) == (1 * GiB, Known.NVML, None)   # 73 - 1 free - 71 this process
    budget = judge(OomFacts(2 * GiB, 10 * GiB, 15 * GiB, allowed=16 * GiB, expandable_segments=False))
    assert (budget.cause, budget.figures.limit, budget.figures.margin) == (Cause.FRAGMENTATION, Limit.BUDGET, 4 * GiB)
    assert budget.suggested_conf == SPLIT_LIMIT and budget.figures.known is Known.UNKNOWN


def test_budget_shortage_and_other_processes():
    budget = judge(OomFacts(4 * GiB, 15 * GiB, 15 * GiB, device_free=100 * GiB, device_total=CARD, allowed=16 * GiB))
    assert (budget.cause, budget.figures.card_room, budget.sure) == (Cause.BUDGET, 115 * GiB, True)
    short = judge(OomFacts(8 * GiB, 130 * GiB, 131 * GiB, device_free=2 * GiB, device_total=134 * GiB,
                           this_process=132 * GiB))   # nothing outside this process
    assert (short.cause, short.figures.shortfall, short.numbers["shortfall"]) == (Cause.SHORTAGE, 5 * GiB, 5 * GiB)
    assert short.figures.others == 0
    others = judge(OomFacts(8 * GiB, 10 * GiB, 11 * GiB, device_free=2 * GiB, device_total=CARD,
                            processes=((42, 100 * GiB),)))
    g = others.figures
    assert (others.cause, g.others, g.known, g.dominant, g.shortfall) == (
        Cause.OTHER_PROCESSES, 100 * GiB, Known.LISTED, True, 5 * GiB)


def test_a_margin_within_the_rounding_is_not_sure():
    rounded = judge(OomFacts(2 * GiB, 14 * GiB, 14 * GiB + 10 * MiB, allowed=16 * GiB, precision=20 * MiB))
    assert rounded.cause is Cause.BUDGET and not rounded.sure


def test_the_sentences_are_made_from_the_cause_and_figures_alone():
    v = judge(OomFacts(2 * GiB, 60 * GiB, 70 * GiB, device_free=1 * GiB, device_total=73 * GiB, this_process=71 * GiB))
    assert v.summary == words.summary(v.cause, v.figures) == (
        "Cached, fragmented memory: 10.00 GiB was reserved but unused, enough for the 2.00 GiB request, yet in pieces "
        "too small for it.")
    assert v.next_steps == words.steps(v.cause, v.figures) and EXPANDABLE in v.next_steps[0]
    assert v.notes == ["other processes held 1.00 GiB of the card (card total - free - this process)"]
    assert v.to_json()["cause"] == "fragmentation" == v.cause and v.to_json()["summary"] == v.summary


def test_graph_pools_hold_what_the_request_lacked():
    """10 GiB unused, 8 GiB of it free in CUDA graph pools: with 1 GiB free the 4 GiB request fits only with the
    pools' memory, which it cannot have. Without the pools it is fragmentation, with a note of the pools' share."""
    pools = judge(OomFacts(4 * GiB, 60 * GiB, 70 * GiB, device_free=1 * GiB, device_total=73 * GiB,
                           this_process=71 * GiB, graph_pools_free=8 * GiB))
    assert (pools.cause, pools.sure, pools.figures.limit, pools.figures.margin) == (
        Cause.GRAPH_POOLS, True, Limit.CARD, 7 * GiB)
    assert pools.numbers["graph_pools_free"] == 8 * GiB
    assert pools.summary.startswith("CUDA graph pools hold the memory: 8.00 GiB of the 10.00 GiB")
    assert "fall 1.00 GiB short of the request" in pools.reasons[2] and "graph.reset()" in pools.next_steps[0]
    some = judge(OomFacts(4 * GiB, 60 * GiB, 70 * GiB, device_free=1 * GiB, device_total=73 * GiB,
                          this_process=71 * GiB, graph_pools_free=2 * GiB))
    assert some.cause is Cause.FRAGMENTATION
    assert "2.00 GiB of the unused cache was free in CUDA graphs' private pools" in some.notes[0]
    budget = judge(OomFacts(2 * GiB, 10 * GiB, 15 * GiB, allowed=16 * GiB, graph_pools_free=5 * GiB))
    assert (budget.cause, budget.figures.limit) == (Cause.GRAPH_POOLS, Limit.BUDGET)
    assert "17.00 GiB, more than the budget" in budget.reasons[2]


def test_figures_no_allocator_state_has_fail_their_checks():
    """Each check on its own: the figures of a sane OOM with one of them made impossible fail it (and diagnose
    refuses them before any verdict); said in one line that names the source and each figure."""
    from alloctune.diagnosis.facts import Check, Inconsistent

    sane = dict(requested=2 * GiB, allocated=60 * GiB, reserved=70 * GiB, device_free=1 * GiB, device_total=73 * GiB,
                this_process=71 * GiB)
    assert OomFacts(**sane).inconsistencies() == () and judge(OomFacts(**sane)).cause is Cause.FRAGMENTATION
    cases = {Check.FREE_OVER_TOTAL: dict(device_free=80 * GiB), Check.RESERVED_OVER_TOTAL: dict(reserved=75 * GiB),
             Check.HELD_OVER_TOTAL: dict(device_free=5 * GiB), Check.ALLOCATED_OVER_RESERVED: dict(allocated=71 * GiB),
             Check.ALLOWED_OVER_TOTAL: dict(allowed=74 * GiB), Check.NOTHING_REQUESTED: dict(requested=0),
             Check.PROCESSES_OVER_TOTAL: dict(processes=((7, 3 * GiB),)), Check.NO_CARD: dict(device_total=0),
             Check.POOLS_OVER_UNALLOCATED: dict(graph_pools_free=11 * GiB), Check.NEGATIVE: dict(device_free=-MiB)}
    assert set(cases) == set(Check)
    for check, change in cases.items():
        found = OomFacts(**sane | change).inconsistencies()
        assert check in {i.check for i in found}, check
        line = words.impossible(found, "oom.txt", 3)
        assert line.startswith("oom.txt (rank 3): figures no allocator's state has") and "\n" not in line
    free = OomFacts(**sane | dict(device_free=50 * GiB, device_total=GiB, reserved=110 * MiB, allocated=100 * MiB,
                                  this_process=None)).inconsistencies()
    assert Inconsistent(Check.FREE_OVER_TOTAL, 50 * GiB, GiB) in free
    assert "50.00 GiB free on a card of 1.00 GiB" in words.impossible(free, "oom.txt", None)
    negative = OomFacts(**sane | dict(requested=-2 * GiB, processes=((7, -MiB),))).inconsistencies()
    assert negative == (Inconsistent(Check.NEGATIVE, -2 * GiB, 0), Inconsistent(Check.NEGATIVE, -MiB, 0))
    assert "a negative size (-2.00 GiB); a negative size (-1.00 MiB)" in words.impossible(negative, "m", None)
    # within the rounding of the figures, the same excess is no contradiction
    rounded = OomFacts(**sane | dict(device_free=1 * GiB + 10 * MiB, reserved=72 * GiB, this_process=None),
                       precision=5 * MiB)
    assert rounded.inconsistencies() == ()


def test_a_shortage_at_the_limit_says_the_request_came_within_the_limit_not_that_it_did_not_fit():
    """An empty cache and a request the free memory covers by less than the rounding: a shortage at the limit,
    whose summary and steps say what the figures do (room left, shortfall 0), where a real shortfall says 'do not
    fit'."""
    at_limit = judge(OomFacts(32 * MiB, 2 * GiB, 2 * GiB + 2 * MiB, device_free=40 * MiB, device_total=4 * GiB,
                              this_process=3 * GiB, precision=5 * MiB))
    assert (at_limit.cause, at_limit.sure, at_limit.numbers["shortfall"]) == (Cause.SHORTAGE, False, 0)
    said = " ".join([at_limit.summary, *at_limit.next_steps])
    # 2 MiB cached + 40 free - 32
    assert "within 10.00 MiB of all PyTorch could have (its cache + what was free)" in at_limit.summary
    assert "do not fit" not in said and "themselves do not fit" not in said
    short = judge(OomFacts(8 * GiB, 130 * GiB, 131 * GiB, device_free=2 * GiB, device_total=134 * GiB,
                           this_process=132 * GiB))
    assert "do not fit" in short.summary and "the live tensors themselves do not fit" in short.next_steps[-1]


def test_a_shortage_that_asks_for_more_than_its_shortfall_says_why():
    """8 GiB asked with 1 GiB unused and 2 GiB free: 5 GiB short, but the step asks for 6 GiB fewer (the request
    less the free memory), which must not read as a contradiction of the shortfall."""
    short = judge(OomFacts(8 * GiB, 130 * GiB, 131 * GiB, device_free=2 * GiB, device_total=134 * GiB,
                           this_process=132 * GiB))
    assert "fall 5.00 GiB short of the request" in short.reasons[1]
    assert short.next_steps[0].startswith("hold less at once: at least 6.00 GiB fewer bytes live, the request less "
                                          "the free memory: the 1.00 GiB unused cache may lie in pieces too small")
    exact = judge(OomFacts(8 * GiB, 130 * GiB, 130 * GiB, device_free=2 * GiB, device_total=134 * GiB,
                           this_process=131 * GiB))   # nothing cached: the two figures are one
    assert "at least 6.00 GiB fewer bytes live (smaller" in exact.next_steps[0]
