"""What the start-up hook (`runtime/hook/sitecustomize.py`) does at the exit of a CUDA process, recording or not, in
a real subprocess with a stand-in for torch.cuda (no GPU here: the stand-in answers as a process that allocated
64 MiB on one device): it takes one allocator snapshot, which gives both the settings in force and, when recording,
the trace; and each step's Unix time is kept only when recording, where the trace places the steps."""
from __future__ import annotations

import json
import os
import pickle
import sys
import textwrap
from pathlib import Path

import pytest

from alloctune.settings.conf import AllocConf
from alloctune.trial.command import hook_environment, run_command
from alloctune.trial.task import child_environment

MiB = 2**20

# A real torch.optim loop on the CPU, in a process whose torch.cuda says it initialised: the stand-in logs each
# snapshot and history call to $CALLS (the hook's exit runs after the program's last line).
PROGRAM = """
import json, os, sys, types
import torch

cuda, MiB = torch.cuda, 2**20
def log(what):
    with open(os.environ["CALLS"], "a") as f:
        f.write(what + "\\n")
def snapshot():
    log("snapshot")
    return {"segments": [], "device_traces": [[]], "allocator_settings": {"expandable_segments": True}}
stats = {"reserved_bytes.all.peak": 64 * MiB, "allocated_bytes.all.peak": 40 * MiB}
cuda.is_initialized = lambda: True
cuda.is_current_stream_capturing = lambda: False
cuda.device_count = lambda: 1
cuda.current_device = lambda: 0
cuda.set_device = lambda device: None
cuda.synchronize = lambda device=None: None
cuda.memory_reserved = cuda.max_memory_reserved = lambda device=None: 64 * MiB
cuda.memory_allocated = lambda device=None: 40 * MiB
cuda.mem_get_info = lambda device=None: (100 * MiB, 1024 * MiB)
cuda.memory_stats = lambda device=None: dict(stats)
cuda.get_device_properties = lambda device: types.SimpleNamespace(total_memory=1024 * MiB, name="stand-in")
cuda.get_allocator_backend = lambda: "native"
cuda.memory._snapshot = snapshot
cuda.memory._record_memory_history = lambda enabled="all", **kwargs: log(f"history {enabled}")
cuda.pynvml = None
for call, _ in list(cuda._queued_calls):   # CUDA's lazy initialisation: what the hook queued runs now
    if getattr(call, "__qualname__", "").startswith("_safely"):
        call()

model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(int(sys.argv[1])):
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
import sitecustomize   # the hook, as the process imported it at start-up
counter = sitecustomize._state.counter
print(json.dumps({"started": sitecustomize._state.started,
                  "kept": [len(s.ends_us) for s in counter.sources]}))
"""


@pytest.mark.parametrize("record", [True, False])
def test_at_exit_one_snapshot_serves_settings_and_trace_and_step_times_are_kept_only_when_recording(tmp_path,
                                                                                                     record):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(PROGRAM))
    calls = tmp_path / "calls"
    env = hook_environment(child_environment(AllocConf.parse(""), None), "expandable_segments:True",
                           record=record, warmup_steps=1)
    run = run_command([sys.executable, str(script), "6"], dict(env, CALLS=str(calls)), None, 120,
                      str(tmp_path / "work"))
    err = Path(run.stderr).read_text()
    assert run.returncode == 0 and "alloctune hook" not in err, err
    seen = json.loads(Path(run.stdout).read_text().splitlines()[-1])
    assert seen == {"started": True, "kept": [6 if record else 0]}   # no list per step unless recording
    (proc,) = run.processes
    assert proc.cuda and [d.peak_reserved_bytes for d in proc.devices] == [64 * MiB]
    assert proc.effective_conf == "expandable_segments:True" and proc.mismatch is None   # read from the snapshot
    trace = tmp_path / "work" / "procs" / f"trace-{proc.pid}.pickle"
    if record:
        assert calls.read_text().splitlines() == ["history all", "snapshot", "history None"]
        snapshot = pickle.loads(trace.read_bytes())
        assert snapshot["allocator_settings"] == {"expandable_segments": True}
        ends = snapshot["alloctune"]["step_ends_us"]
        assert len(ends) == 6 and ends == sorted(ends) and snapshot["alloctune"]["warmup_steps"] == 1
    else:
        assert calls.read_text().splitlines() == ["snapshot"]   # the settings' own
        assert not os.path.exists(trace)
