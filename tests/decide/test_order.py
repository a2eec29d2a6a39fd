"""The one ordering of settings (decide/order.py), and that the choice, the hybrid sweep's finalists, the rounds and
the tables all follow it."""
from __future__ import annotations

import random

import pytest

from alloctune.decide.choice import choose
from alloctune.decide.order import (TieRule, by_preference, lower_beyond_tie, preferred, ranked, tie_rank, tie_rule,
                                    within)
from alloctune.decide.parameters import DEFAULT_TIE
from alloctune.decide.summary import summarize_settings
from alloctune.results.records import Measurement, TrialRecord, TrialState
from alloctune.settings.conf import AllocConf
from alloctune.decide.finalists import finalists
from alloctune.units import GiB

ES, MS, RP = "expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4"
ES_RP = f"{ES},{RP}"


def replay(conf, reserved, state=TrialState.OK, retries=0):
    m = Measurement(peak_reserved_bytes=int(reserved * GiB), peak_allocated_bytes=8 * GiB,
                    num_alloc_retries=retries) if state is TrialState.OK else None
    return TrialRecord("w", "h", conf, 0, "sim:torch-2.11.0", "sim", state, m)


def settings(peaks: dict):
    return summarize_settings([replay(c, r) for c, r in peaks.items()])


def test_within_is_a_fraction_of_the_larger():
    assert within(100, 101, 0.01) and within(101, 100, 0.01) and not within(100, 102, 0.01)
    assert within(0, 0, 0.0) and not within(1, 2, 0.0)
    assert within(99, 100) == within(99, 100, DEFAULT_TIE)


def test_the_preference_takes_the_lowest_memory_then_the_tie_rules():
    group = settings({"": 15.0, ES: 10.5, ES_RP: 10.45, MS: 12.0})
    by = {s.conf: s for s in group}
    # ES_RP is lower, but within the tie of ES, which sets fewer keys
    assert preferred(group).conf == ES and tie_rule(by[ES], by[ES_RP]) is TieRule.SIMPLER
    assert [s.conf for s in by_preference(group)] == [ES, ES_RP, MS, ""]
    # without a margin (the tables) it is plainly by memory
    assert [s.conf for s in ranked(group)] == [ES_RP, ES, MS, ""]
    assert lower_beyond_tie(by[ES], by[MS]) and not lower_beyond_tie(by[ES_RP], by[ES])
    assert tie_rank(by[ES]) < tie_rank(by[ES_RP])


def test_ties_are_not_transitive_so_the_order_is_built_pick_by_pick():
    """10.0 ties 10.09, which ties 10.18, but 10.0 does not tie 10.18: after the first pick the next is decided among
    what ties with the lowest of the rest."""
    group = settings({ES_RP: 10.0, MS: 10.09, ES: 10.18})
    # MS (1 key) beats ES_RP (2 keys) in the first tie; then ES_RP is the lowest left, and ES does not tie with it
    assert [s.conf for s in by_preference(group)] == [MS, ES_RP, ES]
    assert preferred([s for s in group if s.conf != MS]).conf == ES_RP   # 10.0 and 10.18 do not tie


def test_failures_come_last_worst_first():
    group = summarize_settings([replay(ES, 10.0), replay(MS, 0, TrialState.CRASHED), replay(RP, 0, TrialState.OOM),
                                replay("", 12.0)])
    assert [s.conf for s in by_preference(group)] == [ES, "", RP, MS]
    assert preferred([s for s in group if not s.fits]) is None


def random_group(rng):
    confs = ["", ES, MS, RP, ES_RP, f"{MS},{RP}", "roundup_power2_divisions:8", "max_split_size_mb:256"]
    chosen = [""] + rng.sample(confs[1:], rng.randint(1, 7))
    return {c: round(rng.choice((10.0, 10.5, 12.0)) * (1 + rng.uniform(-0.012, 0.012)), 4) for c in chosen}


@pytest.mark.parametrize("seed", range(40))
def test_the_choice_and_the_finalists_follow_the_preference(seed):
    """A replayed group: the choice takes the preferred setting of those that may be recommended, and the hybrid
    sweep measures the ones the preference puts first."""
    peaks = random_group(random.Random(seed))
    records = [replay(c, r) for c, r in peaks.items()]
    group = summarize_settings(records)
    [choice] = choose(group)
    allowed = [s for s in group if s.peak <= next(d for d in group if d.is_default).peak]
    assert choice.best is preferred(allowed)
    planned = {"torch-2.11.0": [AllocConf.parse(c) for c in peaks]}
    picked = {str(c) for c in finalists(records, planned, 0.02, count=2)["torch-2.11.0"]}
    assert picked == {""} | {s.conf for s in by_preference(s for s in group if s.conf)[:2]}
    # the runners-up and the tables list the group in the order without a margin
    assert [s for s, _ in choice.runners_up] == [s for s in ranked(group) if s is not choice.best]


RP2 = "roundup_power2_divisions:[1:1,16:2]"


def test_a_setting_out_of_the_tie_of_the_lowest_loses_before_any_tie_rule():
    """The hybrid folder of issue 29: expandable_segments:True (10.46 GiB) ties the two-key setting (10.36 GiB) that
    won, but is more than 1% above a third (10.30 GiB) the winner ties: it was out before the rule on keys, which
    would have given it the tie."""
    three = f"{MS},{RP2},garbage_collection_threshold:0.8"
    group = settings({"": 15.0, ES: 10.46, f"{ES},{RP2}": 10.36, three: 10.30})
    by = {s.conf: s for s in group}
    won, lost, third = by[f"{ES},{RP2}"], by[ES], by[three]
    assert preferred(group) is won and within(lost.peak, won.peak) and not within(lost.peak, third.peak)
    assert tie_rule(won, lost, group) is TieRule.OUT_OF_TIE and tie_rule(won, third, group) is TieRule.SIMPLER
    [choice] = choose(group)
    tied = {t.conf: t.tie_break for t in next(r.figures for r in choice.reasons if r.code.value == "ties").tied}
    assert (tied[ES].rule, tied[ES].beaten_by, tied[ES].beaten_by_bytes) == (TieRule.OUT_OF_TIE, third.conf,
                                                                             third.peak)
    assert tied[third.conf].rule is TieRule.SIMPLER and (tied[third.conf].winner_keys,
                                                          tied[third.conf].loser_keys) == (2, 3)
    loses = next(why for s, why in choice.runners_up if s is lost).figures.tie_break
    assert loses.rule is TieRule.OUT_OF_TIE and loses.beaten_by == third.conf


def claim_holds(rule: TieRule, winner, loser, group) -> bool:
    """What the rule says of the pair (the words report/words.py gives it) is true of their figures."""
    _, won, lost = winner.compared_with(loser)
    return {TieRule.OUT_OF_TIE: any(lower_beyond_tie(t, loser) and not lower_beyond_tie(t, winner) for t in group),
            TieRule.NATIVE: loser.switches_backend and not winner.switches_backend,
            TieRule.STABLE: loser.unstable and not winner.unstable,
            TieRule.SIMPLER: winner.complexity < loser.complexity,
            TieRule.LOWER_PEAK: won < lost, TieRule.NAME: won == lost and winner.conf < loser.conf}[rule]


@pytest.mark.parametrize("seed", range(30))
def test_three_settings_in_a_chain_of_ties_give_one_order_whatever_the_input_order(seed):
    """A ties B, B ties C, A does not tie C (and random keys): every order of the input gives the same order, and
    every tie it decided is decided by a rule whose claim holds for the two settings."""
    import itertools

    rng = random.Random(seed)
    confs = rng.sample([ES, MS, RP, ES_RP, RP2, f"{ES},{RP2}", f"{MS},{RP}", f"{ES},{RP2},{MS}"], 3)
    low = rng.uniform(8.0, 12.0)
    step = low * rng.uniform(0.0055, 0.0095)   # each within 1% of the next, the ends 1.1-1.9% apart
    peaks = [low, low + step, low + 2 * step]
    rng.shuffle(peaks)
    records = [replay(c, p) for c, p in zip(confs, peaks)]
    orders = set()
    for permutation in itertools.permutations(records):
        group = summarize_settings(list(permutation))
        ordered = by_preference(group)
        orders.add(tuple(s.conf for s in ordered))
        winner = ordered[0]
        for loser in ordered[1:]:
            if within(loser.peak, winner.peak):
                assert claim_holds(tie_rule(winner, loser, group), winner, loser, group)
    assert len(orders) == 1



@pytest.mark.parametrize("seed", range(10))
def test_without_a_margin_the_preference_orders_replays_by_memory(seed):
    """results/order.by_memory, the rule under every ranking of settings: without a margin the preference orders a
    replay's figures (one backend, repeated exactly) as it does, ties of memory included; so does the maximum over
    a job's traces."""
    from alloctune.decide.maximum import TraceFigures, maximum
    from alloctune.results.order import by_memory

    rng = random.Random(seed)
    group = settings({c: rng.choice((10.0, 10.5, 12.0)) for c in ["", ES, MS, RP, ES_RP, f"{MS},{RP}"]})
    by_rule = [s.conf for s in sorted(group, key=lambda s: by_memory(s.setting, s.fits, s.peak_reserved_bytes))]
    assert [s.conf for s in ranked(group)] == by_rule
    highest = maximum(TraceFigures("rank0", s.setting, s.peak_reserved_bytes, 0) for s in group)
    assert [str(h.setting) for h in highest] == by_rule


def test_a_replays_ranking_is_the_preferences_without_a_margin():
    """A real trace replayed: its table's order (ReplayOutcome.sort_key) is the one the choice's tables give the
    same figures as trials."""
    from pathlib import Path

    from alloctune.sim.replay import ReplayOutcome, replay as replay_trace
    from alloctune.sim.trace import load_trace

    trace = load_trace(Path(__file__).parents[1] / "fixtures" / "fits" / "hf-trainer-gpt2-batch-8.xz")
    confs = ["", ES, MS, RP, ES_RP, f"{MS},{RP}", "max_split_size_mb:20", "roundup_power2_divisions:8"]
    outcomes = replay_trace(trace, confs, 80 * GiB, jobs=1)
    group = summarize_settings([TrialRecord("w", "h", str(o.setting), 0, "sim:torch-2.11.0", "sim", TrialState.OK,
                                            o.measurement()) for o in outcomes])
    assert [s.conf for s in ranked(group)] == [str(o.setting) for o in sorted(outcomes, key=ReplayOutcome.sort_key)]


def test_a_dry_runs_gpu_plan_with_confirm_measures_beside_the_default_only_what_the_replays_prefer():
    """sweep --dry-run's plan: with --repeats confirm, the setting the replays prefer beside the default; none where
    every setting replays as the default does (a tie the default wins), which the words and the JSON both say."""
    from alloctune.decide.estimate import Asked
    from alloctune.decide.finalists import gpu_plan

    asked = Asked(hybrid=True, recording=True, command=True, auto=True, confirm=True, rounds=10, finalists=3,
                  searched=False, named=False, max_slowdown=0.02)
    alike = gpu_plan([replay("", 10), replay(MS, 10), replay(RP, 10)], 0.02, asked)
    assert alike.measured == {"torch-2.11.0": [""]} and alike.trials == 2   # the recording, the default's run
    assert alike.to_json() == {"measured": {"torch-2.11.0": ["default"]}, "trials": 2}
    saves = gpu_plan([replay(MS, 10), replay("", 10), replay(ES, 8)], 0.02, asked)
    assert saves.to_json() == {"measured": {"torch-2.11.0": ["default", ES]}, "trials": 3}


def test_a_gpu_plan_counts_as_its_caller_asks_from_one_summary_of_the_replays(monkeypatch):
    """gpu_plan is pure: it counts as `asked` says (asked with a search still to come, the search's leader is a GPU
    trial more; the dry run asks as after its replays: test_sweep.py) and summarises the replays once."""
    from dataclasses import replace
    from alloctune.decide import finalists as module
    from alloctune.decide.estimate import Asked

    calls = []
    monkeypatch.setattr(module, "summarize_settings", lambda *a: calls.append(a) or summarize_settings(*a))
    asked = Asked(hybrid=True, recording=True, command=True, auto=False, confirm=True, rounds=3, finalists=3,
                  searched=False, named=False, max_slowdown=0.02)
    records = [replay("", 10), replay(MS, 10), replay(RP, 10)]   # the default preferred: none beside it
    assert [module.gpu_plan(records, 0.02, a).trials for a in (asked, replace(asked, searched=True))] == [2, 3]
    assert len(calls) == 2
