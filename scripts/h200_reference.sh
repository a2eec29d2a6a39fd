#!/usr/bin/env bash
# The reference runs behind results/ and workloads/traces/, on a GPU machine with 2 GPUs (the device machine's
# nvidia-h200-x2), from the repository root; everything lands under $OUT/r and in one tarball.
#   phase A: record the trace of every shipped workload (h200 preset, default setting, fresh process each);
#            sweep transformer-varlen and transformer-packed over the default grid, 3 repeats;
#            sweep transformer-packed a second time (default + expandable_segments, 3 repeats) for `compare`.
#   phase B: sweep the four other workloads over the default grid, 1 repeat (device time was short).
# Each phase ends well inside the 10-minute limit of one device command: every step gets the time left.
set -u
export PYTHONUNBUFFERED=1
PHASE=${1:?phase A or B}
DEADLINE=${DEADLINE:-570}
R=${OUT:?}/r; mkdir -p "$R/traces" "$R/results"
{ date -u; nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
  python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "git", torch.version.git_version, "python", sys.version.split()[0])'
} > "$R/env-$PHASE.txt" 2>&1

left() { echo $((DEADLINE - SECONDS)); }
rec() {  # rec GPU WORKLOAD
  local t0=$SECONDS
  timeout "$(left)" python3 -m alloctune record "workloads/$2.yaml" --preset h200 --gpu "$1" \
    -o "$R/traces/$2-h200.xz" > "$R/traces/$2-h200.log" 2>&1
  echo "record $2 gpu$1 rc=$? wall=$((SECONDS - t0))s" >> "$R/index.txt"
}
sw() {  # sw GPU WORKLOAD ARGS...
  local gpu=$1 w=$2 t0=$SECONDS; shift 2
  timeout "$(left)" python3 -m alloctune sweep "workloads/$w.yaml" --preset h200 --gpus "$gpu" \
    --results "$R/results" "$@" > "$R/sweep-$w-gpu$gpu-$t0.log" 2>&1
  echo "sweep $w gpu$gpu $* rc=$? wall=$((SECONDS - t0))s" >> "$R/index.txt"
}
if [ "$PHASE" = A ]; then
  (rec 0 transformer-varlen; rec 0 transformer-packed; sw 0 transformer-varlen --repeats 3) &
  (rec 1 llm-decode; rec 1 hpsearch; rec 1 detection; rec 1 cnn-varres
   sw 1 transformer-packed --repeats 3
   sw 1 transformer-packed --repeats 3 --conf expandable_segments:True --fresh) &
else
  (sw 0 cnn-varres --repeats 1; sw 0 detection --repeats 1) &
  (sw 1 llm-decode --repeats 1; sw 1 hpsearch --repeats 1) &
fi
wait
tar czf "$OUT/phase$PHASE.tgz" -C "$OUT" r
cat "$R/index.txt"; tail -n 3 "$R"/sweep-*.log
