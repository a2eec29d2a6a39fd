#!/usr/bin/env bash
# Records the shipped reference traces on a GPU machine (run there from the repository root; results under $OUT):
# every shipped workload's h200 preset under four settings, each in a fresh process, with the peaks measured in
# that process. The simulator's fidelity tests replay the default trace and compare with all four measurements.
# Usage: OUT=/some/dir bash scripts/record_reference_traces.sh   (2 GPUs: the workloads are split between them)
set -u
export PYTHONUNBUFFERED=1
R=${OUT:?}/r; mkdir -p "$R/traces"
{ date -u; nvidia-smi; python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "git", torch.version.git_version, "python", sys.version)'; } > "$R/env.txt" 2>&1

record() {
  local gpu=$1; shift
  for w in "$@"; do
    for conf in "" expandable_segments:True max_split_size_mb:128 roundup_power2_divisions:4; do
      local tag=${conf:-default}; tag=${tag//:/-}
      local t0=$SECONDS
      timeout 300 python3 -m alloctune record "workloads/$w.yaml" --preset h200 --conf "$conf" --gpu "$gpu" \
        -o "$R/traces/$w-h200-$tag.xz" > "$R/traces/$w-h200-$tag.log" 2>&1
      echo "$w $tag rc=$? wall=$((SECONDS - t0))s" | tee -a "$R/traces/index.txt"
    done
  done
}
record 0 transformer-varlen transformer-packed cnn-varres &
# On the second GPU first: the GPU-only tests and a two-setting sweep end to end.
(CUDA_VISIBLE_DEVICES=1 timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_builtin.py tests/test_probe.py > "$R/gpu-tests.txt" 2>&1
 timeout 200 python3 -m alloctune sweep workloads/transformer-varlen.yaml --conf expandable_segments:True \
   --repeats 1 --gpus 1 --results "$R/smoke" > "$R/smoke.txt" 2>&1
 record 1 llm-decode hpsearch detection) &
wait
tar czf "$OUT/call1.tgz" -C "$OUT" r
cat "$R/traces/index.txt" "$R/gpu-tests.txt" | tail -40
