"""Feature observation (`runtime/features.py`, `runtime/observation.py`; the features it shows, `trial/features.py`)
in real subprocesses with real torch (the CPU build): every process starts with a sitecustomize that calls
`features.install()` and writes `observed()` at exit, as the start-up hook will. What the CPU build cannot
exercise is said where it matters: a CUDA tensor sent between processes (here CPU tensors go through the same
reducers, counted under 'cpu'), an actual graph capture (the wrapper is called and the CPU build's own error comes
through), NCCL, and the environment at CUDA initialisation; tests/runtime/test_features_gpu.py covers those on a
GPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from alloctune.settings.known import Feature
from alloctune.runtime.observation import Observation
from alloctune.results.typed import from_json
from alloctune.trial.features import used, used_by_job

ROOT = Path(__file__).resolve().parents[2]

SITECUSTOMIZE = """\
import atexit, json, os
from alloctune.runtime import features
features.install()

@atexit.register
def _write():
    with open(os.path.join(os.environ["FEATURES_OUT"], f"{os.getpid()}.json"), "w") as f:
        json.dump(features.observed(), f)
"""


def _run(tmp_path, program, env=None, sitecustomize=SITECUSTOMIZE, timeout=240):
    """Run `program` as a job whose every Python process installs the watch; the records of its processes,
    by pid, and the job's output."""
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(program))
    return run_job(tmp_path, [str(job)], env, sitecustomize, timeout)


def run_job(tmp_path, argv, env=None, sitecustomize=SITECUSTOMIZE, timeout=240):
    """`python argv...` with the watch in every Python process: the records by pid, and the job's output."""
    site, out = tmp_path / "site", tmp_path / "out"
    site.mkdir(exist_ok=True)
    out.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(sitecustomize)
    base = {k: v for k, v in os.environ.items() if not k.endswith("ALLOC_CONF") and not k.startswith("NCCL_")}
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
                          env={**base, **(env or {}), "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
                               "FEATURES_OUT": str(out)})
    assert done.returncode == 0, done.stderr[-3000:]
    records = {int(p.stem): from_json(Observation, json.loads(p.read_text()), str(p)) for p in out.glob("*.json")}
    return records, done.stdout


def _main(records, stdout):
    """The record of the job's main process (it prints its pid first)."""
    return records[int(stdout.split()[0])]


def test_install_imports_no_torch_and_a_job_without_torch_shows_nothing(tmp_path):
    records, stdout = _run(tmp_path, """
        import os, sys
        print(os.getpid(), "torch" in sys.modules)
    """)
    assert stdout.split()[1] == "False"
    record = _main(records, stdout)
    assert record == Observation() and used(record) == frozenset()


@pytest.mark.slow
def test_cpu_tensors_sent_through_a_torch_multiprocessing_queue_are_counted_on_both_sides(tmp_path):
    """Queues pickle tensors with the reducers torch registers, which are the wrapped functions: the producer
    counts a send, the spawned consumer (a fresh interpreter, watched from its own start) a receipt. CPU tensors
    only here: CUDA tensors take rebuild_cuda_tensor on the receiving side, which only a GPU exercises."""
    records, stdout = _run(tmp_path, """
        import os
        import torch
        import torch.multiprocessing as mp

        def consume(queue, done):
            done.put(float(queue.get().sum()))

        if __name__ == "__main__":
            print(os.getpid())
            ctx = mp.get_context("spawn")
            queue, done = ctx.Queue(), ctx.Queue()
            worker = ctx.Process(target=consume, args=(queue, done))
            worker.start()
            queue.put(torch.ones(4))
            print(done.get(timeout=120))
            worker.join()
    """)
    producer = _main(records, stdout)
    (consumer,) = [r for pid, r in records.items() if r is not producer and r.ipc_received]
    assert stdout.split()[1] == "4.0"
    assert producer.ipc_sent == {"cpu": 1} and producer.ipc_received == {}
    assert consumer.ipc_received == {"cpu": 1}
    assert Feature.CUDA_IPC not in used_by_job(records.values())   # CPU sharing is not CUDA IPC


def test_a_late_install_still_sees_sends(tmp_path):
    """torch imported before the watch (a user's sitecustomize that imports torch first): the reducers torch
    registered at its import are swapped for the wrappers."""
    records, stdout = _run(tmp_path, """
        import os, pickle
        from multiprocessing.reduction import ForkingPickler
        import torch
        from alloctune.runtime import features
        features.install()
        ForkingPickler.dumps(torch.zeros(2))
        print(os.getpid(), features.observed()["ipc_sent"])
    """, sitecustomize="")
    assert stdout.split(maxsplit=1)[1].strip() == "{'cpu': 1}"


def test_a_run_time_change_of_allocator_settings_is_recorded_in_order(tmp_path):
    records, stdout = _run(tmp_path, """
        import os, warnings
        import torch
        print(os.getpid())
        torch._C._accelerator_setAllocatorSettings("max_split_size_mb:64")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)   # 2.13 deprecates the torch.cuda spelling
            torch.cuda.memory._set_allocator_settings("expandable_segments:True")
        torch._C._accelerator_setAllocatorSettings("max_split_size_mb:64")
        print(torch._C._accelerator_getAllocatorSettings())
    """)
    record = _main(records, stdout)
    assert stdout.split()[1] == "max_split_size_mb:64"   # the call went through: torch parsed it
    assert record.allocator_changes == ("max_split_size_mb:64", "expandable_segments:True")
    assert Feature.RUNTIME_ALLOCATOR_CHANGE in used(record)


@pytest.mark.slow
def test_torch_compile_asking_for_cuda_graphs_is_recorded_and_cpu_captures_none(tmp_path):
    """mode='reduce-overhead' asks inductor for CUDA graphs; on CPU tensors inductor leaves them out, so no
    capture happens (on a GPU the capture goes through CUDAGraph.capture_begin: test_features_gpu.py)."""
    records, stdout = _run(tmp_path, """
        import os
        import torch
        print(os.getpid())
        step = torch.compile(lambda x: torch.sin(x) * 2, mode="reduce-overhead")
        print(float(step(torch.zeros(8)).sum()))
        torch.compile(lambda x: x + 1, backend="eager")
    """)
    record = _main(records, stdout)
    assert stdout.split()[1] == "0.0"
    assert [(c.mode, c.cudagraphs) for c in record.compile_calls] == [("reduce-overhead", True), (None, False)]
    assert record.compile_calls[1].backend == "eager" and record.inductor_cudagraphs is False
    assert record.graph_captures == 0
    assert used(record) & {Feature.COMPILE_CUDAGRAPHS, Feature.CUDA_GRAPHS} == {Feature.COMPILE_CUDAGRAPHS}


def test_graph_capture_and_pool_wrappers_note_the_call_and_let_torchs_own_error_through(tmp_path):
    """The CPU build has no CUDA graphs or pools: it cannot even make a CUDAGraph or a MemPool (their dummy
    base classes refuse before __init__), so both capture_begin methods (torch.cuda's and torch.accelerator's)
    are called on stand-in objects, and MemPools are counted only on a GPU. The wrappers note the attempt first (a capture that crashes under a setting is what
    the record must show) and raise what the original raises."""
    records, stdout = _run(tmp_path, """
        import os, types
        import torch
        print(os.getpid())
        errors = []
        for call in (torch.cuda.graph_pool_handle, torch.cuda.graph_pool_handle.__wrapped__,
                     lambda: torch.cuda.CUDAGraph.capture_begin(types.SimpleNamespace(), pool=(0, 1)),
                     lambda: torch.cuda.CUDAGraph.capture_begin.__wrapped__(types.SimpleNamespace()),
                     lambda: torch.accelerator.Graph.capture_begin(types.SimpleNamespace(graph_pool=(0, 1))),
                     lambda: torch.cuda.use_mem_pool(None).__enter__(), torch.cuda.MemPool):
            try:
                call()
            except Exception as exc:
                errors.append(type(exc).__name__)
        print(",".join(errors))
    """)
    record = _main(records, stdout)
    assert stdout.split()[1] == ("RuntimeError,RuntimeError,AttributeError,AttributeError,TypeError,"
                                 "AssertionError,RuntimeError")
    assert (record.graph_pool_handles, record.graph_captures, record.graph_captures_shared_pool) == (1, 2, 2)
    assert (record.mem_pool_uses, record.mem_pools) == (1, 0)
    assert record.failures == ()
    assert used(record) >= {Feature.CUDA_GRAPHS, Feature.GRAPH_SHARED_POOL, Feature.MEM_POOL}


def test_wrappers_keep_signatures_names_and_results(tmp_path):
    records, stdout = _run(tmp_path, """
        import inspect, json, os
        import torch, torch.distributed as dist
        from torch.multiprocessing import reductions
        wrapped = {"compile": torch.compile, "init_process_group": dist.init_process_group,
                   "new_group": dist.new_group, "capture_begin": torch.cuda.CUDAGraph.capture_begin,
                   "reduce_tensor": reductions.reduce_tensor, "rebuild_cuda_tensor": reductions.rebuild_cuda_tensor,
                   "use_mem_pool": torch.cuda.use_mem_pool}
        same = {name: (f.__alloctune_wrapped__, f.__name__ == name,
                       str(inspect.signature(f)) == str(inspect.signature(f.__wrapped__)))
                for name, f in wrapped.items()}
        fn, args = reductions.reduce_tensor(torch.arange(3.0))
        print(os.getpid(), json.dumps({"same": same, "rebuilt_by_wrapper": fn is reductions.rebuild_tensor,
                                       "equal": bool((fn(*args) == torch.arange(3.0)).all())}))
    """)
    result = json.loads(stdout.split(maxsplit=1)[1])
    assert all(all(checks) for checks in result["same"].values()), result
    assert result["rebuilt_by_wrapper"] and result["equal"]
    record = _main(records, stdout)
    assert record.ipc_sent == {"cpu": 1} and record.ipc_received == {"cpu": 1}


def test_a_gloo_process_group_is_recorded_as_gloo_not_nccl(tmp_path):
    records, stdout = _run(tmp_path, f"""
        import os
        import torch.distributed as dist
        print(os.getpid())
        dist.init_process_group("gloo", init_method="file://{tmp_path / 'rendezvous'}", world_size=1, rank=0)
        dist.new_group([0])
        dist.destroy_process_group()
    """, env={"NCCL_GRAPH_REGISTER": "1"})
    record = _main(records, stdout)
    assert record.process_groups == ("gloo", "gloo") and record.nccl_env is None
    assert not used(record) & {Feature.NCCL, Feature.NCCL_GRAPH_REGISTRATION, Feature.NCCL_USER_BUFFERS}


@pytest.mark.parametrize("env, read, unread", [
    ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, "PYTORCH_CUDA_ALLOC_CONF", ()),
    ({"PYTORCH_ALLOC_CONF": "expandable_segments:True"}, "PYTORCH_ALLOC_CONF", ()),
    ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "PYTORCH_ALLOC_CONF": "max_split_size_mb:64"},
     "PYTORCH_CUDA_ALLOC_CONF", ("PYTORCH_ALLOC_CONF",)),
    ({}, None, ()),
])
def test_which_variable_this_torch_read(tmp_path, env, read, unread):
    """Without CUDA the environment at start-up decides (on a GPU: the one at CUDA initialisation)."""
    records, stdout = _run(tmp_path, """
        import os
        import torch
        print(os.getpid(), torch._C._accelerator_getAllocatorSettings() or "-")
    """, env=env)
    record = _main(records, stdout)
    assert (record.variable_read, record.unread_variables, record.alloc_conf_env) == (read, unread, env)
    if read:   # torch itself agrees on the value it took
        assert stdout.split()[1] == env[read]
    assert (Feature.UNREAD_VARIABLE in used(record)) == bool(unread)


def test_a_watch_that_cannot_be_installed_is_noted_and_the_program_runs_on(tmp_path):
    site = SITECUSTOMIZE.replace("features.install()",
                                 "features.PATCHES['torch.cuda.graphs'] = lambda m: m.no_such_api\n"
                                 "features.install()")
    records, stdout = _run(tmp_path, """
        import os
        import torch
        print(os.getpid(), float(torch.ones(2).sum()))
    """, sitecustomize=site)
    assert stdout.split()[1] == "2.0"
    (failure,) = _main(records, stdout).failures
    assert failure.startswith("torch.cuda.graphs: AttributeError")


def test_a_forked_child_starts_its_own_record(tmp_path):
    records, stdout = _run(tmp_path, """
        import os, pickle
        from multiprocessing.reduction import ForkingPickler
        import torch
        from alloctune.runtime import features
        print(os.getpid())
        ForkingPickler.dumps(torch.zeros(2))
        child = os.fork()
        if child == 0:
            print("child", features.observed()["ipc_sent"], flush=True)
            os._exit(0)
        os.waitpid(child, 0)
    """)
    assert "child {}" in stdout
    assert _main(records, stdout).ipc_sent == {"cpu": 1}


def test_an_observation_reads_back_typed_and_shows_its_features():
    data = {"graph_captures": 2, "graph_captures_shared_pool": 1, "ipc_received": {"cuda": 3},
            "mem_pools_custom_allocator": 1, "process_groups": ["cpu:gloo,cuda:nccl"], "nccl_env": {},
            "compile_calls": [{"mode": "max-autotune", "backend": None, "cudagraphs": True}],
            "libraries": ["vllm", "unknown_lib"], "future_field": 1}
    record = from_json(Observation, data, "proc-1.json")
    assert used(record) == {Feature.CUDA_GRAPHS, Feature.GRAPH_SHARED_POOL, Feature.CUDA_IPC,
                            Feature.MEM_POOL_CUSTOM_ALLOCATOR, Feature.NCCL, Feature.NCCL_GRAPH_REGISTRATION,
                            Feature.COMPILE_CUDAGRAPHS, Feature.VLLM}
    off = from_json(Observation, {"process_groups": ["nccl"], "nccl_env": {
        "NCCL_GRAPH_REGISTER": "0", "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK": "True"}}, "x")
    assert used(off) == {Feature.NCCL, Feature.NCCL_USER_BUFFERS}
    assert used_by_job([]) == frozenset()
    with pytest.raises(Exception, match="graph_captures"):
        from_json(Observation, {"graph_captures": "two"}, "proc-1.json")
