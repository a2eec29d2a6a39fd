"""A folder decided as data (decide/decision.py): from sweep.json's SweepInfo and the recorded trials alone, the
choices with what the sweep planned, and the max slowdown applied once (the sweep's, the one asked again, or for a
sweep.json from before it was kept, the default)."""
from __future__ import annotations

from folders import repeats

from alloctune.decide.decision import decide
from alloctune.decide.parameters import DEFAULT_MAX_SLOWDOWN, DEFAULT_TIE
from alloctune.decide.reasons import Code
from alloctune.results.folder import SweepInfo

ES = "expandable_segments:True"
# ES saves memory and is about 10% slower: refused at the default allowance, recommended at 15%
SLOWER = repeats("") + repeats(ES, reserved=8.0, tputs=(90.0, 90.5, 89.5))


def info(**kw) -> SweepInfo:
    return SweepInfo(workload_name="w", workload_hash="h1", workload={"name": "w"}, grid=["", ES], repeats=3, **kw)


def test_the_sweeps_max_slowdown_decides_unless_another_is_asked():
    kept = decide(info(max_slowdown=0.02), SLOWER)
    [choice] = kept.choices
    assert choice.best.is_default and kept.max_slowdown == choice.max_slowdown == 0.02
    assert {s.conf: s.max_slowdown for s in kept.settings} == {"": 0.02, ES: 0.02}
    assert [why.code for s, why in choice.runners_up] == [Code.TOO_SLOW]
    [lenient] = decide(info(max_slowdown=0.02), SLOWER, max_slowdown=0.15).choices
    assert lenient.best.conf == ES and lenient.max_slowdown == 0.15
    assert lenient.best.vs_default.tolerance == 0.15   # the one comparison the choice reads


def test_a_sweep_json_without_a_max_slowdown_was_decided_with_the_default():
    decided = decide(info(), SLOWER)
    assert decided.max_slowdown == DEFAULT_MAX_SLOWDOWN and decided.tie == DEFAULT_TIE
    assert decided.choices[0].best.is_default


def test_what_the_sweep_planned_and_whether_it_ended_are_in_the_decision():
    [done] = decide(info(finished=True), SLOWER).choices
    assert (done.trials_recorded, done.trials_planned, done.complete) == (6, 6, True)
    assert done.precision is not None and done.precision.code in (Code.PRECISION_REACHED, Code.PRECISION_SHORT)
    [cut] = decide(info(finished=False), SLOWER[:4]).choices
    assert (cut.trials_recorded, cut.trials_planned, cut.complete) == (4, 6, False)
