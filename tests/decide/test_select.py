import json

import pytest

from alloctune.decide.choice import choose, pareto_front, ranked, summarize_settings
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


def test_clear_winner_with_reasons_and_numbers():
    records = setting("") + setting(ES, reserved=10.5) + setting(MS, reserved=20.0, tputs=(120, 121, 119))
    settings, [choice] = decide(records)
    assert choice.best.conf == ES
    text = " ".join(choice.reasons)
    assert "10.50 GiB" in text and "15.00 GiB" in text and "-30.0%" in text and "saves 4.50 GiB" in text
    assert "no significant difference" in text
    # faster but bigger: never recommended, and the runner-up says what it costs
    assert "raises peak reserved" in why(choice, MS) and "+33.3%" in why(choice, MS)
    assert "4.50 GiB more" in why(choice, "")
    s = by_conf(settings)[ES]
    assert s.state == "fits" and s.peak_reserved_bytes == int(10.5 * GiB)
    assert s.reserved_ratio == pytest.approx(1.05) and s.fragmentation == pytest.approx(1 - 10 / 10.5)
    assert s.throughput.n == 3 and s.vs_default.ratio == pytest.approx(1.0)
    assert s.memory_spread == 0.0
    data = choice.to_json()
    assert data["conf"] == ES and data["baseline"] == "" and not data["is_default"] and not data["simulated"]
    assert data["torch_version"] == "2.11.0+cu130" and data["verdict"] == "no significant difference"
    assert data["peak_reserved_bytes"] == int(10.5 * GiB)
    assert data["baseline_peak_reserved_bytes"] == int(15 * GiB)
    assert data["throughput_ratio"] == pytest.approx(1.0)
    assert {r["conf"] for r in data["runners_up"]} == {"", MS}
    json.dumps(data)


def test_tie_goes_to_the_simpler_setting():
    both = f"{ES},{RP}"
    records = setting("") + setting(ES, reserved=10.5) + setting(both, reserved=10.45)
    _, [choice] = decide(records)
    assert choice.best.conf == ES
    assert any("wins the tie" in r and both in r for r in choice.reasons)
    assert "ties with the winner" in why(choice, both) and "2 key(s) against 1" in why(choice, both)


def test_memory_saver_ten_percent_slower_is_refused():
    records = setting("") + setting(ES, reserved=8.0, tputs=(90.0, 90.5, 89.5)) + setting(RP, reserved=12.0)
    settings, [choice] = decide(records)
    assert choice.best.conf == RP
    w = why(choice, ES)
    assert "10.0% slower" in w and "2% allowance" in w and "p =" in w
    assert by_conf(settings)[ES].vs_default.slower_beyond_tolerance


def test_one_percent_slower_within_noise_is_accepted():
    # noisy within each round too: the paired ratios are 1.02, 0.99, 0.96
    records = setting("", tputs=(100.0, 104.0, 96.0)) + setting(ES, reserved=10.0, tputs=(102.0, 102.96, 92.16))
    _, [choice] = decide(records)
    assert choice.best.conf == ES
    assert choice.best.vs_default.ratio == pytest.approx(0.99, rel=2e-3) and choice.best.vs_default.pairs == 3
    assert any("0.990x" in r and "no significant difference" in r for r in choice.reasons)


def test_single_repeat_decides_on_memory_and_says_throughput_is_untested():
    # One process each: a 10% lower throughput is inside what fresh processes vary by, so it refuses nothing.
    records = [rec(""), rec(ES, reserved=10.0, tput=90.0), rec(RP, reserved=12.0, tput=99.0)]
    _, [choice] = decide(records)
    assert choice.best.conf == ES
    assert any("NOT TESTED" in r and "--repeats 3" in r for r in choice.reasons)


def test_oom_and_crash_are_not_recommended():
    records = (setting("") + setting(ES, reserved=12.0)
               + [rec(MS, 0, reserved=5.0), rec(MS, 1, state=TrialState.OOM, error="CUDA out of memory")]
               + [rec(RP, 0, state=TrialState.CRASHED, error="Traceback\nRuntimeError: boom\n")])
    settings, [choice] = decide(records)
    s = by_conf(settings)
    assert s[MS].state == "oom" and s[MS].peak_reserved_bytes == int(5 * GiB)  # OK repeats still summarised
    assert s[RP].state == "crashed" and s[RP].error == "RuntimeError: boom" and s[RP].peak_reserved_bytes is None
    assert choice.best.conf == ES
    assert "out of memory in 1 of 2 repeats" in why(choice, MS)
    assert "crashed in 1 of 1 repeat" in why(choice, RP) and "boom" in why(choice, RP)
    assert [x.conf for x in ranked(settings)] == [ES, "", MS, RP]  # fitting by memory, then failures


def test_nothing_beats_the_default():
    records = setting("") + setting(ES, reserved=14.95) + setting(MS, reserved=18.0)
    _, [choice] = decide(records)
    assert choice.best.is_default
    assert "keep the default" in choice.reasons[0] and "15.00 GiB" in choice.reasons[0]
    assert ES in choice.reasons[0] and "-0.3%" in choice.reasons[0]
    data = choice.to_json()
    assert data["is_default"] and data["conf"] == "" and data["verdict"] == "no significant difference"
    assert data["throughput_ratio"] == 1.0


def test_default_kept_and_says_lower_settings_were_refused():
    records = setting("") + setting(ES, reserved=8.0, tputs=(80.0, 80.5, 79.5))
    _, [choice] = decide(records)
    assert choice.best.is_default
    assert any("refused" in r and ES in r and "20.0% slower" in r for r in choice.reasons)


def test_default_oom_under_budget():
    budget = 16 * GiB
    records = ([rec("", i, state=TrialState.OOM, budget=budget) for i in range(2)]
               + setting(ES, reserved=12.0, budget=budget, tputs=(100.0, 101.0))
               + setting(RP, reserved=14.0, budget=budget, tputs=(100.0, 101.0)))
    settings, [choice] = decide(records)
    assert choice.best.conf == ES and choice.baseline.state == "oom"
    assert "the default does not fit" in choice.reasons[0] and "16.00 GiB budget" in choice.reasons[0]
    assert "2 settings that fit" in choice.reasons[0]
    data = choice.to_json()
    assert data["budget_bytes"] == budget and data["verdict"] == "not measured" and data["baseline_state"] == "oom"


def test_nothing_fits():
    records = [rec("", state=TrialState.OOM, budget=GiB), rec(ES, state=TrialState.OOM, budget=GiB),
               rec(MS, state=TrialState.TIMEOUT, budget=GiB, error="killed after 60 s")]
    _, [choice] = decide(records)
    assert choice.best is None
    assert "nothing fits under the 1.00 GiB budget" in choice.reasons[0] and "oom: 2" in choice.reasons[0]
    assert "timed out" in why(choice, MS)
    data = json.loads(json.dumps(choice.to_json()))
    assert data["fits"] is False and data["conf"] is None and data["verdict"] == "nothing fits"


def test_simulated_refuses_more_retries():
    sim = dict(backend="sim")
    records = (setting("", **sim) + setting(ES, reserved=9.0, retries=3, **sim)
               + setting(RP, reserved=11.0, **sim))
    settings, [choice] = decide(records)
    assert all(s.throughput is None and s.vs_default is None for s in settings)
    assert choice.best.conf == RP and choice.simulated
    assert "simulated" in choice.reasons[0]
    assert "3 alloc retries" in why(choice, ES) and "synchronises" in why(choice, ES)
    data = choice.to_json()
    assert data["simulated"] and data["verdict"] == "not measured" and data["throughput_ratio"] is None


def test_two_environments_give_two_choices():
    other = dict(env_id="torch-2.9.1", torch="2.9.1")
    records = (setting("") + setting(ES, reserved=10.0)
               + setting("", **other) + setting(ES, reserved=14.9, **other))
    settings, choices = decide(records)
    assert len(settings) == 4
    assert [(c.env_id, c.best.conf) for c in choices] == [("torch-2.11.0", ES), ("torch-2.9.1", "")]
    assert choices[1].to_json()["torch_version"] == "2.9.1"


def test_memory_disagreement_is_flagged():
    records = setting("") + [rec(ES, 0, reserved=10.0, tput=101.0), rec(ES, 1, reserved=10.3, tput=99.0),
                             rec(ES, 2, reserved=10.1, tput=100.2)]
    settings, [choice] = decide(records)
    assert by_conf(settings)[ES].memory_spread == pytest.approx(0.03)
    assert any("disagreed across repeats by 3.0%" in r for r in choice.reasons)


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


def test_choose_applies_its_own_max_slowdown():
    settings = summarize_settings(setting("") + setting(ES, reserved=8.0, tputs=(90.0, 90.5, 89.5)))
    [strict] = choose(settings, max_slowdown=0.02)
    [lenient] = choose(settings, max_slowdown=0.15)
    assert strict.best.is_default and lenient.best.conf == ES
    assert any("significantly slower" in r and "15% allowance" in r for r in lenient.reasons)
    assert lenient.to_json()["verdict"] == "slower" and lenient.to_json()["max_slowdown"] == 0.15


ASYNC = "backend:cudaMallocAsync"


def test_backends_compared_by_device_memory_and_a_native_setting_wins_the_tie():
    """The Mask R-CNN case: cudaMallocAsync's pool read 32.59 GiB 'reserved', expandable segments 32.68 GiB; the
    driver saw both within 1%. The native setting wins, and the text says so, naming the winner."""
    records = (setting("", reserved=40.0, device=41.0) + setting(ES, reserved=32.68, device=33.50)
               + setting(ASYNC, reserved=32.59, device=33.40))
    settings, [choice] = decide(records)
    assert choice.best.conf == ES
    assert {s.memory_measure for s in settings} == {"peak device memory"}
    assert by_conf(settings)[ES].memory == int(33.5 * GiB)
    text = " ".join(choice.reasons)
    assert "33.50 GiB against the default's 41.00 GiB" in text and "compared as peak device memory" in text
    assert f"{ASYNC} came within 1%" in text and f"{ES} wins the tie as a native-allocator setting" in text
    assert "expandable_segments:True came within" not in text   # the text never credits a loser with the win
    assert "switches the allocator backend" in why(choice, ASYNC)
    data = choice.to_json()
    assert data["conf"] == ES and data["memory_measure"] == "peak device memory"
    assert data["memory_bytes"] == int(33.5 * GiB) and data["peak_reserved_bytes"] == int(32.68 * GiB)


def test_async_pool_reading_low_does_not_beat_a_lower_device_peak():
    records = (setting("", reserved=40.0, device=41.0) + setting(ES, reserved=32.0, device=33.0)
               + setting(ASYNC, reserved=20.0, device=36.0))
    settings, [choice] = decide(records)
    assert choice.best.conf == ES and [s.conf for s in ranked(settings)] == [ES, ASYNC, ""]
    assert "costs 3.00 GiB more peak device memory" in why(choice, ASYNC)


def test_native_only_groups_still_compare_peak_reserved():
    records = setting("", reserved=15.0, device=99.0) + setting(ES, reserved=10.5, device=1.0)
    settings, [choice] = decide(records)
    assert {s.memory_measure for s in settings} == {"peak reserved"}
    assert by_conf(settings)[ES].memory == int(10.5 * GiB)


def test_a_peak_that_moves_between_repeats_loses_the_tie():
    moving = [rec(RP, i, reserved=r, tput=t) for i, (r, t) in enumerate(zip((10.40, 10.45, 10.40), BASE_TPUT))]
    records = setting("") + setting(ES, reserved=10.50) + moving
    settings, [choice] = decide(records)
    assert by_conf(settings)[RP].unstable and not by_conf(settings)[ES].unstable
    assert choice.best.conf == ES
    assert any(f"{RP} came within 1%" in r and "its peak repeated exactly" in r for r in choice.reasons)
    assert "peak moved between repeats (+0.5%)" in why(choice, RP)
    # alone, the moving setting still wins on memory (flagged), and the reasons carry the caution
    _, [alone] = decide(setting("") + moving)
    assert alone.best.conf == RP and any("disagreed across repeats" in r for r in alone.reasons)


def test_tie_text_names_the_real_winner_when_the_simpler_one_has_the_higher_peak():
    both = f"{ES},{RP}"
    records = setting("") + setting(ES, reserved=10.5) + setting(both, reserved=10.45)
    _, [choice] = decide(records)
    assert any(f"{both} came within 1%" in r and f"{ES} wins the tie as the simpler setting (1 key(s) against 2)"
               in r for r in choice.reasons)


def test_detectable_slowdown_is_the_winners_interval_half_width():
    base = (100.0, 90.0, 110.0, 95.0)
    records = [rec("", i, tput=t) for i, t in enumerate(base)]
    records += [rec(ES, i, reserved=10.5, tput=t * f) for i, (t, f) in enumerate(zip(base, (1.0, 1.01, 0.99, 1.0)))]
    _, [choice] = decide(records)
    c = choice.best.vs_default
    assert c.pairs == 4 and choice.detectable == pytest.approx(c.half_width) and 0 < c.half_width < 0.05
    data = choice.to_json()
    assert data["detectable_slowdown"] == pytest.approx(c.half_width) and data["paired_rounds"] == 4
    assert data["throughput_ratio_ci"][0] < data["throughput_ratio"] < data["throughput_ratio_ci"][1]
    assert any("paired t-test over 4 rounds" in r and "95% interval" in r for r in choice.reasons)
