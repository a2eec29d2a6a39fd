#!/usr/bin/env bash
# Evidence for command mode (issue 7) on a GPU machine, from the repository root:
#   DEADLINE=480 GPUS=0,1 bash scripts/h200_command.sh
# best on the device machine's nvidia-h200-x2. DEADLINE (s, default 480) bounds the whole run, every step is
# time-boxed inside it; GPUS (default 0,1) are the GPU indices to use (one is enough: then the entry sweep runs
# after the command sweep and the DDP job runs two gloo ranks on that GPU). Everything lands under $OUT/command
# and in ONE tarball $OUT/command.tgz.
#   1. examples/gpt2_varlen.py swept as a command and as the entry workload examples/gpt2_varlen.yaml (same job,
#      same grid: default, expandable_segments:True, roundup_power2_divisions:4, max_split_size_mb:512; 1 repeat),
#      both at once when there are two GPUs;
#   2. `record -- CMD` of the same script, then `replay` under default, expandable_segments:True and
#      roundup_power2_divisions:4 (set beside the command sweep's measured peaks by the lead / README);
#   3. a 2-rank torchrun DDP job (examples/ddp_gpt2.py) swept as a command: --gpus 0,1 --gpus-per-trial 2 (NCCL);
#      with one GPU, two ranks on it with gloo;
#   4. python3 -m pytest -m gpu on tests/trial/test_command_gpu.py and tests/trial/test_record.py;
#   and, beside step 2 on the second GPU, 10 steps of examples/maskrcnn_train.py (a smoke run).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=. NCCL_NVLS_ENABLE=0
DEADLINE=${DEADLINE:-480}
GPUS=${GPUS:-0,1}
C=${OUT:?}/command; mkdir -p "$C"
STEPS=${STEPS:-60}              # = examples/gpt2_varlen.yaml preset quick (warmup 5 + 55)
GRID=(--conf expandable_segments:True --conf roundup_power2_divisions:4 --conf max_split_size_mb:512)
left() { local l=$((DEADLINE - SECONDS)); echo $((l > 5 ? l : 5)); }
log() { echo "$(date -u +%T) $*" | tee -a "$C/index.txt"; }

{ date -u; nvidia-smi; nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
  python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "git", torch.version.git_version, "python", sys.version.split()[0])'
  python3 -c 'import transformers, torchvision; print("transformers", transformers.__version__, "torchvision", torchvision.__version__)'
  env | grep -E '^(NCCL|CUDA|PYTORCH)' | sort; git log --oneline -1 2>/dev/null
} > "$C/env.txt" 2>&1
SEEN=$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
IFS=, read -r -a GPU_LIST <<< "$GPUS"
G0=${GPU_LIST[0]:-0}; G1=${GPU_LIST[1]:-$G0}
NGPU=${#GPU_LIST[@]}; [ "$G1" = "$G0" ] && NGPU=1
log "GPUs visible: $SEEN; using: $G0 $([ "$NGPU" -ge 2 ] && echo "$G1")"
if [ "$SEEN" -lt 1 ]; then log "no GPU: nothing to do"; tar czf "$OUT/command.tgz" -C "$OUT" command; exit 1; fi

step() {  # step NAME LIMIT COMMAND...: time-boxed (SIGINT first: alloctune then stops its trials), rc logged
  local name=$1 limit=$2 t0=$SECONDS; shift 2
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  timeout -s INT -k 15 "$limit" "$@" > "$C/$name.log" 2>&1
  log "$name rc=$? wall=$((SECONDS - t0))s (limit ${limit}s)"
}

# 1. the same GPT-2 job, as a command (GPU 0) and as an entry workload (GPU 1, or after it on GPU 0)
cmd_sweep() { step sweep-command 210 python3 -m alloctune sweep --repeats 1 --gpus "$G0" --results "$C/results" \
  --name gpt2-varlen-cmd "${GRID[@]}" -- python3 examples/gpt2_varlen.py --steps "$STEPS" --log-every 20; }
entry_sweep() { step sweep-entry 210 python3 -m alloctune sweep examples/gpt2_varlen.yaml --preset quick \
  --repeats 1 --gpus "$G1" --results "$C/results" "${GRID[@]}"; }
if [ "$NGPU" -ge 2 ]; then cmd_sweep & entry_sweep & wait; else cmd_sweep; entry_sweep; fi

# 2. record the command once, replay it under three settings; meanwhile, on the other GPU, a smoke run of the
#    Mask R-CNN example (used by others for evidence; its peaks print at the end of its log)
[ "$NGPU" -ge 2 ] && { CUDA_VISIBLE_DEVICES=$G1 step maskrcnn 90 python3 examples/maskrcnn_train.py --steps 10 \
  --log-every 5 & }
step record 100 python3 -m alloctune record --gpu "$G0" -o "$C/gpt2-cmd.pickle" -- \
  python3 examples/gpt2_varlen.py --steps "$STEPS" --log-every 0
step replay 60 python3 -m alloctune replay "$C/gpt2-cmd.pickle" --conf default --conf expandable_segments:True \
  --conf roundup_power2_divisions:4 --json
[ -s "$C/replay.log" ] && cp "$C/replay.log" "$C/replay.json"
# the pickle is large: bring the trace back in the compact format (the same events), if it fits (<= 8 MB)
step compact 30 python3 -c "from alloctune.sim.trace import load_trace, save_trace
save_trace(load_trace('$C/gpt2-cmd.pickle'), '$C/gpt2-cmd.xz')"
rm -f "$C/gpt2-cmd.pickle"
[ -f "$C/gpt2-cmd.xz" ] && [ "$(stat -c %s "$C/gpt2-cmd.xz")" -gt 8000000 ] && rm -f "$C/gpt2-cmd.xz" && \
  log "trace too large to bring back; dropped"

wait
# 3. a 2-rank torchrun DDP job swept as a command, per-rank peaks in the record and the summary
if [ "$NGPU" -ge 2 ]; then
  step sweep-ddp 150 python3 -m alloctune sweep --repeats 1 --gpus "$G0,$G1" --gpus-per-trial 2 --results "$C/results" \
    --name ddp-gpt2 --conf expandable_segments:True --conf roundup_power2_divisions:4 -- \
    python3 -m torch.distributed.run --standalone --nproc-per-node 2 examples/ddp_gpt2.py --steps 30
else
  step sweep-ddp-gloo 150 python3 -m alloctune sweep --repeats 1 --gpus "$G0" --results "$C/results" \
    --name ddp-gpt2-gloo --conf expandable_segments:True -- \
    python3 -m torch.distributed.run --standalone --nproc-per-node 2 examples/ddp_gpt2.py --steps 30 --backend gloo
fi

# 4. the GPU tests of command mode and record (on the first GPU)
CUDA_VISIBLE_DEVICES=$G0 step pytest-gpu 120 python3 -m pytest -m gpu -q -p no:cacheprovider \
  tests/trial/test_command_gpu.py tests/trial/test_record.py

tar czf "$OUT/command.tgz" -C "$OUT" command
cat "$C/index.txt"
for f in "$C"/results/*/summary.md; do echo "== $f"; sed -n 1,40p "$f"; done 2>/dev/null | head -150
tail -n 15 "$C/pytest-gpu.log"
