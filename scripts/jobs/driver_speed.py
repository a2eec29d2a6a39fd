"""Predicted against measured cost of driver work: the `driver-speed` evidence job's table (runs anywhere).

    python3 scripts/jobs/driver_speed.py --calibration CAL.json --with WITH.json --without WITHOUT.json \
        SETTING=LOG ...

WITH.json / WITHOUT.json: `alloctune replay --json` of the job recorded with and without `empty_cache` after every
step, under the settings measured. Each LOG is `examples/empty_cache_train.py --alternate N` run under SETTING
(`default` for none): its closing line holds the steady rate of the blocks with the call and of those without, in
one process. Predicted: the replay's driver work per step priced by the GPU's calibration
(`alloctune.decide.speed.driver_seconds`), added to the measured step time without the call. The table gives both,
per setting, and the slowdown against the default's rate with the call, as a sweep would judge it.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from alloctune.decide.speed import driver_seconds  # noqa: E402
from alloctune.results.calibration import read_calibration  # noqa: E402
from alloctune.results.records import DriverWork  # noqa: E402

RATES = re.compile(r"alternating blocks of \d+: ([\d.]+) steps/s with empty_cache, ([\d.]+) without")


def works(path: str) -> dict[str, DriverWork]:
    rows = json.loads(Path(path).read_text())["results"]
    return {row["conf"] or "default": DriverWork.from_json(row["driver_work"]) for row in rows
            if row.get("driver_work")}


def rates(path: str) -> tuple[float, float]:
    found = RATES.findall(Path(path).read_text())
    if not found:
        raise SystemExit(f"{path}: no closing line of --alternate")
    with_call, without = found[-1]
    return float(with_call), float(without)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calibration", required=True)
    p.add_argument("--with", dest="with_call", required=True)
    p.add_argument("--without", required=True)
    p.add_argument("--json", dest="json_out", help="also write the rows here")
    p.add_argument("logs", nargs="+", metavar="SETTING=LOG")
    args = p.parse_args(argv)
    cal = read_calibration(args.calibration)
    with_call, without = works(args.with_call), works(args.without)
    rows = []
    for item in args.logs:
        conf, _, log = item.partition("=")
        measured_with, measured_without = rates(log)
        extra = (driver_seconds(with_call[conf], cal).total - driver_seconds(without[conf], cal).total)
        step = 1 / measured_without
        rows.append({"conf": conf, "calls_per_step": with_call[conf].calls, "syncs_per_step": with_call[conf].syncs,
                     "measured_with": measured_with, "measured_without": measured_without,
                     "predicted_overhead": extra / step, "measured_overhead": measured_without / measured_with - 1,
                     "predicted_with": 1 / (step + extra)})
    base = next((r for r in rows if r["conf"] == "default"), None)
    print("| setting | driver calls/step | syncs/step | without (steps/s) | with, measured | with, predicted "
          "| cost of the call, measured | predicted | vs default, measured | predicted |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        vs = ("", "") if base is None else (f"{base['measured_with'] / r['measured_with'] - 1:+.1%}",
                                            f"{base['measured_with'] / r['predicted_with'] - 1:+.1%}")
        print(f"| {r['conf']} | {r['calls_per_step']:.1f} | {r['syncs_per_step']:.1f} | {r['measured_without']:.2f} "
              f"| {r['measured_with']:.2f} | {r['predicted_with']:.2f} | {r['measured_overhead']:+.1%} "
              f"| {r['predicted_overhead']:+.1%} | {vs[0]} | {vs[1]} |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
