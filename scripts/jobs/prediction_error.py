"""How far the speed predictions were from what they predict, over committed tables (runs anywhere): the figures
`PREDICTION_ERROR` (alloctune/decide/speed.py) and docs/measuring.md quote.

    python3 scripts/jobs/prediction_error.py [TABLE.json...] [--allowance 0.02 --allowance 0.05] [--json OUT.json]

With no TABLE, the committed tables `PREDICTION_ERROR` rests on (`EVIDENCE`: every H100 call whose blocks rebuilt
the model under each setting, priced by its own calibration; the first four refitted as the product now fits).
Each TABLE.json is scripts/jobs/speed_model.py's (`--json`): per job and setting the slowdown measured in one
process with its 95% half-width, and the product's prediction. Printed: points off (predicted - measured), lowest
and highest and how many within 2 points; and, per allowance, whether the prediction put each setting on the side
of it the measurement did, counted only where the measurement could tell (its interval clear of the allowance): a
sweep decides by that side, not by the figure.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = ["results/h100-speed-rebuilt-2026-12-06d/refit/table-*.json",
            "results/h100-calibration-*/speed-*/table.json"]


def rows(paths: list[Path]) -> list[dict]:
    """Every setting's row but the default's, named by its table."""
    def name(p: Path) -> str:
        return str(p.resolve().relative_to(ROOT)) if p.resolve().is_relative_to(ROOT) else str(p)
    return [dict(r, table=name(p)) for p in paths for r in json.loads(p.read_text())
            if r["setting"] != "default" and "measured" in r]


NEAR = 0.05   # a measurement this close to the allowance is one a wrong side would have been easy for


def sides(table: list[dict], allowance: float) -> tuple[int, int, int]:
    """(settings whose measured interval is clear of `allowance`, those the prediction put on the same side, those
    of them measured within `NEAR` of it)."""
    clear = [r for r in table if not r["measured"] - r["half_width"] <= allowance <= r["measured"] + r["half_width"]]
    same = [r for r in clear if (r["measured"] > allowance) == (r["product"] > allowance)]
    return len(clear), len(same), sum(abs(r["measured"] - allowance) < NEAR for r in same)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tables", type=Path, nargs="*")
    p.add_argument("--allowance", type=float, action="append", default=None)
    p.add_argument("--json", dest="json_out", type=Path)
    args = p.parse_args(argv)
    args.tables = args.tables or sorted(path for pattern in EVIDENCE for path in ROOT.glob(pattern))
    table = rows(args.tables)
    def off(r: dict) -> float:
        return r["product"] - r["measured"]
    lowest, highest = min(table, key=off), max(table, key=off)
    within = sum(abs(off(r)) <= 0.02 for r in table)
    print(f"{len(table)} settings in {len(args.tables)} tables: off by {100 * off(lowest):+.1f} to "
          f"{100 * off(highest):+.1f} points (predicted - measured), {within} within 2 points")
    for r in (lowest, highest):
        print(f"  {100 * off(r):+.1f}: {r['job']} {r['setting']}, measured {100 * r['measured']:+.1f}% "
              f"±{100 * r['half_width']:.1f}%, predicted {100 * r['product']:+.1f}% ({r['table']})")
    out: dict = {"settings": len(table), "low": off(lowest), "high": off(highest), "within_2_points": within,
                 "allowances": []}
    for allowance in args.allowance or [0.02, 0.05, 0.10]:
        clear, same, near = sides(table, allowance)
        print(f"allowance {allowance:.0%}: {same} of {clear} on the measured side, {near} of them measured within "
              f"{NEAR * 100:.0f} points of it (of {len(table)}; the rest measured too close to tell)")
        out["allowances"].append({"allowance": allowance, "clear": clear, "same_side": same, "near": near})
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
