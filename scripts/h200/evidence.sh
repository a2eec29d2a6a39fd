#!/usr/bin/env bash
# H200 evidence for the own-job (issue 17), unsafe-settings (issue 20) and one-GPU parts of the two-GPU issue (21).
# Run from the repository root on the GPU machine: scripts/h200/evidence.sh OUT JOB...
# Each JOB is swept as a user would (alloctune's defaults unless the job says otherwise), capped in time so that
# what finished comes back; every results folder, log and the environment are packed into OUT/evidence-<jobs>.tgz.
set -u
OUT=$1; shift
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=120
RES=$OUT/work; mkdir -p "$RES"
AT="python3 -m alloctune"
pack() { tar -czf "$OUT/evidence-$TAG.tgz" -C "$RES" . 2>/dev/null; }
env_facts() {
  { date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda)'
    python3 -m pip list 2>/dev/null | grep -iE '^(torch|transformers|lightning|pytorch-lightning|torch-geometric|accelerate|nvidia-ml-py) '
    # the device's copy carries the working tree without current git metadata: the caller passes the commit
    echo "alloctune commit ${ALLOCTUNE_COMMIT:-unknown (set ALLOCTUNE_COMMIT)}"; } > "$RES/env.txt" 2>&1
}
# sweep NAME LIMIT_S [alloctune options...] -- COMMAND...: one sweep, its own results root, its output logged
sweep() {
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  # a sweep cut short by an earlier call resumes from its folder, carried back in resume/ (same command, same root)
  [ -d "resume/$name" ] && cp -r "resume/$name" "$RES/"
  timeout -s INT -k 20 "$limit" $AT sweep --results "$RES/$name" "$@" > "$RES/$name.log" 2>&1
  echo "exit $? after $((SECONDS - start)) s" >> "$RES/$name.log"
  pack
}
TAG=$(IFS=-; echo "$*")
env_facts; pack
for job in "$@"; do
  case $job in
    pyg)       sweep pyg 240 -- python3 examples/pyg_graphs.py ;;
    lightning) sweep lightning 250 -- python3 examples/lightning_bert.py --steps 80 ;;
    hf)        sweep hf "${HF_S:-160}" -- python3 examples/hf_trainer_gpt2.py --steps 40 ;;
    # two ranks on one GPU (gloo: NCCL refuses two ranks on one device); a smaller model than the script's default
    # keeps gloo's host-side all-reduce, and so a trial, short
    ddp)       sweep ddp "${DDP_S:-330}" -- torchrun --nproc-per-node 2 examples/ddp_train.py --backend gloo --steps 40 \
                 --layers 8 --d-model 768 ;;
    generate)  sweep generate "${GENERATE_S:-330}" --step-on forward -- python3 examples/generate_varlen.py --steps 6 --new-tokens 16 64 ;;
    window)    sweep window 160 --steps 100 -- python3 examples/long_train.py ;;
    cudagraph) sweep cudagraph 75 --repeats 1 -- python3 examples/cudagraph_train.py --steps 300 ;;
    ipc)       sweep ipc 65 --repeats 1 -- python3 examples/ipc_share.py --steps 200 ;;
    oom)       # issue 21 on one GPU: two ranks share the card; each is held to a fifth of it, and rank 1 asks for more
               timeout 60 torchrun --nproc-per-node 2 scripts/h200/rank1_oom.py "$RES/oom" > "$RES/oom.log" 2>&1
               echo "exit $?" >> "$RES/oom.log"
               $AT diagnose "$RES/oom/oom-rank1.pickle" > "$RES/oom/diagnose.txt" 2>&1
               $AT diagnose --json "$RES/oom/oom-rank1.pickle" > "$RES/oom/diagnose.json" 2>&1; pack ;;
    # GPU_TESTS narrows the run to some test files (a later call finishing what an earlier one's cap cut)
    gputests)  timeout "${GPU_TESTS_S:-270}" python3 -m pytest -q -rA -m gpu -p no:cacheprovider ${GPU_TESTS:-tests} \
                 > "$RES/gpu-tests.log" 2>&1
               echo "exit $?" >> "$RES/gpu-tests.log"; pack ;;
    *) echo "unknown job $job" >&2 ;;
  esac
done
pack
