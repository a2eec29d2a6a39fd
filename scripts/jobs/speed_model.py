"""The speed-model evidence judged (runs anywhere): what scripts/jobs/speed_blocks.py measured in one process per
job, against what the replay's driver work predicts under each way of pricing it.

    python3 scripts/jobs/speed_model.py RES [--job big --job small] [--mode fresh] [--json OUT.json]

RES is the speed-model job's folder (OUT/work/speed-model): calibration.json, JOB.jsonl (the blocks) and JOB.json
(`alloctune replay --json` of the job's recording under the four settings). Per job and setting, in the mode the
job was written (`empty`: its empty_cache calls; `--mode fresh`: RES/JOB-fresh.jsonl, blocks whose model and
optimizer were rebuilt under each setting, as a process under it from its start):

- measured: the setting's step time over the default's, paired round by round (blocks of the same round ran back
  to back in one process), mean log ratio with a 95% t-interval, and the parts of a step (the CPU's time to issue
  it, the time the synchronisation before empty_cache waits, empty_cache's own time);
- predicted, by each pricing in `PRICINGS` (decide/speed.py's `predict` is the product's), from the replay's driver
  calls per steady step, the GPU's calibration, and the default's own measured step parts.

And the cost of one synchronisation per step (mode `sync` against `plain`, the default) beside what it waited for.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from alloctune.decide.speed import driver_seconds, predict  # noqa: E402
from alloctune.results.calibration import COST_KINDS, read_calibration  # noqa: E402
from alloctune.results.records import DriverWork  # noqa: E402

T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 15: 2.13,
       20: 2.09, 30: 2.04}


def t95(df: int) -> float:
    return T95.get(df) or T95[max(k for k in T95 if k <= df)] if df >= 1 else math.nan


def blocks(path: Path, kind: str = "block") -> list[dict]:
    return [row for row in map(json.loads, path.read_text().splitlines()) if row["kind"] == kind]


COUNTED = {"device_allocs": "segment_alloc", "device_frees": "segment_free", "maps": "segment_map",
           "unmaps": "segment_unmap"}   # DriverWork's counts and the memory history's actions


def counted(path: Path, replayed: dict[str, DriverWork]) -> dict[str, dict[str, tuple[float, float]]]:
    """Per setting, per kind of call: (counted per step in the block run with the memory history, replayed)."""
    return {row["setting"]: {k: (row["per_step"].get(action, 0.0), getattr(replayed[row["setting"]], k))
                             for k, action in COUNTED.items()}
            for row in blocks(path, "counted") if row["setting"] in replayed}


def step_time(block: dict) -> float:
    return block["wall"] / block["steps"]


def paired(rows: list[dict], setting: str, mode: str, base_mode: str) -> tuple[float, float, int]:
    """(mean slowdown, 95% half-width, rounds): the setting's step over the default's, round by round."""
    mine = {b["round"]: step_time(b) for b in rows if b["setting"] == setting and b["mode"] == mode}
    base = {b["round"]: step_time(b) for b in rows if b["setting"] == "default" and b["mode"] == base_mode}
    logs = [math.log(mine[r] / base[r]) for r in mine if r in base]
    mean = statistics.fmean(logs)
    half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else math.nan
    return math.expm1(mean), half, len(logs)


def parts(rows: list[dict], setting: str, mode: str) -> dict[str, float]:
    """Median per step of each timed part, over the setting's blocks in that mode."""
    steps = [s for b in rows if b["setting"] == setting and b["mode"] == mode for s in b["per_step"]]
    keys = ["wall", "issue", "drain", "empty_cache", "cpu"] + (["gpu_events"] if steps[0].get("gpu_events") else [])
    return {k: statistics.median(s[k] for s in steps) for k in keys}


def works(path: Path) -> dict[str, DriverWork]:
    rows = json.loads(path.read_text())["results"]
    return {row["conf"] or "default": DriverWork.from_json(row["driver_work"]) for row in rows if row.get("driver_work")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("res", type=Path)
    p.add_argument("--job", action="append", default=None)
    p.add_argument("--mode", choices=("empty", "fresh"), default="empty")
    p.add_argument("--json", dest="json_out", type=Path)
    args = p.parse_args(argv)
    cal = read_calibration(args.res / "calibration.json")
    out = []
    for job in args.job or ["big", "small"]:
        mode = args.mode
        path = args.res / (f"{job}.jsonl" if mode == "empty" else f"{job}-{mode}.jsonl")
        rows, replayed = blocks(path), works(args.res / f"{job}.json")
        base = parts(rows, "default", mode)
        print(f"\n{job}: default step {base['wall'] * 1e3:.2f} ms (issue {base['issue'] * 1e3:.2f}, drain "
              f"{base['drain'] * 1e3:.2f}, empty_cache {base['empty_cache'] * 1e3:.2f})")
        if mode == "empty":
            sync, _, n = paired(rows, "default", "sync", "plain")
            lag = parts(rows, "default", "sync")["drain"]
            print(f"  one sync per step costs {sync:+.2%} ({n} rounds); it waited {lag * 1e3:.2f} ms")
        print("  setting                       calls  syncs  measured        " + "  ".join(PRICINGS))
        for setting in replayed:
            measured, half, rounds = paired(rows, setting, mode, mode)
            row = {"job": job, "setting": setting, "mode": mode, "measured": measured, "half_width": half,
                   "rounds": rounds, "parts": parts(rows, setting, mode)}
            for name, pricing in PRICINGS.items():
                row[name] = pricing(replayed[setting], replayed["default"], base, cal)
            out.append(row)
            print(f"  {setting:28} {replayed[setting].calls:6.1f} {replayed[setting].syncs:5.2f}  "
                  f"{measured:+6.1%} ±{half:4.1%}  " + "  ".join(f"{row[n]:+6.1%}" for n in PRICINGS))
        print("  driver calls per step, counted in the block (memory history) / replayed:")
        for setting, calls in counted(path, replayed).items():
            print(f"  {setting:28} " + "  ".join(f"{k} {c:.2f}/{r:.2f}" for k, (c, r) in calls.items() if c or r))
            out.append({"job": job, "setting": setting, "mode": mode, "counted_replayed": calls})
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


def idle(work: DriverWork, default: DriverWork, base: dict, cal) -> float:
    """Every call at its idle device's price, added to the default's measured step (the product before the busy
    device's prices were measured)."""
    bare = replace(cal, **{kind: replace(getattr(cal, kind), busy=None) for kind in COST_KINDS})
    return predict(work, default, base["wall"], bare).predicted_slowdown


def product(work: DriverWork, default: DriverWork, base: dict, cal) -> float:
    """decide/speed.py's prediction as it stands: every call at its busy device's price where the calibration has
    it (`CostFit.in_a_job`)."""
    return predict(work, default, base["wall"], cal).predicted_slowdown


def hidden_growth(work: DriverWork, default: DriverWork, base: dict, cal) -> float:
    """Releases (after the sync: the GPU idle) at their price; growth (cudaMalloc, map) hidden up to the GPU's lead,
    which the default's drain shows: the CPU could have spent that long more and the GPU not waited."""
    mine, theirs = driver_seconds(work, cal), driver_seconds(default, cal)   # at the busy device's prices
    slack = base["drain"] + theirs.device_allocs + theirs.maps

    def cost(s) -> float:
        return s.device_frees + s.unmaps + max(0.0, s.device_allocs + s.maps - slack)

    return (cost(mine) - cost(theirs)) / base["wall"]


PRICINGS = {"idle": idle, "product": product, "hidden": hidden_growth}


if __name__ == "__main__":
    sys.exit(main())
