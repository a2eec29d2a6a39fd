"""How far the speed prediction moves with the calibration alone (runs anywhere): one job's blocks and replays
(scripts/jobs/speed_model.py's RES), priced by each of several calibrations of the same machine, and by their pool
as `alloctune calibrate` makes it (trial/calibration.py's `pooled`, each kind's figures size by size).

    python3 scripts/jobs/speed_model.py RES --job big ...   # first: RES/JOB.json, the replays
    python3 scripts/jobs/calibration_spread.py RES CAL.json... [--job big --job mid] [--json OUT.json]

Per calibration, each kind's busy-device line (what prices a job's calls); per job and setting, the slowdown
measured in one process (as speed_model.py pairs it) and the product's prediction under each calibration.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import speed_model  # noqa: E402

from alloctune.decide.speed import predict  # noqa: E402
from alloctune.results.calibration import COST_KINDS, read_calibration  # noqa: E402
from alloctune.trial.calibration import pooled  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("res", type=Path)
    p.add_argument("calibrations", type=Path, nargs="+")
    p.add_argument("--job", action="append", default=None)
    p.add_argument("--json", dest="json_out", type=Path)
    args = p.parse_args(argv)
    cals = {str(path): read_calibration(path) for path in args.calibrations}
    first = next(iter(cals.values()))
    cals["pooled"] = replace(first, **{kind: pooled([getattr(c, kind) for c in cals.values()]) for kind in COST_KINDS})
    names = {name: f"c{i + 1}" for i, name in enumerate(cals)} | {"pooled": "pooled"}
    out: list[dict] = []
    print("busy-device lines, fixed us + us/MiB:")
    for name, cal in cals.items():
        lines = {kind: getattr(cal, kind).in_a_job for kind in COST_KINDS if kind != "sync"}
        print(f"  {names[name]:6} " + "  ".join(f"{k} {f.fixed_us:6.1f}+{f.per_mib_us:4.2f}" for k, f in lines.items())
              + ("" if name == "pooled" else f"  ({name})"))
        out.append({"calibration": name, "busy": {k: [f.fixed_us, f.per_mib_us] for k, f in lines.items()}})
    print(f"\njob   setting                      measured        " + " ".join(f"{n:>7}" for n in names.values()))
    for job in args.job or ["big", "mid"]:
        rows, works = speed_model.blocks(args.res / f"{job}-fresh.jsonl"), speed_model.works(args.res / f"{job}.json")
        step = speed_model.parts(rows, "default", "fresh")["wall"]
        for setting in (s for s in works if s != "default"):
            measured, half, rounds = speed_model.paired(rows, setting, "fresh", "fresh")
            predicted = {names[n]: predict(works[setting], works["default"], step, cal).predicted_slowdown
                         for n, cal in cals.items()}
            print(f"{job:5} {setting:28} {measured:+6.1%} ±{half:4.1%}  "
                  + " ".join(f"{v:+7.1%}" for v in predicted.values()))
            out.append({"job": job, "setting": setting, "measured": measured, "half_width": half, "rounds": rounds,
                        "predicted": predicted})
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
