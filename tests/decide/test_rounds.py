"""`--repeats auto`: which settings each round runs and when it stops (pure rules), then the sweeper's round loop
against real child processes: a stand-in interpreter answers as the trial child would, with throughputs chosen per
setting, and the trials file shows what ran in which order."""
from __future__ import annotations

import json
import random
import stat
import sys
import textwrap

import pytest

from alloctune.decide.summary import summarize_settings
from alloctune.decide.precision import precision_of
from alloctune.decide.reasons import Code, Stop
from alloctune.decide.rounds import MIN_ROUNDS, Contention, contenders, standings
from alloctune.decide.summary import SettingState
from alloctune.results.folder import ResultsFolder, SweepInfo
from alloctune.results.records import Measurement, TrialRecord, TrialState
from alloctune.settings.conf import AllocConf
from alloctune.sweeper.executors import LocalExecutor
from alloctune.sweeper import execute
from alloctune.trial.task import TrialTask

ES, MS, RP, GC = ("expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4",
                  "garbage_collection_threshold:0.6")
GiB = 2**30


def rec(conf, repeat, tput, reserved=10.0, state=TrialState.OK):
    m = Measurement(peak_reserved_bytes=int(reserved * GiB), peak_allocated_bytes=8 * GiB, throughput=tput,
                    unit="tokens") if state is TrialState.OK else None
    return TrialRecord("w", "h", conf, repeat, "env", "cuda", state, m)


def group(rows):
    """rows: conf -> (throughputs by round, reserved GiB)."""
    return summarize_settings([rec(c, i, t, r) for c, (tputs, r) in rows.items() for i, t in enumerate(tputs)])


def test_first_rounds_run_everything_that_fits():
    g = group({"": ([100.0], 20.0), ES: ([99.0], 15.0), MS: ([101.0], 60.0)})
    g += summarize_settings([rec(RP, 0, None, state=TrialState.OOM)])
    by = {s.conf: s for s in standings(g, ["", ES, MS, RP, GC], 1, 0.02)}
    assert by[ES].open and by[ES].why is Contention.TOO_FEW_ROUNDS
    assert by[GC].open and by[GC].why is Contention.NOT_MEASURED
    assert by[MS].open                     # more memory: it still gets MIN_ROUNDS rounds for a throughput verdict
    assert not by[RP].open and (by[RP].why, by[RP].state) == (Contention.FAILED, SettingState.OOM)
    assert contenders(g, ["", ES, MS, RP, GC], 1, 0.02) == [ES, MS, GC]
    late = {s.conf: s for s in standings(g, ["", ES, MS, RP, GC], MIN_ROUNDS, 0.02)}
    assert not late[MS].open and late[MS].why is Contention.MORE_MEMORY


def test_answered_refused_and_cannot_win():
    base = [100.0, 90.0, 110.0, 95.0]
    g = group({"": (base, 20.0),
               ES: ([b * f for b, f in zip(base, (1.0, 1.005, 0.995, 1.0))], 15.0),      # tight: answered
               RP: ([b * f for b, f in zip(base, (0.80, 0.81, 0.79, 0.80))], 12.0),      # 20% slower: refused
               GC: ([b * f for b, f in zip(base, (1.1, 0.9, 1.05, 0.95))], 18.0)})       # noisy, more memory than ES
    by = {s.conf: s for s in standings(g, ["", ES, RP, GC], 4, 0.02)}
    assert not by[ES].open and by[ES].why is Contention.ANSWERED and by[ES].half_width <= 0.02
    assert not by[RP].open and by[RP].why is Contention.TOO_SLOW
    assert not by[GC].open and (by[GC].why, by[GC].winner) == (Contention.CANNOT_WIN, ES)
    assert contenders(g, ["", ES, RP, GC], 4, 0.02) == []
    # before MIN_ROUNDS nothing is settled by throughput
    assert all(st.open for st in standings(g, ["", ES, RP, GC], MIN_ROUNDS - 1, 0.02))


def test_a_noisy_setting_stays_open_while_a_lower_one_is_not_answered():
    base = [100.0, 90.0, 110.0, 95.0]
    g = group({"": (base, 20.0), ES: ([b * f for b, f in zip(base, (1.1, 0.9, 1.05, 0.95))], 15.0),
               GC: ([b * f for b, f in zip(base, (1.1, 0.92, 1.05, 0.95))], 18.0)})
    by = {s.conf: s for s in standings(g, ["", ES, GC], 4, 0.02)}
    assert by[ES].open and by[GC].open and by[ES].why is Contention.TOO_WIDE and by[ES].half_width > 0.02


def test_the_default_failing_ends_the_rounds():
    g = summarize_settings([rec("", 0, None, state=TrialState.CRASHED), rec(ES, 0, 100.0)])
    assert contenders(g, ["", ES], 1, 0.02) == []
    assert [st.why for st in standings(g, ["", ES], 1, 0.02)] == [Contention.NO_BASELINE]


def test_a_lower_setting_within_the_tie_does_not_end_the_contention():
    """'Cannot win' needs less memory beyond the tie (decide.order): within it the tie rules could still pick
    this one."""
    base = [100.0, 90.0, 110.0, 95.0]
    g = group({"": (base, 20.0), ES: ([b * f for b, f in zip(base, (1.0, 1.005, 0.995, 1.0))], 15.0),
               GC: ([b * f for b, f in zip(base, (1.1, 0.9, 1.05, 0.95))], 15.1)})
    assert {st.conf: st.why for st in standings(g, ["", ES, GC], 4, 0.02)} == {ES: Contention.ANSWERED,
                                                                                GC: Contention.TOO_WIDE}


def test_precision_degenerate_and_each_reason():
    assert precision_of(None, 1, 0.02, auto=True, max_repeats=10).code is Code.PRECISION_UNKNOWN
    reached = precision_of(0.015, 4, 0.02, auto=True, max_repeats=10)
    assert reached.code is Code.PRECISION_REACHED
    assert (reached.figures.detectable, reached.figures.rounds, reached.figures.goal) == (0.015, 4, 0.02)
    capped = precision_of(0.04, 10, 0.02, auto=True, max_repeats=10)
    # sd of the log ratios = ln(1.04) * sqrt(10) / t(0.975, 9) = 0.0548; t(0.975, n-1) * 0.0548 / sqrt(n) <= ln(1.02)
    # first holds at n = 32
    assert capped.code is Code.PRECISION_SHORT
    assert (capped.figures.stop, capped.figures.max_repeats, capped.figures.rounds_needed) == (Stop.MAX_REPEATS, 10, 32)
    assert precision_of(0.04, 5, 0.02, auto=True, max_repeats=10).figures.stop is Stop.TIME_BUDGET
    fixed = precision_of(0.04, 3, 0.02, auto=False, max_repeats=3).figures
    assert (fixed.stop, fixed.rounds) == (Stop.FIXED_REPEATS, 3)
    assert precision_of(0.04, 1, 0.02, auto=True, max_repeats=10).figures.rounds_needed is None   # no spread yet
    assert precision_of(0.0, 3, 0.02, auto=True, max_repeats=10).code is Code.PRECISION_REACHED


# A stand-in for `python -m alloctune.child SPEC`: logs which setting ran, and answers with a throughput from
# FACTORS (setting -> ratio to the default, per round) times a drifting machine speed.
CHILD = """
import json, sys
spec = json.load(open(sys.argv[3]))
log, plan = {log!r}, json.loads({plan!r})
with open(log, "a") as f:
    f.write(spec["conf"] + "\\n")
runs = open(log).read().splitlines()
n = runs.count(spec["conf"]) - 1        # this setting's repeat (rounds run in order)
speed = 100.0 * (1 + 0.05 * len(runs))   # the machine warms up: +5% per trial
entry = plan[spec["conf"]]
if entry == "oom":
    result = {{"state": "oom", "measurement": None, "error": "CUDA out of memory", "env": {{}}}}
else:
    result = {{"state": "ok", "env": {{}}, "measurement": {{
        "peak_reserved_bytes": entry["gib"] * 2**30, "peak_allocated_bytes": 2**30,
        "throughput": speed * entry["ratios"][n % len(entry["ratios"])], "unit": "tokens"}}}}
json.dump(result, open(spec["result"], "w"))
"""


def run_rounds(tmp_path, plan, max_rounds=8, budget=None):
    python = tmp_path / "fake-python"
    python.write_text("#!" + sys.executable + "\n" + textwrap.dedent(
        CHILD.format(log=str(tmp_path / "ran.log"), plan=json.dumps(plan))))
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    confs = [AllocConf.parse(c) for c in plan]
    info = SweepInfo("w", "h", {"name": "w"}, [str(c) for c in confs], repeats=max_rounds, auto_repeats=True)
    folder = ResultsFolder.create(tmp_path / "out", info)

    def task(env_id, conf, r):
        return TrialTask({"name": "w"}, "h", conf, r, str(python), env_id)

    notices = []
    with LocalExecutor([None]) as executor:
        execute.run_rounds(folder, executor, {"env": confs}, task, max_rounds, budget, 0.02, 1, None, notices.append)
    ran = (tmp_path / "ran.log").read_text().splitlines()
    return folder, ran, notices


def test_rounds_stop_each_setting_when_its_answer_is_known(tmp_path):
    rng = random.Random(0)
    plan = {"": {"gib": 20, "ratios": [1.0]},
            ES: {"gib": 15, "ratios": [1.0, 1.001, 0.9995, 1.0005]},                  # answered after 3 rounds
            MS: {"gib": 60, "ratios": [1.0]},                                         # more memory: out after 3
            RP: "oom",                                                                # out after 1
            GC: {"gib": 12, "ratios": [1 + rng.uniform(-0.15, 0.15) for _ in range(8)]}}  # noisy: to the cap
    folder, ran, _ = run_rounds(tmp_path, plan)
    counts = {c: ran.count(c) for c in plan}
    assert counts == {"": 8 + 1, ES: MIN_ROUNDS, MS: MIN_ROUNDS, RP: 1, GC: 8}   # + the default closing the last
    assert ran[:5] == ["", ES, MS, RP, GC] and ran[5:9] == ["", ES, MS, GC] and ran[-3:] == ["", GC, ""]
    trials = folder.trials()
    assert sorted(t.repeat for t in trials if t.conf == "") == list(range(9))
    es = next(s for s in summarize_settings(trials) if s.conf == ES)
    # the machine sped up by 5% per trial, yet with the default on both sides of every round ES reads within
    # ±1% of the default, its interval narrower than ±2%
    assert es.vs_default.pairs == MIN_ROUNDS and es.vs_default.half_width < 0.02
    assert es.vs_default.ratio == pytest.approx(1.0, abs=0.01)
    # paired with its round's default alone it would have read ~5% faster
    assert sum(c / b for b, c in es.pairs) / len(es.pairs) < 1.01


def test_rounds_stop_at_the_time_budget(tmp_path):
    plan = {"": {"gib": 20, "ratios": [1.0]}, ES: {"gib": 15, "ratios": [1.2, 0.8]}}
    _, ran, notices = run_rounds(tmp_path, plan, budget=1e-6)
    assert ran == ["", ES, ""] and "time budget" in notices[0]   # the first round always runs, and is closed


def test_bracket_pairs_interpolate_the_default_between_its_runs():
    from alloctune.decide.summary import bracket_pairs

    d0, c, d1 = rec("", 0, 100.0), rec(ES, 0, 110.0), rec("", 1, 121.0)
    pairs = bracket_pairs([d0, d1], [c], {id(d0): 0, id(c): 1, id(d1): 2})
    assert pairs == [(pytest.approx(110.0), 110.0)]          # halfway, log-linearly: sqrt(100 * 121)
    # without the next default, or out of order, the round's own default is the baseline
    assert bracket_pairs([d0], [c], {id(d0): 0, id(c): 1}) == [(100.0, 110.0)]
    assert bracket_pairs([d0, d1], [c], {id(d0): 0, id(c): 3, id(d1): 2}) == [(100.0, 110.0)]
    assert bracket_pairs([rec("", 0, None, state=TrialState.OOM)], [c], {}) == []
