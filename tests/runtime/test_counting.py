"""The step counter the start-up hook runs inside a job (`runtime/counting.py`), with a stand-in for the process:
which source it follows, where the timed window starts, the growth samples, the --steps window's 80% and end
readings, and the end itself. The same counter in real processes is tests/trial/test_window.py."""
from __future__ import annotations

import gc
import os
import time

import pytest

from alloctune.results.records import ThroughputSource
from alloctune.runtime import counting
from alloctune.runtime.counting import Counter, leader
from alloctune.runtime.peaks import StepCount
from alloctune.runtime.stopping import AHEAD_STEPS, SharedStop
from alloctune.trial.job import rising


class Job:
    """A stand-in process: each synchronisation and reading is logged with the step count at that moment;
    `finish` ends the 'process' by raising, as os._exit would stop the step."""

    def __init__(self, reserved=(), memory=(5, 3), clock=None):
        self.log: list[str] = []
        self.reserved = list(reserved)
        self.mem = memory
        self.clock = 100.0
        self.time = clock   # a Clock: synchronisations read it

    def synced(self) -> float:
        self.clock += 1
        self.log.append("sync")
        return self.time.now if self.time is not None else self.clock

    def reserved_peak(self):
        self.log.append("peak")
        return self.reserved.pop(0) if self.reserved else None

    def memory(self):
        self.log.append("memory")
        return self.mem

    def finish(self) -> None:
        self.log.append("finish")
        raise Finished


class Finished(Exception):
    pass


class Adam:
    pass


class SGD:
    pass


def test_the_window_starts_at_the_end_of_the_warm_up_step_after_a_synchronisation():
    job = Job()
    counter = Counter(job, warmup=3)
    opt = SGD()
    for _ in range(5):
        counter.optimizer_step(opt)
    assert job.log == ["sync"]   # once, at step 3; nothing else without a window or growth check
    (count,) = counter.at_exit(synced=250.0)
    assert count == StepCount(ThroughputSource.OPTIMIZER_STEPS, "SGD", 5, 3, start=101.0, last=count.last,
                              end=250.0)
    assert count.last is not None and count.last > 0


@pytest.mark.parametrize("warmup", [0, 1])
def test_the_warm_up_is_at_least_one_step(warmup):
    counter = Counter(Job(), warmup=warmup)
    counter.optimizer_step(SGD())
    assert counter.at_exit(None)[0].start is not None and counter.at_exit(None)[0].warmup == 1


def test_the_window_follows_the_optimizer_that_steps_most_and_ties_go_to_the_first_seen():
    """A GAN: the discriminator steps twice per generator step; then one that steps in turn with another."""
    job = Job(reserved=[10, 12])
    counter = Counter(job, warmup=1, window=5)
    d, g = Adam(), SGD()
    with pytest.raises(Finished):
        while True:
            counter.optimizer_step(d)
            counter.optimizer_step(d)
            counter.optimizer_step(g)
    counts = {c.name: c.count for c in counter.at_exit(None)}
    assert counts == {"Adam": 6, "SGD": 2}   # ended at the discriminator's step 1 + 5
    assert counter.window_reserved == [10, 12] and rising(counter.window_reserved) is True

    job = Job()
    counter = Counter(job, warmup=1, window=3)
    first, second = SGD(), Adam()
    with pytest.raises(Finished):
        while True:
            counter.optimizer_step(first)
            counter.optimizer_step(second)
    assert [(c.name, c.count) for c in counter.at_exit(None)] == [("SGD", 4), ("Adam", 3)]


def test_the_80_percent_reading_and_the_end_of_a_window():
    job = Job(reserved=[7, 7])
    counter = Counter(job, warmup=2, window=10)
    opt = SGD()
    steps = 0
    with pytest.raises(Finished):
        while True:
            counter.optimizer_step(opt)
            steps += 1
            job.log.append(f"step {steps}")
    # warm-up sync after step 2; 80% of 10 steps at step 2 + 8; then the end at step 12: sync, peak, finish
    assert job.log[:4] == ["step 1", "sync", "step 2", "step 3"]
    assert job.log[job.log.index("step 9"):] == ["step 9", "peak", "step 10", "step 11", "sync", "peak", "finish"]
    (count,) = counter.at_exit(synced=None)
    assert count.count == 12 and count.end is not None and count.end > count.start
    assert counter.window_reserved == [7, 7] and rising(counter.window_reserved) is False


def test_a_one_step_window_reads_its_80_percent_at_the_warm_up_step():
    job = Job(reserved=[1, 2])
    counter = Counter(job, warmup=2, window=1)
    opt = SGD()
    with pytest.raises(Finished):
        for _ in range(5):
            counter.optimizer_step(opt)
    assert job.log == ["sync", "peak", "sync", "peak", "finish"]


def test_without_cuda_a_window_still_ends_and_reads_no_peaks():
    job = Job(reserved=[])   # reserved_peak: None, as without CUDA
    counter = Counter(job, warmup=1, window=2)
    with pytest.raises(Finished):
        for _ in range(10):
            counter.optimizer_step(SGD)
    assert counter.window_reserved is None and rising(None) is None


def test_growth_samples_at_k_and_2k_of_the_followed_source():
    job = Job(memory=(300, 200))
    counter = Counter(job, warmup=1, growth=4)
    opt = SGD()
    for _ in range(10):
        counter.optimizer_step(opt)
    assert counter.growth_samples == [[4, 300, 200], [8, 300, 200]]


def test_marks_come_first_then_step_on_calls_then_optimizers():
    job = Job()
    counter = Counter(job, warmup=1, window=2, call_name="pkg.mod:run")
    opt = SGD()
    for _ in range(5):   # --step-on asked: the calls are followed, even before the first one
        counter.optimizer_step(opt)
    counter.call()
    counter.call()
    with pytest.raises(Finished):
        counter.call()
    assert [(c.source, c.name, c.count) for c in counter.at_exit(None)] == [
        (ThroughputSource.OPTIMIZER_STEPS, "SGD", 5), (ThroughputSource.STEP_CALLS, "pkg.mod:run", 3)]

    counter = Counter(Job(), warmup=1, window=2)
    counter.mark()
    for _ in range(5):   # marks seen: they are followed
        counter.optimizer_step(opt)
        counter.call()
    counter.mark()
    with pytest.raises(Finished):
        counter.mark()


def test_leader():
    counts = [StepCount(ThroughputSource.OPTIMIZER_STEPS, name, n, 1) for name, n in (("a", 3), ("b", 5), ("c", 5))]
    assert leader(counts).name == "b" and leader([]) is None


def test_step_ends_are_the_followed_sources_in_unix_microseconds():
    """What a recording keeps to place the steps among its entries (whose time_us is Unix time in µs): the end of
    each step of the source followed, the optimizer that stepped most, then the marks once there are any."""
    before = time.time_ns() // 1000
    counter = Counter(Job(), warmup=1, ends=True)
    sgd, adam = SGD(), Adam()
    counter.optimizer_step(sgd)
    for _ in range(3):
        counter.optimizer_step(adam)
    ends = counter.step_ends_us()
    assert len(ends) == 3 and ends == sorted(ends) and before <= ends[0] <= time.time_ns() // 1000
    assert ends == counter.optimizers[id(adam)].ends_us
    counter.mark()
    assert counter.step_ends_us() == counter.marks.ends_us and len(counter.marks.ends_us) == 1
    assert Counter(Job(), warmup=1, ends=True).step_ends_us() == []


def test_without_recording_no_step_keeps_its_time():
    """Only a recording reads the step ends: a long job that records nothing keeps no list per step."""
    counter = Counter(Job(), warmup=1, call_name="pkg.mod:run")
    sgd = SGD()
    for _ in range(50):
        counter.optimizer_step(sgd)
        counter.call()
        counter.mark()
    assert [s.count for s in counter.sources] == [50, 50] and counter.marks.count == 50
    assert [s.ends_us for s in (*counter.sources, counter.marks)] == [[], [], []]
    assert counter.step_ends_us() == []


def test_optimizers_that_succeed_each_other_are_one_source():
    """A search loop: ten models one after another, a new optimizer each, eight steps each. Rebinding `opt` makes
    the new optimizer before the old one dies (at the rebinding, before the new one's first step)."""
    job = Job()
    counter = Counter(job, warmup=2, ends=True)
    opt = Adam()
    for trial in range(10):
        if trial:
            opt = SGD() if trial % 2 else Adam()
        for _ in range(8):
            counter.optimizer_step(opt)
    (count,) = counter.at_exit(synced=None)
    assert (count.name, count.count, count.warmup, count.optimizers) == ("Adam", 80, 2, 10)
    assert job.log == ["sync"] and len(counter.step_ends_us()) == 80


def test_an_optimizer_freed_only_by_a_collection_joins_the_chain_when_it_is_collected():
    counter = Counter(Job(), warmup=2, ends=True)
    old = Adam()
    old.cycle = old   # a reference cycle: only the garbage collector frees it
    for _ in range(8):
        counter.optimizer_step(old)
    new = Adam()
    gc.disable()   # no collection before the one below
    try:
        del old
        for _ in range(3):
            counter.optimizer_step(new)
        assert [c.count for c in counter.at_exit(None)] == [8, 3]   # the first still alive: two sources so far
        gc.collect()
    finally:
        gc.enable()
    counter.optimizer_step(new)
    (count,) = counter.at_exit(None)
    assert (count.count, count.warmup, count.optimizers) == (12, 2, 2)
    assert len(counter.step_ends_us()) == 12


def test_a_chain_whose_first_optimizers_stepped_less_than_the_warm_up_starts_its_time_in_a_later_one():
    job = Job()
    counter = Counter(job, warmup=5)
    for _ in range(4):
        opt = SGD()
        for _ in range(2):
            counter.optimizer_step(opt)
    (count,) = counter.at_exit(None)
    assert (count.count, count.warmup, count.optimizers, count.start) == (8, 5, 4, 101.0)


def test_optimizers_alive_and_stepping_at_once_stay_separate_sources():
    """A GAN (today's rule: the one that stepped most, the first on a tie), one made after the other had stepped,
    one kept alive but no longer stepped; and a GAN rebuilt per trial: each new pair continues the pair before it,
    in the order first seen."""
    counter = Counter(Job(), warmup=1)
    d = Adam()
    counter.optimizer_step(d)
    g = Adam()
    for _ in range(5):
        counter.optimizer_step(g)
        counter.optimizer_step(d)
    head = SGD()   # d and g stay alive (their names hold them) without stepping again
    for _ in range(3):
        counter.optimizer_step(head)
    assert [(c.count, c.optimizers) for c in counter.at_exit(None)] == [(6, 1), (5, 1), (3, 1)]

    counter = Counter(Job(), warmup=1)
    for trial in range(3):
        d, g = Adam(), SGD()
        for _ in range(4):
            counter.optimizer_step(d)
            counter.optimizer_step(d)
            counter.optimizer_step(g)
    assert [(c.name, c.count, c.optimizers) for c in counter.at_exit(None)] == [("Adam", 24, 3), ("SGD", 12, 3)]


class Clock:
    """Stand-in time for counting.py: each step takes `step` seconds, the i-th `jitter[i % len]` times that."""

    def __init__(self, step, jitter=(1.0,)):
        self.now, self.step, self.jitter, self.i = 0.0, step, jitter, 0

    def tick(self):
        self.now += self.step * self.jitter[self.i % len(self.jitter)]
        self.i += 1

    def perf_counter(self):
        return self.now

    def time_ns(self):
        return int(self.now * 1e9)


def _until_finished(counter, clock, limit=100_000):
    opt = SGD()
    for step in range(1, limit + 1):
        clock.tick()
        try:
            counter.optimizer_step(opt)
        except Finished:
            return step
    return None


@pytest.mark.parametrize("step_s, jitter, steady", [
    (1 / 128, (1.0,), 640),          # even steps: the 5 s of steady time decide
    (1.0, (1.0,), 20),               # slow steps: the 20 steady steps
    (0.01, (0.7, 1.3), 902),         # a 30% spread: the 1% error, 0.3/√(n-1) at an even n (as many short as long)
])
def test_the_automatic_window_ends_after_the_warm_up_and_enough_steady_steps(tmp_path, monkeypatch, step_s, jitter,
                                                                          steady):
    clock = Clock(step_s, jitter)
    monkeypatch.setattr(counting, "time", clock)
    job = Job(reserved=[9], clock=clock)
    counter = Counter(job, warmup=2, early=SharedStop(str(tmp_path)))
    steps = _until_finished(counter, clock)
    assert steps == 2 + steady + AHEAD_STEPS and counter.auto_ended
    assert SharedStop(str(tmp_path)).read() == steps and os.listdir(tmp_path) == ["stop-step"]
    (count,) = counter.at_exit(None)
    assert count.end == pytest.approx(clock.now) and count.start == pytest.approx(step_s * (jitter[0] + jitter[-1]))
    assert counter.window_reserved is None   # no 80% reading without --steps: nothing says whether it still rose


def test_the_automatic_window_does_not_end_before_the_step_of_the_replayed_peak(tmp_path, monkeypatch):
    """Slow steps meet the rule after 20 steady steps; a peak in step 60 keeps the process to it, so that the
    memory the confirmation measures covers the peak."""
    clock = Clock(1.0)
    monkeypatch.setattr(counting, "time", clock)
    counter = Counter(Job(reserved=[9], clock=clock), warmup=2, early=SharedStop(str(tmp_path)), peak_step=60)
    assert _until_finished(counter, clock) == 60 + AHEAD_STEPS and counter.auto_ended


def test_every_process_stops_at_the_step_the_first_one_proposed(tmp_path, monkeypatch):
    """A second rank reads the step agreed on, even before its own steps meet the rule; a --steps window that
    ends first ends it as before, and not as the automatic window."""
    assert SharedStop(str(tmp_path)).propose(40) == 40 and SharedStop(str(tmp_path)).propose(30) == 40
    clock = Clock(1.0)
    monkeypatch.setattr(counting, "time", clock)
    counter = Counter(Job(clock=clock), warmup=2, early=SharedStop(str(tmp_path)))
    assert _until_finished(counter, clock) == 40 and counter.auto_ended
    counter = Counter(Job(clock=clock), warmup=2, window=30, early=SharedStop(str(tmp_path)))
    assert _until_finished(counter, clock) == 32 and not counter.auto_ended


def test_without_steps_nothing_stops(tmp_path):
    counter = Counter(Job(), warmup=2, early=SharedStop(str(tmp_path)))
    assert counter.at_exit(None) == [] and counter.step_ends_us() == [] and os.listdir(tmp_path) == []
