"""`alloctune search` and the sweep's search / hybrid planning, on the shipped H200 traces with real replays (small
budgets, so each test takes seconds) and the real torch of this machine as the judge of every setting."""
from __future__ import annotations

import json
import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from clirun import in_process
from folders import new_folder

import alloctune
from alloctune.decide.summary import summarize_settings
from alloctune.errors import AlloctuneError
from alloctune.results.folder import SweepInfo
from alloctune.results.records import Measurement, TrialRecord, TrialState
from alloctune.settings.conf import AllocConf
from alloctune.sim.config import division_table
from alloctune.sim.replay import replay
from alloctune.sim.search import CLOSE_RATIO, _State, pareto_front, search
from alloctune.sim.space import Space
from alloctune.sim.trace import load_trace
from alloctune.results.names import SEARCH_FILE, TRACE_FILE
from alloctune.decide.finalists import finalists
from alloctune.sweeper.hybrid import record_default, recording_task
from alloctune.trial.launch import lost_trial, run_trial
from alloctune.trial.probe import SettingsJudge, check_settings, probe
from alloctune.trial.task import TrialTask
from alloctune.workload.loader import load_workload

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "workloads" / "traces"
VARLEN = ROOT / "workloads" / "transformer-varlen.yaml"
H200 = 143771 * 2**20

@pytest.fixture(scope="module")
def judge():
    """This interpreter's torch judges the settings: one child for the module's searches, as `alloctune search`
    keeps one for all the batches of a search."""
    with SettingsJudge(sys.executable) as judge:
        yield judge


@pytest.fixture(scope="module")
def varlen_search(judge):
    trace = load_trace(TRACES / "transformer-varlen-h200.xz")
    seen = []
    result = search(trace, validate=judge, trace_name="varlen", device_memory=H200, max_settings=45, jobs=2,
                    progress=lambda done, total, best: seen.append((done, total, best)))
    return trace, result, seen


@pytest.mark.slow
def test_search_finds_the_close_setting_and_keeps_a_valid_pareto_front(varlen_search):
    trace, result, seen = varlen_search
    assert 30 <= len(result.candidates) <= 45 and result.rounds >= 1
    assert seen and seen[-1][0] == len(result.candidates) and seen[-1][1] == 45
    front = [m.candidate for m in result.front]
    # expandable segments reaches 1.009 on this trace (26.87 GiB measured on the H200): the search must find it
    best = front[0]
    assert best.ratio <= CLOSE_RATIO and best.peak_reserved <= 26.88 * 2**30
    assert any(c.conf == "expandable_segments:True" for c in front)
    assert front[-1].conf == "default" and "the default" in result.front[-1].reason
    for a in front:   # nothing replayed beats a front member on all three counts
        assert not any(b.fits and b.peak_reserved <= a.peak_reserved and b.retries <= a.retries
                       and b.keys <= a.keys and (b.peak_reserved, b.retries, b.keys) !=
                       (a.peak_reserved, a.retries, a.keys) for b in result.candidates)
    assert all(m.reason for m in result.front)
    # every setting it replayed (so every one it proposes) is accepted by the real torch of this machine
    verdicts = check_settings(sys.executable, [AllocConf.parse(c.conf) for c in result.candidates])
    assert not [c for c, why in verdicts.items() if why]
    assert not any(AllocConf.parse(c.conf).expandable_segments and AllocConf.parse(c.conf).max_split_size_mb
                   for c in result.candidates)


def test_settings_deduplicated_as_equivalent_replay_identically(varlen_search):
    trace, result, _ = varlen_search
    pairs = [(c.conf, e) for c in result.candidates for e in c.equivalent]
    assert pairs, "the varlen trace has size intervals where some divisions change nothing"
    conf, twin = random.Random(0).choice(pairs)
    a, b = replay(trace, [conf, twin], H200, jobs=1)
    assert (a.result.peak_reserved_bytes, a.result.peak_allocated_bytes, a.result.num_device_alloc) == \
        (b.result.peak_reserved_bytes, b.result.peak_allocated_bytes, b.result.num_device_alloc)


def test_per_interval_divisions_encode_to_the_shortest_equivalent_setting():
    space = Space("2.13", False, (0, 1, 2, 3, 4, 5, 9), (), {})
    rng = random.Random(1)
    for _ in range(300):
        table = [0] * 16
        for i in space.intervals:
            table[i] = rng.choice((1, 1, 2, 4, 8, 16))
        conf = AllocConf(roundup_power2_divisions=space._encode(table))
        assert AllocConf.parse(str(conf)) == conf
        for old_gt in (False, True):   # '>' read the 2.10+ way and the way before
            back = division_table(conf, old_gt)
            assert [max(back[i], 1) for i in space.intervals] == [table[i] for i in space.intervals], str(conf)
    assert str(AllocConf(roundup_power2_divisions=space._encode([4] * 16))) == "roundup_power2_divisions:4"


def test_the_space_follows_the_target_version_and_the_rules():
    trace = load_trace(TRACES / "hpsearch-h200.xz")
    old = Space.for_trace(trace, "2.1.2", has_budget=False)
    new = Space.for_trace(trace, "2.13.0", has_budget=True)
    assert "large_segment_size_mb" not in old.axes and "max_non_split_rounding_mb" not in old.axes
    assert "garbage_collection_threshold" not in old.axes
    assert {"large_segment_size_mb", "max_non_split_rounding_mb", "garbage_collection_threshold"} <= set(new.axes)
    steps = new.neighbours(AllocConf.parse("expandable_segments:True"))
    assert steps and not any(c.max_split_size_mb or c.garbage_collection_threshold for c in steps
                             if c.expandable_segments)
    assert not any(c.max_non_split_rounding_mb and not c.max_split_size_mb for c in steps)


@pytest.mark.slow
def test_a_budget_brings_gc_into_the_search(judge):
    trace = load_trace(TRACES / "hpsearch-h200.xz")
    result = search(trace, validate=judge, device_memory=H200, budget_bytes=30 * 2**30, max_settings=20, jobs=2)
    assert any(AllocConf.parse(c.conf).garbage_collection_threshold for c in result.candidates)
    assert result.budget_bytes == 30 * 2**30


def test_candidates_that_torch_or_the_rules_refuse_are_never_replayed(judge):
    trace = load_trace(TRACES / "hpsearch-h200.xz")
    state = _State(Space.for_trace(trace, "2.13.0", has_budget=False), judge, 10)
    confs = [AllocConf.parse(c) for c in ("max_split_size_mb:20,large_segment_size_mb:32",
                                          "garbage_collection_threshold:0.5", "max_split_size_mb:64",
                                          "roundup_power2_divisions:[1:1,64:4]",
                                          "roundup_power2_divisions:[1:1,64:4,128:1]")]
    admitted = state.admit(confs)
    assert [str(c) for c in admitted] == ["max_split_size_mb:64", "roundup_power2_divisions:[1:1,64:4]"]
    # an explicit 128:1 rounds every request as the unset interval did: the same behaviour, not replayed again
    assert state.equivalents == {"roundup_power2_divisions:[1:1,64:4]": ["roundup_power2_divisions:[1:1,64:4,128:1]"]}
    assert "rejects it" in state.rejected["max_split_size_mb:20,large_segment_size_mb:32"]
    assert "memory fraction" in state.rejected["garbage_collection_threshold:0.5"]
    assert state.admit(confs) == []   # each setting is judged once


def test_pareto_front_of_nothing_that_fits_is_empty():
    assert pareto_front([]) == []


@pytest.mark.slow
def test_cli_prints_the_front_in_100_columns_and_as_json():
    trace = TRACES / "hpsearch-h200.xz"
    proc = in_process("search", trace, "--max-settings", "12", "--jobs", "2")
    assert proc.returncode == 0, proc.stderr
    assert "Pareto front" in proc.stdout and "default" in proc.stdout
    assert max(map(len, proc.stdout.splitlines())) <= 100
    as_json = in_process("search", "-", "--max-settings", "12", "--jobs", "2", "--json", stdin=trace.read_bytes())
    data = json.loads(as_json.stdout)
    assert data["replayed"] <= 12 and data["front"] and all(m["reason"] for m in data["front"])
    # the trace's own torch (2.11), not this machine's: judged by the version table (sim/target.py)
    assert (data["torch_version"], data["simulated_torch"], data["validated_by"]) == ("2.11.0+cu130", "2.11", "static")
    bad = in_process("search", ROOT / "README.md")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    zero = in_process("search", trace, "--max-settings", "0")
    assert zero.returncode == 2 and "whole number" in zero.stderr


@pytest.mark.slow
@pytest.mark.usefixtures("no_visible_gpu")   # exercises the no-GPU path, on any machine
def test_sweep_search_sweeps_the_front_and_a_resume_does_not_search_again(tmp_path):
    kw = dict(preset="h200", backend="sim", search=15, results_root=tmp_path)
    outcome = alloctune.sweep(VARLEN, **kw)
    folder = outcome.folder.path
    account = json.loads((folder / SEARCH_FILE).read_text())
    [(env_id, searched)] = account.items()
    front = {str(AllocConf.parse(m["conf"])) for m in searched["front"]}   # the default named "default"
    swept = {r.conf for r in outcome.folder.trials()}
    assert swept == front | {""} and outcome.choices[0].best.conf in front
    assert outcome.choices[0].trials_recorded == len(swept) and outcome.choices[0].trials_planned is None
    stamp = (folder / SEARCH_FILE).stat().st_mtime_ns
    again = alloctune.sweep(VARLEN, **kw)
    assert again.folder.path == folder and (folder / SEARCH_FILE).stat().st_mtime_ns == stamp
    assert len(again.folder.trials()) == len(outcome.folder.trials())
    # hybrid planning on these real replays: the default and the best two predicted go to the GPU
    planned = {"torch-2.11.0": [AllocConf.parse(c) for c in swept]}
    [chosen] = finalists(outcome.folder.trials(), planned, 0.02, count=2).values()
    ranked = sorted((s for s in outcome.settings if s.conf), key=lambda s: s.peak_reserved_bytes)
    assert {str(c) for c in chosen} == {"", *(s.conf for s in ranked[:2])}
    # with one finalist, the setting the choice would take: within 1% of the lowest peak, the fewest keys
    [one] = finalists(outcome.folder.trials(), planned, 0.02, count=1).values()
    assert {str(c) for c in one} == {"", "expandable_segments:True"}
    with pytest.raises(AlloctuneError, match="search replays a trace: use it with backend sim or hybrid"):
        alloctune.sweep(VARLEN, preset="h200", backend="cuda", search=10, results_root=tmp_path)


def test_settings_named_beside_a_search_are_swept_with_its_front(tmp_path):
    """`sweep --search N --conf X`: X is replayed and judged with what the search found (it was dropped)."""
    named = "max_split_size_mb:128"   # far from the front on this trace: the search would not keep it
    outcome = alloctune.sweep(VARLEN, preset="h200", backend="sim", search=15, grid=[named], results_root=tmp_path)
    [searched] = json.loads((outcome.folder.path / SEARCH_FILE).read_text()).values()
    front = {str(AllocConf.parse(m["conf"])) for m in searched["front"]}   # the default named "default"
    assert named not in front
    assert {r.conf for r in outcome.folder.trials()} == front | {"", named}
    assert outcome.folder.info().grid == ["", named]
    assert named in {s.conf for s, _ in outcome.choices[0].runners_up}


def test_the_recording_trial_counts_as_the_defaults_repeat_0_unless_an_old_folder_measured_it_again():
    def record(repeat, recording, tput):
        return TrialRecord(workload="w", workload_hash="h", conf="", repeat=repeat, env_id="e", backend="cuda",
                           state=TrialState.OK, recording=recording,
                           measurement=Measurement(peak_reserved_bytes=10, peak_allocated_bytes=5, throughput=tput))
    recorded, measured, second = record(0, True, 1.0), record(0, False, 100.0), record(1, False, 102.0)
    assert recorded.key == measured.key   # a resumed sweep does not run the default's repeat 0 again
    assert TrialRecord.from_json(json.loads(json.dumps(recorded.to_json()))).recording
    [default] = summarize_settings([recorded, second])
    assert [t.measurement.throughput for t in default.trials] == [1.0, 102.0]
    # a folder from before it counted ran an unrecorded repeat 0 as well: that one counts, as its reports said
    [default] = summarize_settings([recorded, measured, second])
    assert [t.measurement.throughput for t in default.trials] == [100.0, 102.0]
    # a command's recording covers its whole run: an extra trial, with a key of its own, left out
    extra = replace(recorded, extra=True)
    assert extra.key != measured.key and TrialRecord.from_json(extra.to_json()).key == extra.key
    [default] = summarize_settings([extra, measured, second])
    assert [t.measurement.throughput for t in default.trials] == [100.0, 102.0]
    command = TrialTask({"name": "c", "command": {"argv": ["x"]}}, "h", AllocConf(), 0, "py", "e", record_trace="t")
    assert command.extra and command.key()[-1] == "extra" and lost_trial(command, "lost").key == command.key()


@pytest.mark.slow
@pytest.mark.usefixtures("no_visible_gpu")   # exercises the no-GPU path, on any machine
def test_hybrid_recording_runs_the_default_first_and_refuses_a_failed_recording(tmp_path):
    spec = load_workload(VARLEN, "tiny")
    p = probe()
    folder = new_folder(tmp_path / "sweep", SweepInfo(spec.name, spec.digest(), spec.to_dict(), [""],
                                                      trace={"path": TRACE_FILE}))
    task = recording_task(TrialTask(spec.to_dict(), spec.digest(), AllocConf(), 0, p.python, p.env_id,
                                    timeout_s=120), folder)
    assert task.record_trace and task.key()[-1] == 0   # the key of the default's repeat 0

    def run(tasks):   # the real child: on this machine it finds no GPU, and says so
        for t in tasks:
            folder.store.append(run_trial(t))

    with pytest.raises(AlloctuneError, match="records the allocation trace.*crashed.*no CUDA device"):
        record_default(folder, task, run)
    [trial] = folder.trials()
    assert trial.recording and trial.conf == ""
    # a trace already in the folder (an earlier run of this sweep) is read back, nothing runs again
    (folder.path / TRACE_FILE).write_bytes((TRACES / "transformer-packed-h200.xz").read_bytes())
    [trace] = record_default(folder, task, run)
    assert len(trace) == len(load_trace(TRACES / "transformer-packed-h200.xz"))
    assert len(folder.trials()) == 1
