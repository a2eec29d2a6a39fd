#!/usr/bin/env bash
# Issue 8's evidence (throughput you can stand behind) on one H200 GPU, from the repository root:
#   DEADLINE=500 GPUS=0 bash scripts/h200_throughput.sh        # phase A (default): ends by itself inside DEADLINE
#   DEADLINE=500 GPUS=0 bash scripts/h200_throughput.sh B      # phase B (optional): the GPT-2 example job
# A: transformer-varlen (h200 preset) swept with --repeats auto over the default, expandable_segments:True and
#    max_split_size_mb:128, with the A/A control expandable_segments:False (the default spelled another way) in
#    the same rounds: benchmarks/aa_check.py --also ... (one sweep; the control shares the default's runs).
# B: the transformers GPT-2 job of examples/ (not shipped as a workload; quick preset) swept with --repeats auto
#    over the default and expandable_segments:True.
# Throughput runs on the first GPU of $GPUS only, one trial at a time (trials in parallel disturb each other).
# Everything lands under $OUT/throughput/ (results folders, logs, a GPU clock/temperature trace, the environment)
# and goes back as ONE tarball, $OUT/throughput.tgz. A sweep cut short still gets its reports written from the
# trials it recorded.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=.
PHASE=${1:-A}
DEADLINE=${DEADLINE:-500}
GPU=${GPUS:-0}; GPU=${GPU%%,*}
D=${OUT:?}/throughput; mkdir -p "$D"
BUDGET=$((DEADLINE - 110))   # seconds of measuring for the sweep's rounds: probes, reports and packing need the rest
left() { echo $((DEADLINE - SECONDS - ${1:-0})); }
log() { echo "$(date -u +%T) $*" | tee -a "$D/index.txt"; }

{ date -u; uptime; nproc; echo "GPUS=${GPUS:-} -> GPU $GPU; DEADLINE=$DEADLINE; measuring budget ${BUDGET}s"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version,persistence_mode,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,power.limit --format=csv
  nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv
  python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "git", torch.version.git_version, "python", sys.version.split()[0])'
  python3 -c 'import pynvml; print("pynvml importable:", pynvml.__file__)' 2>&1 | tail -n 1
  git log -1 --format='alloctune commit %H %cI' 2>/dev/null || true
} > "$D/env.txt" 2>&1

# A cheap trace of what the GPU did meanwhile (one NVML query every 2 s): explains drift between rounds.
nvidia-smi -i "$GPU" --query-gpu=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu \
  --format=csv -l 2 > "$D/gpu.csv" 2>&1 &
SAMPLER=$!

if [ "$PHASE" = A ]; then
  log "phase A: transformer-varlen h200 on GPU $GPU, auto repeats, A/A control in the same rounds"
  timeout "$(left 40)" python3 benchmarks/aa_check.py workloads/transformer-varlen.yaml --preset h200 --gpu "$GPU" \
    --also expandable_segments:True --also max_split_size_mb:128 --max-repeats 10 --time-budget "$BUDGET" \
    --results "$D/results" > "$D/main.log" 2>&1
  log "aa_check rc=$? (0 pass, 1 a difference called, 2 could not run, 124 timed out) wall=${SECONDS}s"
else
  log "phase B: examples/gpt2_varlen.yaml quick preset on GPU $GPU, auto repeats"
  timeout "$(left 40)" python3 -m alloctune sweep examples/gpt2_varlen.yaml --preset quick --gpus "$GPU" \
    --backend cuda --conf default --conf expandable_segments:True --max-repeats 10 --time-budget "$BUDGET" \
    --results "$D/results" > "$D/main.log" 2>&1
  log "sweep rc=$? wall=${SECONDS}s"
fi
# A sweep cut off by its timeout has trials but no choice: decide from what it recorded.
for d in "$D"/results/*/; do
  if [ -f "$d/trials.jsonl" ] && [ ! -f "$d/choice.json" ]; then
    timeout "$(left 15)" python3 -m alloctune report "$d" >> "$D/index.txt" 2>&1
    log "report written for a sweep cut short: $d rc=$?"
  fi
done
kill "$SAMPLER" 2>/dev/null
log "done in ${SECONDS}s"
tar czf "$OUT/throughput.tgz" -C "$OUT" throughput && rm -rf "$D"   # one tarball comes back
tar xzOf "$OUT/throughput.tgz" throughput/main.log | tail -n 30
