"""The one OOM rule (alloctune/runtime/oom.py) over every OOM message the fixtures hold, the libraries' own (as
torch's checks print them), torch's own exception class, cuDNN's likely OOM, and errors that are not OOMs; and the
rule as each user of it applies it: `dump_on_oom`'s excepthook, a command trial whose process dies of an uncaught
OOM (the start-up hook's excepthook, then the trial's verdict), and diagnose, which reads logs by the same words."""
import sys
from pathlib import Path

import pytest
import torch

from alloctune.diagnosis.message import likely_error, outside_error, readings
from alloctune.results.records import TrialState
from alloctune.runtime import oomdump
from alloctune.runtime.oom import LIKELY_MARKS, OUTSIDE_MARKS, is_oom, is_oom_text, oom_line
from alloctune.settings.conf import AllocConf
from alloctune.trial.command import run_command_trial
from alloctune.trial.task import TrialTask
from alloctune.workload.command import check_command, command_workload

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "oom"
MESSAGES = sorted(FIXTURES.glob("public/*.txt")) + sorted(FIXTURES.glob("h200/*/oom-rank*.txt"))
# As torch's checks print a library's failed allocation (aten/src/ATen/cuda/Exceptions.h, native/cuda/CuFFTUtils.h)
LIBRARIES = ["RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
             "RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED",   # cuDNN 9
             "RuntimeError: cuFFT error: CUFFT_ALLOC_FAILED",
             "RuntimeError: cusolver error: CUSOLVER_STATUS_ALLOC_FAILED, when calling `cusolverDnCreate(handle)`. ",
             "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
             "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error "
             "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\nncclUnhandledCudaError: Call to CUDA "
             "function failed.\nLast error:\nCuda failure 2 'out of memory'"]
NOT_OOM = ["RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)",
           "ValueError: memory_format must be a torch.memory_format", "CUDA error: device-side assert triggered",
           "KeyboardInterrupt", ""]


def test_the_fixtures_hold_messages():
    assert len(MESSAGES) >= 20


@pytest.mark.parametrize("path", MESSAGES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_fixture_message_is_an_oom_as_text_as_an_exception_and_as_a_line_of_output(path):
    text = path.read_text(errors="replace")
    assert is_oom_text(text)
    assert is_oom(RuntimeError(text))
    line = oom_line("starting\n" + text + "\n")
    assert line is not None and is_oom_text(line) and line == line.strip()


@pytest.mark.parametrize("text", LIBRARIES)
def test_a_librarys_failed_allocation_is_an_oom_and_diagnose_names_it_by_the_same_words(text):
    assert is_oom_text(text) and is_oom(RuntimeError(text)) and oom_line("step 3\n" + text) is not None
    assert outside_error(readings(text)) in OUTSIDE_MARKS


def test_every_mark_is_the_trials_and_diagnoses_alike():
    for mark in OUTSIDE_MARKS:
        assert is_oom_text(f"RuntimeError: {mark}") and outside_error(readings(f"RuntimeError: {mark}\n")) == mark, mark
    for mark in LIKELY_MARKS:
        assert not is_oom_text(mark) and likely_error(readings(f"RuntimeError: {mark}\n")) == mark, mark


@pytest.mark.parametrize("num_ooms, counts", [(1, True), (0, False), (None, False)])
def test_cudnns_convolution_without_an_algorithm_is_an_oom_where_the_allocator_ran_out(monkeypatch, num_ooms,
                                                                                       counts):
    """A workspace the caching allocator could not give counts in torch's num_ooms (caught, the next algorithm
    tried); without one, a convolution cuDNN cannot run is not called out of memory. None: CUDA never started."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: num_ooms is not None)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device: {"num_ooms": num_ooms if device == 1 else 0})
    for mark in LIKELY_MARKS:
        assert is_oom(RuntimeError(mark)) is counts, mark
    assert not is_oom(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


@pytest.mark.parametrize("text", NOT_OOM)
def test_other_errors_are_not(text):
    assert not is_oom_text(text) and not is_oom(RuntimeError(text)) and oom_line(text) is None


def test_torchs_exception_class_counts_whatever_its_message_and_so_does_a_subclass():
    assert is_oom(torch.OutOfMemoryError("")) and is_oom(torch.cuda.OutOfMemoryError("no text"))

    class Retried(torch.OutOfMemoryError):
        pass

    assert is_oom(Retried("gave up"))
    assert is_oom(RuntimeError("CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"))


def test_the_last_oom_line_of_output_is_the_one_kept():
    out = "epoch 1\nRuntimeError: CUDA out of memory. first\nretrying\n  torch.OutOfMemoryError: second  \nbye\n"
    assert oom_line(out) == "torch.OutOfMemoryError: second"


def test_dump_on_oom_saves_the_message_of_an_uncaught_oom_and_only_of_one(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(oomdump, "_state", {"stem": str(tmp_path / "oom-rank0"),
                                            "previous_hook": lambda *args: seen.append(args[0])})
    oomdump._excepthook(ValueError, ValueError("not memory"), None)
    assert not (tmp_path / "oom-rank0.txt").exists()
    message = "Allocation on device 0 would exceed allowed memory. (out of memory)"   # cudaMallocAsync's
    oomdump._excepthook(torch.OutOfMemoryError, torch.OutOfMemoryError(message), None)
    assert (tmp_path / "oom-rank0.txt").read_text() == message
    assert seen == [ValueError, torch.OutOfMemoryError]   # the program's own hook still runs


@pytest.mark.parametrize("raised, message", [
    ("torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB.')",
     "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."),
    ("RuntimeError('CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)')",
     "RuntimeError: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)"),
    ("RuntimeError('cuDNN error: CUDNN_STATUS_ALLOC_FAILED')", "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
    ("RuntimeError('shapes cannot be multiplied')", None),
    # the allocator never ran out here (no CUDA): cuDNN had no algorithm for another reason
    ("RuntimeError('Unable to find a valid cuDNN algorithm to run convolution')", None),
])
def test_a_command_that_dies_of_an_uncaught_oom_is_an_oom_trial(raised, message):
    """The hook's excepthook applies the rule in the command's own process (which marked a step, so it reports);
    the trial then takes the hook's message."""
    program = f"import alloctune, torch\nalloctune.step()\nraise {raised}\n"
    spec = command_workload(check_command([sys.executable, "-c", program]))
    task = TrialTask(spec.to_dict(), spec.digest(), AllocConf.parse(""), 0, sys.executable, "torch-test",
                     timeout_s=60)
    record = run_command_trial(task)
    if message is None:
        assert record.state is TrialState.CRASHED and record.error.startswith("the command exited with status 1")
    else:
        assert (record.state, record.error) == (TrialState.OOM, message)


def test_the_words_are_found_in_any_case_in_a_log_of_the_size_diagnose_reads():
    """Each word as the text writes it, in any case, also after U+0130 (the one character whose lower case is two);
    and none in the 64 MiB diagnose reads of a log, searched twice (its two readings; its time is
    benchmarks/diagnose_speed.py's: a case-insensitive pattern of the many words took 20 s)."""
    assert outside_error(["\u0130 x cuda ERROR: Out Of Memory y"]) == "cuda ERROR: Out Of Memory"
    assert oom_line("ok\n\u0130\u0130 torch.outofmemoryerror: ...\nok") == "\u0130\u0130 torch.outofmemoryerror: ..."
    log = "step 1 loss 2.3 lr 1e-05 tokens/s 12345 Memory Allocated 61.2 GiB\n" * (2**26 // 64)
    assert outside_error([log, log]) is None and likely_error([log, log]) is None
