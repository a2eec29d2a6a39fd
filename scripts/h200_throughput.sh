#!/usr/bin/env bash
# Issue 8's evidence (throughput you can stand behind) on one H200, from the repository root:
#   bash scripts/h200_throughput.sh        # phase A, ~8 minutes
#   bash scripts/h200_throughput.sh B      # phase B (optional, another ~8 minutes)
# A: transformer-varlen (h200 preset) swept with --repeats auto over the default, expandable_segments:True and
#    max_split_size_mb:128, with the A/A control expandable_segments:False (the default spelled another way) in
#    the same rounds: benchmarks/aa_check.py --also ... (one sweep; the control shares the default's runs).
# B: the transformers GPT-2 job of examples/ (not shipped as a workload; quick preset) swept with --repeats auto
#    over the default and expandable_segments:True.
# Throughput runs on GPU 0 only, one trial at a time (trials in parallel disturb each other). Everything lands
# under $OUT: throughput-<phase>.tgz (all results folders, logs, a GPU clock/temperature trace, the environment),
# plus index.txt, env.txt, the main log, gpu.csv and summary.md beside it. Every step gets the time left before
# DEADLINE (s); a sweep cut short still gets its reports written from the trials it recorded.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=.
PHASE=${1:-A}
DEADLINE=${DEADLINE:-540}
R=${OUT:?}/r; mkdir -p "$R"
left() { echo $((DEADLINE - SECONDS - ${1:-0})); }
log() { echo "$(date -u +%T) $*" | tee -a "$R/index.txt"; }

{ date -u; uptime; nproc
  nvidia-smi --query-gpu=index,name,memory.total,driver_version,persistence_mode,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit --format=csv
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv
  python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "git", torch.version.git_version, "python", sys.version.split()[0])'
  python3 -c 'import pynvml; print("pynvml importable:", pynvml.__file__)' 2>&1 | tail -n 1
  git log -1 --format='alloctune commit %H %cI' 2>/dev/null || true
} > "$R/env.txt" 2>&1

# A cheap trace of what the GPU did meanwhile (one NVML query every 2 s): explains drift between rounds.
nvidia-smi -i 0 --query-gpu=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu \
  --format=csv -l 2 > "$R/gpu.csv" 2>&1 &
SAMPLER=$!

finish_reports() {  # a sweep cut off by its timeout has trials but no summary: decide from what was recorded
  for d in "$R"/results/*/; do
    [ -f "$d/trials.jsonl" ] && [ ! -f "$d/choice.json" ] && timeout 60 python3 -m alloctune report "$d" >> "$R/index.txt" 2>&1
  done
}

if [ "$PHASE" = A ]; then
  log "phase A: transformer-varlen h200, auto repeats, A/A control in the same rounds"
  timeout "$(left 40)" python3 benchmarks/aa_check.py workloads/transformer-varlen.yaml --preset h200 --gpu 0 \
    --also expandable_segments:True --also max_split_size_mb:128 --max-repeats 10 --time-budget 430 \
    --results "$R/results" > "$R/main.log" 2>&1
  log "aa_check rc=$? (0 pass, 1 a difference called, 2 could not run, 124 timed out) wall=${SECONDS}s"
else
  log "phase B: examples/gpt2_varlen.yaml quick preset, auto repeats"
  timeout "$(left 40)" python3 -m alloctune sweep examples/gpt2_varlen.yaml --preset quick --gpus 0 \
    --backend cuda --conf default --conf expandable_segments:True --max-repeats 10 --time-budget 430 \
    --results "$R/results" > "$R/main.log" 2>&1
  log "sweep rc=$? wall=${SECONDS}s"
fi
finish_reports
kill "$SAMPLER" 2>/dev/null
for d in "$R"/results/*/; do [ -f "$d/summary.md" ] && cp "$d/summary.md" "$OUT/summary.md"; done
cp "$R/index.txt" "$R/env.txt" "$R/main.log" "$R/gpu.csv" "$OUT/" 2>/dev/null
log "done in ${SECONDS}s"
cp "$R/index.txt" "$OUT/"
tar czf "$OUT/throughput-$PHASE.tgz" -C "$OUT" r && rm -rf "$R"   # at most 8 files come back: the rest is in the tarball
tail -n 25 "$OUT/main.log"
