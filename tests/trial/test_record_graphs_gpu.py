"""`record -- CMD` of jobs that capture CUDA graphs, on a real GPU (a CPU build cannot capture): the start-up hook
notes each capture's begin, end and release (runtime/graphs.py), the trace places them as pool events, and the
replay of the recording's own setting gives the peak the job measured."""
from __future__ import annotations

import sys

import pytest
import torch

from alloctune.settings.conf import AllocConf
from alloctune.sim.simulate import simulate
from alloctune.sim.trace import EMPTY_CACHE, POOL_BEGIN, POOL_END, POOL_RELEASE, POOL_STREAM
from alloctune.trial.recording import record_command

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

GRAPHS = """
import gc
import torch
x = torch.randn(4096, 4096, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):   # warm up off the capture, as torch's docs ask
    y = (x @ x).relu()
torch.cuda.current_stream().wait_stream(side)
first, second = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
with torch.cuda.graph(first):
    a = (x @ x).relu()
    b = a @ a
with torch.cuda.graph(second, pool=first.pool()):   # shares the first graph's pool
    c = (b + 1) @ x
first.replay(); second.replay()
torch.cuda.synchronize()
first.reset()            # released now
del second, a, b, c
gc.collect()             # released at its death
torch.cuda.empty_cache()
z = torch.empty(300 * 2**20, dtype=torch.uint8, device="cuda")
"""

COMPILED = """
import torch
step = torch.compile(lambda x: (x @ x).sin() * 2, mode="reduce-overhead")
for n in (256, 512, 256, 512, 256, 512):   # two shapes: two graphs in cudagraph trees' one pool
    for _ in range(3):
        y = step(torch.randn(n, n, device="cuda"))
torch.cuda.synchronize()
"""


def _recorded(tmp_path, text):
    script = tmp_path / "job.py"
    script.write_text(text)
    ((_, trace),) = record_command([sys.executable, str(script)], tmp_path / "job.pickle")
    return trace


def test_captures_of_torch_cuda_graph_with_a_shared_pool_are_recorded_and_replayed(tmp_path):
    trace = _recorded(tmp_path, GRAPHS)
    kinds = trace.kinds
    assert len(trace.meta["pools"]) == 1
    assert (kinds.count(POOL_BEGIN), kinds.count(POOL_END), kinds.count(POOL_RELEASE)) == (2, 2, 2)
    assert kinds.count(POOL_STREAM) == 1   # both captures on torch.cuda.graph's one capture stream
    assert kinds[kinds.index(POOL_BEGIN) - 1] == EMPTY_CACHE   # torch.cuda.graph empties the cache first
    assert kinds.index(POOL_RELEASE) < len(kinds) - 1 - kinds[::-1].index(EMPTY_CACHE)
    measured = trace.meta["measured"][0]
    replayed = simulate(trace, AllocConf.parse(measured["conf"]), trace.meta["device_total_bytes"],
                        overhead_bytes=trace.meta["overhead_bytes"], torch_version=trace.meta["torch_version"])
    assert replayed.peak_reserved_bytes == measured["peak_reserved_bytes"]


def test_cudagraph_trees_warm_up_and_record_into_one_pool(tmp_path):
    trace = _recorded(tmp_path, COMPILED)
    assert len(trace.meta["pools"]) == 1
    assert trace.kinds.count(POOL_BEGIN) >= 4   # the keep-alive graph, warm-ups and two recordings
    measured = trace.meta["measured"][0]
    replayed = simulate(trace, AllocConf.parse(measured["conf"]), trace.meta["device_total_bytes"],
                        overhead_bytes=trace.meta["overhead_bytes"], torch_version=trace.meta["torch_version"])
    assert replayed.peak_reserved_bytes == measured["peak_reserved_bytes"]
