"""How fast does `diagnose` read long logs? Wall time of `diagnose` on a log of many caught OOMs, and of the word
searches it runs over a log's text: for the parts near an OOM's words, and for runtime/oom.py's words in any case.

    python benchmarks/diagnose_speed.py [--ooms 20000] [--mib 64] [--rounds 3]

The log of OOMs is what a job that catches its OOMs and runs on (fairseq) writes: --ooms messages of torch 1.x's
layout, each with its own request, between progress lines; each is read, judged, and repeats dropped (that
was once quadratic in the OOMs read). The word searches run over a log of --mib MiB that holds no OOM (64: the most
diagnose reads of a log, `sources.LOG_TAIL_BYTES`): `excerpt`, which keeps the parts near an OOM's words, then
`outside_error` and `likely_error` over two readings of the whole (a case-insensitive pattern of the many words took
20 s). Each figure runs --rounds times: the median and the range are printed, with the load average before and
after. Not a test: it prints figures.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from alloctune.diagnosis import diagnose  # noqa: E402
from alloctune.diagnosis.message import excerpt, likely_error, outside_error  # noqa: E402


def load() -> str:
    return "load average %.2f %.2f %.2f" % os.getloadavg() if hasattr(os, "getloadavg") else "load unknown"


def caught_ooms(count: int) -> str:
    """A fairseq log of `count` caught OOMs, each with its own request, a progress line after each."""
    return "".join(
        f"2021-01-01 12:00:00 | WARNING | fairseq.trainer | OOM: Ran out of memory with exception: CUDA out of "
        f"memory. Tried to allocate {100 + i % 900}.{i // 900:02d} MiB (GPU 0; 31.75 GiB total capacity; 27.43 GiB "
        "already allocated; 1.21 GiB free; 29.43 GiB reserved in total by PyTorch)\n2021-01-01 12:00:00 | INFO | "
        f"train_inner | epoch 001: {i} / 1000 loss=3.2\n" for i in range(count))


def timed(rounds: int, run) -> list[float]:
    """Wall seconds of `rounds` calls of `run`."""
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - start)
    return seconds


def show(name: str, seconds: list[float]) -> None:
    print(f"  {name:44s} median {statistics.median(seconds):7.2f} s   range {min(seconds):.2f} - {max(seconds):.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ooms", type=int, default=20_000)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, {load()}")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "train.log")
        with open(path, "w") as f:
            f.write(caught_ooms(args.ooms))
        ooms = len(diagnose(path).ooms)
        print(f"a log of {args.ooms:,} caught OOMs ({os.path.getsize(path) / 2**20:.1f} MiB), {ooms:,} read:")
        show("diagnose", timed(args.rounds, lambda: diagnose(path)))
    line = "step 1 loss 2.3 lr 1e-05 tokens/s 12345 Memory Allocated 61.2 GiB\n"
    log = line * (args.mib * 2**20 // len(line))
    print(f"the word search over a log of {args.mib} MiB without an OOM:")
    show("excerpt", timed(args.rounds, lambda: excerpt(log)))
    show("outside_error + likely_error, two readings", timed(
        args.rounds, lambda: (outside_error([log, log]), likely_error([log, log]))))
    print(f"machine at the end: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
