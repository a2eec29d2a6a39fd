"""`alloctune diagnose` on OOM messages: every layout torch has printed (real messages from public reports,
tests/fixtures/oom/public/SOURCES.md), the verdict each gets, and the command's conventions (stdin, --json,
one line and exit 2 for bad input)."""
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from alloctune.diagnosis import diagnose
from alloctune.diagnosis.message import parse_message
from alloctune.errors import DiagnoseError
from alloctune.results.records import TrialRecord, TrialState
from alloctune.results.trials import TrialStore

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ROOT / "tests" / "fixtures" / "oom" / "public"
MiB, GiB = 2**20, 2**30


def run_cli(*args, stdin: bytes | None = None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "alloctune", "diagnose", *map(str, args)], input=stdin,
                          capture_output=True, env=env, cwd=ROOT, timeout=120)


# file, layout (start of OomMessage.format), cause, sure
CASES = [
    ("v1early-cached.txt", "early torch 1.x", "fragmentation", True),
    ("v1-allowed-shortage.txt", "torch 1.x-2.0", "shortage", True),
    ("v1-allowed-budget.txt", "torch 1.x-2.0", "budget", False),     # the request equals the budget: at the limit
    ("v1_13-others.txt", "torch 1.x-2.0", "other-processes", True),
    ("v2_1-pid-frag.txt", "torch 2.1", "fragmentation", True),
    ("v2_1-shortage.txt", "torch 2.1", "shortage", True),
    ("v2_2-wrapped-frag.txt", "torch 2.2+", "fragmentation", True),
    ("v2_x-private-pools.txt", "torch 2.2+", "fragmentation", True),
    ("v2_x-budget.txt", "torch 2.2+", "budget", True),
    ("v2_11-h200-budget-frag.txt", "torch 2.2+", "fragmentation", True),
]


@pytest.mark.parametrize("name,layout,cause,sure", CASES)
def test_every_layout_is_read_and_judged(name, layout, cause, sure):
    d = diagnose(PUBLIC / name)
    assert d.message is not None and d.message.format.startswith(layout)
    assert d.verdict is not None and (d.verdict.cause, d.verdict.sure) == (cause, sure)
    assert d.verdict.next_steps and d.verdict.reasons


def _pools_message(printed: str, pools: str, unallocated: str) -> str:
    """torch 2.2+'s words for a 3 GiB request with 1 GiB free, P free in CUDA graph pools."""
    return ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity of "
            "79.18 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 78.08 GiB memory in "
            f"use. Of the allocated memory {printed} is allocated by PyTorch, with {pools} allocated in private pools "
            f"(e.g., CUDA Graphs), and {unallocated} is reserved by PyTorch but unallocated.")


def test_a_message_where_graph_pools_hold_the_memory(tmp_path):
    """torch counts the pools' free memory in 'allocated by PyTorch' and leaves it out of 'reserved but
    unallocated' (CUDACachingAllocator.cpp: allocated_bytes + allocated_in_private_pools): of 76 GiB, 71 GiB are
    live; 1 GiB unused outside the 5 GiB of pools, 1 GiB free: the 3 GiB request fits only with the graphs' memory.
    Read as if the pools were part of the 1 GiB, the figures were refused as impossible."""
    path = tmp_path / "oom.txt"
    path.write_text(_pools_message("76.00 GiB", "5.00 GiB", "1.00 GiB"))
    d = diagnose(path)
    assert (d.verdict.cause, d.verdict.sure, d.facts.graph_pools_free) == ("graph-pools", True, 5 * GiB)
    assert (d.facts.allocated, d.facts.reserved, d.facts.unallocated) == (71 * GiB, 77 * GiB, 6 * GiB)
    assert "CUDA graph pools hold the memory" in d.verdict.summary


def test_graph_pools_free_memory_is_not_taken_from_the_unused_cache_outside_them(tmp_path):
    """6 GiB unused outside the pools and 1 GiB free cover the 3 GiB request without the pools: fragmentation."""
    path = tmp_path / "oom.txt"
    path.write_text(_pools_message("70.00 GiB", "5.00 GiB", "6.00 GiB"))
    d = diagnose(path)
    assert d.verdict.cause == "fragmentation" and d.facts.allocated == 65 * GiB
    assert d.facts.unallocated == 11 * GiB and d.verdict.numbers["graph_pools_free"] == 5 * GiB


def test_figures_of_the_2_1_layout():
    m = parse_message((PUBLIC / "v2_1-shortage.txt").read_text())
    assert m.requested == 32 * GiB and m.gpu == 0
    assert m.device_total == round(23.69 * GiB) and m.device_free == round(14.12 * GiB)
    assert m.allocated == 9 * GiB and m.reserved == 9 * GiB + round(982.50 * 1024)
    assert m.this_process == round(9.30 * GiB) and m.processes == ((2006998, 256 * MiB),)
    assert m.hint == "max_split_size_mb" and m.precision == round(0.005 * GiB)


def test_figures_of_the_1_x_layouts():
    early = parse_message((PUBLIC / "v1early-cached.txt").read_text())
    # 'cached' was the cache beyond the allocated memory: reserved = allocated + cached
    assert early.reserved == round(10.38 * GiB) + round(2.99 * GiB)
    late = parse_message((PUBLIC / "v1-allowed-shortage.txt").read_text())
    assert (late.allowed, late.reserved, late.allocated) == (round(2.37 * GiB), round(5.05 * GiB),
                                                             round(192.29 * MiB))
    assert late.processes == () and late.this_process is None


def test_private_pools_budget_and_the_issue_example():
    pools = parse_message((PUBLIC / "v2_x-private-pools.txt").read_text())
    assert pools.private_pools == round(1.38 * MiB) and pools.gpu == 4
    assert pools.hint == "expandable_segments:True"
    # 1.38 MiB in graph pools leaves the fragmentation verdict as it was, and is quoted among its figures
    public = diagnose(PUBLIC / "v2_x-private-pools.txt")
    assert public.verdict.cause == "fragmentation" and public.verdict.numbers["graph_pools_free"] == round(1.38 * MiB)
    h200 = diagnose(PUBLIC / "v2_11-h200-budget-frag.txt")
    assert h200.facts is not None and h200.facts.allowed == 28 * GiB
    assert h200.facts.processes == ((1904, 518 * MiB),)
    # live 19.75 GiB + 3.44 GiB fit the 28 GiB budget: 5.03 GiB of cache was stuck in pieces
    assert "expandable_segments:True" in " ".join(h200.verdict.next_steps)


def test_this_process_is_told_from_the_others_when_nvml_lists_it_by_pid():
    d = diagnose(PUBLIC / "v2_1-pid-frag.txt")
    assert d.facts.processes == () and d.facts.this_process == round(14.73 * GiB)
    assert any("process 3258" in w for w in d.warnings)


def test_wrapped_and_repeated_messages(tmp_path):
    flat = parse_message(" ".join((PUBLIC / "v2_2-wrapped-frag.txt").read_text().split()))
    assert parse_message((PUBLIC / "v2_2-wrapped-frag.txt").read_text()) == flat
    log = tmp_path / "job.log"
    log.write_text("step 1\n" + (PUBLIC / "v2_1-shortage.txt").read_text() + "retrying\n"
                   + (PUBLIC / "v2_x-budget.txt").read_text() + "Traceback (most recent call last):\n  ...\n")
    d = diagnose(log)   # both messages read, the worst detailed: a shortage no setting fixes, over a budget
    assert [o.verdict.cause for o in d.ooms] == ["shortage", "budget"] and d.verdict.cause == "shortage"


def test_the_cudamallocasync_message():
    text = ("torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)\n"
            "Currently allocated     : 10.00 GiB\nRequested               : 2.00 GiB\n"
            "Device limit            : 79.15 GiB\nFree (according to CUDA): 1.00 GiB\n"
            "PyTorch limit (set by user-supplied memory fraction)\n                        : 79.15 GiB")
    m = parse_message(text)
    assert (m.requested, m.allocated, m.device_free, m.gpu) == (2 * GiB, 10 * GiB, GiB, 0)


def test_cli_text_json_and_stdin():
    text = run_cli(PUBLIC / "v2_x-budget.txt")
    assert text.returncode == 0, text.stderr
    out = text.stdout.decode()
    assert "Verdict (budget)" in out and "Next steps:" in out
    assert max(len(line) for line in out.splitlines()) <= 100
    piped = run_cli("-", "--json", stdin=(PUBLIC / "v1_13-others.txt").read_bytes())
    assert piped.returncode == 0, piped.stderr
    data = json.loads(piped.stdout)
    assert data["cause"] == "other-processes" and data["message"]["requested_bytes"] == 20 * MiB
    assert data["verdict"]["numbers"]["other_processes"] > 10 * GiB - 1024 * MiB


def test_a_results_folder_is_diagnosed_from_its_failed_trial(tmp_path):
    store = TrialStore(tmp_path / "trials.jsonl")
    message = (PUBLIC / "v2_11-h200-budget-frag.txt").read_text()
    store.append(TrialRecord("w", "h", "", 0, "torch-2.11.0", "cuda", TrialState.OOM, budget_bytes=28 * GiB,
                             error=message))
    assert diagnose(tmp_path).verdict.cause == "fragmentation"
    empty = tmp_path / "ok"
    TrialStore(empty / "trials.jsonl").append(
        TrialRecord("w", "h", "", 0, "torch-2.11.0", "cuda", TrialState.CRASHED, error="boom"))
    result = run_cli(empty)
    assert result.returncode == 2 and b"no trial that ended in an OOM" in result.stderr


def bad_inputs(tmp: Path) -> list[tuple[Path, str]]:
    (tmp / "empty.txt").write_text("")
    (tmp / "other.txt").write_text("RuntimeError: shape mismatch\n")
    (tmp / "noreq.txt").write_text("CUDA out of memory. GPU 0 has a total capacity of 1.00 GiB")
    (tmp / "hostile.pickle").write_bytes(pickle.dumps({"device_traces": [], "x": os.system}, protocol=4))
    (tmp / "folder").mkdir()
    return [(tmp / "empty.txt", "is empty"),
            (tmp / "other.txt", "no CUDA out-of-memory message"),
            (tmp / "noreq.txt", "Tried to allocate"),
            (tmp / "hostile.pickle", "refused"),
            (tmp / "folder", "not a results folder"),
            (tmp / "missing.txt", "cannot read"),
            (ROOT / "workloads" / "traces" / "llm-decode-h200.xz", "compact alloctune trace")]


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for path, says in bad_inputs(tmp_path):
        result = run_cli(path)
        err = result.stderr.decode()
        assert result.returncode == 2, (path, err)
        assert len(err.strip().splitlines()) == 1 and says in err and "Traceback" not in err, (path, err)


@pytest.mark.parametrize("log, named", [
    ("RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED\n", "CUDNN_STATUS_ALLOC_FAILED"),
    ("RuntimeError: cuDNN Frontend error: [cudnn_frontend] Error: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED"
     "\n", "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED"),
    ("torch._C._LinAlgError: cusolver error: CUSOLVER_STATUS_ALLOC_FAILED, when calling `cusolverDnCreate(&handle)`"
     ". \n", "CUSOLVER_STATUS_ALLOC_FAILED"),
    ("RuntimeError: cuFFT error: CUFFT_ALLOC_FAILED\n", "CUFFT_ALLOC_FAILED"),
    ("torch.OutOfMemoryError: Not enough memory for workspace!\n", "Not enough memory for workspace!"),
    ("[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error\n"
     "[rank1]: ncclUnhandledCudaError: Call to CUDA function failed.\n[rank1]: Last error:\n"
     "[rank1]: Cuda failure 2 'out of memory'\n", "Cuda failure 2 'out of memory'"),
])
def test_a_librarys_out_of_memory_is_named_as_one_without_figures(tmp_path, log, named):
    """cuDNN, cuSOLVER, cuFFT and NCCL fail for want of memory outside the caching allocator, in words of their
    own."""
    path = tmp_path / "job.log"
    path.write_text("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n" + log)
    result = run_cli(path)
    err = result.stderr.decode()
    assert result.returncode == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"holds '{named}', an out-of-memory error" in err and "which prints no figures" in err


def test_a_message_without_the_allocated_figures_is_refused():
    with pytest.raises(DiagnoseError):
        parse_message("CUDA out of memory. Tried to allocate 2.00 MiB. and nothing else")


def test_a_snapshots_graph_pool_segments_are_counted(tmp_path):
    """The free blocks of segments whose segment_pool_id names a private pool are the graph pools' free memory."""
    snapshot = pickle.loads((ROOT / "tests" / "fixtures" / "oom" / "h200" / "frag" / "oom-rank0.pickle").read_bytes())
    graph = [s for s in snapshot["segments"] if any(b["state"] == "inactive" for b in s["blocks"])][:2]
    for s in graph:
        s["segment_pool_id"] = (1, 0)
    path = tmp_path / "graphs.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    d = diagnose(path)
    free = sum(b["size"] for s in graph for b in s["blocks"] if b["state"] == "inactive")
    assert d.facts.graph_pools_free == free > 0 and d.verdict.numbers["graph_pools_free"] == free
    assert sum(p.private for p in d.snapshot.pools) >= 1
