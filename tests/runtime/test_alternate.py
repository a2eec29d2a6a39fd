"""The in-process confirmation inside a job (`runtime/alternate.py`), with a stand-in for the devices whose clock
each step moves by the time the setting in force takes: the order of blocks, what is timed and what skipped,
where the memory figures are taken, when it stops, a switch torch does not take, the stop every process agrees
on, and the counter that ends the process for it. The hook's wiring in a real process is in
tests/trial/test_alternate_hook.py; the real switching on a GPU in tests/trial/test_alternate_gpu.py."""
from __future__ import annotations

import math

import pytest

from alloctune.results.alternation import AlternationEnd
from alloctune.runtime.alternate import AlternatePlan, Alternator, finished, resolved
from alloctune.runtime.counting import Counter
from alloctune.runtime.stopping import AHEAD_STEPS, SharedStop

C, D = "expandable_segments:True", "expandable_segments:False"


class Devices:
    """A stand-in: `synced` reads a clock that `run` moves by each step's time under the setting in force;
    `switch` logs the setting and takes it, unless it is in `refused`."""

    def __init__(self, seconds: dict[str, float], refused: tuple[str, ...] = ()):
        self.seconds = seconds
        self.refused = refused
        self.now = 0.0
        self.setting = C            # the process starts under the candidate
        self.switches: list[str] = []

    def synced(self) -> float:
        return self.now

    def switch(self, setting: str) -> str | None:
        self.switches.append(setting)
        if setting in self.refused:
            return f"allocator settings did not take effect: {setting}"
        self.setting = setting
        return None

    def run_step(self) -> None:
        self.now += self.seconds[self.setting]


def plan(**kw) -> AlternatePlan:
    fields = dict(candidate=C, against=D, against_conf="", block_steps=5, skip_steps=2, target=0.01, min_pairs=3,
                  max_pairs=40, max_seconds=1e9)
    return AlternatePlan(**{**fields, **kw})


def drive(alternation: Alternator, devices: Devices, steps: int, warmup: int = 2) -> int | None:
    """Steps 1..`steps` of a job whose warm-up ends at `warmup`: the step the alternation ended the process at."""
    for count in range(1, steps + 1):
        devices.run_step()
        if count >= warmup and alternation.step(count, count - warmup):
            return count
    return None


def test_blocks_alternate_in_pairs_whose_order_flips_and_time_only_their_steps_after_the_skipped_ones():
    devices = Devices({C: 1.0, D: 2.0})
    alternation = Alternator(plan(max_pairs=2), devices, capture=lambda: "figures")
    ended = drive(alternation, devices, 100)
    # blocks of 5 from the end of the warm-up (step 2): C D | D C, then the stop at the next boundary
    assert [b.candidate for b in alternation.blocks] == [True, False, False, True]
    assert [b.steps for b in alternation.blocks] == [3, 3, 3, 3]
    assert [b.seconds for b in alternation.blocks] == [3.0, 6.0, 6.0, 3.0]
    assert alternation.log_ratios() == pytest.approx([math.log(0.5)] * 2)
    assert ended == 2 + 4 * 5 and alternation.end is AlternationEnd.MAX_PAIRS
    # a switch at every block's start but the first (the same setting again included); the last, the candidate's,
    # stays
    assert devices.switches == [D, D, C] and devices.setting == C


def test_the_first_block_runs_as_the_process_started_its_cache_not_emptied():
    """An empty_cache before the candidate's first block would change the memory figures the process reports."""
    devices = Devices({C: 1.0, D: 1.0})
    switched_at = []
    devices.switch = lambda setting: switched_at.append((devices.now, setting))   # type: ignore[method-assign]
    alternation = Alternator(plan(max_pairs=1), devices, capture=lambda: switched_at.copy())
    drive(alternation, devices, 100)
    assert alternation.captured == [] and switched_at[0] == (2 + 5, D)   # the first switch: block 1, the other


def test_the_memory_figures_are_taken_once_at_the_first_switch_to_the_other_setting():
    devices = Devices({C: 1.0, D: 1.0})
    taken = []
    alternation = Alternator(plan(max_pairs=3), devices, capture=lambda: taken.append(devices.now) or "own part")
    drive(alternation, devices, 100)
    assert alternation.captured == "own part" and taken == [2 + 5]   # the end of block 0, the candidate's


def test_it_stops_once_the_pairs_time_the_ratio_to_the_target_and_not_before_min_pairs():
    devices = Devices({C: 1.0, D: 1.03})   # no spread between pairs: resolved as soon as there are enough
    alternation = Alternator(plan(min_pairs=4), devices, capture=lambda: None)
    ended = drive(alternation, devices, 1000)
    assert alternation.end is AlternationEnd.RESOLVED and len(alternation.blocks) == 8 and ended == 2 + 8 * 5
    assert finished(alternation).blocks == alternation.blocks


def test_the_stop_rule_is_a_normal_interval_on_the_mean_log_ratio():
    assert not resolved([0.01, 0.02], target=0.01, min_pairs=3)
    assert resolved([0.01, 0.011, 0.012], target=0.01, min_pairs=3)
    spread = [0.0, 0.1] * 5   # standard error 0.0167: ±3.3%, not within ±1%
    assert not resolved(spread, target=0.01, min_pairs=3) and resolved(spread, target=0.04, min_pairs=3)


def test_time_spent_stops_it_with_what_it_timed():
    devices = Devices({C: 1.0, D: 1.0})
    alternation = Alternator(plan(min_pairs=100, max_seconds=25), devices, capture=lambda: None)
    drive(alternation, devices, 1000)
    assert alternation.end is AlternationEnd.MAX_SECONDS and len(alternation.blocks) == 6


def test_a_switch_torch_does_not_take_ends_the_alternation_and_the_run_goes_on_under_the_candidate():
    devices = Devices({C: 1.0, D: 1.0}, refused=(D,))
    alternation = Alternator(plan(), devices, capture=lambda: None)
    assert drive(alternation, devices, 100) is None   # it never ends the process itself
    assert alternation.end is AlternationEnd.SWITCH_FAILED and "did not take effect" in (alternation.note or "")
    assert alternation.blocks == [] and devices.setting == C and not alternation.active
    assert finished(alternation).end is AlternationEnd.SWITCH_FAILED


def test_a_job_that_ends_first_keeps_its_whole_pairs():
    devices = Devices({C: 1.0, D: 2.0})
    alternation = Alternator(plan(min_pairs=100), devices, capture=lambda: None)
    drive(alternation, devices, 2 + 2 * 5 + 3)   # C D, then part of a block of D, where the job ends
    assert devices.setting == D
    record = finished(alternation)   # the report reads the settings back under the candidate
    assert record.end is AlternationEnd.JOB_ENDED and len(record.blocks) == 2 and devices.setting == C


def test_every_process_ends_at_the_step_the_first_one_proposed(tmp_path):
    fast, slow = Devices({C: 1.0, D: 1.01}), Devices({C: 1.0, D: 1.0})
    proposer = Alternator(plan(min_pairs=2), fast, lambda: None, SharedStop(str(tmp_path)))
    follower = Alternator(plan(min_pairs=100), slow, lambda: None, SharedStop(str(tmp_path)))
    ends = {}
    for count in range(1, 200):
        for name, alternation, devices in (("proposer", proposer, fast), ("follower", follower, slow)):
            devices.run_step()
            if name not in ends and count >= 2 and alternation.step(count, count - 2):
                ends[name] = count
    assert ends["proposer"] == ends["follower"] == 2 + 4 * 5 + AHEAD_STEPS
    assert proposer.end is AlternationEnd.RESOLVED and follower.end is AlternationEnd.AGREED
    assert fast.setting == C and slow.setting == C


class Job:
    """counting.Job's stand-in: synchronisations read the devices' clock; `finish` ends the 'process'."""

    def __init__(self, devices: Devices):
        self.devices = devices

    def synced(self) -> float:
        return self.devices.now

    def reserved_peak(self):
        return None

    def memory(self):
        return None

    def finish(self) -> None:
        raise Finished


class Finished(Exception):
    pass


class SGD:
    pass


def steps_until_finished(counter: Counter, devices: Devices) -> int:
    """Optimizer steps of a job whose counter ends the process (`Finished`): how many ran."""
    opt = SGD()
    for steps in range(1, 1001):
        devices.run_step()
        try:
            counter.optimizer_step(opt)
        except Finished:
            return steps
    raise AssertionError("the counter never ended the process")


def test_the_counter_tells_it_every_step_after_the_warm_up_and_ends_the_process_when_it_says_so(tmp_path):
    devices = Devices({C: 1.0, D: 1.5})
    alternation = Alternator(plan(max_pairs=1), devices, lambda: None)
    counter = Counter(Job(devices), warmup=3, alternation=alternation,
                      early=SharedStop(str(tmp_path)))   # the automatic window waits for the alternation
    assert steps_until_finished(counter, devices) == 3 + 2 * 5 and counter.auto_ended
    assert [b.candidate for b in alternation.blocks] == [True, False]


def test_its_first_block_begins_after_the_step_of_the_replayed_peak(tmp_path):
    """With `peak_step` past the warm-up, the process runs on under its own setting until that step has ended;
    the memory figures taken at the first switch (at step 25: each step takes 1 s under the candidate) then cover
    the peak."""
    devices = Devices({C: 1.0, D: 1.5})
    taken: list[float] = []
    alternation = Alternator(plan(max_pairs=1), devices, lambda: taken.append(devices.now))
    counter = Counter(Job(devices), warmup=3, alternation=alternation, early=SharedStop(str(tmp_path)), peak_step=20)
    assert steps_until_finished(counter, devices) == 20 + 2 * 5
    assert taken == [25.0] and devices.switches == [D, C]
    assert [b.candidate for b in alternation.blocks] == [True, False]
