"""The largest batch under a budget (issue 39), by `alloctune fit --trace` over a job's H100 recordings and over the
dry runs of the same commands at the same batches, under the four settings; any machine, no GPU.

    python3 scripts/jobs/dryrun_largest.py GPU_DIR DRY_DIR [--json FILE] > largest-batch.md

GPU_DIR holds the `dryrun` evidence job's recordings (JOB-bBATCH.xz, recorded under the default setting: the other
settings are replayed), DRY_DIR the dry runs (`record --dry-run --arch sm90 -o JOB-bBATCH.xz -- python3 ...`). The
jobs, their batches and budgets are dryrun_evidence.py's (JOBS, FITS: each budget between the GPU's peaks reserved at
two of the job's batches under the default setting; the `fits` phase finds the GPU's own answer under it); a job
without traces at every batch in both folders is listed as not compared. The fit answers at multiples of the
batches' greatest common divisor, a batch between two traced ones by the curve.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dryrun_evidence import FITS, JOBS  # noqa: E402

SETTINGS = ["default", "expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4"]


def fitted(folder: Path, job: str, batches: list[int], budget: str) -> dict:
    """`alloctune fit --trace` over the job's traces in `folder`, under `budget`, for SETTINGS: fit.json's object."""
    traces = [a for b in batches for a in ("--trace", f"{b}={folder / f'{job}-b{b}.xz'}")]
    confs = [a for conf in SETTINGS for a in ("--conf", conf)]
    done = subprocess.run([sys.executable, "-m", "alloctune", "fit", "--param", "batch", *traces, *confs,
                           "--budget", budget, "--jobs", "1", "--json"], capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        sys.exit(f"fit of {job} in {folder}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def answers(fit: dict) -> dict[str, tuple[int | None, str]]:
    """Per setting: the largest batch under the (one) budget and what decided it: 'exact' where that batch and the
    next were both traced and their replays decide, else fit's basis (replayed, interpolated, extrapolated)."""
    return {a["conf"] or "default": (a["largest"], "exact" if a["exact"] else a["basis"] or "curve")
            for a in fit["limits"][0]["answers"]}


def peaks(fit: dict) -> list[float]:
    """The default setting's peak reserved at each batch, in GiB."""
    s = next(s for s in fit["settings"] if not s["conf"])
    return [p["peak_reserved_bytes"] / 2**30 for p in s["points"]]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("gpu", type=Path)
    p.add_argument("dry", type=Path)
    p.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = p.parse_args()
    rows, context, missing = [], [], []
    for job, budget in FITS.items():
        batches = JOBS[job][1]
        if not all((folder / f"{job}-b{b}.xz").exists() for folder in (args.gpu, args.dry) for b in batches):
            missing.append(job)
            continue
        gpu, dry = fitted(args.gpu.resolve(), job, batches, budget), fitted(args.dry.resolve(), job, batches, budget)
        assert gpu["dry_run"] is None and dry["dry_run"] is not None, job   # each what it says it is
        on_gpu, by_dry = answers(gpu), answers(dry)
        for conf in SETTINGS:
            rows.append({"job": job, "budget": budget, "setting": conf, "gpu": on_gpu[conf][0],
                         "gpu_from": on_gpu[conf][1], "dry_run": by_dry[conf][0], "dry_run_from": by_dry[conf][1]})
        context.append((job, batches, peaks(gpu), peaks(dry)))
    print("| job | budget | setting | largest batch, GPU recordings | largest batch, dry runs | same |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        same = "yes" if r["gpu"] == r["dry_run"] else "NO"
        print(f"| {r['job']} | {r['budget']} | {r['setting']} | {r['gpu']} ({r['gpu_from']}) | {r['dry_run']} "
              f"({r['dry_run_from']}) | {same} |")
    print("\n| job | batches | peak reserved under the default, GPU recordings (GiB) | dry runs (GiB) |")
    print("|---|---|---|---|")
    for job, batches, on_gpu, by_dry in context:
        print(f"| {job} | {', '.join(map(str, batches))} | {', '.join(f'{x:.2f}' for x in on_gpu)} | "
              f"{', '.join(f'{x:.2f}' for x in by_dry)} |")
    if missing:
        print(f"\nNot compared (no traces at every batch in both folders): {', '.join(missing)}.")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
