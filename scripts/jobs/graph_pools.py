"""CUDA-graph jobs recorded, replayed and measured: the `graph-pools` evidence job (issue 30), on a GPU machine.

    python3 scripts/jobs/graph_pools.py OUT

Each job (below) is recorded with `alloctune record`, replayed under the four settings with `alloctune replay
--json`, and measured under the same four with `alloctune sweep --backend cuda --repeats 1`; the four jobs run at
once (their memory is each process's own; their speed is not what is measured here). `OUT/table.md` gives predicted
against measured peak reserved per job and setting.
"""
from __future__ import annotations

import glob
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SETTINGS = ["default", "expandable_segments:True", "roundup_power2_divisions:4", "max_split_size_mb:128"]
JOBS = {
    "graphed": ["examples/cudagraph_train.py", "--mode", "graphed", "--steps", "150", "--width", "1024", "--layers",
                "8", "--batch", "512", "--log-every", "0"],
    "compile": ["examples/cudagraph_train.py", "--mode", "compile", "--steps", "60", "--width", "1024", "--layers",
                "6", "--batch", "512", "384", "--eval-every", "0", "--log-every", "0"],
    "decode": ["examples/graph_decode.py", "--requests", "24", "--new-tokens", "64"],
    "mixed": ["examples/cudagraph_train.py", "--mode", "graph", "--steps", "150", "--width", "1024", "--layers", "8",
              "--batch", "512", "--eval-every", "10", "--log-every", "0"],
}
AT = [sys.executable, "-m", "alloctune"]


def run(argv: list[str], log: Path, stdout: Path | None = None) -> int:
    with open(log, "w") as err, open(stdout or log, "a") as out:
        return subprocess.run(argv, stdout=out, stderr=err, check=False).returncode


def job(out: Path, name: str, command: list[str]) -> str:
    trace = out / f"{name}.pickle"
    confs = [arg for conf in SETTINGS[1:] for arg in ("--conf", conf)]
    codes = [run([*AT, "record", "-o", str(trace), "--", sys.executable, *command], out / f"{name}.record.log"),
             run([*AT, "replay", str(trace), "--conf", "default", *confs, "--json"], out / f"{name}.replay.err",
                 out / f"{name}.replay.json"),
             run([*AT, "sweep", "--backend", "cuda", "--repeats", "1", *confs, "--results", str(out / f"sweep-{name}"),
                  "--", sys.executable, *command], out / f"{name}.sweep.log")]
    return f"{name}: record, replay, sweep exit {codes}"


def table(out: Path) -> list[str]:
    lines = ["| job | setting | predicted | measured | error |", "|---|---|---|---|---|"]
    for name in JOBS:
        try:
            rows = json.loads((out / f"{name}.replay.json").read_text())["results"]
            predicted = {r["conf"] or "default": r["peak_reserved_bytes"] for r in rows}
        except (OSError, ValueError, KeyError) as exc:
            lines.append(f"| {name} | replay failed: {exc} | | | |")
            continue
        measured = {}
        for path in glob.glob(str(out / f"sweep-{name}" / "**" / "trials.jsonl"), recursive=True):
            for line in open(path):
                t = json.loads(line)
                measured[t["conf"] or "default"] = (t.get("measurement") or {}).get("peak_reserved_bytes")
        for conf in SETTINGS:
            p, m = predicted.get(conf), measured.get(conf)
            error = f"{(p - m) / m:+.2%}" if p is not None and m else "-"
            lines.append(f"| {name} | {conf} | {p} | {m} | {error} |")
    return lines


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(len(JOBS)) as pool:
        for line in pool.map(lambda item: job(out, *item), JOBS.items()):
            print(line, flush=True)
    for path in out.glob("*.pickle"):   # kept as the compact format: the pickles are too large to bring back
        run([sys.executable, "-c", "import sys; from alloctune.sim.trace import load_trace, save_trace; "
             "save_trace(load_trace(sys.argv[1]), sys.argv[2])", str(path), str(path.with_suffix(".xz"))],
            out / f"{path.stem}.compact.log")
        path.unlink()
    text = "\n".join(table(out)) + "\n"
    (out / "table.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
