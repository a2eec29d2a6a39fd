"""What counts as running out of device memory: the one rule for the trial child (an exception), the start-up hook
(an uncaught exception), a command trial (its stderr) and `dump_on_oom` (an uncaught exception).

torch raises `torch.cuda.OutOfMemoryError` (on recent versions an alias of `torch.OutOfMemoryError`) when the
caching allocator cannot get memory; its message says "CUDA out of memory" (native backend) or "(out of memory)"
(cudaMallocAsync). Allocations outside the caching allocator fail with other errors whose text still says so:
"CUDA error: out of memory" from the driver, "CUBLAS_STATUS_ALLOC_FAILED" when cuBLAS cannot get a workspace.
The class is matched by name, so this needs no torch import. Standard library only: it runs inside the user's job.
"""
from __future__ import annotations

OOM_TYPE = "OutOfMemoryError"
_MARKS = ("CUBLAS_STATUS_ALLOC_FAILED", OOM_TYPE)   # matched as written; "out of memory" in any case


def is_oom_text(text: str) -> bool:
    """A message, or a line of a process's output, that reports running out of device memory."""
    return "out of memory" in text.lower() or any(mark in text for mark in _MARKS)


def is_oom(exc: BaseException) -> bool:
    """An exception that reports running out of device memory: torch's OutOfMemoryError (or a subclass), or any
    error whose message says so."""
    return any(cls.__name__ == OOM_TYPE for cls in type(exc).__mro__) or is_oom_text(str(exc))


def oom_line(text: str) -> str | None:
    """The last line of `text` (a process's output) that reports an OOM, stripped; None if none does."""
    return next((line.strip() for line in reversed(text.splitlines()) if is_oom_text(line)), None)
