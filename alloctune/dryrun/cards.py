"""What the card adds: the allocations torch's own kernels make on a real GPU that a run on fake tensors does not see,
per torch minor version and GPU architecture, and the cards a dry run can stand for (`--arch`).

A row (`Row`) is keyed by the torch minor version and the architecture (`sm90`: H100, H200), and says where each
figure comes from (a recording, or torch's source file). What a row holds:
- `cublas_workspace_bytes`: the workspace cuBLAS gets from the caching allocator the first time a matrix multiply runs
  on a stream in a thread (a handle per thread: one for the program's thread, one for the autograd engine's device
  thread, which runs backward; kept until the process ends, so it never shows a free):
  aten/src/ATen/cuda/CublasHandlePool.cpp, `parseChosenWorkspaceSize`: CUBLAS_WORKSPACE_CONFIG, else 32 MiB
  (`:4096:8`) on compute capability 9.x (10.x and 12.x too from torch 2.8), else `:4096:2:16:8` (8.125 MiB);
- `cublaslt_workspace_bytes`: cuBLASLt's own workspace, taken right after at the first multiply that runs through
  cuBLASLt (addmm with a 1-D bias: nn.Linear's forward) in a thread: 1 MiB on the H100 with torch 2.11 (the
  recordings of the dryrun evidence job, 2026-12-06: 32 MiB, then 1 MiB at the first forward addmm, and 32 MiB
  again at the first multiply of backward);
- `attention`: the order in which scaled_dot_product_attention tries its fused backends on that architecture before
  the math path (`attention.py` applies each one's conditions).
- `overhead_bytes`: not in the allocator at all, so not in a trace: the CUDA context and the libraries' own memory
  (cuBLAS, cuDNN handles), the most the recordings measured outside the allocator (778-799 MB on the H100 over the
  dryrun jobs); the trace's `overhead_bytes`, which `fit` and `replay --min-memory` count.

Standard library only: the dry run imports this inside the user's process.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

MiB = 1 << 20
CUBLAS_SOURCE = "torch aten/src/ATen/cuda/CublasHandlePool.cpp, parseChosenWorkspaceSize"
H100_RECORDED = "H100 recordings of the dryrun evidence job (torch 2.11.0+cu130, 2026-12-06)"


@dataclass(frozen=True)
class Card:
    """A GPU a dry run stands for: what `torch.cuda.get_device_properties` says of it."""

    name: str
    arch: str                 # the table's key, e.g. "sm90"
    capability: tuple[int, int]
    total_memory: int         # bytes, as torch reports them
    multi_processor_count: int


CARDS = {
    "h100": Card("NVIDIA H100 80GB HBM3", "sm90", (9, 0), 85017493504, 132),
    "h200": Card("NVIDIA H200", "sm90", (9, 0), 150109880320, 132),
    "a100": Card("NVIDIA A100-SXM4-80GB", "sm80", (8, 0), 85198045184, 108),
}
ARCHES = {"sm90": "h100", "sm80": "a100"}   # an architecture named alone: the card that stands for it
DEFAULT_CARD = "h100"   # what `record --dry-run` stands for unless --arch names another


@dataclass(frozen=True)
class Row:
    """What the card adds, for one torch minor version on one architecture."""

    torch: str                  # "2.11"
    arch: str
    cublas_workspace_bytes: int
    cublaslt_workspace_bytes: int
    attention: tuple[str, ...]  # fused backends in the order tried before the math path: "flash", "efficient"
    source: str
    overhead_bytes: int | None = None   # the CUDA context and libraries, outside the allocator, as recorded

    @property
    def key(self) -> str:
        return f"torch {self.torch} {self.arch}"


ROWS = (
    Row("2.11", "sm90", 32 * MiB, MiB, ("flash", "efficient"), f"{CUBLAS_SOURCE}; {H100_RECORDED}",
        overhead_bytes=799014912),
    Row("2.11", "sm80", 8 * MiB + 128 * 1024, MiB, ("flash", "efficient"), CUBLAS_SOURCE),
)


def card(name: str) -> Card | None:
    """The card `name` stands for (a card's name or an architecture), None when unknown."""
    name = name.lower()
    return CARDS.get(ARCHES.get(name, name))


def row(torch_version: str, arch: str) -> Row:
    """The row for this torch and architecture: its own minor version if the table has it, else the nearest one
    the table has for that architecture (the trace says which it used)."""
    mine = [r for r in ROWS if r.arch == arch]
    if not mine:
        raise KeyError(arch)
    wanted = _minor(torch_version)
    return min(mine, key=lambda r: (abs(_minor(r.torch) - wanted), -_minor(r.torch)))


def cublas_workspace(row: Row) -> int:
    """The workspace size, as CUBLAS_WORKSPACE_CONFIG (`:SIZE_KIB:COUNT` pairs) overrides the row's."""
    config = os.environ.get("CUBLAS_WORKSPACE_CONFIG", "")
    pairs = [p for p in config.split(":") if p]
    if not pairs or len(pairs) % 2 or not all(p.isdigit() for p in pairs):
        return row.cublas_workspace_bytes
    return sum(int(size) * 1024 * int(count) for size, count in zip(pairs[::2], pairs[1::2]))


def _minor(version: str) -> int:
    major, _, rest = version.partition(".")
    digits = "".join(c for c in rest.split(".")[0] if c.isdigit())
    return int(major) * 1000 + int(digits or 0) if major.isdigit() else 0
