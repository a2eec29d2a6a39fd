"""What counts as running out of device memory, and the words that say so: the one rule for the trial child (an
exception), the start-up hook (an uncaught exception), a command trial (its stderr) and `dump_on_oom` (an uncaught
exception), and the one list of those words, which `diagnose` reads logs by (diagnosis/message.py).

torch raises `torch.cuda.OutOfMemoryError` (on recent versions an alias of `torch.OutOfMemoryError`) when the
caching allocator cannot get memory; its message says "CUDA out of memory" (native backend) or "(out of memory)"
(cudaMallocAsync). Allocations outside the caching allocator fail with errors of their own (`OUTSIDE_MARKS`), and
cuDNN's convolutions with one that is most often, not always, a want of memory (`LIKELY_MARKS`). Every word is
matched in any case. The class is matched by name, so this needs no torch import. Standard library only: it runs
inside the user's job.
"""
from __future__ import annotations

import sys

OOM_TYPE = "OutOfMemoryError"
OOM_WORDS = "out of memory"

# Out of memory outside the caching allocator, as torch prints it (checked against PyTorch's sources): CUDA's own
# error (C10_CUDA_CHECK's "CUDA error: " and AT_CUDA_DRIVER_CHECK's "CUDA driver error: " + the error string; THC,
# torch before 0.4: "cuda runtime error (2) : out of memory", "THCudaCheck FAIL ... error=2 : out of memory"), NCCL's
# warning after "unhandled cuda error" (older NCCL without the error's number), and the status names torch's checks
# print for the CUDA libraries: cuBLAS and cuSOLVER (aten/src/ATen/cuda/Exceptions.h), cuFFT (native/cuda/
# CuFFTUtils.h), cuDNN's cudnnGetErrorString (cuDNN 9 names a device allocation INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED;
# no cuDNN has a NOT_ENOUGH_MEMORY status), and cuSPARSE's name as libraries built on it print it (torch prints
# cuSPARSE's own description of the status instead); and torch's refusal of a cuDNN workspace of 1 TiB or more
# (Conv_v7.cpp, Conv_v8.cpp), an OutOfMemoryError that allocates nothing.
OUTSIDE_MARKS = (
    "CUDA error: out of memory", "CUDA driver error: out of memory", "cuda runtime error (2) : out of memory",
    "error=2 : out of memory", "Cuda failure 'out of memory'", "Cuda failure 2 'out of memory'",
    "CUBLAS_STATUS_ALLOC_FAILED", "CUSOLVER_STATUS_ALLOC_FAILED", "CUFFT_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED", "CUSPARSE_STATUS_ALLOC_FAILED",
    "Not enough memory for workspace!")

# What a cuDNN convolution raises once no algorithm ran: PyTorch tries each in turn and skips one whose workspace the
# caching allocator cannot give, and one cuDNN refuses (Conv_v7.cpp's AlgoIterator::try_all; the v8 API's GET and
# FIND searches in Conv_v8.cpp). Most often no workspace fitted, but a convolution this cuDNN does not support ends
# the same way.
LIKELY_MARKS = ("Unable to find a valid cuDNN algorithm to run convolution",
                "GET was unable to find an engine to execute this computation",
                "FIND was unable to find an engine to execute this computation")


class _Words:
    """Words matched in any case: each looked for in the text lowercased, the first in the text kept (on a log of
    tens of megabytes, a case-insensitive pattern of many words takes seconds, forty times as long)."""

    def __init__(self, words: tuple[str, ...]) -> None:
        self._words = tuple(word.lower() for word in words)

    def find(self, text: str) -> str | None:
        """The first of the words in `text` (the longest of those that start there), as `text` writes it; None if
        none."""
        # U+0130 (I with a dot) is the one character whose lower case is two: read as I, positions stay the text's
        low = text.replace("\u0130", "I").lower()
        found = min(((at, -len(word)) for word in self._words if (at := low.find(word)) >= 0), default=None)
        return text[found[0]:found[0] - found[1]] if found else None


_OOM = _Words((OOM_WORDS, OOM_TYPE, *OUTSIDE_MARKS))
_OUTSIDE = _Words(OUTSIDE_MARKS)
_LIKELY = _Words(LIKELY_MARKS)


def is_oom_text(text: str) -> bool:
    """A message, or a line of a process's output, that reports running out of device memory."""
    return _OOM.find(text) is not None


def outside_allocator(text: str) -> str | None:
    """The words, as `text` writes them, of an out-of-memory error from outside the caching allocator (the first
    in `text`); None if it holds none."""
    return _OUTSIDE.find(text)


def likely_oom(text: str) -> str | None:
    """The words, as `text` writes them, of an error that is most often, not always, out of memory; None if none."""
    return _LIKELY.find(text)


def is_oom(exc: BaseException) -> bool:
    """An exception that reports running out of device memory: torch's OutOfMemoryError (or a subclass), any error
    whose message says so, and cuDNN's convolution without an algorithm only where the caching allocator ran out in
    this process (a workspace it could not give), as a command trial counts the allocator's OOMs (trial/command.py):
    a convolution this cuDNN cannot run stays a crash with its message, not a "does not fit" every setting shares."""
    text = str(exc)
    return (any(cls.__name__ == OOM_TYPE for cls in type(exc).__mro__) or is_oom_text(text)
            or (likely_oom(text) is not None and _allocator_ran_out()))


def _allocator_ran_out() -> bool:
    """Whether torch's caching allocator raised an OOM in this process, on any device, caught or not (a workspace
    cuDNN could not get is caught and the next algorithm tried); only where torch is already loaded."""
    torch = sys.modules.get("torch")
    try:
        cuda = torch.cuda   # type: ignore[union-attr]
        return bool(cuda.is_initialized()) and any(cuda.memory_stats(d).get("num_ooms", 0)
                                                   for d in range(cuda.device_count()))
    except Exception:   # no torch, or no CUDA: no evidence; and a failure must not become another error here
        return False


def oom_line(text: str) -> str | None:
    """The last line of `text` (a process's output) that reports an OOM, stripped; None if none does."""
    return next((line.strip() for line in reversed(text.splitlines()) if is_oom_text(line)), None)
