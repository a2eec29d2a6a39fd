"""A setting's slowdown measured as a sweep predicts it: each setting in processes of its own, under it from their
start (not switched to inside one), against what the replay of a recording and the GPU's calibration predict
(`decide/speed.py`'s `predict`, a sweep's own). The test of the speed model that in-process blocks cannot give
where driver calls matter (results/h100-speed-model-v-2026-12-06).

    python3 scripts/jobs/speed_fresh.py run RES --job big [--rounds 6] [--steps 84]    # on the GPU
    python3 scripts/jobs/speed_fresh.py table RES [--job big --job mid] [--json OUT]    # anywhere

`run` starts `scripts/jobs/speed_blocks.py run --job JOB --steps N --json` once per setting per round, under
PYTORCH_CUDA_ALLOC_CONF, in an order rotated from round to round (a drift favours none), one process at a time, and
appends each process's steady time (its steps after the first cycle of shapes, between two synchronisations) to
RES/JOB-fresh.jsonl. `table` pairs each setting with the default's process of the same round (mean log ratio,
95% t-interval) and sets the prediction beside it: the replay of RES/JOB.xz under each setting (RES/JOB.json,
`alloctune replay --json`), priced by RES/calibration.json, on top of the default's median step here.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from alloctune.decide.speed import predict  # noqa: E402
from alloctune.results.calibration import read_calibration  # noqa: E402
from speed_model import t95, works  # noqa: E402   (beside this script)

SETTINGS = ("default", "expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4")
MARK = "SPEED-FRESH "


def run(res: Path, job: str, rounds: int, steps: int) -> int:
    out = res / f"{job}-fresh.jsonl"
    for r in range(rounds):
        order = SETTINGS[r % len(SETTINGS):] + SETTINGS[:r % len(SETTINGS)]
        for setting in order:
            env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="" if setting == "default" else setting)
            done = subprocess.run([sys.executable, str(ROOT / "scripts" / "jobs" / "speed_blocks.py"), "run",
                                   "--job", job, "--steps", str(steps), "--json"], env=env, capture_output=True,
                                  text=True, check=False)
            lines = [line[len(MARK):] for line in done.stdout.splitlines() if line.startswith(MARK)]
            row = {"round": r, "setting": setting, "rc": done.returncode, **(json.loads(lines[0]) if lines else {})}
            with open(out, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{job} round {r} {setting}: " + (f"{row['seconds'] / row['steps'] * 1e3:.2f} ms a step"
                                                    if lines else f"failed (rc {done.returncode})"), flush=True)
    return 0


def table(res: Path, jobs: list[str], json_out: Path | None) -> int:
    cal = read_calibration(res / "calibration.json")
    out = []
    print("job    setting                       measured (fresh processes)  predicted  off by")
    for job in jobs:
        rows = [json.loads(line) for line in (res / f"{job}-fresh.jsonl").read_text().splitlines()]
        step = {(r["round"], r["setting"]): r["seconds"] / r["steps"] for r in rows if r.get("rc") == 0}
        default_step = statistics.median(v for (_, s), v in step.items() if s == "default")
        replayed = works(res / f"{job}.json")
        for setting in SETTINGS[1:]:
            logs = [math.log(step[(r, setting)] / step[(r, "default")]) for r, s in step if s == setting
                    and (r, "default") in step]
            mean = statistics.fmean(logs)
            half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else math.nan
            measured = math.expm1(mean)
            predicted = predict(replayed[setting], replayed["default"], default_step, cal).predicted_slowdown
            assert predicted is not None
            out.append({"job": job, "setting": setting, "rounds": len(logs), "measured": measured, "half_width": half,
                        "predicted": predicted, "default_step_seconds": default_step})
            print(f"{job:6} {setting:28} {measured:+8.1%} ±{half:4.1%} ({len(logs)} rounds)   {predicted:+7.1%}  "
                  f"{(predicted - measured) * 100:+5.1f}")
    if json_out:
        json_out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("res", type=Path)
    r.add_argument("--job", required=True)
    r.add_argument("--rounds", type=int, default=6)
    r.add_argument("--steps", type=int, default=84)
    t = sub.add_parser("table")
    t.add_argument("res", type=Path)
    t.add_argument("--job", action="append", default=None)
    t.add_argument("--json", dest="json_out", type=Path)
    args = p.parse_args(argv)
    if args.command == "run":
        args.res.mkdir(parents=True, exist_ok=True)
        return run(args.res, args.job, args.rounds, args.steps)
    return table(args.res, args.job or ["big", "mid"], args.json_out)


if __name__ == "__main__":
    sys.exit(main())
