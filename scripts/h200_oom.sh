#!/usr/bin/env bash
# Real CUDA out-of-memory errors made on purpose, one of each cause, for `alloctune diagnose` (issue 11).
# Run on the GPU machine from the repository root:   OUT=/some/dir GPUS=0 DEADLINE=420 PYTHONPATH=. bash scripts/h200_oom.sh
# One GPU is enough (the first of GPUS; a second one in GPUS takes the rank-1 capture); about 80 s; it ends by
# itself inside DEADLINE seconds (default 420).
#   1. captures (scripts/oom_case.py, default allocator setting, GPU 0 unless noted):
#        shortage     live 4 GiB tensors until the card is full
#        budget       live 1 GiB tensors under a 16 GiB memory fraction
#        frag         interleaved frees under a 4500 MiB fraction, then a 1500 MiB request
#        frag-window  the same with max_entries=60: the trace starts mid-run (ring buffer)
#        other        a holder process takes all but 24 GiB, then a victim fills the rest
#        budget-rank1 the budget case as RANK=1 (on GPU 1 when there are 2): the file is named for rank 1
#      each leaves oom-rank{R}.pickle (via alloctune.dump_on_oom), oom-rank{R}.txt (str(exc)), result.json
#   2. `alloctune diagnose` on every message and snapshot (text and --json)
#   3. confirm: the frag case again under the setting diagnose recommends, and under expandable_segments:True
# Everything lands under $OUT/diagnose/ (r/ and index.txt: each step's exit code and time) and in $OUT/diagnose.tgz.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-.}
DEADLINE=${DEADLINE:-420}
DEADLINE=$((DEADLINE - 15))  # room for the tarball
BASE=${OUT:?set OUT}/diagnose
R=$BASE/r
mkdir -p "$R"
INDEX=$BASE/index.txt
IFS=, read -r G0 G1 _ <<< "${GPUS:-0}"
G0=${G0:-0}; G1=${G1:-$G0}
left() { local l=$((DEADLINE - SECONDS)); [ "$l" -gt 5 ] && echo "$l" || echo 5; }
cap() { local l; l=$(left); [ "$l" -gt "$1" ] && echo "$1" || echo "$l"; }
step() {  # step NAME LIMIT CMD...: run with a time limit, log its exit code and time
  local name=$1 limit=$2 t0=$SECONDS; shift 2
  timeout "$(cap "$limit")" "$@"
  echo "$name rc=$? wall=$((SECONDS - t0))s" >> "$INDEX"
}

{ date -u; nvidia-smi; nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv
  python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0]); print("devices", torch.cuda.device_count(), [torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count())])'
} > "$R/facts.txt" 2>&1

# ---- 1. captures ----
for c in shortage budget frag; do
  step "case-$c" 120 python3 scripts/oom_case.py "$c" "$R/$c" --gpu "$G0" > "$R/$c.log" 2>&1
done
step case-frag-window 120 python3 scripts/oom_case.py frag "$R/frag-window" --max-entries 60 --gpu "$G0" \
  > "$R/frag-window.log" 2>&1
RANK=1 step case-budget-rank1 120 python3 scripts/oom_case.py budget "$R/budget-rank1" --gpu "$G1" \
  > "$R/budget-rank1.log" 2>&1
# another process holds the card: the holder waits for victim.done (or 180 s) before it lets go
mkdir -p "$R/other"
timeout "$(cap 240)" python3 scripts/oom_case.py holder "$R/other" --gpu "$G0" > "$R/other-holder.log" 2>&1 &
HOLDER=$!
for _ in $(seq 120); do [ -e "$R/other/holder.ready" ] && break; kill -0 "$HOLDER" 2>/dev/null || break; sleep 1; done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$R/other/nvidia-smi-apps.txt" 2>&1
step case-other 120 python3 scripts/oom_case.py victim "$R/other" --gpu "$G0" > "$R/other.log" 2>&1
touch "$R/other/victim.done"
wait "$HOLDER"; echo "holder rc=$?" >> "$INDEX"

# ---- 2. diagnose every capture ----
for d in "$R"/*/; do
  for f in "$d"oom-rank*.pickle "$d"oom-rank*.txt; do
    [ -e "$f" ] || continue
    step "diagnose-$(basename "$d")-$(basename "$f")" 120 python3 -m alloctune diagnose "$f" > "$f.diagnose.txt" 2>&1
    step "diagnose-json-$(basename "$d")-$(basename "$f")" 120 python3 -m alloctune diagnose "$f" --json \
      > "$f.diagnose.json" 2> "$f.diagnose.err"
  done
done

# ---- 3. confirm the fragmentation case under the recommended setting ----
SNAP=$R/frag/oom-rank0.pickle
REC=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("recommended_conf") or "")' \
      "$SNAP.diagnose.json" 2>/dev/null)
if [ -z "$REC" ]; then  # diagnose gave no answer: fall back to replay's best fitting setting under the budget
  step replay-frag 120 python3 -m alloctune replay "$SNAP" --budget 4500MiB --json > "$R/frag/replay.json" 2>&1
  REC=$(python3 -c 'import json, sys; rows = [r for r in json.load(open(sys.argv[1]))["results"] if r.get("num_ooms") == 0 and r.get("conf") != "default"]; print(rows[0]["conf"] if rows else "")' \
        "$R/frag/replay.json" 2>/dev/null)
  echo "recommended (fallback: replay) ${REC:-none}" >> "$INDEX"
else
  echo "recommended (diagnose) $REC" >> "$INDEX"
fi
if [ -n "$REC" ]; then
  PYTORCH_CUDA_ALLOC_CONF=$REC step confirm-recommended 120 python3 scripts/oom_case.py frag \
    "$R/confirm-recommended" --gpu "$G0" > "$R/confirm-recommended.log" 2>&1
fi
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True step confirm-expandable 120 \
  python3 scripts/oom_case.py frag "$R/confirm-expandable" --gpu "$G0" > "$R/confirm-expandable.log" 2>&1

find "$R" -name '*.tmp*' -delete
cp "$INDEX" "$R/index.txt" 2>/dev/null
tar czf "$OUT/diagnose.tgz" -C "$OUT" diagnose
cat "$INDEX"
grep -h '"oom"' "$R"/*.log "$R"/confirm-*.log 2>/dev/null | sort -u
ls -la "$OUT/diagnose.tgz"
