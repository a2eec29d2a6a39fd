"""What an allocator setting's driver work costs inside one process: the data the speed model (issue 37) is built
and tested on. Two jobs that do driver work every step or two, each run in ONE process that switches the allocator
setting between blocks of steps (`torch.cuda.memory._set_allocator_settings`, the full string each time).

    python3 scripts/jobs/speed_blocks.py run --job big [--steps 40]   # the plain job (for alloctune record)
    python3 scripts/jobs/speed_blocks.py alternate --job big --seconds 100 -o big.jsonl
    python3 scripts/jobs/speed_blocks.py alternate --job big --fresh --seconds 100 -o big-fresh.jsonl

Jobs (the model of examples/empty_cache_train.py, its shapes drawn once and repeated in a cycle, so that every
block meets the same shapes and block times compare):
  big    142M-parameter causal LM, 8-16 x 128-1024 tokens, empty_cache() after every step: GPU-bound
  small  7M-parameter causal LM, 2-4 x 32-256 tokens, empty_cache() after every second step: launch-bound
  mid    about 80M parameters, 4-12 x 64-768 tokens, empty_cache() after every step (added after the speed model
         was fitted to big and small: held out, to test it on)

`alternate` runs rounds; a round runs one block of each kind, in turn (reversed every other round, so that drift
favours none). A kind is a setting (default, expandable_segments:True, max_split_size_mb:128,
roundup_power2_divisions:4) and a mode: `empty` (the job as written), `plain` (no empty_cache), and `sync` (the
default, plain, with torch.cuda.synchronize() timed at each step's end: what one sync per step costs). At each
switch: synchronise, empty_cache, set the setting, read it back; then one cycle of steps untimed (steady), then
`--cycles` cycles timed. Per block (one JSON line): wall seconds with the device synchronised at both ends,
memory_stats deltas (num_device_alloc, num_device_free, num_sync_all_streams, num_alloc_retries), and per step:
wall, CPU time of the process, the CPU's time to issue the step (to just before any sync), the time the sync
before empty_cache waits (the queued work it drains), empty_cache's own time, and CUDA events around the step.
`--fresh`: the kinds are the four settings in mode `fresh`, the job as written with its model and optimizer
rebuilt at each switch (dropped before it, copied from the host after it): each block's parameters and optimizer
state are made under its setting, as in a process under it from its start, which a block switched to beside
memory made under the default is not (results/h100-speed-model-v-2026-12-06: half the maps).
After the rounds: one block per setting (empty, or fresh) with the memory history on, counting segment_alloc / free / map /
unmap per step; and the default profiled (torch.profiler) for the GPU's kernel time per step, plain and empty.
The closing lines: per kind, the median step and its ratio to the default's in the same mode, paired by round.
"""
from __future__ import annotations

import argparse
import copy
import gc
import importlib.util
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]

SETTINGS = {   # name: the full string (expandable_segments persists across run-time parses: always given)
    "default": "expandable_segments:False",
    "expandable_segments:True": "expandable_segments:True",
    "max_split_size_mb:128": "expandable_segments:False,max_split_size_mb:128",
    "roundup_power2_divisions:4": "expandable_segments:False,roundup_power2_divisions:4",
}
JOBS = {
    "big": dict(layers=6, d_model=1024, heads=16, vocab=32000, batch=(8, 16), lengths=(128, 1024), every=1),
    "small": dict(layers=4, d_model=256, heads=4, vocab=8000, batch=(2, 4), lengths=(32, 256), every=2),
    "mid": dict(layers=8, d_model=768, heads=12, vocab=16000, batch=(4, 12), lengths=(64, 768), every=1),
}
CYCLE = 4   # shapes repeat every CYCLE steps
COUNTERS = ("num_device_alloc", "num_device_free", "num_sync_all_streams", "num_alloc_retries")


def _example():
    spec = importlib.util.spec_from_file_location("empty_cache_train", ROOT / "examples" / "empty_cache_train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Job:
    """The model, its optimizer and the cycle of shapes and tokens."""

    def __init__(self, name: str, device: torch.device, seed: int = 0):
        cfg = JOBS[name]
        self.every, self.device, self.cuda = cfg["every"], device, device.type == "cuda"
        example = _example()
        args = example.parse_args(["--layers", str(cfg["layers"]), "--d-model", str(cfg["d_model"]),
                                   "--heads", str(cfg["heads"]), "--vocab", str(cfg["vocab"]),
                                   "--max-len", str(cfg["lengths"][1])])
        torch.manual_seed(seed)
        self.host_model = example.CausalLM(args)   # kept on the host: `build` copies it to the device
        self.build()
        rng = random.Random(seed)
        shapes = [(rng.randint(*cfg["batch"]), rng.randint(*cfg["lengths"])) for _ in range(CYCLE)]
        self.tokens = [torch.randint(cfg["vocab"], (b, n + 1), generator=torch.Generator().manual_seed(seed + j))
                       for j, (b, n) in enumerate(shapes)]
        self.params = sum(p.numel() for p in self.model.parameters())

    def build(self) -> None:
        """The model on the device and a new optimizer (its state is made at the first step)."""
        self.model = copy.deepcopy(self.host_model).to(self.device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)

    def drop(self) -> None:
        """Every tensor the job holds on the device freed (its tokens live on the host)."""
        self.model = self.opt = None
        gc.collect()   # a module's reference cycles would keep its parameters on the device

    def step(self, j: int) -> None:
        x = self.tokens[j % CYCLE].to(self.device, non_blocking=False)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cuda):
            logits = self.model(x[:, :-1])
            loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), x[:, 1:].flatten())
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def empties_after(self, j: int) -> bool:
        return (j + 1) % self.every == 0


def switch(setting: str) -> dict:
    """Synchronise, empty the cache, set `setting` (its full string), and read back what took effect."""
    if not torch.cuda.is_available():
        return {}
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.memory._set_allocator_settings(SETTINGS[setting])
    snapshot = torch.cuda.memory._snapshot()
    return {"max_split_size": torch.cuda.memory_stats().get("max_split_size"),
            "allocator_settings": snapshot.get("allocator_settings")}


def _counters() -> dict:
    stats = torch.cuda.memory_stats() if torch.cuda.is_available() else {}
    return {k: stats.get(k, 0) for k in COUNTERS}


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed_step(job: Job, j: int, mode: str) -> dict:
    """One step with its parts timed (see the module)."""
    cuda = job.cuda
    ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else None
    t0, c0 = time.perf_counter(), time.process_time()
    if ev:
        ev[0].record()
    job.step(j)
    if ev:
        ev[1].record()
    issued = time.perf_counter()
    empty = empties(job, j, mode)
    drain = cleared = 0.0
    if empty or mode == "sync":
        _sync()
        drain = time.perf_counter() - issued
    if empty and cuda:
        t = time.perf_counter()
        torch.cuda.empty_cache()
        cleared = time.perf_counter() - t
    return {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0, "issue": issued - t0,
            "drain": drain, "empty_cache": cleared, "empties": empty, "_events": ev}


def switch_job(job: Job, setting: str, mode: str) -> dict:
    """`switch`; in mode `fresh` with the job's device memory dropped before and rebuilt after (see the module)."""
    if mode != "fresh":
        return switch(setting)
    job.drop()
    readback = switch(setting)
    readback["allocated_at_switch"] = torch.cuda.memory_allocated() if job.cuda else 0
    job.build()
    return readback


def empties(job: Job, j: int, mode: str) -> bool:
    return mode in ("empty", "fresh") and job.empties_after(j)


def block(job: Job, setting: str, mode: str, cycles: int, rnd: int) -> dict:
    """One block: switch, one untimed cycle, then `cycles` timed cycles."""
    readback = switch_job(job, setting, mode)
    for j in range(CYCLE):
        job.step(j)
        if empties(job, j, mode) and job.cuda:
            torch.cuda.empty_cache()
    _sync()
    before, t0 = _counters(), time.perf_counter()
    steps = [timed_step(job, j, mode) for j in range(CYCLE * cycles)]
    _sync()
    wall = time.perf_counter() - t0
    after = _counters()
    for s in steps:
        ev = s.pop("_events")
        s["gpu_events"] = ev[0].elapsed_time(ev[1]) / 1e3 if ev else None
    return {"kind": "block", "round": rnd, "setting": setting, "mode": mode, "steps": len(steps), "wall": wall,
            "counters": {k: after[k] - before[k] for k in COUNTERS}, "readback": readback,
            "reserved": torch.cuda.memory_reserved() if job.cuda else 0, "per_step": steps}


def counted_block(job: Job, setting: str, cycles: int, mode: str) -> dict:
    """One block of the job as written, untimed, with the memory history on: segment actions per step."""
    switch_job(job, setting, mode)
    for j in range(CYCLE):
        job.step(j)
        if job.empties_after(j):
            torch.cuda.empty_cache()
    memory = torch.cuda.memory
    memory._record_memory_history("all", context=None, max_entries=1_000_000)
    try:
        before = _actions()
        for j in range(CYCLE * cycles):
            job.step(j)
            if job.empties_after(j):
                torch.cuda.empty_cache()
        _sync()
        after = _actions()
    finally:
        memory._record_memory_history(None)
    steps = CYCLE * cycles
    return {"kind": "counted", "setting": setting, "mode": mode, "steps": steps,
            "per_step": {a: (after.get(a, 0) - before.get(a, 0)) / steps for a in set(after) | set(before)}}


def _actions() -> dict:
    counts: dict = {}
    for trace in torch.cuda.memory._snapshot()["device_traces"]:
        for entry in trace:
            counts[entry["action"]] = counts.get(entry["action"], 0) + 1
    return counts


def profiled(job: Job, mode: str, cycles: int) -> dict:
    """The default's GPU kernel time per step (the union of kernel intervals), from torch.profiler."""
    switch("default")
    for j in range(CYCLE):
        job.step(j)
    _sync()
    out: dict = {"kind": "profile", "setting": "default", "mode": mode, "steps": CYCLE * cycles}
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for j in range(CYCLE * cycles):
                job.step(j)
                if mode == "empty" and job.empties_after(j):
                    torch.cuda.empty_cache()
            _sync()
        events = prof.events()
        spans = sorted((e.time_range.start, e.time_range.end) for e in events
                       if str(getattr(e, "device_type", "")).endswith("CUDA"))
        busy, end = 0.0, -math.inf
        for start, stop in spans:
            busy += max(0.0, stop - max(start, end))
            end = max(end, stop)
        # the kernels the CPU ops launched, summed (one stream: about the union), where device events are not listed
        launched = sum(k.duration for e in events for k in getattr(e, "kernels", ()))
        out.update(kernels=len(spans), busy_per_step=busy / 1e6 / out["steps"],
                   launched_per_step=launched / 1e6 / out["steps"],
                   span_per_step=(spans[-1][1] - spans[0][0]) / 1e6 / out["steps"] if spans else None)
    except Exception as exc:   # evidence, not the product: keep what the other blocks measured
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def summary(blocks: list[dict]) -> list[str]:
    """Per kind: the median step and, paired by round, its ratio to the default's in the same mode."""
    by = {}
    for b in blocks:
        by.setdefault((b["setting"], b["mode"]), {})[b["round"]] = b["wall"] / b["steps"]
    lines = []
    for (setting, mode), rounds in by.items():
        base = by.get(("default", mode if mode in ("empty", "fresh") else "plain"), {})
        logs = [math.log(t / base[r]) for r, t in rounds.items() if r in base]
        mean = statistics.fmean(logs) if logs else 0.0
        half = 1.96 * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else math.nan
        lines.append(f"{setting:28} {mode:6} {statistics.median(rounds.values()) * 1e3:8.2f} ms/step  "
                     f"{math.exp(mean) - 1:+.2%} ±{half:.2%} vs default ({len(logs)} rounds)")
    return lines


def alternate(args: argparse.Namespace) -> int:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    job = Job(args.job, device)
    kinds = ([(s, "fresh") for s in SETTINGS] if args.fresh else
             [(s, "empty") for s in SETTINGS] + [(s, "plain") for s in SETTINGS] + [("default", "sync")])
    out = open(args.output, "w")

    def emit(row: dict) -> None:
        out.write(json.dumps(row) + "\n")
        out.flush()

    emit({"kind": "meta", "job": args.job, "config": JOBS[args.job], "cycle": CYCLE, "cycles": args.cycles,
          "params": job.params, "torch": torch.__version__,
          "gpu": torch.cuda.get_device_name() if job.cuda else None, "settings": SETTINGS, "fresh": args.fresh})
    for j in range(CYCLE):   # the optimizer's state made under the default, as in a fresh process
        job.step(j)
    blocks, start, rnd = [], time.perf_counter(), 0
    while rnd < args.min_rounds or time.perf_counter() - start < args.seconds:
        for setting, mode in (kinds if rnd % 2 == 0 else kinds[::-1]):
            blocks.append(block(job, setting, mode, args.cycles, rnd))
            emit(blocks[-1])
        rnd += 1
    if job.cuda:
        for setting in SETTINGS:
            emit(counted_block(job, setting, args.cycles, "fresh" if args.fresh else "empty"))
        for mode in ("plain", "empty"):
            emit(profiled(job, mode, args.cycles))
    for line in summary(blocks):
        print(line, flush=True)
    out.close()
    return 0


def run(args: argparse.Namespace) -> int:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    job = Job(args.job, device)
    start = time.perf_counter()
    for i in range(args.steps):
        job.step(i)
        if job.empties_after(i) and job.cuda:
            torch.cuda.empty_cache()
    _sync()
    print(f"{args.job}: {job.params / 1e6:.1f}M parameters, {args.steps} steps, "
          f"{args.steps / (time.perf_counter() - start):.2f} steps/s", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="the plain job, for alloctune record")
    r.add_argument("--job", choices=JOBS, required=True)
    r.add_argument("--steps", type=int, default=40)
    a = sub.add_parser("alternate", help="blocks under each setting in one process")
    a.add_argument("--job", choices=JOBS, required=True)
    a.add_argument("--seconds", type=float, default=100, help="start no round after this many seconds")
    a.add_argument("--min-rounds", type=int, default=2)
    a.add_argument("--cycles", type=int, default=2, help="timed cycles of shapes per block")
    a.add_argument("--fresh", action="store_true", help="rebuild the model and optimizer at each switch")
    a.add_argument("-o", "--output", required=True)
    args = p.parse_args(argv)
    return run(args) if args.command == "run" else alternate(args)


if __name__ == "__main__":
    sys.exit(main())
