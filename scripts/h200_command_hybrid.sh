#!/usr/bin/env bash
# A hybrid sweep of a user's command on the H200, from the repository root, in one device call:
#     DEADLINE=420 OUT=... bash scripts/h200_command_hybrid.sh
# 1. The GPU test of the command hybrid (tests/trial/test_command_gpu.py -k hybrid).
# 2. `alloctune sweep --backend hybrid --search 200 --finalists 1 --repeats 1 -- python3 examples/gpt2_varlen.py
#    --steps 60` (a plain transformers GPT-2 script, not shipped as a workload): the default's first trial records
#    the trace, the search replays 200 settings as the GPU's torch, the default and the best finalist are measured.
#    Its grid counterpart (default grid, same command) is in results/command-h200-20261130/.
# Everything lands in $OUT/command-hybrid/ and comes back as $OUT/command-hybrid.tgz.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
DEADLINE=${DEADLINE:-420}
D=${OUT:?set OUT}/command-hybrid; mkdir -p "$D"
left() { echo $((DEADLINE - SECONDS - ${1:-0})); }
log() { echo "$(date -u +%T) $*" | tee -a "$D/index.txt"; }
timeout 40 bash scripts/build_sim_core.sh > "$D/build_sim_core.log" 2>&1
{ date -u; nproc; git log -1 --format='alloctune commit %H %cI' 2>/dev/null; cat "$D/build_sim_core.log"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
  python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
  python3 -c 'import transformers; print("transformers", transformers.__version__)'
} > "$D/env.txt" 2>&1

log "GPU test of the command hybrid"
timeout -k 10 120 python3 -m pytest -m gpu -q -rA -p no:cacheprovider tests/trial/test_command_gpu.py -k hybrid \
  > "$D/gpu-test.log" 2>&1
log "GPU test rc=$? wall=${SECONDS}s"; tail -n 5 "$D/gpu-test.log"

log "hybrid sweep of the GPT-2 command"
timeout -s INT -k 15 "$(left 25)" python3 -m alloctune sweep --backend hybrid --search 200 --finalists 1 \
  --repeats 1 --gpus 0 --out "$D/gpt2-cmd-hybrid" -- python3 examples/gpt2_varlen.py --steps 60 --log-every 20 \
  > "$D/gpt2-cmd-hybrid.log" 2>&1
log "hybrid sweep rc=$? wall=${SECONDS}s"
tail -n 40 "$D/gpt2-cmd-hybrid.log"
tar czf "$OUT/command-hybrid.tgz" -C "$OUT" command-hybrid && rm -rf "$D"
