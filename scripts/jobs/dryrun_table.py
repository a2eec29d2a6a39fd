"""Dry runs against the GPU (issue 39): the tables of the `dryrun` evidence jobs, from their folders, on any machine.

    python3 scripts/jobs/dryrun_table.py GPU_OUT DRY_OUT [--json FILE] > table.md

GPU_OUT is what `dryrun_evidence.py` wrote on the GPU (gpu/JOB-bBATCH[-SETTING].xz, fixtures/NAME.xz: recordings whose
metadata holds the peaks measured in that run); DRY_OUT holds the dry runs of the same commands (JOB-bBATCH.xz,
fixtures/NAME.xz), made on the GPU machine with its GPU hidden or on any machine without one. For each pair, under
the four settings: the GPU's measured peak reserved, the replay of the GPU's trace and of the dry run's, and the dry
run's error against the measured peak; and how the two allocation sequences compare (allocations, bytes asked for,
the first allocation where they differ).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from alloctune.sim.trace import ALLOC, load_trace  # noqa: E402

SETTINGS = {"default": "", "expandable": "expandable_segments:True", "maxsplit": "max_split_size_mb:128",
            "roundup": "roundup_power2_divisions:4"}


def replayed(trace: Path) -> dict[str, int]:
    """Peak reserved under each of SETTINGS, replayed."""
    confs = [a for conf in SETTINGS.values() for a in ("--conf", conf or "default")]
    done = subprocess.run([sys.executable, "-m", "alloctune", "replay", str(trace), "--json", *confs],
                          capture_output=True, text=True, check=True)
    return {r["conf"] or "default": r["peak_reserved_bytes"] for r in json.loads(done.stdout)["results"]}


def measured(gpu: Path, stem: str) -> dict[str, int | None]:
    """The GPU's measured peak reserved under each setting: the recording of that setting, where there is one."""
    out: dict[str, int | None] = {}
    for label, conf in SETTINGS.items():
        path = gpu / (f"{stem}.xz" if label == "default" else f"{stem}-{label}.xz")
        runs = load_trace(path).meta.get("measured") or [{}] if path.exists() else [{}]
        out[conf or "default"] = runs[0].get("peak_reserved_bytes")
    return out


def sequences(gpu: Path, dry: Path) -> dict[str, object]:
    a, b = load_trace(gpu), load_trace(dry)
    sa = [s for k, s in zip(a.kinds, a.sizes) if k == ALLOC]
    sb = [s for k, s in zip(b.kinds, b.sizes) if k == ALLOC]
    first = next((i for i, (x, y) in enumerate(zip(sa, sb)) if x != y), None if len(sa) == len(sb) else min(len(sa), len(sb)))
    return {"gpu_allocs": len(sa), "dry_allocs": len(sb), "gpu_bytes": sum(sa), "dry_bytes": sum(sb),
            "first_difference": first, "gpu_there": sa[first] if first is not None and first < len(sa) else None,
            "dry_there": sb[first] if first is not None and first < len(sb) else None,
            "invented": b.meta.get("dry_run", {}).get("invented")}


def pairs(gpu_out: Path, dry_out: Path) -> list[tuple[str, Path, Path, Path]]:
    """(name, the GPU folder its setting recordings are in, the GPU's default recording, the dry run)."""
    found = []
    for dry in sorted(dry_out.glob("*.xz")) + sorted((dry_out / "fixtures").glob("*.xz")):
        sub = "fixtures" if dry.parent.name == "fixtures" else "gpu"
        gpu = gpu_out / sub / dry.name
        if gpu.exists():
            found.append((f"{'fixture ' if sub == 'fixtures' else ''}{dry.stem}", gpu.parent, gpu, dry))
    return found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("gpu_out", type=Path)
    p.add_argument("dry_out", type=Path)
    p.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = p.parse_args()
    rows = []
    print("| job | setting | GPU measured | GPU trace replayed | dry run replayed | dry vs measured |")
    print("|---|---|---|---|---|---|")
    for name, folder, gpu, dry in pairs(args.gpu_out, args.dry_out):
        truth, from_gpu, from_dry = measured(folder, gpu.stem), replayed(gpu), replayed(dry)
        for conf in truth:
            m, g, d = truth[conf], from_gpu.get(conf), from_dry.get(conf)
            error = f"{(d - m) / m:+.2%}" if d is not None and m else "-"
            print(f"| {name} | {conf} | {m} | {g} | {d} | {error} |")
            rows.append({"job": name, "conf": conf, "measured": m, "gpu_replayed": g, "dry_replayed": d})
        rows[-1]["sequences"] = sequences(gpu, dry)
    print("\n| job | allocations GPU / dry | bytes asked GPU / dry | first difference (index: GPU, dry) | made up |")
    print("|---|---|---|---|---|")
    for row in rows:
        if "sequences" in row:
            s = row["sequences"]
            print(f"| {row['job']} | {s['gpu_allocs']} / {s['dry_allocs']} | {s['gpu_bytes']} / {s['dry_bytes']} | "
                  f"{s['first_difference']}: {s['gpu_there']}, {s['dry_there']} | {s['invented']} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
