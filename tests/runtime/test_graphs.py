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
