"""`alloctune record --dry-run -- python3 SCRIPT` as a user runs it, on this machine's torch without a GPU, against
recordings of the same scripts on an H100 (tests/fixtures/dryrun/, torch 2.11.0+cu130, recorded by the `dryrun`
evidence job on 2026-12-06 with the command each trace's metadata names): the tiny plain-PyTorch transformer (AdamW,
memory-efficient attention), with checkpointing, with a length drawn per step, with bf16 autocast (flash attention),
and a CNN (cuDNN convolutions). Each is dry-run end to end through the CLI, read back and replayed.

A CUDA build of torch (what `pip install torch` gives on Linux) on a machine with no GPU, or with its GPU hidden,
is dry-run the same way where one is at hand: this interpreter's torch, or the Python that ALLOCTUNE_CUDA_PYTHON
names (default: ../venv-cu beside the checkout; docs/dry-run.md says how to make one)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from clirun import ROOT, cli
from pids import hear_ctrl_c
from waiting import wait_until

from alloctune.dryrun import cards
from alloctune.sim.trace import ALLOC, FREE, load_trace

pytestmark = pytest.mark.slow
FIXTURES = ROOT / "tests" / "fixtures" / "dryrun"
SETTINGS = ["default", "expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4"]


def cuda_build_python() -> str | None:
    """An interpreter whose torch is a CUDA build: this one's, else ALLOCTUNE_CUDA_PYTHON's (if it has one)."""
    import torch

    if torch.version.cuda:
        return sys.executable
    other = Path(os.environ.get("ALLOCTUNE_CUDA_PYTHON", ROOT.parent / "venv-cu" / "bin" / "python"))
    if not other.exists():
        return None
    probe = subprocess.run([other, "-c", "import torch; print(torch.version.cuda)"], capture_output=True, text=True,
                           timeout=120, check=False)
    return str(other) if probe.returncode == 0 and probe.stdout.strip() not in ("", "None") else None


CUDA_PYTHON = cuda_build_python()
needs_cuda_build = pytest.mark.skipif(CUDA_PYTHON is None, reason="no CUDA build of torch here (this interpreter's "
                                      "is CPU-only; ALLOCTUNE_CUDA_PYTHON names a Python with one)")


def dry_run(tmp_path: Path, fixture: str, python: str = sys.executable) -> tuple[object, object, str]:
    """The GPU's recording of `fixture` and the dry run of the same command (run by `python`), with what record
    printed."""
    gpu = load_trace(FIXTURES / f"{fixture}.xz")
    out = tmp_path / f"{fixture}.xz"
    done = cli("record", "--dry-run", "-o", out, "--", python, *gpu.meta["command"], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return gpu, load_trace(out), " ".join((done.stderr + done.stdout).split())   # wrapped where the path falls


def events(trace) -> list[tuple[int, int]]:
    return [(k, s) for k, s in zip(trace.kinds, trace.sizes) if k in (ALLOC, FREE)]


def replayed(path: Path) -> dict[str, int]:
    done = cli("replay", path, "--json", *[a for conf in SETTINGS for a in ("--conf", conf)])
    assert done.returncode == 0, done.stderr
    return {r["conf"] or "default": r["peak_reserved_bytes"] for r in json.loads(done.stdout)["results"]}


@pytest.mark.parametrize("fixture", ["gpt", "gpt-checkpoint", "gpt-varlen"])
def test_the_allocator_sees_what_the_gpu_saw(tmp_path, fixture):
    """Every allocation and free in the GPU's order, and so the same peaks under every setting."""
    gpu, dry, said = dry_run(tmp_path, fixture)
    assert events(dry) == events(gpu)
    assert dry.meta["step_ends"] == gpu.meta["step_ends"]
    assert replayed(tmp_path / f"{fixture}.xz") == replayed(FIXTURES / f"{fixture}.xz")
    assert replayed(tmp_path / f"{fixture}.xz")["default"] == gpu.meta["measured"][0]["peak_reserved_bytes"]
    assert "a dry run for NVIDIA H100" in said and "Nothing was measured" in said
    assert "made up" not in said   # no value read back: --log-every 5 > 4 steps
    meta = dry.meta["dry_run"]
    assert meta["card"] == cards.CARDS["h100"].name == gpu.meta["env"]["gpu"] and meta["invented"] == {}
    assert dry.meta["measured"] == [] and dry.meta["device_total_bytes"] == gpu.meta["device_total_bytes"]


@needs_cuda_build
@pytest.mark.parametrize("fixture", ["gpt", "cnn"])
def test_a_cuda_build_without_a_gpu_traces_what_a_cpu_build_does(tmp_path, fixture):
    """The CUDA build's own CUDA is never asked for a device (there is none, or it is hidden): the same events as the
    GPU's recording (the CNN's short of cuDNN's workspaces), the same peaks under every setting."""
    gpu, dry, said = dry_run(tmp_path, fixture, CUDA_PYTHON)
    assert "a dry run for NVIDIA H100" in said
    if fixture == "gpt":
        assert events(dry) == events(gpu)
    assert replayed(tmp_path / f"{fixture}.xz") == replayed(FIXTURES / f"{fixture}.xz")


@needs_cuda_build
def test_a_cuda_build_sees_no_gpu_even_where_the_program_picks_one(tmp_path):
    """A program that sets CUDA_VISIBLE_DEVICES itself, and asks CUDA (not torch.cuda, which the dry run answers):
    CUDA was started with every GPU hidden before the program ran, so it finds none on a machine that has one."""
    script = tmp_path / "picks.py"
    script.write_text("import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '0'\nimport torch\n"
                      "print('CUDA sees', torch._C._cuda_getDeviceCount(), 'devices')\n"
                      "print((torch.ones(4, device='cuda') * 2).device)\n")
    done = cli("record", "--dry-run", "-o", tmp_path / "t.xz", "--", CUDA_PYTHON, script, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CUDA sees 0 devices" in done.stderr and "cuda:0" in done.stderr   # the program's output, on stderr


def test_autocast_differs_only_in_the_order_of_its_cast_caches_frees(tmp_path):
    """Leaving autocast frees its cached bf16 copies of the weights in the order of a C++ hash map: the same frees,
    at the same point, in another order; the peaks are the GPU's."""
    gpu, dry, _ = dry_run(tmp_path, "gpt-autocast")
    assert sorted(events(dry)) == sorted(events(gpu)) and len(events(dry)) == len(events(gpu))
    assert [s for k, s in events(dry) if k == ALLOC] == [s for k, s in events(gpu) if k == ALLOC]
    assert replayed(tmp_path / "gpt-autocast.xz") == replayed(FIXTURES / "gpt-autocast.xz")


def test_a_cnn_misses_only_cudnns_workspaces(tmp_path):
    """cuDNN takes a workspace around each convolution, sized by the algorithm it picks on the card: all that the dry
    run lacks; the peaks under every setting are the GPU's here."""
    gpu, dry, _ = dry_run(tmp_path, "cnn")
    missing = [s for k, s in events(gpu) if k == ALLOC]
    for size in (s for k, s in events(dry) if k == ALLOC):
        missing.remove(size)
    kept = {a for k, a in zip(gpu.kinds, gpu.addrs) if k == ALLOC} - {a for k, a in zip(gpu.kinds, gpu.addrs) if k == FREE}
    assert missing and all(size not in kept for size in missing)   # each one given back: a workspace
    assert replayed(tmp_path / "cnn.xz") == replayed(FIXTURES / "cnn.xz")


def test_what_is_not_traced_is_refused_in_one_line(tmp_path):
    script = tmp_path / "compiled.py"
    script.write_text("import torch\nf = torch.compile(lambda x: x * 2)\nprint(f(torch.ones(2, device='cuda')))\n")
    done = cli("record", "--dry-run", "-o", tmp_path / "t.xz", "--", sys.executable, script, timeout=600)
    assert done.returncode != 0 and not (tmp_path / "t.xz").exists()
    last = done.stderr.strip().splitlines()[-1]
    assert "torch.compile is not traced by a dry run" in last and "Traceback" not in done.stderr


# An optimizer's steps, as many as its first argument says; it writes `started` once the first one is done.
STEPS = """import sys, time, torch
model = torch.nn.Linear(64, 64).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(int(sys.argv[1])):
    model(torch.ones(8, 64, device="cuda")).sum().backward()
    opt.step()
    if step == 0:
        open("started", "w").close()
    time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0)
sys.exit(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
"""


def test_a_command_that_fails_keeps_no_trace_and_exits_1_not_as_bad_input(tmp_path):
    """Exit 2 is what alloctune was given wrong; a job that fails is said in one line naming its status."""
    (tmp_path / "job.py").write_text(STEPS)
    done = cli("record", "--dry-run", "-o", tmp_path / "t.xz", "--", sys.executable, "job.py", "2", "0", "3",
               cwd=tmp_path, timeout=600)
    assert done.returncode == 1 and not (tmp_path / "t.xz").exists(), done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1].endswith("exited with status 3: a trace of a failed run is not kept")


def test_a_command_that_ends_before_its_window_is_traced_whole_with_a_notice(tmp_path):
    (tmp_path / "job.py").write_text(STEPS)
    done = cli("record", "--dry-run", "--steps", "10", "-o", tmp_path / "t.xz", "--", sys.executable, "job.py", "3",
               cwd=tmp_path, timeout=600)
    assert done.returncode == 0 and (tmp_path / "t.xz").exists(), done.stderr[-3000:]
    said = " ".join(done.stderr.split())   # wrapped
    assert (f"notice: {sys.executable} ended after 3 steps, before the end of its --steps window (2 warm-up steps + "
            f"10): the trace covers its whole run") in said, done.stderr


def test_a_dry_run_sweep_of_a_command_that_ends_before_its_window_says_so_as_record_does(tmp_path):
    (tmp_path / "job.py").write_text(STEPS)
    done = cli("sweep", "--dry-run", "--steps", "10", "--conf", "expandable_segments:True", "--out", tmp_path / "r",
               "--", sys.executable, "job.py", "3", cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    said = " ".join(done.stderr.split())   # wrapped
    assert "notice: " in said and "ended after 3 steps, before the end of its --steps window (2 warm-up steps + 10): " \
        "the trace covers its whole run" in said, done.stderr


def test_an_interrupted_dry_run_keeps_no_trace_and_offers_a_window(tmp_path):
    """A long job interrupted: nothing to keep, and --steps N, which would have ended it, is said."""
    (tmp_path / "job.py").write_text(STEPS)
    proc = subprocess.Popen([sys.executable, "-m", "alloctune", "record", "--dry-run", "-o", str(tmp_path / "t.xz"),
                             "--", sys.executable, "job.py", "100000", "0.05"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            preexec_fn=hear_ctrl_c)
    wait_until(lambda: proc.poll() is not None or (tmp_path / "started").exists(), 300, "the job's first step")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT and not (tmp_path / "t.xz").exists(), err[-3000:]
    assert err.strip().splitlines()[-1] == ("alloctune: interrupted; no trace was kept; --steps N ends your command "
                                            "after N steps past the warm-up")


def test_an_unknown_card_is_refused_before_anything_runs(tmp_path):
    done = cli("record", "--dry-run", "--arch", "sm12", "-o", tmp_path / "t.xz", "--", sys.executable, "-c", "pass")
    assert done.returncode == 2 and "--arch 'sm12'" in done.stderr and "h100" in done.stderr


def test_the_table_row_and_the_workspace_setting():
    assert cards.row("2.13.0+cpu", "sm90").key == "torch 2.11 sm90"   # the nearest version the table holds
    row = cards.row("2.11.0", "sm90")
    assert cards.cublas_workspace(row) == 32 << 20 and row.cublaslt_workspace_bytes == 1 << 20
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:2:16:8")
        assert cards.cublas_workspace(row) == (4096 * 2 + 16 * 8) * 1024
