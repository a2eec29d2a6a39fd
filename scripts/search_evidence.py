"""Summarize the results folders of scripts/h200_search.sh (one or more parts): per job, the exhaustive grid
measured on the GPU against the one-command hybrid sweep with a search, GPU seconds, the recommendation and its
measured peak, and the search's front.

    PYTHONPATH=. python3 scripts/search_evidence.py WORK [WORK ...] [--json OUT.json] > summary.md

WORK is a `work` folder the script wrote: `<job>-grid/` and `<job>-hybrid/` results folders and `timings*.tsv`.
"""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from alloctune.decide.choice import counted
from alloctune.results.records import TrialState
from alloctune.results.trials import TRIALS_FILE, TrialStore


def gib(b) -> str:
    return f"{b / 2**30:.2f} GiB" if b else "-"


def read_folder(folder: Path, walls: dict) -> dict:
    job, kind = folder.name.rsplit("-", 1)
    trials_file = folder / TRIALS_FILE
    cuda = [t for t in (TrialStore(trials_file).load() if trials_file.exists() else []) if t.backend == "cuda"]
    choice_file = folder / "choice.json"
    choices = json.loads(choice_file.read_text())["choices"] if choice_file.exists() else []
    best = next((c.get("conf") for c in choices if c.get("backend") == "cuda"), None)
    # The trials the decision rests on, as the sweep counts them (the recording trial is the default's first).
    ok = [t for t in counted(cuda) if t.state is TrialState.OK and t.measurement is not None]
    peaks: dict[str, list[int]] = {}
    for t in ok:
        peaks.setdefault(t.conf, []).append(t.measurement.peak_reserved_bytes)
    allocated = {t.conf: t.measurement.peak_allocated_bytes for t in ok}
    wall = walls.get((job, kind), {})
    # GPU seconds: every trial process, the recording one included (it ran on the GPU, counted or not).
    entry = {"job": job, "kind": kind, "trials": len(cuda),
             "gpu_seconds": round(sum(t.wall_seconds or 0 for t in cuda), 1),
             "recording_trials": sum(1 for t in cuda if t.recording),
             "command_wall_s": float(wall.get("wall_s") or 0), "rc": wall.get("rc"), "best": best,
             "best_peak_reserved_bytes": min(peaks[best]) if best in peaks else None,
             "best_reserved_ratio": (min(peaks[best]) / allocated[best]) if best in peaks and allocated.get(best)
             else None,
             "measured_peaks": {c or "default": min(v) for c, v in peaks.items()}}
    search_file = folder / "search.json"
    if search_file.exists():
        s = next(iter(json.loads(search_file.read_text()).values()))
        entry["search"] = {k: s[k] for k in ("replayed", "equivalent_not_replayed", "rounds", "seconds",
                                             "torch_version")}
        entry["search"]["rejected"] = len(s["rejected"])
        entry["search"]["front"] = [{k: m[k] for k in ("conf", "peak_reserved_bytes", "reserved_ratio",
                                                       "num_alloc_retries", "keys", "reason")} for m in s["front"]]
    return entry


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("work", nargs="+", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    walls, report = {}, {}
    for work in args.work:
        for tsv in sorted(work.glob("timings*.tsv")):
            walls.update({(r["job"], r["kind"]): r for r in csv.DictReader(tsv.open(), delimiter="\t")})
    for work in args.work:
        for folder in sorted(p for p in work.iterdir() if (p / "sweep.json").exists()):
            entry = read_folder(folder, walls)
            report.setdefault(entry["job"], {})[entry["kind"]] = entry
    for (job, kind), wall in sorted(walls.items()):
        if kind not in report.get(job, {}):
            report.setdefault(job, {})[kind] = {"job": job, "kind": kind, "rc": wall.get("rc"), "trials": 0,
                                                "gpu_seconds": 0, "command_wall_s": float(wall.get("wall_s") or 0),
                                                "best": None, "best_peak_reserved_bytes": None}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    print("| job | kind | GPU trials | GPU s (trials) | command s | rc | recommended | measured peak reserved |")
    print("|---|---|---|---|---|---|---|---|")
    for job, kinds in report.items():
        for kind, e in sorted(kinds.items()):
            print(f"| {job} | {kind} | {e['trials']} | {e['gpu_seconds']} | {e['command_wall_s']} | {e['rc']} | "
                  f"`{e['best'] if e['best'] is not None else '-'}` | {gib(e['best_peak_reserved_bytes'])} |")
    print()
    for job, kinds in report.items():
        g, h = kinds.get("grid"), kinds.get("hybrid")
        if g and h and g["gpu_seconds"] and h["gpu_seconds"]:
            both = g["best_peak_reserved_bytes"] and h["best_peak_reserved_bytes"]
            print(f"- {job}: hybrid GPU seconds {h['gpu_seconds'] / g['gpu_seconds']:.2f} of the grid's; command "
                  f"wall {h['command_wall_s'] / max(g['command_wall_s'], 1e-9):.2f} of the grid's; hybrid's "
                  f"measured peak <= the grid winner's: "
                  f"{h['best_peak_reserved_bytes'] <= g['best_peak_reserved_bytes'] if both else 'unknown'}")
        if h and h.get("search"):
            s = h["search"]
            print(f"  search: {s['replayed']} replayed as torch {s['torch_version']}, {s['equivalent_not_replayed']} "
                  f"equivalent, {s['rejected']} refused, {s['rounds']} rounds, {s['seconds']} s; front: "
                  + "; ".join(f"`{m['conf'] or 'default'}` {gib(m['peak_reserved_bytes'])} "
                              f"({m['reserved_ratio']:.3f})" for m in s["front"]))


if __name__ == "__main__":
    main()
