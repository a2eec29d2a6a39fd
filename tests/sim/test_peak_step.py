"""The step of the peak (SimResult.steps_before_peak): the step ends passed when a replay first reached its peak
reserved, read at every step end by both cores, and kept in the replayed trial's measurement; None without step
marks, or when the replay ended early."""
from __future__ import annotations

import pytest

from alloctune.settings.conf import AllocConf
from alloctune.sim.replay import replay
from alloctune.sim.simulate import core_notice, simulate
from alloctune.sim.steady import steady_window
from alloctune.sim.trace import ALLOC, FREE, Trace

MiB = 2**20
DEVICE = 1 << 40
CORES = ["python", pytest.param("compiled", marks=pytest.mark.skipif(core_notice() is not None,
                                                                      reason="the compiled core is not built"))]


def stepped(steps: list[int], teardown: int | None = None) -> Trace:
    """Step k allocates steps[k] MiB and frees it, the teardown after the last step `teardown` MiB. Under the default
    a freed segment stays cached and serves any smaller request: reserved grows only when a request outgrows them
    all, by a segment of its size."""
    kinds, addrs, sizes = [], [], []
    for i, mib in enumerate(steps + ([] if teardown is None else [teardown])):
        kinds += [ALLOC, FREE]
        addrs += [i, i]
        sizes += [mib * MiB] * 2
    return Trace(kinds, addrs, sizes, [0] * len(kinds),
                 meta={"step_ends": [2 * (k + 1) for k in range(len(steps))], "warmup_steps": 1})


def peak_step(trace: Trace, core: str, device: int = DEVICE, **kw) -> int | None:
    return simulate(trace, AllocConf.parse(""), device, core=core, window=steady_window(trace.meta),
                    step_ends=trace.meta.get("step_ends"), **kw).steps_before_peak


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("steps, teardown, before", [
    ([100, 60, 80], None, 0),   # the first step's 100 MiB serves the rest
    ([60, 80, 70], None, 1),    # 80 MiB beside the cached 60; the 80 serves the 70
    ([60, 70, 80], None, 2),    # each step a new segment: the peak in the last
    ([60, 80, 70], 90, 3),      # the teardown's 90 MiB: after the last step's end
])
def test_the_steps_ended_before_the_peak(core, steps, teardown, before):
    trace = stepped(steps, teardown)
    assert peak_step(trace, core) == before
    outcome, = replay(trace, [""], DEVICE, jobs=1)   # the replayed trial's record carries it
    measurement = outcome.measurement()
    assert measurement is not None and measurement.steps_before_peak == before


@pytest.mark.parametrize("core", CORES)
def test_without_step_marks_or_a_replay_to_the_end_there_is_none(core):
    unmarked = stepped([60, 80, 70])
    unmarked.meta.clear()
    assert peak_step(unmarked, core) is None
    oom = stepped([60, 120])   # 180 MiB on a 100 MiB device, or 120 alone after the retry: an OOM in step 2
    assert peak_step(oom, core, device=100 * MiB) is None
    assert peak_step(stepped([60, 80]), core, device=100 * MiB, stop_at_retry=True) is None
    assert peak_step(stepped([60, 80]), core, device=100 * MiB) == 1   # the same, replayed past its retry


@pytest.mark.parametrize("step_ends", [[4, 2], [2, 7]])
def test_step_ends_out_of_order_or_past_the_trace_are_refused(step_ends):
    with pytest.raises(ValueError, match="step ends"):
        simulate(stepped([60, 80, 70]), AllocConf.parse(""), DEVICE, step_ends=step_ends)
