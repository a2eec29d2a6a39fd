#!/usr/bin/env bash
# Compare two PyTorch versions on one workload without a GPU: replay the workload's shipped H200 trace under
# torch 2.1.2 and under this machine's torch, in one results folder, then `alloctune compare` the two.
#
#   scripts/compare_torch_versions.sh            # writes results/torch-2.1-vs-2.13-sim/
#
# Each interpreter's own torch parses the grid (settings it does not know are skipped for it, with torch's
# message), and the simulator follows that version's allocator where behaviour changed
# (alloctune/settings/versions.py, BEHAVIOUR_CHANGES). The trace is the same for both: the requests a program makes do not depend on the allocator
# settings (docs/ALLOCATOR.md §5), so what differs is how each version's allocator serves them.
#
# Environment (all optional):
#   OLD_PYTHON  interpreter with the older torch. Default: ../venv-torch21/bin/python next to this checkout,
#               created if missing (python3 -m venv + pip install torch==2.1.2 'numpy<2'; ~2 GB, outside the repo).
#   NEW_PYTHON  interpreter with the newer torch; it also runs alloctune itself (default: python3).
#   WORKLOAD, PRESET  the shipped workload and its preset with a trace (default: transformer-varlen, h200).
#   OUT         output folder (default: results/torch-2.1-vs-2.13-sim). Its sweep subfolder is replaced.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
NEW_PYTHON=${NEW_PYTHON:-python3}
OLD_PYTHON=${OLD_PYTHON:-$(dirname "$REPO")/venv-torch21/bin/python}
WORKLOAD=${WORKLOAD:-transformer-varlen}
PRESET=${PRESET:-h200}
OUT=${OUT:-results/torch-2.1-vs-2.13-sim}
SWEEP="$OUT/$WORKLOAD-$PRESET"

if [[ ! -x "$OLD_PYTHON" ]]; then
    venv=$(dirname "$(dirname "$OLD_PYTHON")")
    echo "creating $venv with torch 2.1.2 (CPU is enough: the sweep replays, it does not run the model)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet torch==2.1.2 'numpy<2'
fi

mkdir -p "$OUT"
rm -rf "$SWEEP"
exec > >(tee "$OUT/run.log") 2>&1
export COLUMNS=${COLUMNS:-170}   # rich tables in the log at full width

echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ)  alloctune $(git describe --always --dirty 2>/dev/null || echo '?')"
for py in "$OLD_PYTHON" "$NEW_PYTHON"; do
    echo "# $py: torch $("$py" -c 'import torch; print(torch.__version__)')"
done

# The grid, and why each setting is in it (the default is always added as the baseline):
grid=(
    expandable_segments:True                            # the usual winner: same behaviour in both
    max_split_size_mb:128                               # same behaviour in both
    roundup_power2_divisions:4                          # same behaviour in both
    roundup_power2_divisions:1                          # 2.4: 1 = 512-byte rounding; before: no rounding at all
    'roundup_power2_divisions:[256:1,512:2,1024:4,>:8]' # 2.10: '>' no longer overwrites the 1024 entry
    garbage_collection_threshold:0.2                    # budget = whole device: GC on before 2.8, off after
    max_non_split_rounding_mb:64                        # needs 2.6: torch 2.1 rejects it
    large_segment_size_mb:40                            # needs 2.11: torch 2.1 rejects it
    backend:cudaMallocAsync                             # valid in both, but cannot be simulated: skipped in both
)
confs=()
for c in "${grid[@]}"; do confs+=(--conf "$c"); done

# --budget 1.0: a memory fraction of the whole device. garbage_collection_threshold needs a fraction to act;
# a fraction of exactly 1.0 is where torch 2.1 and recent versions disagree (BEHAVIOUR_CHANGES, 2.8).
# The older interpreter comes first: it is the baseline that compare judges the newer one against.
"$NEW_PYTHON" -m alloctune sweep "workloads/$WORKLOAD.yaml" --preset "$PRESET" --backend sim \
    --python "$OLD_PYTHON" --python "$NEW_PYTHON" --budget 1.0 "${confs[@]}" --out "$SWEEP"

"$NEW_PYTHON" -m alloctune compare "$SWEEP" -o "$OUT"

# What each version's job should set: the variable it reads first (PYTORCH_CUDA_ALLOC_CONF for every torch from 2.1).
envs=$("$NEW_PYTHON" -c 'import json, sys; print(*(c["env_id"] for c in json.load(open(sys.argv[1]))["choices"]))' \
      "$SWEEP/choice.json")
for env_id in $envs; do
    echo "\$ alloctune export $SWEEP --env $env_id --format env"
    "$NEW_PYTHON" -m alloctune export "$SWEEP" --env "$env_id" --format env
done
