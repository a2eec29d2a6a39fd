"""What one cudaMalloc and one cudaFree cost inside a running job, against what `alloctune calibrate` prices them at
(issue 37: `max_split_size_mb:128` on speed_blocks.py's `mid` measured about twice its predicted slowdown; its
issue time grew by about 130 us per added cudaMalloc on both `mid` and `big`, where the calibration says 55).

    python3 scripts/jobs/call_costs.py -o costs.jsonl

Part 1, in the job: speed_blocks.py's jobs in mode `fresh` (model and optimizer rebuilt under the setting), one
untimed cycle, then two cycles under torch.profiler (CPU and CUDA activities): the CUDA runtime and driver calls
the process made, count and total time per step (the profiler's own timestamps of each call), and every other
op's own CPU time per step, per setting.
Part 2, one call in different surroundings, each 32 times through torch's caching allocator (a 20 MiB segment
after empty_cache): `idle` as the calibration times it (device synchronised just before); `launching` right after
200 small kernels were queued (the CPU fresh from launching, the GPU busy); `live` with 64 other segments held;
`cold` right after the CPU read 256 MiB of host memory (its caches holding none of the driver's state, as after a
job's Python and autograd work); `after`: how much longer 50 kernel launches take right after a cudaMalloc than
after nothing (a call's cost to the CPU work after it), and `after-use`: the same launches on the new segment
itself, against the same launches on a cached block. One JSON line per measurement, then a summary on stdout.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import speed_blocks as sb  # noqa: E402

MiB = 1 << 20
ROUNDS = 32


def in_job(name: str, job: sb.Job, setting: str, cycles: int = 2) -> dict:
    from torch.profiler import ProfilerActivity, profile
    sb.switch_job(job, setting, "fresh")
    for j in range(sb.CYCLE):
        job.step(j)
        torch.cuda.empty_cache()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    steps = [sb.timed_step(job, j, "fresh") for j in range(sb.CYCLE * cycles)]
    plain = {"wall": (time.perf_counter() - t0) / len(steps),
             "issue": statistics.median(s["issue"] for s in steps)}
    before = sb._counters()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for j in range(sb.CYCLE * cycles):
            job.step(j)
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    after = sb._counters()
    n = sb.CYCLE * cycles
    calls, ops = {}, {}
    for e in prof.key_averages():
        if e.key.startswith("cu"):
            calls[e.key] = {"count": e.count / n, "us": e.cpu_time_total / n,
                            "us_each": e.cpu_time_total / max(e.count, 1)}
        else:   # every other op's own CPU time per step: where a setting's added issue time goes
            ops[e.key] = {"count": e.count / n, "self_us": e.self_cpu_time_total / n}
    return {"part": "job", "job": name, "setting": setting, "steps": n, "unprofiled": plain,
            "counters": {k: (after[k] - before[k]) / n for k in sb.COUNTERS}, "calls": calls, "ops": ops}


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e6


def surroundings() -> list[dict]:
    cuda = torch.cuda
    small = torch.ones(256, device="cuda")

    def launches(k: int) -> None:
        for _ in range(k):
            small.add_(1.0)

    flush = bytearray(256 * MiB)

    def one(context: str) -> tuple[float, float]:
        cuda.empty_cache()
        cuda.synchronize()
        if context == "launching":
            launches(200)
        elif context == "cold":
            bytes(flush)
        alloc = _timed(lambda: pointers.append(cuda.caching_allocator_alloc(20 * MiB)))
        cuda.caching_allocator_delete(pointers.pop())
        cuda.synchronize()
        free = _timed(cuda.empty_cache)
        return alloc, free

    out = []
    pointers: list[int] = []
    held: list[int] = []
    for context in ("idle", "launching", "cold", "live"):
        if context == "live":   # 64 segments of distinct sizes (each its own cudaMalloc), kept
            held = [cuda.caching_allocator_alloc((22 + 2 * i) * MiB) for i in range(64)]
        one(context)   # warm-up
        samples = [one(context) for _ in range(ROUNDS)]
        out.append({"part": "surroundings", "context": context,
                    "alloc_us": statistics.median(a for a, _ in samples),
                    "free_us": statistics.median(f for _, f in samples), "rounds": ROUNDS})
    for pointer in held:
        cuda.caching_allocator_delete(pointer)
    cuda.empty_cache()
    # a call's cost to the CPU work after it: 50 launches timed after a cudaMalloc and after nothing, in turn
    with_call, without = [], []
    for r in range(ROUNDS + 1):
        for call in (True, False):
            cuda.empty_cache()
            cuda.synchronize()
            if call:
                pointers.append(cuda.caching_allocator_alloc(20 * MiB))
            micros = _timed(lambda: launches(50))
            if r:
                (with_call if call else without).append(micros)
            cuda.synchronize()
            while pointers:
                cuda.caching_allocator_delete(pointers.pop())
    out.append({"part": "surroundings", "context": "after",
                "launches_after_malloc_us": statistics.median(with_call),
                "launches_alone_us": statistics.median(without), "rounds": ROUNDS})
    # the same launches on the memory just allocated: a new segment (after empty_cache) against a cached block
    def launches_on_new(call: bool) -> float:
        if call:
            cuda.empty_cache()
        cuda.synchronize()
        head = torch.empty(5 * MiB, device="cuda")[:256]   # of 20 MiB of float32, kept alive by the view
        micros = _timed(lambda: [head.add_(1.0) for _ in range(50)])
        cuda.synchronize()
        return micros

    with_call, without = [], []
    for r in range(ROUNDS + 1):
        for call in (True, False):
            micros = launches_on_new(call)
            if r:
                (with_call if call else without).append(micros)
    out.append({"part": "surroundings", "context": "after-use",
                "launches_after_malloc_us": statistics.median(with_call),
                "launches_alone_us": statistics.median(without), "rounds": ROUNDS})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--out", required=True)
    parser.add_argument("--jobs", nargs="+", default=["mid", "big"])
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("call_costs: needs a CUDA GPU", file=sys.stderr)
        return 2
    rows: list[dict] = [{"part": "meta", "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}]
    rows += surroundings()
    for name in args.jobs:
        job = sb.Job(name, torch.device("cuda"))
        for setting in sb.SETTINGS:
            rows.append(in_job(name, job, setting))
        job.drop()
        torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    for row in rows:
        if row["part"] == "surroundings":
            print(json.dumps(row))
        elif row["part"] == "job":
            calls = {k: v for k, v in row["calls"].items() if k.startswith(("cudaMalloc", "cudaFree", "cuMem"))}
            print(row["job"], row["setting"], f"wall {1e3 * row['unprofiled']['wall']:.2f} ms",
                  f"issue {1e3 * row['unprofiled']['issue']:.2f} ms", json.dumps(row["counters"]),
                  json.dumps({k: (round(v["count"], 1), round(v["us_each"], 1)) for k, v in calls.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
