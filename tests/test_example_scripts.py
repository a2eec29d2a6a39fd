"""The example user jobs of examples/ run to their end on the CPU at tiny sizes, each in a fresh interpreter the way
a user starts it (`python3 examples/X.py ...`, the DDP one under torchrun with gloo), and print their closing line.
Those that need lightning, transformers or torch_geometric skip where that library is missing (CI has only torch);
the plain-PyTorch ones (ddp_train.py, long_train.py, empty_cache_train.py) always run."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest

from clirun import ROOT

TINY_LM = ["--layers", "1", "--d-model", "32", "--heads", "2", "--vocab", "200"]


def started(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python3 ARGV` from the checkout's root, run to its end."""
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def run(*argv: str, timeout: float = 120) -> str:
    """`python3 ARGV` from the checkout's root; its stdout, after asserting it exited 0."""
    return ended(started(*argv, timeout=timeout))


def ended(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_long_train_runs_and_repeats_itself():
    argv = ["examples/long_train.py", "--steps", "6", *TINY_LM, "--max-len", "32", "--bucket", "8",
            "--tokens", "64", "--log-every", "3"]
    first, second = run(*argv), run(*argv)
    assert "done, 6 steps" in first
    losses = re.findall(r"loss (\S+)", first)
    assert len(losses) == 2 and losses == re.findall(r"loss (\S+)", second)   # seeded: the same run twice


def test_empty_cache_train_runs_on_the_cpu():
    out = run("examples/empty_cache_train.py", "--steps", "3", *TINY_LM, "--min-len", "4", "--max-len", "16",
              "--batch", "1", "3", "--log-every", "1")
    assert "empty_cache after each: False" in out and "step 3:" in out and "done, 3 steps" in out
    out = run("examples/empty_cache_train.py", "--steps", "6", *TINY_LM, "--min-len", "4", "--max-len", "16",
              "--batch", "1", "3", "--log-every", "0", "--alternate", "2")
    assert "every other block of 2" in out and "(2 and 2 steps)" in out   # the first block is the warm-up


def test_ddp_train_under_torchrun_with_gloo():
    argv = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "examples/ddp_train.py",
            "--steps", "3", *TINY_LM, "--batch", "1", "3", "--seq-len", "4", "16", "--log-every", "1"]
    proc = started(*argv)
    if proc.returncode != 0 and GLOO_TEARDOWN in proc.stderr and proc.stdout.count(", 3 steps") == 2:
        # every rank finished, then one aborted inside gloo's teardown, after the barrier and the
        # destroy_process_group the example makes (seen once in a clean-clone CI run on 2026-12-06): once more
        proc = started(*argv)
    out = ended(proc)
    assert "2 ranks on cpu" in out
    assert "rank 0: done, 3 steps" in out and "rank 1: done, 3 steps" in out


GLOO_TEARDOWN = "terminate called without an active exception"


def test_hf_trainer_gpt2():
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")   # transformers' Trainer requires it
    out = run("examples/hf_trainer_gpt2.py", "--steps", "3", "--batch", "2", *TINY_LM, "--seq-len", "4", "32",
              "--median-len", "8", "--log-every", "1")
    assert "done, 3 steps" in out


def test_lightning_bert():
    pytest.importorskip("transformers")
    if importlib.util.find_spec("lightning") is None:
        pytest.importorskip("pytorch_lightning")
    out = run("examples/lightning_bert.py", "--steps", "3", *TINY_LM, "--batch", "2", "3", "--seq-len", "4", "16",
              "--log-every", "1")
    assert "step 3/3 loss" in out and "done, 3 steps" in out


def test_generate_varlen():
    pytest.importorskip("transformers")
    out = run("examples/generate_varlen.py", "--steps", "2", *TINY_LM, "--batch", "3", "3", "--prompt-len", "2",
              "8", "--new-tokens", "4", "4", "--log-every", "1")
    assert "done, 2 batches, 24 new tokens" in out   # no end-of-sequence token: every prompt gets all 4


def test_pyg_graphs():
    pytest.importorskip("torch_geometric")
    out = run("examples/pyg_graphs.py", "--steps", "5", "--graphs", "20", "--nodes", "3", "12", "--degree", "1",
              "4", "--hidden", "8", "--layers", "2", "--batch", "8")
    assert "epoch 2 step 5/5" in out and "done, 5 steps" in out   # 20 graphs in batches of 8: 3 steps an epoch


def test_graph_decode_runs_its_decode_steps_eagerly_on_the_cpu():
    out = run("examples/graph_decode.py", "--requests", "3", "--layers", "1", "--d-model", "32", "--heads", "2",
              "--vocab", "100", "--max-len", "32", "--prompt", "4", "8", "--new-tokens", "4")
    assert "0 decode graphs" in out and "done, 3 requests" in out


def test_graph_buckets_runs_every_step_eagerly_on_the_cpu():
    out = run("examples/graph_buckets.py", "--steps", "4", "--layers", "1", "--d-model", "32", "--heads", "2",
              "--vocab", "100", "--buckets", "8", "16", "--min-len", "4", "--batch", "2", "--log-every", "4")
    assert "step 4/4 loss" in out and "done, 4 steps, 0 graphs" in out


def test_cudagraph_train_graphed_runs_the_model_eagerly_on_the_cpu():
    out = run("examples/cudagraph_train.py", "--mode", "graphed", "--steps", "3", "--width", "32", "--layers", "2",
              "--batch", "8", "--eval-every", "2", "--eval-batch", "4", "8", "--log-every", "3")
    assert "--mode graphed" in out and "step 3/3" in out and "final loss" in out


@pytest.mark.slow
def test_cudagraph_train_compiles_for_two_batch_sizes_on_the_cpu():
    out = run("examples/cudagraph_train.py", "--mode", "compile", "--steps", "4", "--width", "32", "--layers", "2",
              "--batch", "8", "6", "--eval-every", "0", "--log-every", "4", timeout=600)
    assert "step 4/4" in out and "final loss" in out


TINY_GPT = ["--steps", "2", "--batch", "2", "--seq", "16", "--layers", "1", "--d-model", "32", "--heads", "2",
            "--vocab", "200", "--log-every", "1"]


@pytest.mark.parametrize("flags", [[], ["--checkpoint", "--autocast"], ["--varlen"]])
def test_gpt_train(flags):
    out = run("examples/gpt_train.py", *TINY_GPT, *flags)
    assert "step 2: loss" in out and "done, 2 steps" in out


@pytest.mark.parametrize("flags", [[], ["--autocast"]])
def test_cnn_train(flags):
    out = run("examples/cnn_train.py", "--steps", "2", "--batch", "2", "--size", "16", "--width", "4", "--stages",
              "2", "--classes", "3", "--log-every", "1", *flags)
    assert "step 2: loss" in out and "done, 2 steps" in out


def test_gpt2_train():
    pytest.importorskip("transformers")
    assert "done, 2 steps" in run("examples/gpt2_train.py", *TINY_GPT[:6], *TINY_LM, "--log-every", "1")


def test_lora_train():
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    out = run("examples/lora_train.py", *TINY_GPT[:6], "--layers", "1", "--d-model", "64", "--heads", "2",
              "--vocab", "200", "--rank", "4", "--log-every", "1")
    assert "done, 2 steps" in out


def test_resnet_train():
    pytest.importorskip("torchvision")
    out = run("examples/resnet_train.py", "--steps", "2", "--batch", "2", "--size", "32", "--arch", "resnet18",
              "--classes", "3", "--log-every", "1")
    assert "done, 2 steps" in out
