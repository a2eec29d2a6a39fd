#!/usr/bin/env bash
# Issue 10 evidence, on a GPU machine with 2 GPUs (the device machine's nvidia-h200-x2), from the repository root:
#     OUT=/some/folder bash scripts/h200_search.sh        (at most ~8.9 minutes; ends by itself)
#     JOBS="gpt2-varlen" OUT=... bash scripts/h200_search.sh   (a second run for jobs the first one had to cut)
# For three jobs (transformer-varlen and detection at their h200 preset, and examples/gpt2_varlen.yaml, a
# transformers GPT-2 job not shipped with alloctune, at its quick preset), both of:
#   grid   : the exhaustive default grid measured on the GPU   (sweep --backend cuda)
#   hybrid : one command: record the trace in the default's first trial, search the settings space by replay,
#            measure the default and the best finalist          (sweep --backend hybrid --search)
# one job per GPU at a time, both kinds in this one run, each command timed; the GPU seconds of a sweep are the
# wall seconds of its trial processes (trials.jsonl), beside the command's own wall time (which adds probing,
# recording's conversion and, for hybrid, the search on the CPU while the GPU idles).
# $OUT gets: summary.md, summary.json, env.txt, timings.tsv and search-h200.tgz (every results folder and log).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:?set OUT to the folder that comes back}
BUDGET_S=${BUDGET_S:-470}      # after the core's build (<= 40 s), every sweep is stopped (SIGINT) by then
REPEATS=${REPEATS:-1}          # the same for both kinds; 7 grid settings x 2 repeats would not fit 9 minutes x 3 jobs
FINALISTS=${FINALISTS:-1}
SEARCH=${SEARCH:-400}
JOBS=${JOBS:-transformer-varlen detection gpt2-varlen}
W=$OUT/work; mkdir -p "$W/logs"
# The simulator's compiled core, when this machine has a compiler (the search replays hundreds of settings).
timeout 40 bash scripts/build_sim_core.sh > "$W/logs/build_sim_core.log" 2>&1
START=$(date +%s)
printf 'job\tkind\tgpu\trc\twall_s\n' > "$OUT/timings.tsv"
{ date -u; git rev-parse HEAD 2>/dev/null; nproc
  cat "$W/logs/build_sim_core.log"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
  python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "git", torch.version.git_version, "python", sys.version.split()[0])'
  python3 -c 'import transformers, torchvision; print("transformers", transformers.__version__, "torchvision", torchvision.__version__)'
} > "$OUT/env.txt" 2>&1

THIRD=examples/gpt2_varlen.yaml; THIRD_PRESET=quick
[ -f "$THIRD" ] || { echo "no $THIRD on this checkout: third job left out" >> "$OUT/env.txt"; THIRD=""; }

run() {  # run GPU JOB KIND WORKLOAD PRESET
  local gpu=$1 job=$2 kind=$3 workload=$4 preset=$5 left t0 rc
  case " $JOBS " in *" $job "*) ;; *) return ;; esac
  [ -n "$workload" ] || return
  left=$((START + BUDGET_S - $(date +%s)))
  if [ "$left" -lt 30 ]; then printf '%s\t%s\t%s\tnot-started\t0\n' "$job" "$kind" "$gpu" >> "$OUT/timings.tsv"; return; fi
  local args=(--backend cuda)
  [ "$kind" = hybrid ] && args=(--backend hybrid --search "$SEARCH" --finalists "$FINALISTS")
  t0=$(date +%s%N)
  CUDA_VISIBLE_DEVICES=$gpu timeout -s INT -k 20 "$left" python3 -m alloctune sweep "$workload" --preset "$preset" \
    --gpus 0 --repeats "$REPEATS" --timeout 240 --out "$W/$job-$kind" "${args[@]}" > "$W/logs/$job-$kind.log" 2>&1
  rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '%s\t%s\t%s\t%s\t%d.%03d\n' "$job" "$kind" "$gpu" "$rc" $((ms / 1000)) $((ms % 1000)) >> "$OUT/timings.tsv"
}

# Balanced by the trial times seen on the H200 (~20-25 s a trial); the GPT-2 pair last, so a slow third job
# costs only itself.
( run 0 transformer-varlen grid workloads/transformer-varlen.yaml h200
  run 0 detection hybrid workloads/detection.yaml h200
  run 0 gpt2-varlen grid "$THIRD" "$THIRD_PRESET" ) &
( run 1 transformer-varlen hybrid workloads/transformer-varlen.yaml h200
  run 1 detection grid workloads/detection.yaml h200
  run 1 gpt2-varlen hybrid "$THIRD" "$THIRD_PRESET" ) &
wait

python3 - "$W" "$OUT" <<'EOF' > "$OUT/summary.md" 2> "$W/logs/summary.err"
import csv, json, sys
from pathlib import Path
work, out = Path(sys.argv[1]), Path(sys.argv[2])
walls = {(r["job"], r["kind"]): r for r in csv.DictReader(open(out / "timings.tsv"), delimiter="\t")}
rows, report = [], {}
for folder in sorted(p for p in work.iterdir() if (p / "sweep.json").exists()):
    job, kind = folder.name.rsplit("-", 1)
    trials = [json.loads(l) for l in open(folder / "trials.jsonl") if l.strip()] if (folder / "trials.jsonl").exists() else []
    cuda = [t for t in trials if t["backend"] == "cuda"]
    gpu_s = sum(t.get("wall_seconds") or 0 for t in cuda)
    choice = json.loads((folder / "choice.json").read_text())["choices"] if (folder / "choice.json").exists() else []
    measured = next((c for c in choice if c.get("backend") == "cuda"), {})
    peaks = {}
    for t in cuda:
        if t["state"] == "ok" and not t.get("recording"):
            peaks.setdefault(t["conf"], []).append(t["measurement"]["peak_reserved_bytes"])
    best = measured.get("conf")
    entry = {"job": job, "kind": kind, "trials": len(cuda), "gpu_seconds": round(gpu_s, 1),
             "command_wall_s": float(walls.get((job, kind), {}).get("wall_s") or 0),
             "rc": walls.get((job, kind), {}).get("rc"), "best": best,
             "best_peak_reserved_bytes": min(peaks[best]) if best in peaks else None,
             "measured_peaks": {c or "default": min(v) for c, v in peaks.items()},
             "recording_trials": sum(1 for t in cuda if t.get("recording"))}
    if (folder / "search.json").exists():
        s = next(iter(json.loads((folder / "search.json").read_text()).values()))
        entry["search"] = {k: s[k] for k in ("replayed", "equivalent_not_replayed", "rounds", "seconds", "torch_version")}
        entry["search"]["front"] = [{k: m[k] for k in ("conf", "peak_reserved_bytes", "reserved_ratio", "num_alloc_retries", "keys", "reason")} for m in s["front"]]
        entry["search"]["rejected"] = len(s["rejected"])
    report.setdefault(job, {})[kind] = entry
json.dump(report, open(out / "summary.json", "w"), indent=2)
gib = lambda b: f"{b / 2**30:.2f} GiB" if b else "-"
print("| job | kind | trials | GPU s (trials) | command s | rc | recommended | its measured peak reserved |")
print("|---|---|---|---|---|---|---|---|")
for job, kinds in report.items():
    for kind, e in kinds.items():
        print(f"| {job} | {kind} | {e['trials']} | {e['gpu_seconds']} | {e['command_wall_s']} | {e['rc']} | "
              f"`{e['best'] if e['best'] is not None else '-'}` | {gib(e['best_peak_reserved_bytes'])} |")
print()
for job, kinds in report.items():
    g, h = kinds.get("grid"), kinds.get("hybrid")
    if g and h and g["gpu_seconds"]:
        ok = None if not (g["best_peak_reserved_bytes"] and h["best_peak_reserved_bytes"]) else \
            h["best_peak_reserved_bytes"] <= g["best_peak_reserved_bytes"]
        print(f"- {job}: hybrid GPU time {h['gpu_seconds'] / g['gpu_seconds']:.2f} of the grid's "
              f"(command wall {h['command_wall_s'] / max(g['command_wall_s'], 1e-9):.2f}); hybrid's peak "
              f"<= grid winner's: {ok}")
    if h and "search" in h:
        s = h["search"]
        print(f"  search: {s['replayed']} replayed, {s['equivalent_not_replayed']} equivalent, {s['rejected']} "
              f"refused, {s['rounds']} rounds, {s['seconds']} s; front: "
              + "; ".join(f"{m['conf'] or 'default'} {gib(m['peak_reserved_bytes'])} ({m['reserved_ratio']:.3f})" for m in s['front']))
EOF
tar czf "$OUT/search-h200.tgz" -C "$OUT" work
rm -rf "$W"
cat "$OUT/timings.tsv" "$OUT/summary.md"
echo "h200_search.sh done in $(( $(date +%s) - START )) s"
