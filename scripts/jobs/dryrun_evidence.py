"""GPU recordings of the jobs a dry run is checked against (issue 39): the `dryrun` evidence job, on a GPU machine.

    python3 scripts/jobs/dryrun_evidence.py OUT [--only JOB,...] [--parallel 3] [--skip PHASE,...] [--seed DIR]

Phases, in order (each run's exit status and wall time go to OUT/runs.txt, its output to OUT/logs/):
- `batches`: each job (JOBS) recorded on the GPU at each of its batch sizes, under the default setting
  (`alloctune record`: the trace's meta holds the peaks measured in that run): OUT/gpu/JOB-bBATCH.xz;
- `settings`: each job at its comparison batch under the three other settings (SETTINGS; a recording does not change
  the peaks, so each trace's meta holds that setting's measured peaks): OUT/gpu/JOB-bBATCH-SETTING.xz;
- `fixtures`: the tiny versions CI dry-runs on its CPU (FIXTURES), recorded the same way: OUT/fixtures/NAME.xz;
- `fits`: the largest batch under a budget on the GPU (`alloctune fit --budget --confirm default`: the predicted
  largest batch and the next one run on the GPU under the budget) for the jobs of FITS at their JOBS batches:
  OUT/fits/JOB/; `--seed DIR` puts the recordings of the `batches` phase (DIR/JOB-bBATCH.xz, e.g.
  results/h100-dryrun-2026-12-06/gpu) in each fit's folder first, so that the fit records none of them again;
- `dry`: the same commands dry-run on this machine with its GPU hidden (`alloctune record --dry-run --arch sm90`:
  torch's CUDA build without a visible device), at each job's comparison batch and the batches its fit records:
  OUT/dry/JOB-bBATCH.xz, OUT/dry/fixtures/NAME.xz.
Runs go --parallel at a time (each process's allocator statistics are its own); the batch lists keep each run
under about 20 GiB, so that three at once fit an 80 GiB card. `scripts/jobs/dryrun_table.py OUT` makes the tables.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SETTINGS = {"expandable": "expandable_segments:True", "maxsplit": "max_split_size_mb:128",
            "roundup": "roundup_power2_divisions:4"}
# name: (the command after `python3`, without --batch; the batch sizes recorded; the batch compared under SETTINGS)
JOBS: dict[str, tuple[list[str], list[int], int]] = {
    "gpt2": (["examples/gpt2_train.py"], [2, 4, 6, 8, 12], 8),
    "lora": (["examples/lora_train.py"], [2, 4, 6, 8, 12], 8),
    "resnet": (["examples/resnet_train.py"], [16, 32, 48, 64, 96], 64),
    "checkpoint": (["examples/gpt_train.py", "--checkpoint"], [8, 16, 24, 32, 48], 32),
    "autocast": (["examples/gpt_train.py", "--autocast"], [4, 8, 12, 16, 24], 16),
    "varlen": (["examples/gpt_train.py", "--varlen"], [4, 8, 12, 16], 8),
    "cnn": (["examples/cnn_train.py"], [32, 64, 96, 128], 64),
}


def _tiny_lm(batch: int) -> list[str]:
    return ["--layers", "2", "--d-model", "64", "--heads", "4", "--vocab", "512", "--seq", "64", "--batch", str(batch),
            "--steps", "4"]


_TINY_LM = _tiny_lm(4)
TINY_BATCHES = [16, 32, 48, 64]   # the tiny transformer's batches a fit's CI test can compare (fixtures gpt-bB)
_TINY_CNN = ["--batch", "8", "--size", "32", "--width", "16", "--stages", "3", "--classes", "10", "--steps", "4"]
FIXTURES: dict[str, list[str]] = {
    "gpt": ["examples/gpt_train.py", *_TINY_LM],
    "gpt-checkpoint": ["examples/gpt_train.py", *_TINY_LM, "--checkpoint"],
    "gpt-autocast": ["examples/gpt_train.py", *_TINY_LM, "--autocast"],
    "gpt-varlen": ["examples/gpt_train.py", *_TINY_LM, "--varlen"],
    "cnn": ["examples/cnn_train.py", *_TINY_CNN],
    "cnn-autocast": ["examples/cnn_train.py", *_TINY_CNN, "--autocast"],
    **{f"gpt-b{b}": ["examples/gpt_train.py", *_tiny_lm(b)] for b in TINY_BATCHES},
}
# job: the budget its largest batch is found under, between the GPU's peaks reserved at two of its batches under the
# default setting (scripts/jobs/dryrun_largest.py compares the dry runs' answers under the same budgets)
FITS = {"gpt2": "13GiB", "lora": "11GiB", "resnet": "6GiB", "checkpoint": "20GiB", "autocast": "12GiB",
        "varlen": "15GiB", "cnn": "1.5GiB"}
AT = [sys.executable, "-m", "alloctune"]
PHASES = ("batches", "settings", "fixtures", "fits", "dry")


def runs(out: Path, phase: str, only: set[str]) -> list[tuple[str, list[str], dict[str, str]]]:
    """(name, argv, extra environment) of each run of `phase`."""
    py = [sys.executable]
    jobs = {name: job for name, job in JOBS.items() if not only or name in only}
    if phase == "batches":
        return [(f"{name}-b{b}", [*AT, "record", "-o", str(out / "gpu" / f"{name}-b{b}.xz"), "--", *py, *cmd,
                                  "--batch", str(b)], {}) for name, (cmd, batches, _) in jobs.items() for b in batches]
    if phase == "settings":
        return [(f"{name}-b{b}-{label}", [*AT, "record", "--conf", conf, "-o",
                                          str(out / "gpu" / f"{name}-b{b}-{label}.xz"), "--", *py, *cmd,
                                          "--batch", str(b)], {})
                for name, (cmd, _, b) in jobs.items() for label, conf in SETTINGS.items()]
    if phase == "fixtures":
        return [(f"fixture-{name}", [*AT, "record", "-o", str(out / "fixtures" / f"{name}.xz"), "--", *py, *cmd], {})
                for name, cmd in FIXTURES.items()]
    if phase == "fits":
        return [(f"fit-{name}", [*AT, "fit", "--param", f"batch={','.join(map(str, jobs[name][1]))}", "--budget",
                                 budget, "--conf", "default", "--confirm", "default", "--out", str(out / "fits" / name),
                                 "--", *py, *jobs[name][0], "--batch", "{batch}"], {})
                for name, budget in FITS.items() if name in jobs]
    dry = [*AT, "record", "--dry-run", "--arch", "sm90"]
    hidden = {"CUDA_VISIBLE_DEVICES": ""}
    return [(f"dry-{name}-b{b}", [*dry, "-o", str(out / "dry" / f"{name}-b{b}.xz"), "--", *py, *cmd, "--batch",
                                  str(b)], hidden) for name, (cmd, batches, compared) in jobs.items()
            for b in sorted({compared, *(batches if name in FITS else [])})] + \
        [(f"dry-fixture-{name}", [*dry, "-o", str(out / "dry" / "fixtures" / f"{name}.xz"), "--", *py, *cmd], hidden)
         for name, cmd in FIXTURES.items()]


def seed(out: Path, recordings: Path, only: set[str]) -> None:
    """Each fit's folder given the recordings of its batches that `recordings` holds (a fit keeps a recording in its
    folder and records only the values it lacks)."""
    for name in FITS:
        if only and name not in only:
            continue
        (out / "fits" / name).mkdir(parents=True, exist_ok=True)
        for b in JOBS[name][1]:
            made, kept = recordings / f"{name}-b{b}.xz", out / "fits" / name / f"trace.batch-{b}.xz"
            if made.exists() and not kept.exists():
                shutil.copyfile(made, kept)


def run(out: Path, name: str, argv: list[str], env: dict[str, str]) -> str:
    started = time.monotonic()
    with open(out / "logs" / f"{name}.log", "w") as log:
        code = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env},
                              check=False).returncode
    return f"{name}: exit {code}, {time.monotonic() - started:.1f} s"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--only", default="", help="jobs to run (comma-separated; default: all)")
    p.add_argument("--parallel", type=int, default=3)
    p.add_argument("--skip", default="", help=f"phases to skip, of {', '.join(PHASES)}")
    p.add_argument("--seed", type=Path, help="recordings of the batches phase to start each fit from")
    args = p.parse_args()
    only, skip = set(filter(None, args.only.split(","))), set(filter(None, args.skip.split(",")))
    for folder in ("gpu", "fixtures", "fits", "dry/fixtures", "logs"):
        (args.out / folder).mkdir(parents=True, exist_ok=True)
    with open(args.out / "runs.txt", "a") as index:
        for phase in PHASES:
            if phase in skip:
                continue
            if phase == "fits" and args.seed:
                seed(args.out, args.seed, only)
            with ThreadPoolExecutor(args.parallel) as pool:
                for line in pool.map(lambda r: run(args.out, *r), runs(args.out, phase, only)):
                    print(line, flush=True)
                    index.write(line + "\n")
                    index.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
