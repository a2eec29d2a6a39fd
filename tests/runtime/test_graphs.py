"""The hook's CUDA-graph watch (`runtime/graphs.py`) inside a program: a capture is noted with its pool, taken at the
capture's end where torch answers `pool()` only after a successful capture (torch 2.11 raises before: seen on the
H200, where the first version broke every graph job it recorded), and nothing the watch does raises into the
program. In a fresh interpreter with stand-ins for CUDAGraph and torch.cuda (no GPU here): the patches are global."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from clirun import ROOT

PROGRAM = r'''
import json, sys, types
import torch
from alloctune.runtime import graphs

class CUDAGraph:                      # as torch 2.11's: pool() only after a successful capture
    def __init__(self): self.captured, self.handle = False, (7, 1)
    def capture_begin(self, pool=None, capture_error_mode="global"): self.handle = pool or self.handle
    def capture_end(self): self.captured = True
    def reset(self): pass
    def pool(self):
        if not self.captured:
            raise RuntimeError("Called CUDAGraph::pool() without a preceding successful capture.")
        return self.handle

class graph:
    def __enter__(self): return self
module = types.SimpleNamespace(CUDAGraph=CUDAGraph, graph=graph)
stream = types.SimpleNamespace(cuda_stream=42)
torch.cuda.current_stream = lambda: stream
torch.cuda.current_device = lambda: 0
graphs.watch_graphs(module)

g = CUDAGraph(); g.capture_begin(); g.capture_end()            # a new pool: known at the end
h = CUDAGraph(); h.capture_begin((3, 4)); h.capture_end()       # a shared handle, given to the begin
torch.cuda.current_stream = None                                # a torch whose API differs: the watch stays quiet
k = CUDAGraph(); k.capture_begin(); k.capture_end()
print(json.dumps([(e["action"], e["pool"], e["stream"]) for e in graphs.events()]))
'''


def test_a_capture_is_noted_with_its_pool_and_a_failing_note_never_reaches_the_program():
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [
        ["begin", [7, 1], 42], ["end", [7, 1], 42], ["begin", [3, 4], 42], ["end", [3, 4], 42]]


RESTORE = r'''
import json, time, torch
from alloctune.runtime import graphs

class State: pass
made = []
def get(device, pool):
    made.append(State()); return made[-1]
def restore(device, state, stale, deleters):
    time.sleep(0.002)   # the allocations it makes lie inside
torch._C._cuda_getCheckpointState, torch._C._cuda_setCheckpointPoolState = get, restore
early = torch._C._cuda_getCheckpointState(0, (5, 2))   # taken before the watch: its pool is not known
graphs._patch_pool_calls(torch._C)
t0 = time.time_ns() // 1000
state = torch._C._cuda_getCheckpointState(0, (5, 2))
torch._C._cuda_setCheckpointPoolState(0, state, [], [])
t1 = time.time_ns() // 1000
torch._C._cuda_setCheckpointPoolState(0, early, [], [])
print(json.dumps({"events": graphs.events(), "t0": t0, "t1": t1}))
'''


def test_a_checkpoint_restore_is_noted_around_the_call_with_the_pool_it_was_taken_from():
    done = subprocess.run([sys.executable, "-c", RESTORE], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    events = out["events"]
    assert [(e["action"], e["pool"], e["stream"]) for e in events] == [
        ("begin", [5, 2], None), ("end", [5, 2], None), ("release", [5, 2], None)]
    begin, end, _ = (e["time_us"] for e in events)
    assert out["t0"] - 1 <= begin and end - begin >= 2000 and end <= out["t1"]
