"""Feature observation on a real GPU, what the CPU build cannot exercise (tests/runtime/test_features.py has the rest):
graph captures and shared pools, torch.compile's CUDA graphs, CUDA tensors sent to another process, MemPools,
the environment when CUDA initialises, an NCCL process group and its registration variables."""
from __future__ import annotations

import pytest
import torch

import test_features as base
from alloctune.settings.known import Feature
from alloctune.trial.features import used, used_by_job

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_graph_captures_and_a_shared_pool(tmp_path):
    records, stdout = base._run(tmp_path, """
        import os
        import torch
        print(os.getpid())
        x = torch.ones(1024, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):   # warm up off the capture, as torch's docs ask
            y = x * 2
        torch.cuda.current_stream().wait_stream(side)
        first, second = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(first):
            y = x * 2
        with torch.cuda.graph(second, pool=first.pool()):
            z = y + 1
        pool = torch.cuda.graph_pool_handle()
        first.replay(); second.replay()
        torch.cuda.synchronize()
        print(float(z.sum()))
    """)
    record = base._main(records, stdout)
    assert stdout.split()[1] == "3072.0"
    assert (record.graph_captures, record.graph_captures_shared_pool, record.graph_pool_handles) == (2, 1, 1)
    assert {Feature.CUDA_GRAPHS, Feature.GRAPH_SHARED_POOL} <= used(record)


def test_torch_compile_reduce_overhead_captures_on_a_gpu(tmp_path):
    records, stdout = base._run(tmp_path, """
        import os
        import torch
        print(os.getpid())
        step = torch.compile(lambda x: torch.sin(x) * 2, mode="reduce-overhead")
        x = torch.zeros(64, device="cuda")
        for _ in range(4):   # cudagraph trees record after warm-up runs
            y = step(x)
        torch.cuda.synchronize()
    """)
    record = base._main(records, stdout)
    assert record.compile_calls[0].cudagraphs and record.graph_captures >= 1
    assert {Feature.COMPILE_CUDAGRAPHS, Feature.CUDA_GRAPHS} <= used(record)


def test_a_cuda_tensor_sent_to_a_spawned_process(tmp_path):
    records, stdout = base._run(tmp_path, """
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
            shared = torch.ones(4, device="cuda")
            queue.put(shared)
            print(done.get(timeout=120))   # the producer keeps `shared` alive until the consumer is done
            worker.join()
    """)
    producer = base._main(records, stdout)
    assert stdout.split()[1] == "4.0"
    assert producer.ipc_sent == {"cuda": 1}
    assert sum(r.ipc_received.get("cuda", 0) for r in records.values()) == 1
    assert Feature.CUDA_IPC in used_by_job(records.values())


def test_a_mem_pool_and_its_use(tmp_path):
    records, stdout = base._run(tmp_path, """
        import os
        import torch
        print(os.getpid())
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            x = torch.ones(1024, device="cuda")
    """)
    record = base._main(records, stdout)
    assert (record.mem_pools, record.mem_pools_custom_allocator, record.mem_pool_uses) == (1, 0, 1)
    assert Feature.MEM_POOL in used(record) and Feature.MEM_POOL_CUSTOM_ALLOCATOR not in used(record)


def test_the_environment_when_cuda_starts_decides_the_variable_read(tmp_path):
    """A job that sets the variable itself after start-up, before its first CUDA call: torch reads it then."""
    records, stdout = base._run(tmp_path, """
        import os
        import torch
        print(os.getpid())
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        torch.ones(1, device="cuda")
        print(torch.cuda.memory._snapshot()["allocator_settings"]["expandable_segments"])
    """)
    record = base._main(records, stdout)
    assert stdout.split()[1] == "True"   # torch took it
    assert record.alloc_conf_env == {}
    assert record.alloc_conf_env_at_cuda_init == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert record.variable_read == "PYTORCH_CUDA_ALLOC_CONF"


def test_an_nccl_group_and_its_registration_variables(tmp_path):
    records, stdout = base._run(tmp_path, f"""
        import os
        import torch, torch.distributed as dist
        print(os.getpid())
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", init_method="file://{tmp_path / 'rendezvous'}", world_size=1, rank=0)
        x = torch.ones(4, device="cuda")
        dist.all_reduce(x)
        nccl = dist.distributed_c10d.ProcessGroupNCCL
        print(getattr(getattr(nccl, "register_mem_pool", None), "__alloctune_wrapped__", "absent"))
        dist.destroy_process_group()
    """, env={"NCCL_GRAPH_REGISTER": "0"})
    record = base._main(records, stdout)
    assert record.process_groups == ("nccl",) and record.nccl_env == {"NCCL_GRAPH_REGISTER": "0"}
    assert stdout.split()[1] in ("True", "absent")   # wrapped wherever this torch has it
    assert Feature.NCCL in used(record) and Feature.NCCL_GRAPH_REGISTRATION not in used(record)
    assert record.failures == ()
