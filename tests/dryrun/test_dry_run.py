"""`alloctune record --dry-run -- python3 SCRIPT` as a user runs it, on this machine's torch without a GPU: the
example training scripts (a plain-PyTorch transformer with AdamW, checkpointing, bf16 autocast; a CNN) traced end to
end, the trace read back and replayed, and what the dry run refuses said in one line."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from clirun import ROOT, cli

from alloctune.dryrun import cards
from alloctune.sim.trace import ALLOC, load_trace

pytestmark = pytest.mark.slow
TINY = ["--steps", "3", "--batch", "4", "--seq", "32", "--layers", "3", "--d-model", "64", "--heads", "4",
        "--vocab", "256", "--log-every", "1"]


def dry_run(tmp_path: Path, *argv: str, name: str = "trace.xz") -> tuple[object, str]:
    out = tmp_path / name
    done = cli("record", "--dry-run", "-o", out, "--", sys.executable, *argv, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return load_trace(out), done.stderr + done.stdout


def live_peak(trace) -> int:
    """The most bytes live at once, from the trace's own allocations and frees."""
    live = peak = 0
    for kind, size in zip(trace.kinds, trace.sizes):
        live += size if kind == ALLOC else -size if kind == 1 else 0
        peak = max(peak, live)
    return peak


def test_a_transformer_traced_as_the_allocator_would_see_it(tmp_path):
    trace, said = dry_run(tmp_path, "examples/gpt_train.py", *TINY)
    assert "Dry run (no GPU)" in said and "item: 3" in said   # the loss printed each step: a made-up value
    dry = trace.meta["dry_run"]
    assert dry["card"] == cards.CARDS["h100"].name and dry["invented"] == {"item": 3}
    assert trace.meta["measured"] == [] and trace.meta["device_total_bytes"] == cards.CARDS["h100"].total_memory
    # the parameters moved to the GPU, in the model's order and sizes, then the cuBLAS workspace at the first GEMM
    sys.path.insert(0, str(ROOT / "examples"))
    import gpt_train

    model = gpt_train.LM(gpt_train.parse_args(TINY))
    expected = [p.numel() * 4 for p in model.parameters()]
    sizes = [s for k, s in zip(trace.kinds, trace.sizes) if k == ALLOC]
    assert sizes[:len(expected)] == expected
    # cuBLAS's workspace for the program's thread and for backward's (the autograd engine's thread on a GPU), and
    # cuBLASLt's at the first nn.Linear, right after the first one: as the H100 recordings show them
    assert sizes.count(32 << 20) == 2 and sizes.count(1 << 20) == 1 and dry["cublas_workspace_bytes"] == 32 << 20
    first = sizes.index(32 << 20)
    assert sizes[first + 1] == 1 << 20
    assert len(trace.meta["step_ends"]) == 3   # the optimizer's steps, counted by the start-up hook
    replayed = cli("replay", tmp_path / "trace.xz", "--json", "--conf", "default", "--conf",
                   "expandable_segments:True")
    assert replayed.returncode == 0, replayed.stderr
    peaks = {r["conf"]: r["peak_reserved_bytes"] for r in json.loads(replayed.stdout)["results"]}
    assert all(p >= live_peak(trace) for p in peaks.values())


def test_checkpointing_and_autocast_keep_less_for_backward(tmp_path):
    plain = live_peak(dry_run(tmp_path, "examples/gpt_train.py", *TINY, name="plain.xz")[0])
    recomputed = live_peak(dry_run(tmp_path, "examples/gpt_train.py", *TINY, "--checkpoint", name="ck.xz")[0])
    halved = live_peak(dry_run(tmp_path, "examples/gpt_train.py", *TINY, "--autocast", name="bf16.xz")[0])
    assert recomputed < plain and halved < plain


def test_what_is_not_traced_is_refused_in_one_line(tmp_path):
    script = tmp_path / "compiled.py"
    script.write_text("import torch\nf = torch.compile(lambda x: x * 2)\nprint(f(torch.ones(2, device='cuda')))\n")
    done = cli("record", "--dry-run", "-o", tmp_path / "t.xz", "--", sys.executable, script, timeout=600)
    assert done.returncode != 0 and not (tmp_path / "t.xz").exists()
    last = done.stderr.strip().splitlines()[-1]
    assert "torch.compile is not traced by a dry run" in last and "Traceback" not in done.stderr


def test_an_unknown_card_is_refused_before_anything_runs(tmp_path):
    done = cli("record", "--dry-run", "--arch", "sm12", "-o", tmp_path / "t.xz", "--", sys.executable, "-c", "pass")
    assert done.returncode == 2 and "--arch 'sm12'" in done.stderr and "h100" in done.stderr


def test_the_table_row_and_the_workspace_setting():
    assert cards.row("2.13.0+cpu", "sm90").key == "torch 2.11 sm90"   # the nearest version the table holds
    assert cards.row(torch.__version__, "sm80").arch == "sm80"
    row = cards.row("2.11.0", "sm90")
    assert cards.cublas_workspace(row) == 32 << 20
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:2:16:8")
        assert cards.cublas_workspace(row) == (4096 * 2 + 16 * 8) * 1024
