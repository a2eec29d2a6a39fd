"""The calibration timed behind different kinds of queued GPU work (issue 37 item 2). `alloctune calibrate` times each
driver call on an idle device and behind GPU work queued on purpose, and that work is `torch.cuda._sleep`: a kernel
that spins without touching memory. Inside speed_blocks.py's jobs torch.profiler timed a cudaMalloc at 78-98 us,
where the calibration of the same machine priced it at 52-55 (results/h100-speed-rebuilt-2026-12-06c). Here
the calibration child itself runs with its queued work made of something else, everything else as it is:

    python3 scripts/jobs/busy_work.py RES [--work sleep matmul copy]

sleep   torch.cuda._sleep, as the product does (the control: it should repeat the product's calibration)
matmul  bf16 4096 x 4096 matrix products into a tensor made beforehand (compute-bound, as a model's layers)
copy    copies between two 256 MiB tensors made beforehand (bandwidth-bound)

Writes RES/calibration-WORK.json (the product's Calibration record: both children, native and expandable, under
that work) and prints one line per kind: each call's busy price at each size.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from alloctune.errors import AlloctuneError  # noqa: E402
from alloctune.results.calibration import write_calibration  # noqa: E402
from alloctune.trial.calibration import answer_of, from_answers  # noqa: E402
from alloctune.child.calibration import Answer  # noqa: E402

# The child with its queue of GPU work replaced: queue(ms) launches about ms of the chosen kernel, timed first (two
# warm-up launches) as the product's spinner times _sleep. Outputs go into tensors made before the measurements.
CHILD = r"""
import sys, torch
import alloctune.child.calibration as calibration

def queue_of(work):
    def maker(torch):
        cuda = torch.cuda
        if work == "matmul":
            a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
            out = torch.empty_like(a)
            launch = lambda: torch.mm(a, a, out=out)
        else:
            src = torch.empty(128 << 20, device="cuda", dtype=torch.float16)
            dst = torch.empty_like(src)
            launch = lambda: dst.copy_(src)
        for _ in range(2):
            start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            start.record()
            for _ in range(20):
                launch()
            end.record()
            end.synchronize()
        per_launch_ms = start.elapsed_time(end) / 20
        def queue(ms):
            for _ in range(max(1, round(ms / per_launch_ms))):
                launch()
        return queue
    return maker

if sys.argv[2] != "sleep":
    calibration._spinner = queue_of(sys.argv[2])
sys.exit(calibration.child_main([sys.argv[1]]))
"""


def child(mode: str, work: str) -> Answer:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True" if mode == "expandable" else ""
    done = subprocess.run([sys.executable, "-c", CHILD, mode, work], env=env, capture_output=True, text=True,
                          timeout=300)
    return answer_of(done.stdout, done.stderr, done.returncode, f"the {mode} child under {work}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("res", type=Path)
    parser.add_argument("--work", nargs="+", default=["sleep", "matmul", "copy"])
    args = parser.parse_args(argv)
    args.res.mkdir(parents=True, exist_ok=True)
    failed = 0
    for work in args.work:
        try:
            record = from_answers([child("native", work), child("expandable", work)], sys.executable)
        except AlloctuneError as exc:   # one kind of work that could not be measured leaves the others
            print(f"busy_work: {exc}", flush=True)
            failed += 1
            continue
        write_calibration(args.res / f"calibration-{work}.json", record)
        for kind in ("device_alloc", "device_free", "map", "unmap"):
            fit = getattr(record, kind)
            busy = fit.busy
            print(work, kind, "idle", [round(s.median_us, 1) for s in fit.samples],
                  "busy", [round(s.median_us, 1) for s in busy.samples] if busy else None,
                  "waits", round(busy.waits, 3) if busy else None, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
