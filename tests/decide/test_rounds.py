"""`--repeats auto`: which settings each round runs and when it stops (pure rules), then the sweeper's round loop
against real child processes: a stand-in interpreter answers as the trial child would, with throughputs chosen per
setting, and the trials file shows what ran in which order."""
from __future__ import annotations

import json
import random
import stat
import sys
import textwrap
from dataclasses import replace

import pytest
from folders import new_folder

from alloctune.decide.summary import summarize_settings
from alloctune.decide.precision import precision_of
from alloctune.decide.reasons import Code
from alloctune.decide.quoted import Stop
from alloctune.decide.rounds import (MIN_ROUNDS, Contention, Standing, contenders, over_time_budget, standings,
                                     trials_to_come)
from alloctune.decide.stats import rounds_needed
from alloctune.decide.summary import SettingState
from alloctune.results.folder import ResultsFolder, SweepInfo
from alloctune.results.records import Measurement, TrialRecord, TrialState
from alloctune.settings.conf import AllocConf
from alloctune.sweeper.executors import LocalExecutor
from alloctune.sweeper import execute
from alloctune.trial.task import TrialTask
from alloctune.workload.spec import WorkloadSpec

ES, MS, RP, GC = ("expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4",
                  "garbage_collection_threshold:0.6")
GiB = 2**30


def plan(*confs: str) -> list[AllocConf]:
    """A sweep's planned settings, as the sweeper hands them to the rounds."""
    return [AllocConf.parse(c) for c in confs]


def rec(conf, repeat, tput, reserved=10.0, state=TrialState.OK):
    m = Measurement(peak_reserved_bytes=int(reserved * GiB), peak_allocated_bytes=8 * GiB, throughput=tput,
                    unit="tokens") if state is TrialState.OK else None
    return TrialRecord("w", "h", conf, repeat, "env", "cuda", state, m)


def group(rows):
    """rows: conf -> (throughputs by round, reserved GiB)."""
    return summarize_settings([rec(c, i, t, r) for c, (tputs, r) in rows.items() for i, t in enumerate(tputs)])


def test_memory_first_after_the_first_round():
    """One measurement settles memory: a setting above the default leaves at once (it is never recommended), one
    that fits is measured again, one whose memory nobody knows yet is measured once; lowest memory first."""
    g = group({"": ([100.0], 20.0), ES: ([99.0], 15.0), MS: ([101.0], 60.0)})
    g += summarize_settings([rec(RP, 0, None, state=TrialState.OOM)])
    by = {s.conf: s for s in standings(g, plan("", ES, MS, RP, GC), 0.02, max_rounds=10)}
    assert by[ES].open and (by[ES].why, by[ES].rounds) == (Contention.TOO_FEW_ROUNDS, 1)
    assert by[GC].open and by[GC].why is Contention.NOT_MEASURED and not by[GC].memory_known
    assert not by[MS].open and by[MS].why is Contention.MORE_MEMORY
    assert (by[MS].memory_bytes, by[MS].other_bytes) == (60 * GiB, 20 * GiB)
    assert not by[RP].open and (by[RP].why, by[RP].state) == (Contention.FAILED, SettingState.OOM)
    assert contenders(g, plan("", ES, MS, RP, GC), 0.02, max_rounds=10) == [ES, GC]


def test_a_setting_beaten_on_memory_gets_no_rounds_while_the_lower_one_stands():
    base = [100.0, 90.0, 110.0, 95.0]
    g = group({"": (base, 20.0),
               ES: ([b * f for b, f in zip(base, (1.0, 1.002, 0.998, 1.0))], 15.0),      # tight: accepted
               RP: ([b * f for b, f in zip(base, (0.80, 0.81, 0.79, 0.80))], 12.0),      # 20% slower: refused
               GC: ([b * f for b, f in zip(base, (1.1, 0.9, 1.05, 0.95))], 18.0)})       # noisy, more memory than ES
    by = {s.conf: s for s in standings(g, plan("", ES, RP, GC), 0.02, max_rounds=10)}
    assert not by[ES].open and by[ES].why is Contention.CLEARED and by[ES].half_width <= 0.02
    assert not by[RP].open and by[RP].why is Contention.TOO_SLOW
    # RP needs less than ES but is refused, so ES stands; GC loses to ES beyond the tie
    assert (by[GC].why, by[GC].winner, by[GC].memory_bytes, by[GC].other_bytes) == (
        Contention.LOSES_ON_MEMORY, ES, 18 * GiB, 15 * GiB)
    assert contenders(g, plan("", ES, RP, GC), 0.02, max_rounds=10) == []
    # before MIN_ROUNDS nothing is settled by throughput, but memory is: RP is not refused yet, so ES and GC wait
    early = group({"": (base[:2], 20.0), ES: ([100.0, 90.5], 15.0), RP: ([80.0, 72.9], 12.0),
                   GC: ([110.0, 81.0], 18.0)})
    by = {s.conf: s for s in standings(early, plan("", ES, RP, GC), 0.02, max_rounds=10)}
    assert by[RP].why is Contention.TOO_FEW_ROUNDS
    assert {(by[c].why, by[c].winner) for c in (ES, GC)} == {(Contention.LOSES_ON_MEMORY, RP)}
    assert contenders(early, plan("", ES, RP, GC), 0.02, max_rounds=10) == [RP]


def test_the_sequential_test_ends_a_setting_not_its_interval():
    """An interval above 1 - max_slowdown after 3 of 10 rounds does not end the rounds: the sequential test
    spends little of its error that early (sequential.py). Where 3 rounds are the cap, the whole is spent on them
    and the same rounds accept the setting; a setting neither accepted nor refused at the cap is inconclusive."""
    base = [100.0, 90.0, 110.0]
    g = group({"": (base, 20.0), ES: ([b * f for b, f in zip(base, (1.04, 1.08, 1.06))], 15.0),
               GC: ([b * f for b, f in zip(base, (1.1, 0.9, 1.05))], 15.0)})
    assert g[1].vs_default.ci_low > 0.98
    early = {st.conf: st for st in standings(g, plan("", ES, GC), 0.02, max_rounds=10)}
    assert (early[ES].why, early[GC].why) == (Contention.TOO_WIDE, Contention.TOO_WIDE) and early[ES].open
    capped = {st.conf: st for st in standings(g, plan("", ES, GC), 0.02, max_rounds=3)}
    assert capped[ES].why is Contention.CLEARED and capped[ES].half_width > 0.02 and not capped[ES].open
    assert capped[GC].why is Contention.INCONCLUSIVE and not capped[GC].open


def test_the_default_failing_ends_the_rounds():
    g = summarize_settings([rec("", 0, None, state=TrialState.CRASHED), rec(ES, 0, 100.0)])
    assert contenders(g, plan("", ES), 0.02, max_rounds=10) == []
    assert [st.why for st in standings(g, plan("", ES), 0.02, max_rounds=10)] == [Contention.NO_BASELINE]
    # a setting not measured yet still is, once: without the default's figures its own memory decides
    assert contenders(g, plan("", ES, RP), 0.02, max_rounds=10) == [RP]


def test_a_lower_setting_within_the_tie_does_not_end_the_contention():
    """'Cannot win' needs less memory beyond the tie (decide.order): within it the tie rules could still pick
    this one."""
    base = [100.0, 90.0, 110.0, 95.0]
    g = group({"": (base, 20.0), ES: ([b * f for b, f in zip(base, (1.0, 1.002, 0.998, 1.0))], 15.0),
               GC: ([b * f for b, f in zip(base, (1.1, 0.9, 1.05, 0.95))], 15.1)})
    assert {st.conf: st.why for st in standings(g, plan("", ES, GC), 0.02, max_rounds=10)} == {ES: Contention.CLEARED,
                                                                             GC: Contention.TOO_WIDE}


ASYNC = "backend:cudaMallocAsync"


def test_replayed_memory_plans_the_first_round_and_a_backend_switch_is_skipped_near_the_live_bytes():
    """A hybrid sweep: the replay's peaks are the memory the rounds start from."""
    measured = group({"": ([100.0], 9.91)})
    sim = {s.conf: s for s in summarize_settings(
        [TrialRecord("w", "h", c, 0, "sim:env", "sim", TrialState.OK,
                     Measurement(peak_reserved_bytes=int(r * GiB), peak_allocated_bytes=int(9.32 * GiB),
                                 peak_requested_bytes=int(requested * GiB)))
         for c, r, requested in (("", 9.91, 9.32), (ES, 9.37, 9.32), (RP, 10.04, 9.32), (MS, 9.60, 9.32))])}
    planned = plan("", ES, RP, MS, ASYNC)
    by = {st.conf: st for st in standings(measured, planned, 0.02, predicted=sim, max_rounds=10)}
    assert by[ES].why is Contention.NOT_MEASURED and by[ES].memory_known and by[ES].predicted
    assert by[RP].why is Contention.MORE_MEMORY and by[RP].predicted
    assert (by[MS].why, by[MS].winner) == (Contention.LOSES_ON_MEMORY, ES)
    # ES reserves within 1% of the program's peak requested bytes: no allocator holds less than those
    assert (by[ASYNC].why, by[ASYNC].winner, by[ASYNC].memory_bytes, by[ASYNC].other_bytes) == (
        Contention.BACKEND_SKIPPED, ES, int(9.37 * GiB), int(9.32 * GiB))
    assert contenders(measured, planned, 0.02, predicted=sim, max_rounds=10) == [ES]
    # without a native setting that close to the live bytes, the switch is measured once for its memory
    assert contenders(measured, plan("", RP, MS, ASYNC), 0.02, predicted=sim, max_rounds=10) == [MS, ASYNC]


def test_trials_to_come():
    leader = Standing(ES, Contention.NOT_MEASURED, memory_known=True)
    # one leader: its MIN_ROUNDS rounds, each after a default run, and the closing run
    assert trials_to_come([leader], 0.02, 10) == 2 * MIN_ROUNDS
    assert trials_to_come([Standing(ES, Contention.TOO_FEW_ROUNDS, rounds=2, memory_known=True)], 0.02, 10) == 2
    # nobody's memory known yet: each measured once, one of them then taken to lead
    unknown = [Standing(c, Contention.NOT_MEASURED) for c in (ES, MS, RP)]
    assert trials_to_come(unknown, 0.02, 10) == MIN_ROUNDS + 2 + MIN_ROUNDS
    # a wide interval: the rounds its spread implies (±4% over 3 rounds: ±2% needs about 5), capped by those left
    wide = Standing(ES, Contention.TOO_WIDE, rounds=3, memory_known=True, half_width=0.04)
    assert trials_to_come([wide], 0.02, 10) == 2 * 2 and trials_to_come([wide], 0.02, 1) == 2
    # away from the 0.98 boundary the question settles before the goal is met, and the rounds stop then (1.05x
    # ±10% over 4 rounds: ±2% needs 38 rounds, settling at 1.05x about ±7%, 6)
    far = Standing(ES, Contention.TOO_WIDE, rounds=4, memory_known=True, half_width=0.10, ratio=1.05)
    assert trials_to_come([far], 0.02, 100) == 2 * 2
    assert trials_to_come([replace(far, ratio=None)], 0.02, 100) == 2 * (rounds_needed(0.10, 4, 0.02) - 4)
    assert trials_to_come([Standing(ES, Contention.CLEARED, rounds=3)], 0.02, 10) == 0


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
# What the trial child is given (its spec.json holds it whole); the stand-in child reads only the setting.
WORKLOAD = WorkloadSpec(name="w", description="", source=None, kind="transformer", entry=None, params={}, preset=None,
                        warmup_steps=1, steps=1, unit="tokens", seed=0).to_dict()
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


def run_rounds(tmp_path, plan, max_rounds=8, budget=None, folder=None, progress=None):
    """The round loop over `plan`'s settings, in a new results folder or, to resume, in `folder`."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    python = tmp_path / "fake-python"
    python.write_text("#!" + sys.executable + "\n" + textwrap.dedent(
        CHILD.format(log=str(tmp_path / "ran.log"), plan=json.dumps(plan))))
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    confs = [AllocConf.parse(c) for c in plan]
    if folder is None:
        info = SweepInfo("w", "h", {"name": "w"}, [str(c) for c in confs], repeats=max_rounds, auto_repeats=True)
        folder = new_folder(tmp_path / "out", info)

    def task(env_id, conf, r):
        return TrialTask(WORKLOAD, "h", conf, r, str(python), env_id)

    notices = []
    with LocalExecutor([None]) as executor:
        execute.run_rounds(folder, executor, {"env": confs}, task, max_rounds, budget, 0.02, 1, progress,
                           notices.append)
    ran = (tmp_path / "ran.log").read_text().splitlines()
    return folder, ran, notices


def test_rounds_stop_each_setting_when_its_answer_is_known(tmp_path):
    rng = random.Random(0)
    plan = {"": {"gib": 20, "ratios": [1.0]},
            ES: {"gib": 15, "ratios": [1.0, 1.0002, 0.9999, 1.0001]},                 # accepted after 4 rounds
            MS: {"gib": 60, "ratios": [1.0]},                                         # more memory: out after 1
            RP: "oom",                                                                # out after 1
            GC: {"gib": 17, "ratios": [1 + rng.uniform(-0.15, 0.15) for _ in range(8)]}}  # noisy, beaten by ES
    bar = []
    folder, ran, _ = run_rounds(tmp_path, plan, progress=lambda record, done, total: bar.append((done, total)))
    # the progress bar's total: the first default alone, then the estimate of the whole sweep, which memory first
    # gets right here, while each round's default runs too (it fell to the trials done so far then: '6/6')
    assert bar == [(1, 1)] + [(n, 10) for n in range(2, 11)] + [(11, 12), (12, 12)]
    counts = {c: ran.count(c) for c in plan}
    # the first round measures every setting's memory; then only ES can win. Its first round ran far from the
    # next default (the drift leaves 0.4% in that ratio), so the spread over MIN_ROUNDS is not small enough for the
    # first look, which spends little of the error: it is accepted at the next
    assert counts == {"": MIN_ROUNDS + 2, ES: MIN_ROUNDS + 1, MS: 1, RP: 1, GC: 1}   # + the default closing the last
    assert ran[:5] == ["", ES, MS, RP, GC] and ran[5:] == ["", ES, "", ES, "", ES, ""]
    trials = folder.trials()
    assert sorted(t.repeat for t in trials if t.conf == "") == list(range(MIN_ROUNDS + 2))
    es = next(s for s in summarize_settings(trials) if s.conf == ES)
    # the machine sped up by 5% per trial, yet with the default on both sides of every round ES reads within
    # ±1% of the default, its interval narrower than ±2%
    assert es.vs_default.pairs == MIN_ROUNDS + 1 and es.vs_default.half_width < 0.02
    assert es.vs_default.ratio == pytest.approx(1.0, abs=0.01)
    # paired with its round's default alone it would have read ~5% faster
    assert sum(c / b for b, c in es.pairs) / len(es.pairs) < 1.01


def test_a_setting_beaten_on_memory_is_measured_once_the_lower_one_is_refused(tmp_path):
    plan = {"": {"gib": 20, "ratios": [1.0]},
            ES: {"gib": 12, "ratios": [0.9, 0.901, 0.8995]},       # least memory, 10% slower: refused after 3
            GC: {"gib": 15, "ratios": [1.0, 1.001, 0.9995]}}       # beaten by ES until then
    folder, ran, _ = run_rounds(tmp_path, plan)
    assert ran == ["", ES, GC, "", ES, "", ES, "", GC, "", GC, ""]
    by = {s.conf: s for s in summarize_settings(folder.trials())}
    assert [t.repeat for t in by[GC].trials] == [0, 3, 4]    # its rounds: the first, then once ES was refused
    assert by[ES].vs_default.slower_beyond_tolerance and by[GC].vs_default.half_width < 0.02


def test_a_resumed_sweep_leaves_the_rounds_it_had_closed_as_they_were(tmp_path):
    """Cut once a setting came back into contention (GC, after ES was refused) and resumed: GC runs on in the rounds
    after the refusal, each run between two of the default, as in the sweep that was not cut; it does not go back
    to the rounds it sat out (found on the H200: a resumed DDP sweep ran cudaMallocAsync's repeats 1 and 2 after
    round 4, each paired with a default run from minutes before)."""
    plan = {"": {"gib": 20, "ratios": [1.0]},
            ES: {"gib": 12, "ratios": [0.9, 0.901, 0.8995]},
            GC: {"gib": 15, "ratios": [1.0, 1.001, 0.9995]}}
    whole, ran, _ = run_rounds(tmp_path / "whole", plan)
    assert ran == ["", ES, GC, "", ES, "", ES, "", GC, "", GC, ""]
    cut = tmp_path / "cut"
    run_rounds(cut, plan)
    for done in (cut / "out" / "trials.jsonl", cut / "ran.log"):   # cut after GC's first return, as if it ran so
        done.write_text("".join(done.read_text().splitlines(keepends=True)[:9]))
    folder, after, _ = run_rounds(cut, plan, folder=ResultsFolder(cut / "out"))
    assert after == ran[:9] + ["", GC, ""]
    assert ([(t.conf, t.repeat) for t in folder.trials()] == [(t.conf, t.repeat) for t in whole.trials()])


def test_rounds_stop_at_the_time_budget(tmp_path):
    plan = {"": {"gib": 20, "ratios": [1.0]}, ES: {"gib": 15, "ratios": [1.2, 0.8]}}
    _, ran, notices = run_rounds(tmp_path, plan, budget=1e-6)
    assert ran == ["", ES, ""] and "time budget" in notices[0]   # the first round always runs, and is closed


def test_a_round_runs_when_the_time_spent_and_its_trials_at_the_mean_wall_time_fit_the_budget():
    # 2 trials of 10 s on 2 slots: 10 s more
    assert not over_time_budget(100.0, 90.0, 1, [8.0, 12.0], trials=2, slots=2)
    assert over_time_budget(100.0, 90.5, 1, [8.0, 12.0], trials=2, slots=2)
    assert over_time_budget(100.0, 100.5, 1, [], trials=2, slots=2)   # nothing timed yet: only what was spent
    assert not over_time_budget(100.0, 500.0, 0, [8.0], trials=2, slots=1)   # the first round always runs
    assert not over_time_budget(None, 500.0, 3, [8.0], trials=2, slots=1)


def test_bracket_pairs_interpolate_the_default_between_its_runs():
    from alloctune.decide.summary import bracket_pairs

    d0, c, d1 = rec("", 0, 100.0), rec(ES, 0, 110.0), rec("", 1, 121.0)
    pairs = bracket_pairs([d0, d1], [c], {id(d0): 0, id(c): 1, id(d1): 2})
    assert pairs == [(pytest.approx(110.0), 110.0)]          # halfway, log-linearly: sqrt(100 * 121)
    # without the next default, or out of order, the round's own default is the baseline
    assert bracket_pairs([d0], [c], {id(d0): 0, id(c): 1}) == [(100.0, 110.0)]
    assert bracket_pairs([d0, d1], [c], {id(d0): 0, id(c): 3, id(d1): 2}) == [(100.0, 110.0)]
    assert bracket_pairs([rec("", 0, None, state=TrialState.OOM)], [c], {}) == []


def test_the_choice_refuses_a_setting_of_rounds_as_their_sequential_test_did():
    """Four rounds 4% slower: one test at 5% on them finds it slower beyond the 2% allowance, which refuses it where
    a fixed number of repeats ran. Rounds capped at 10 would go on (the sequential test has not decided at round 4);
    a choice made from them as they are (a time budget ran out, the sweep was stopped) falls back to that one test
    on what was measured, and refuses it too; at a cap of 4 it is the sequential test's last look that refuses."""
    from alloctune.decide.choice import choose

    base = [100.0, 90.0, 110.0, 95.0, 100.0]
    g = group({"": (base, 20.0), ES: ([b * f for b, f in zip(base, (0.95, 0.97, 0.96, 0.955))], 15.0)})
    assert g[1].vs_default.slower_beyond_tolerance
    [fixed] = choose(g, 0.02)
    assert fixed.best.is_default and fixed.runners_up[0][1].code is Code.TOO_SLOW
    [st] = standings(g, plan("", ES), 0.02, max_rounds=10)
    [rounds] = choose(g, 0.02, horizon=10)
    assert st.why is Contention.TOO_WIDE and rounds.best.is_default
    assert rounds.runners_up[0][1].code is Code.TOO_SLOW
    [capped] = choose(g, 0.02, horizon=4)      # the same rounds as the last look of a cap at 4: refused
    assert capped.best.is_default and capped.runners_up[0][1].code is Code.TOO_SLOW
