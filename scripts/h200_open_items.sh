#!/usr/bin/env bash
# Evidence for what issues 7 and 8 left to the H200, from the repository root, in one device call:
#     DEADLINE=560 OUT=... bash scripts/h200_open_items.sh
# 1. The GPU-marked tests (command mode, record -- CMD, recording, probes, the steady pass):
#    pytest -m gpu, with a JUnit report and the slowest tests listed.
# 2. A Mask R-CNN tie: examples/maskrcnn_train.yaml (torchvision Mask R-CNN, not shipped with alloctune; quick
#    preset) under the default, expandable_segments:True and backend:cudaMallocAsync, 2 interleaved repeats (a
#    peak that moves between repeats is visible). The choice and summary.md are kept as written.
# Everything lands in $OUT/open-items/ and comes back as $OUT/open-items.tgz.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
DEADLINE=${DEADLINE:-560}
D=${OUT:?set OUT}/open-items; mkdir -p "$D"
left() { echo $((DEADLINE - SECONDS - ${1:-0})); }
log() { echo "$(date -u +%T) $*" | tee -a "$D/index.txt"; }
{ date -u; nproc; git log -1 --format='alloctune commit %H %cI' 2>/dev/null
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
  python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
  python3 -c 'import torchvision; print("torchvision", torchvision.__version__)'
} > "$D/env.txt" 2>&1

log "GPU tests"
timeout -k 10 "${TESTS_S:-300}" python3 -m pytest -m gpu -q -rA --durations=15 -p no:cacheprovider \
  --junitxml="$D/gpu-tests.xml" tests/ > "$D/gpu-tests.log" 2>&1
log "GPU tests rc=$? wall=${SECONDS}s"; tail -n 25 "$D/gpu-tests.log"

log "Mask R-CNN tie sweep"
timeout -s INT -k 15 "$(left 30)" python3 -m alloctune sweep examples/maskrcnn_train.yaml --preset quick --gpus 0 \
  --backend cuda --conf default --conf expandable_segments:True --conf backend:cudaMallocAsync --repeats 2 \
  --timeout 200 --out "$D/maskrcnn-tie" > "$D/maskrcnn-tie.log" 2>&1
log "tie sweep rc=$? wall=${SECONDS}s"
if [ -f "$D/maskrcnn-tie/trials.jsonl" ] && [ ! -f "$D/maskrcnn-tie/choice.json" ]; then
  timeout 20 python3 -m alloctune report "$D/maskrcnn-tie" >> "$D/maskrcnn-tie.log" 2>&1
fi
tail -n 30 "$D/maskrcnn-tie.log"
tar czf "$OUT/open-items.tgz" -C "$OUT" open-items && rm -rf "$D"
