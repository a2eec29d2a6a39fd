"""The choice, asserted as decisions: the winner, and each reason's code and figures (tests/report/test_words.py
pins the sentences they are said in)."""
from dataclasses import replace

import pytest

from alloctune.decide.choice import choose
from alloctune.decide.order import TieRule, ranked
from alloctune.decide.parameters import DEFAULT_MAX_SLOWDOWN, DEFAULT_TIE
from alloctune.decide.reasons import Code
from alloctune.decide.quoted import StateCount
from alloctune.decide.summary import MemoryMeasure, SettingState, pareto_front, summarize_settings
from alloctune.errors import ResultsError
from alloctune.results.records import Measurement, TrialRecord, TrialState
from alloctune.units import GiB

ES = "expandable_segments:True"
MS = "max_split_size_mb:128"
RP = "roundup_power2_divisions:4"
BASE_TPUT = (100.0, 100.5, 99.5)


def rec(conf="", repeat=0, reserved=15.0, allocated=10.0, tput=100.0, state=TrialState.OK, env_id="torch-2.11.0",
        backend="cuda", budget=None, retries=0, error=None, torch="2.11.0+cu130", whash="h1", device=None):
    m = None
    if state is TrialState.OK:
        m = Measurement(peak_reserved_bytes=int(reserved * GiB), peak_allocated_bytes=int(allocated * GiB),
                        device_peak_used_bytes=None if device is None else int(device * GiB),
                        num_alloc_retries=retries, throughput=None if backend == "sim" else tput,
                        unit="tokens", peak_requested_bytes=int(allocated * GiB) - 1000)
    return TrialRecord(workload="w", workload_hash=whash, conf=conf, repeat=repeat, env_id=env_id, backend=backend,
                       state=state, measurement=m, budget_bytes=budget, error=error,
                       env={"torch": torch, "gpu": "NVIDIA H200"})


def setting(conf, tputs=BASE_TPUT, **kw):
    return [rec(conf, i, tput=t, **kw) for i, t in enumerate(tputs)]


def decide(records, **kw):
    settings = summarize_settings(records)
    return settings, choose(settings, **kw)


def by_conf(settings):
    return {s.conf: s for s in settings}


def why(choice, conf):
    return next(w for s, w in choice.runners_up if s.conf == conf)


def codes(choice):
    return [r.code for r in choice.reasons]


def reason(choice, code):
    return next(r.figures for r in choice.reasons if r.code is code)


def gib(x):
    return int(x * GiB)


def test_clear_winner_with_reasons_and_numbers():
    records = setting("") + setting(ES, reserved=10.5) + setting(MS, reserved=20.0, tputs=(120, 121, 119))
    settings, [choice] = decide(records)
    assert choice.best.conf == ES
    assert codes(choice) == [Code.SAVES_MEMORY, Code.THROUGHPUT_SAME] and choice.decision is choice.reasons[0]
    saved = choice.decision.figures
    assert (saved.measure, saved.peak_bytes, saved.default_bytes) == (MemoryMeasure.RESERVED, gib(10.5), gib(15))
    assert saved.reserved_ratio == pytest.approx(1.05) and saved.small_gain is None   # 30% saved: no small gain
    assert reason(choice, Code.THROUGHPUT_SAME).vs_default.ratio == pytest.approx(1.0)
    # faster but bigger: never recommended, and the runner-up says what it costs
    assert why(choice, MS).code is Code.MORE_MEMORY
    assert (why(choice, MS).figures.peak_bytes, why(choice, MS).figures.default_bytes) == (gib(20), gib(15))
    assert why(choice, "").code is Code.COSTS_MORE and why(choice, "").figures.winner_bytes == gib(10.5)
    s = by_conf(settings)[ES]
    assert s.state is SettingState.FITS and s.peak_reserved_bytes == int(10.5 * GiB)
    assert s.reserved_ratio == pytest.approx(1.05) and s.fragmentation == pytest.approx(1 - 10 / 10.5)
    assert s.throughput.n == 3 and s.vs_default.ratio == pytest.approx(1.0)
    assert s.memory_spread == 0.0
    assert choice.verdict == "no significant difference" and choice.throughput_ratio == pytest.approx(1.0)
    assert choice.baseline.peak_reserved_bytes == gib(15) and not choice.simulated
    assert {s.conf for s, _ in choice.runners_up} == {"", MS}


def test_tie_goes_to_the_simpler_setting():
    both = f"{ES},{RP}"
    records = setting("") + setting(ES, reserved=10.5) + setting(both, reserved=10.45)
    _, [choice] = decide(records)
    assert choice.best.conf == ES
    ties = reason(choice, Code.TIES)
    assert ties.winner == ES and ties.tie == DEFAULT_TIE and [t.conf for t in ties.tied] == [both]
    assert ties.tied[0].tie_break.rule is TieRule.SIMPLER
    lost = why(choice, both)
    assert lost.code is Code.LOSES_TIE and lost.figures.tie_break.rule is TieRule.SIMPLER
    assert (lost.figures.tie_break.winner_keys, lost.figures.tie_break.loser_keys) == (1, 2)


def test_memory_saver_ten_percent_slower_is_refused():
    records = setting("") + setting(ES, reserved=8.0, tputs=(90.0, 90.5, 89.5)) + setting(RP, reserved=12.0)
    settings, [choice] = decide(records)
    assert choice.best.conf == RP
    slow = why(choice, ES)
    assert slow.code is Code.TOO_SLOW and slow.figures.max_slowdown == DEFAULT_MAX_SLOWDOWN
    assert slow.figures.vs_default.ratio == pytest.approx(0.9, abs=0.005) and slow.figures.vs_default.p_slower < 0.05
    assert slow.figures.saved_bytes == gib(15) - gib(8)
    assert by_conf(settings)[ES].vs_default.slower_beyond_tolerance


def test_one_percent_slower_within_noise_is_accepted():
    # noisy within each round too: the paired ratios are 1.02, 0.99, 0.96
    records = setting("", tputs=(100.0, 104.0, 96.0)) + setting(ES, reserved=10.0, tputs=(102.0, 102.96, 92.16))
    _, [choice] = decide(records)
    assert choice.best.conf == ES
    assert choice.best.vs_default.ratio == pytest.approx(0.99, rel=2e-3) and choice.best.vs_default.pairs == 3
    assert reason(choice, Code.THROUGHPUT_SAME).vs_default.ratio == pytest.approx(0.99, rel=2e-3)


def test_single_repeat_decides_on_memory_and_says_throughput_is_untested():
    # One process each: a 10% lower throughput is inside what fresh processes vary by, so it refuses nothing.
    records = [rec(""), rec(ES, reserved=10.0, tput=90.0), rec(RP, reserved=12.0, tput=99.0)]
    _, [choice] = decide(records)
    assert choice.best.conf == ES
    assert codes(choice) == [Code.SAVES_MEMORY, Code.THROUGHPUT_UNTESTED]
    assert reason(choice, Code.THROUGHPUT_UNTESTED).vs_default.p_value is None


def test_oom_and_crash_are_not_recommended():
    records = (setting("") + setting(ES, reserved=12.0)
               + [rec(MS, 0, reserved=5.0), rec(MS, 1, state=TrialState.OOM, error="CUDA out of memory")]
               + [rec(RP, 0, state=TrialState.CRASHED, error="Traceback\nRuntimeError: boom\n")])
    settings, [choice] = decide(records)
    s = by_conf(settings)
    assert s[MS].state == "oom" and s[MS].peak_reserved_bytes == int(5 * GiB)  # OK repeats still summarised
    assert s[RP].state == "crashed" and s[RP].error == "RuntimeError: boom" and s[RP].peak_reserved_bytes is None
    assert choice.best.conf == ES
    oom, crash = why(choice, MS), why(choice, RP)
    assert oom.code is crash.code is Code.FAILED
    assert (oom.figures.state, oom.figures.failed, oom.figures.repeats) == (SettingState.OOM, 1, 2)
    assert (crash.figures.state, crash.figures.failed, crash.figures.error) == (SettingState.CRASHED, 1,
                                                                                 "RuntimeError: boom")
    assert [x.conf for x in ranked(settings)] == [ES, "", MS, RP]  # fitting by memory, then failures
    assert [s.conf for s, _ in choice.runners_up] == ["", MS, RP]


def test_nothing_beats_the_default():
    records = setting("") + setting(ES, reserved=14.95) + setting(MS, reserved=18.0)
    _, [choice] = decide(records)
    assert choice.best.is_default and choice.decision.code is Code.KEEP_DEFAULT
    kept = choice.decision.figures
    assert (kept.default_bytes, kept.closest, kept.closest_bytes, kept.tie) == (gib(15), ES, gib(14.95), DEFAULT_TIE)
    lost = why(choice, ES)   # within the tie of the default, which sets no key
    assert lost.code is Code.LOSES_TIE and lost.figures.tie_break.rule is TieRule.SIMPLER
    assert (lost.figures.tie_break.winner_keys, lost.figures.tie_break.loser_keys) == (0, 1)
    assert choice.verdict == "no significant difference" and choice.throughput_ratio == 1.0


def test_default_kept_and_says_lower_settings_were_refused():
    records = setting("") + setting(ES, reserved=8.0, tputs=(80.0, 80.5, 79.5))
    _, [choice] = decide(records)
    assert choice.best.is_default
    assert codes(choice) == [Code.KEEP_DEFAULT, Code.REFUSED_LOWER]
    assert reason(choice, Code.REFUSED_LOWER).refused == (ES,) and choice.decision.figures.closest is None
    assert why(choice, ES).code is Code.TOO_SLOW
    assert why(choice, ES).figures.vs_default.ratio == pytest.approx(0.8, abs=0.01)


def test_default_oom_under_budget():
    budget = 16 * GiB
    records = ([rec("", i, state=TrialState.OOM, budget=budget) for i in range(2)]
               + setting(ES, reserved=12.0, budget=budget, tputs=(100.0, 101.0))
               + setting(RP, reserved=14.0, budget=budget, tputs=(100.0, 101.0)))
    settings, [choice] = decide(records)
    assert choice.best.conf == ES and choice.baseline.state == "oom"
    failed = choice.decision.figures
    assert choice.decision.code is Code.DEFAULT_FAILED and (failed.winner, failed.fitting) == (ES, 2)
    assert (failed.default.state, failed.default.budget_bytes, failed.default.failed) == (SettingState.OOM, budget, 2)
    assert choice.verdict == "not measured" and choice.budget_bytes == budget


def test_nothing_fits():
    records = [rec("", state=TrialState.OOM, budget=GiB), rec(ES, state=TrialState.OOM, budget=GiB),
               rec(MS, state=TrialState.TIMEOUT, budget=GiB, error="killed after 60 s")]
    _, [choice] = decide(records)
    assert choice.best is None and codes(choice) == [Code.NOTHING_FITS]
    assert choice.decision.figures.budget_bytes == GiB and choice.decision.figures.settings == 3
    assert choice.decision.figures.states == (StateCount(SettingState.OOM, 2), StateCount(SettingState.TIMEOUT, 1))
    assert why(choice, MS).code is Code.FAILED and why(choice, MS).figures.state is SettingState.TIMEOUT
    assert choice.verdict == "nothing fits" and choice.throughput_ratio is None


def test_simulated_refuses_more_retries():
    sim = dict(backend="sim")
    records = (setting("", **sim) + setting(ES, reserved=9.0, retries=3, **sim)
               + setting(RP, reserved=11.0, **sim))
    settings, [choice] = decide(records)
    assert all(s.throughput is None and s.vs_default is None for s in settings)
    assert choice.best.conf == RP and choice.simulated
    assert codes(choice) == [Code.SIMULATED, Code.SAVES_MEMORY, Code.SIM_RETRIES]
    assert choice.decision is choice.reasons[1]
    retries = why(choice, ES)
    assert retries.code is Code.MORE_RETRIES and (retries.figures.retries, retries.figures.default_retries) == (3, 0)
    assert choice.verdict == "not measured" and choice.throughput_ratio is None


def test_two_environments_give_two_choices():
    other = dict(env_id="torch-2.9.1", torch="2.9.1")
    records = (setting("") + setting(ES, reserved=10.0)
               + setting("", **other) + setting(ES, reserved=14.9, **other))
    settings, choices = decide(records)
    assert len(settings) == 4
    assert [(c.env_id, c.best.conf) for c in choices] == [("torch-2.11.0", ES), ("torch-2.9.1", "")]
    assert choices[1].env["torch"] == "2.9.1"


def test_memory_disagreement_is_flagged():
    records = setting("") + [rec(ES, 0, reserved=10.0, tput=101.0), rec(ES, 1, reserved=10.3, tput=99.0),
                             rec(ES, 2, reserved=10.1, tput=100.2)]
    settings, [choice] = decide(records)
    assert by_conf(settings)[ES].memory_spread == pytest.approx(0.03)
    assert codes(choice)[-1] is Code.UNSTABLE and reason(choice, Code.UNSTABLE).spread == pytest.approx(0.03)


def test_mixed_workloads_refused():
    with pytest.raises(ResultsError, match="2 different workload definitions"):
        summarize_settings([rec(whash="a"), rec(ES, whash="b")])


def test_pareto_front():
    records = (setting("", tputs=(100, 100, 100)) + setting(ES, reserved=10.0, tputs=(95, 95, 95))
               + setting(MS, reserved=20.0, tputs=(120, 120, 120)) + setting(RP, reserved=16.0, tputs=(90, 90, 90))
               + [rec("garbage_collection_threshold:0.6", state=TrialState.OOM)])
    front = pareto_front(summarize_settings(records))
    assert [s.conf for s in front] == [ES, "", MS]


def test_empty_input():
    assert summarize_settings([]) == [] and choose([]) == []


def test_ok_without_measurement_counts_as_crashed():
    broken = TrialRecord(workload="w", workload_hash="h1", conf=ES, repeat=0, env_id="torch-2.11.0", backend="cuda",
                         state=TrialState.OK)
    settings, [choice] = decide(setting("") + [broken])
    s = by_conf(settings)[ES]
    assert s.state == "crashed" and s.failed_repeats == 1 and s.error == "reported OK without a measurement"
    assert choice.best.is_default


def test_the_max_slowdown_is_applied_once_where_the_settings_are_summarised():
    records = setting("") + setting(ES, reserved=8.0, tputs=(90.0, 90.5, 89.5))
    [strict] = choose(summarize_settings(records))
    [lenient] = choose(summarize_settings(records, max_slowdown=0.15))
    assert strict.best.is_default and lenient.best.conf == ES
    differs = reason(lenient, Code.THROUGHPUT_DIFFERS)
    assert differs.max_slowdown == 0.15 and differs.vs_default.tolerance == 0.15
    assert differs.vs_default.verdict == "slower" and differs.vs_default.significant
    assert lenient.verdict == "slower" and lenient.max_slowdown == 0.15


ASYNC = "backend:cudaMallocAsync"


def test_backends_compared_by_device_memory_and_a_native_setting_wins_the_tie():
    """The Mask R-CNN case: cudaMallocAsync's pool read 32.59 GiB 'reserved', expandable segments 32.68 GiB; the
    driver saw both within 1%. The native setting wins, and the reasons say so, naming the winner. Against the
    default, also native, it is compared by peak reserved."""
    records = (setting("", reserved=40.0, device=41.0) + setting(ES, reserved=32.68, device=33.50)
               + setting(ASYNC, reserved=32.59, device=33.40))
    settings, [choice] = decide(records)
    assert choice.best.conf == ES
    assert {s.memory_measure for s in settings} == {MemoryMeasure.DEVICE}
    assert by_conf(settings)[ES].memory == int(33.5 * GiB)
    assert codes(choice) == [Code.SAVES_MEMORY, Code.THROUGHPUT_SAME, Code.DEVICE_MEMORY, Code.TIES]
    saved = choice.decision.figures
    assert (saved.measure, saved.peak_bytes, saved.default_bytes) == (MemoryMeasure.RESERVED, gib(32.68), gib(40))
    ties = reason(choice, Code.TIES)
    assert ties.winner == ES and [(t.conf, t.tie_break.rule, t.measure, t.peak_bytes, t.winner_bytes)
                                  for t in ties.tied] == [(ASYNC, TieRule.NATIVE, MemoryMeasure.DEVICE, gib(33.4),
                                                           gib(33.5))]
    assert why(choice, ASYNC).code is Code.LOSES_TIE and why(choice, ASYNC).figures.tie_break.rule is TieRule.NATIVE
    default = why(choice, "").figures
    assert (default.measure, default.peak_bytes, default.winner_bytes) == (MemoryMeasure.RESERVED, gib(40), gib(32.68))
    assert choice.best.memory_measure is MemoryMeasure.DEVICE and choice.best.memory == gib(33.5)
    assert choice.best.peak_reserved_bytes == gib(32.68)


def test_async_pool_reading_low_does_not_beat_a_lower_device_peak():
    records = (setting("", reserved=40.0, device=41.0) + setting(ES, reserved=35.0, device=35.8)
               + setting(ASYNC, reserved=34.5, device=36.4))
    settings, [choice] = decide(records)
    assert choice.best.conf == ES and [s.conf for s in ranked(settings)] == [ES, ASYNC, ""]
    costs = why(choice, ASYNC)
    assert costs.code is Code.COSTS_MORE and costs.figures.measure is MemoryMeasure.DEVICE
    assert costs.figures.peak_bytes - costs.figures.winner_bytes == gib(36.4) - gib(35.8)


def test_settings_of_one_backend_compare_by_peak_reserved_where_backends_differ():
    """The issue-17 case: device memory counts other processes too, and comparing two native settings by it chose
    one with 16% more peak reserved. Within a backend peak reserved decides; the lowest device reading is used
    across backends, and one far above the trial's own reserved plus its context is not used at all."""
    records = (setting("", reserved=40.0, device=41.0)
               + [rec(ES, i, reserved=28.0, device=d, tput=t) for i, (d, t) in enumerate(zip((64.0, 28.8, 28.9),
                                                                                             BASE_TPUT))]
               + setting(RP, reserved=32.5, device=33.3) + setting(ASYNC, reserved=31.0, device=31.8))
    settings, [choice] = decide(records)
    es = by_conf(settings)[ES]
    assert es.device_peak_used_bytes == gib(28.8) and not es.device_disagrees
    [bad] = es.contaminated
    assert (bad.repeat, bad.device_bytes, bad.reserved_bytes, bad.context_bytes, bad.context_measured) == (
        0, gib(64), gib(28), 2 * GiB, False)
    assert choice.best.conf == ES
    contaminated = reason(choice, Code.DEVICE_CONTAMINATED)
    assert [(s.conf, s.used_bytes, [c.repeat for c in s.repeats]) for s in contaminated.settings] == [
        (ES, gib(28.8), [0])]
    assert why(choice, RP).figures.measure is MemoryMeasure.RESERVED
    assert why(choice, ASYNC).figures.measure is MemoryMeasure.DEVICE


def test_device_figures_that_move_are_flagged_and_the_lowest_is_used():
    records = (setting("", reserved=40.0, device=41.0)
               + [rec(ES, i, reserved=30.0, device=d, tput=t) for i, (d, t) in enumerate(zip((30.8, 31.6, 31.0),
                                                                                             BASE_TPUT))]
               + setting(ASYNC, reserved=33.0, device=33.9))
    settings, [choice] = decide(records)
    es = by_conf(settings)[ES]
    assert es.device_peak_used_bytes == gib(30.8) and es.device_disagrees and not es.contaminated
    spread = reason(choice, Code.DEVICE_SPREAD)
    assert [(s.conf, s.used_bytes) for s in spread.settings] == [(ES, gib(30.8))]
    assert spread.settings[0].spread == pytest.approx(31.6 / 30.8 - 1, rel=1e-6) and spread.agreement == 0.01
    # an overhead figure of the trial's own replaces the allowance
    own = [replace(r, measurement=replace(r.measurement, overhead_bytes=GiB // 2)) for r in setting(
        ES, reserved=30.0, device=31.0)]
    [judged] = [s for s in summarize_settings(setting("", reserved=40.0, device=41.0) + own) if s.conf == ES]
    assert [(c.context_bytes, c.context_measured) for c in judged.contaminated] == [(GiB // 2, True)] * 3
    assert judged.device_peak_used_bytes is None


def test_native_only_groups_still_compare_peak_reserved():
    records = setting("", reserved=15.0, device=99.0) + setting(ES, reserved=10.5, device=1.0)
    settings, [choice] = decide(records)
    assert {s.memory_measure for s in settings} == {MemoryMeasure.RESERVED}
    assert by_conf(settings)[ES].memory == int(10.5 * GiB)


def test_a_peak_that_moves_between_repeats_loses_the_tie():
    moving = [rec(RP, i, reserved=r, tput=t) for i, (r, t) in enumerate(zip((10.40, 10.45, 10.40), BASE_TPUT))]
    records = setting("") + setting(ES, reserved=10.50) + moving
    settings, [choice] = decide(records)
    assert by_conf(settings)[RP].unstable and not by_conf(settings)[ES].unstable
    assert choice.best.conf == ES
    assert [(t.conf, t.tie_break.rule) for t in reason(choice, Code.TIES).tied] == [(RP, TieRule.STABLE)]
    lost = why(choice, RP).figures.tie_break
    assert lost.rule is TieRule.STABLE and lost.loser_spread == pytest.approx(0.05 / 10.40)
    # alone, the moving setting still wins on memory (flagged), and the reasons carry the caution
    _, [alone] = decide(setting("") + moving)
    assert alone.best.conf == RP and Code.UNSTABLE in codes(alone)


def test_the_driver_pool_moving_a_little_is_no_instability():
    """cudaMallocAsync's reserved is the driver pool's and moves by a fraction of a percent between repeats (H200,
    HF Trainer: +0.1%); only beyond DEVICE_AGREEMENT is that a caution. The native allocator's moves at all."""
    pool = "backend:cudaMallocAsync"
    def moving(conf, by):
        return [rec(conf, i, reserved=10.0 * f, tput=t, device=11.0 * f)
                for i, (f, t) in enumerate(zip((1.0, 1.0 + by, 1.0), BASE_TPUT))]
    settings = summarize_settings(setting("", device=16.0) + moving(pool, 0.001) + moving(ES, 0.001))
    assert not by_conf(settings)[pool].unstable and by_conf(settings)[ES].unstable
    assert by_conf(summarize_settings(setting("", device=16.0) + moving(pool, 0.02)))[pool].unstable


def test_the_tie_names_the_real_winner_when_the_simpler_one_has_the_higher_peak():
    both = f"{ES},{RP}"
    records = setting("") + setting(ES, reserved=10.5) + setting(both, reserved=10.45)
    _, [choice] = decide(records)
    ties = reason(choice, Code.TIES)
    assert ties.winner == ES and ties.winner_bytes == gib(10.5)
    assert [(t.conf, t.peak_bytes) for t in ties.tied] == [(both, gib(10.45))]


def test_detectable_slowdown_is_the_winners_interval_half_width():
    base = (100.0, 90.0, 110.0, 95.0)
    records = [rec("", i, tput=t) for i, t in enumerate(base)]
    records += [rec(ES, i, reserved=10.5, tput=t * f) for i, (t, f) in enumerate(zip(base, (1.0, 1.01, 0.99, 1.0)))]
    _, [choice] = decide(records)
    c = choice.best.vs_default
    assert c.pairs == 4 and choice.detectable == pytest.approx(c.half_width) and 0 < c.half_width < 0.05
    assert c.ci_low < choice.throughput_ratio < c.ci_high
    assert reason(choice, Code.THROUGHPUT_SAME).vs_default == c
