#!/usr/bin/env bash
# Issue 10 evidence on the H200, from the repository root, in two parts (one device call each):
#     PART=1 DEADLINE=500 GPUS=1 OUT=... bash scripts/h200_search.sh
#     PART=2 DEADLINE=420 GPUS=1 OUT=... bash scripts/h200_search.sh
#     PART=3 DEADLINE=150 GPUS=1 TGZ=search-final MARGIN=12 BUILD_S=15 SEARCH=200 OUT=... bash scripts/h200_search.sh
# Per job, both of, each timed:
#   grid   : the exhaustive default grid measured on the GPU            (sweep --backend cuda)
#   hybrid : one command: record the trace in the default's first trial (which is also the default's measurement
#            at --repeats 1), search the settings space by replay, measure the best finalist: two GPU trials
#                                                                        (sweep --backend hybrid --search)
# Part 1: transformer-varlen grid + hybrid, detection grid. Part 3: the Mask R-CNN hybrid alone (for when part 2 ran
# out of time before it). Part 2: detection hybrid, then hybrid + grid of
# examples/maskrcnn_train.yaml (torchvision Mask R-CNN, a job not shipped with alloctune; quick preset). A grid
# comes last in each part: if time runs short, it loses its last settings, and what it measured still counts.
# GPU seconds of a sweep = wall seconds of all its trial processes, the recording one included (trials.jsonl);
# beside them the command's own wall time (which adds probing and, for hybrid, the search on the CPU while the GPU
# idles).
# DEADLINE: seconds for everything (the script ends inside it by itself); GPUS: "1", or "0,1" for one queue per
# GPU. Everything goes to $OUT/$TGZ/, then into the one tarball $OUT/$TGZ.tgz (TGZ=search by default; the
# folder is removed). MARGIN: seconds kept for packing (30); BUILD_S: at most for the compiled core's build (40).
# PLAN="job:kind:workload:preset ..." replaces the part's plan (e.g. a job's grid and hybrid in one call).
# JOBS="transformer-varlen detection maskrcnn-train" limits the jobs (e.g. to rerun one that was cut); KINDS="hybrid"
# runs only the hybrids (e.g. to compare with grids measured earlier).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
T0=$(date +%s)
OUT=${OUT:?set OUT}; PART=${PART:-1}; DEADLINE=${DEADLINE:-500}; GPUS=${GPUS:-1}
JOBS=${JOBS:-transformer-varlen detection maskrcnn-train}; KINDS=${KINDS:-grid hybrid}
REPEATS=${REPEATS:-1}; FINALISTS=${FINALISTS:-1}; SEARCH=${SEARCH:-400}
TGZ=${TGZ:-search}; MARGIN=${MARGIN:-30}; BUILD_S=${BUILD_S:-40}
END=$((T0 + DEADLINE - MARGIN))    # sweeps stop by then (SIGINT: trial children are killed), leaving time to pack
D=$OUT/$TGZ; W=$D/work-part$PART; mkdir -p "$W/logs"
T="$W/timings-part$PART.tsv"; printf 'job\tkind\tgpu\trc\twall_s\n' > "$T"

# The simulator's compiled core, when this machine has a compiler: the search replays hundreds of settings.
timeout "$BUILD_S" bash scripts/build_sim_core.sh > "$W/logs/build_sim_core.log" 2>&1
{ date -u; echo "part $PART deadline $DEADLINE gpus $GPUS jobs $JOBS kinds $KINDS"; git rev-parse HEAD 2>/dev/null; nproc
  cat "$W/logs/build_sim_core.log"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
  python3 -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "git", torch.version.git_version, "python", sys.version.split()[0])'
  python3 -c 'import torchvision; print("torchvision", torchvision.__version__)'
} > "$W/env.txt" 2>&1

run() {  # run GPU JOB KIND WORKLOAD PRESET
  local gpu=$1 job=$2 kind=$3 workload=$4 preset=$5 left t0 rc ms
  case " $JOBS " in *" $job "*) ;; *) return ;; esac
  case " $KINDS " in *" $kind "*) ;; *) return ;; esac
  left=$((END - $(date +%s)))
  if [ "$left" -lt 30 ]; then printf '%s\t%s\t%s\tnot-started\t0\n' "$job" "$kind" "$gpu" >> "$T"; return; fi
  local args=(--backend cuda)
  [ "$kind" = hybrid ] && args=(--backend hybrid --search "$SEARCH" --finalists "$FINALISTS")
  t0=$(date +%s%N)
  CUDA_VISIBLE_DEVICES=$gpu timeout -s INT -k 15 "$left" python3 -m alloctune sweep "$workload" --preset "$preset" \
    --gpus 0 --repeats "$REPEATS" --timeout 200 --out "$W/$job-$kind" "${args[@]}" > "$W/logs/$job-$kind.log" 2>&1
  rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '%s\t%s\t%s\t%s\t%d.%03d\n' "$job" "$kind" "$gpu" "$rc" $((ms / 1000)) $((ms % 1000)) >> "$T"
}

if [ -n "${PLAN:-}" ]; then
  :   # PLAN="job:kind:workload:preset ..." given: run just that, in that order
elif [ "$PART" = 3 ]; then
  PLAN="maskrcnn-train:hybrid:examples/maskrcnn_train.yaml:quick"
elif [ "$PART" = 1 ]; then
  PLAN="transformer-varlen:grid:workloads/transformer-varlen.yaml:h200 transformer-varlen:hybrid:workloads/transformer-varlen.yaml:h200 detection:grid:workloads/detection.yaml:h200"
else
  PLAN="detection:hybrid:workloads/detection.yaml:h200 maskrcnn-train:hybrid:examples/maskrcnn_train.yaml:quick maskrcnn-train:grid:examples/maskrcnn_train.yaml:quick"
fi
IFS=, read -r -a GPU_LIST <<< "$GPUS"
n=${#GPU_LIST[@]}
for q in $(seq 0 $((n - 1))); do   # job i goes to queue i mod n; each queue runs its jobs one after the other
  ( i=0
    for item in $PLAN; do
      if [ $((i % n)) = "$q" ]; then IFS=: read -r job kind workload preset <<< "$item"; run "${GPU_LIST[$q]}" "$job" "$kind" "$workload" "$preset"; fi
      i=$((i + 1))
    done ) &
done
wait

python3 scripts/search_evidence.py "$W" --json "$W/summary.json" > "$W/summary.md" 2> "$W/logs/summary.err"
cat "$T" "$W/summary.md"
tar czf "$OUT/$TGZ.tgz" -C "$OUT" "$TGZ" && rm -rf "$D"
echo "h200_search.sh part $PART done in $(( $(date +%s) - T0 )) s; $(du -h "$OUT/$TGZ.tgz" | cut -f1) in $OUT/$TGZ.tgz"
