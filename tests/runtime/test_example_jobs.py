"""The example jobs of issue 20's evidence (`examples/cudagraph_train.py`, `examples/ipc_share.py`) run as plain
scripts, with tiny sizes on the CPU, and with the feature watch in every process (as the start-up hook will put
it): what each job uses shows in the records. On a GPU the same jobs capture graphs and share CUDA tensors."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import test_features as base
from alloctune.settings.known import Feature
from alloctune.trial.features import used_by_job

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY_TRAIN = ["--steps", "3", "--width", "32", "--layers", "2", "--batch", "8", "--eval-every", "2",
              "--eval-batch", "4", "8", "--log-every", "0"]
TINY_SHARE = ["--steps", "6", "--width", "16", "--rows", "2", "8", "--in-flight", "2", "--log-every", "0"]
# The CPU variants, on a GPU machine too (no device visible to the job); test_features_gpu.py and the H200 sweeps
# cover the GPU.
cpu_only = pytest.mark.usefixtures("no_visible_gpu")


@cpu_only
def test_graph_mode_says_it_needs_a_gpu_in_one_line():
    done = subprocess.run([sys.executable, str(EXAMPLES / "cudagraph_train.py"), "--steps", "2"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == ("cudagraph_train: --mode graph needs a CUDA GPU (--mode compile also runs on "
                                   "the CPU)")


@pytest.mark.slow
@cpu_only
def test_compile_mode_trains_on_the_cpu_and_shows_compile_with_cuda_graphs(tmp_path):
    records, stdout = base.run_job(tmp_path, [str(EXAMPLES / "cudagraph_train.py"), "--mode", "compile",
                                              *TINY_TRAIN], timeout=600)
    assert "final loss" in stdout
    features = used_by_job(records.values())
    assert Feature.COMPILE_CUDAGRAPHS in features and Feature.CUDA_GRAPHS not in features   # none on the CPU


@pytest.mark.slow
@cpu_only
def test_ipc_share_hands_every_batch_over_and_both_sides_count_them(tmp_path):
    records, stdout = base.run_job(tmp_path, [str(EXAMPLES / "ipc_share.py"), *TINY_SHARE])
    assert "mean answer" in stdout
    sent = sum(r.ipc_sent.get("cpu", 0) for r in records.values())
    received = sum(r.ipc_received.get("cpu", 0) for r in records.values())
    assert sent == received == 6   # CPU tensors: shared memory, not CUDA IPC
    assert Feature.CUDA_IPC not in used_by_job(records.values())


@pytest.mark.slow
def test_the_same_seed_gives_the_same_run(tmp_path):
    """Deterministic: two runs of the example print the same answer."""
    argv = [sys.executable, str(EXAMPLES / "ipc_share.py"), *TINY_SHARE]
    runs = [subprocess.run(argv, capture_output=True, text=True, timeout=300, check=True).stdout for _ in range(2)]
    answers = [[line for line in run.splitlines() if line.startswith("mean answer")] for run in runs]
    assert answers[0] == answers[1] and answers[0]
