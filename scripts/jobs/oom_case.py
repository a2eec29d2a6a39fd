"""Make one real CUDA out-of-memory error on purpose, of a known cause, for `alloctune diagnose`'s fixtures.

    python3 scripts/jobs/oom_case.py CASE OUTDIR [--gpu N]

CASE is one of:
  shortage  live tensors of 4 GiB until the card is full: the tensors alone do not fit.
  budget    a memory fraction of 16 GiB, then live tensors of 1 GiB until it is spent: the card had room.
  frag      a fraction of 4500 MiB; four 1000 MiB tensors freed (four cached segments), 40 tensors of 100 MiB
            carved from them, every other one freed (2000 MiB reserved but unallocated, in 100 MiB holes), then
            a 1500 MiB request. Live tensors (2000 MiB) plus the request fit the budget; no hole is big enough.
            Under expandable_segments:True the free pages are unmapped and the request fits.
  holder    (for `victim`) allocate all but HOLDER_LEAVE_GIB of the card, write OUTDIR/holder.ready, then wait
            until OUTDIR/victim.done appears (at most 180 s).
  victim    live tensors of 2 GiB until the GPU is full, while a `holder` process holds most of it.

Each OOM case writes into OUTDIR: oom-rank{R}.pickle (through alloctune.dump_on_oom, so that path is exercised on
the GPU), oom-rank{R}.txt (the exception's text, str(exc)), and result.json (what happened, the measured
memory figures, torch version, the setting in force). A case that does not hit an OOM says so in result.json
(`oom: false`) and exits 0: under expandable_segments the `frag` case is expected to fit.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from alloctune.runtime.oomdump import dump_on_oom, save_oom_message  # noqa: E402

MiB, GiB = 2**20, 2**30
MAX_ENTRIES = 20_000  # every case here makes a few hundred events at most: the trace holds all of them


def tensor(nbytes: int, dev: torch.device) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8, device=dev)


def shortage(dev: torch.device, held: list) -> None:
    while True:
        held.append(tensor(4 * GiB, dev))


def budget(dev: torch.device, held: list) -> None:
    torch.cuda.set_per_process_memory_fraction(16 * GiB / torch.cuda.get_device_properties(dev).total_memory, dev)
    while True:
        held.append(tensor(1 * GiB, dev))


def frag(dev: torch.device, held: list) -> None:
    torch.cuda.set_per_process_memory_fraction(4500 * MiB / torch.cuda.get_device_properties(dev).total_memory,
                                               dev)
    big = [tensor(1000 * MiB, dev) for _ in range(4)]
    del big
    small = [tensor(100 * MiB, dev) for _ in range(40)]
    held.extend(small[0::2])
    del small
    held.append(tensor(1500 * MiB, dev))


def victim(dev: torch.device, held: list) -> None:
    while True:
        held.append(tensor(2 * GiB, dev))


def holder(dev: torch.device, outdir: str) -> None:
    free, total = torch.cuda.mem_get_info(dev)
    leave = int(float(os.environ.get("HOLDER_LEAVE_GIB", "24")) * GiB)
    block = tensor(max(free - leave, GiB), dev)
    torch.cuda.synchronize(dev)
    with open(os.path.join(outdir, "holder.ready"), "w") as f:
        json.dump({"pid": os.getpid(), "held_bytes": block.numel(), "total_bytes": total}, f)
    deadline = time.time() + 180
    while time.time() < deadline and not os.path.exists(os.path.join(outdir, "victim.done")):
        time.sleep(0.2)


CASES = {"shortage": shortage, "budget": budget, "frag": frag, "victim": victim}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("case", choices=[*CASES, "holder"])
    parser.add_argument("outdir")
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--max-entries", type=int, default=MAX_ENTRIES)
    args = parser.parse_args()
    os.makedirs(args.outdir, exist_ok=True)
    dev = torch.device("cuda", args.gpu)
    torch.cuda.set_device(dev)
    if args.case == "holder":
        holder(dev, args.outdir)
        return 0
    snapshot = dump_on_oom(args.outdir, max_entries=args.max_entries)
    held: list = []
    result: dict = {"case": args.case, "torch_version": torch.__version__, "gpu": args.gpu,
                    "device_name": torch.cuda.get_device_name(dev),
                    "device_total_bytes": torch.cuda.get_device_properties(dev).total_memory,
                    "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"), "max_entries": args.max_entries,
                    "rank_env": {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK")}}
    t0 = time.time()
    try:
        CASES[args.case](dev, held)
        result["oom"] = False
    except torch.OutOfMemoryError as exc:
        result.update(oom=True, message=str(exc), message_file=save_oom_message(exc))
    result["seconds"] = round(time.time() - t0, 3)
    stats = torch.cuda.memory_stats(dev)
    result.update(
        live_tensors=len(held), live_bytes=sum(t.numel() for t in held),
        snapshot=snapshot if os.path.exists(snapshot) else None,
        mem_get_info=list(torch.cuda.mem_get_info(dev)),
        stats={k: stats.get(k) for k in ("reserved_bytes.all.current", "reserved_bytes.all.peak",
                                          "allocated_bytes.all.current", "allocated_bytes.all.peak",
                                          "requested_bytes.all.peak", "num_alloc_retries", "num_ooms",
                                          "num_device_alloc", "num_device_free")},
        allocator_settings=torch.cuda.memory._snapshot().get("allocator_settings"))
    with open(os.path.join(args.outdir, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: result.get(k) for k in ("case", "alloc_conf", "oom", "live_tensors", "stats")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
