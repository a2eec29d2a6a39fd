"""Put the peaks that a GPU sweep measured beside the trace they are checked against.

    python scripts/attach_measurements.py TRACE RESULTS_FOLDER

For each setting the sweep ran on the GPU (backend cuda, state ok), the medians over its repeats of peak reserved,
allocated and requested bytes and the most alloc retries go into the trace's meta["measured"] (replacing it), with
where they came from. The recording run's own figures move to meta["recording_run"]. tests/sim/test_sim_fidelity.py
replays every shipped trace under each measured setting and holds the simulator to these figures.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

from alloctune.results.folder import ResultsFolder
from alloctune.sim.trace import load_trace, save_trace


def main(trace_path: str, results_path: str) -> int:
    trace = load_trace(trace_path)
    folder = ResultsFolder(results_path)
    info = folder.info()
    by_conf: dict[str, list] = {}
    for r in folder.trials():
        if r.backend == "cuda" and r.state.value == "ok" and r.measurement:
            by_conf.setdefault(r.conf, []).append(r)
    measured = []
    for conf, records in by_conf.items():
        ms = [r.measurement for r in records]
        measured.append({
            "conf": conf, "repeats": len(ms), "source": f"results/{Path(results_path).name}",
            "peak_reserved_bytes": int(statistics.median(m.peak_reserved_bytes for m in ms)),
            "peak_allocated_bytes": int(statistics.median(m.peak_allocated_bytes for m in ms)),
            "peak_requested_bytes": int(statistics.median(m.peak_requested_bytes or 0 for m in ms)),
            "num_alloc_retries": max(m.num_alloc_retries for m in ms),
            "env": records[0].env})
    if info.workload_hash != trace.meta.get("workload_hash"):
        raise SystemExit(f"{results_path} swept another definition of the workload than {trace_path} recorded")
    trace.meta.setdefault("recording_run", (trace.meta.get("measured") or [None])[0])
    trace.meta["measured"] = measured
    save_trace(trace, trace_path)
    print(f"{trace_path}: {len(measured)} measured settings attached from {results_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
