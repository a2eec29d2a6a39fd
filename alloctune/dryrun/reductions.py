"""The global-memory buffers of torch's CUDA reductions. A reduction over many values per output splits each output
across thread blocks and gathers their partial results through a buffer and a few semaphores that it takes from the
caching allocator after its output, and gives back as it returns (aten/src/ATen/native/cuda/Reduce.cuh,
`setReduceConfig` and `ReduceConfig::global_memory_size`/`semaphore_size`). Their sizes follow from the shapes and the
card (its multiprocessors and threads per multiprocessor), so a dry run computes them; the H100 recordings of the
dryrun jobs showed them at every gradient of a bias (`grad.sum(0)` over the tokens), of the sizes computed here.

Followed: a reduction of the leading dimensions of a contiguous tensor onto its last ones (N values for each of C
outputs, the outputs contiguous): the launch maps the block's x to the outputs, 4 outputs a thread where they align.
Other reductions are left without their buffers (the trace's metadata does not count them).
"""
from __future__ import annotations

from typing import Any

import torch

from .cards import Card

MAX_THREADS = 512          # mnt_wrapper<scalar_t>::MAX_NUM_THREADS
WARP = 32
THREADS_PER_SM = 2048      # maxThreadsPerMultiProcessor from compute capability 7.5 to 9.0


def _last_pow2(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def column_buffers(outputs: int, values: int, card: Card) -> tuple[int, int] | None:
    """(buffer bytes, semaphore bytes) of a float-accumulated reduction of `values` rows onto `outputs` contiguous
    columns, None when it reduces within a block (no global memory)."""
    vec = 4
    while outputs % vec:
        vec //= 2
    most = MAX_THREADS // vec
    dim0, dim1 = outputs // vec, values
    dim0_pow2 = _last_pow2(dim0) if dim0 < most else most
    dim1_pow2 = _last_pow2(dim1) if dim1 < most else most
    width = min(dim0_pow2, WARP)
    height = min(dim1_pow2, most // width)
    width = min(dim0_pow2, most // height)
    per_thread = values
    if per_thread >= height * 16 or per_thread >= 256:
        per_thread = -(-values // height)
    else:
        return None
    grid = -(-dim0 // width)
    target = card.multi_processor_count * (THREADS_PER_SM // (width * height))
    if per_thread < 256 or grid > target:
        return None
    ctas = max(min(-(-target // grid), -(-per_thread // 16)), -(-per_thread // 256))
    if ctas <= 1:
        return None
    return 4 * outputs * ctas * width * vec, 4 * grid


def _sum(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """sum over the leading dimensions of a contiguous tensor: its output, then the buffer and semaphores a GPU
    takes for it, given back as the kernel returns (semaphores first)."""
    out = mode.run(func, args, kwargs)
    source, dims = args[0], args[1] if len(args) > 1 else kwargs.get("dim")
    if not dims or not source.is_contiguous() or source.dim() < 2 or source.dtype not in _FLOATS:
        return out
    reduced = sorted(d % source.dim() for d in dims)
    if reduced != list(range(len(reduced))) or len(reduced) == source.dim():
        return out
    values = int(torch.Size(source.shape[:len(reduced)]).numel())
    sizes = column_buffers(int(torch.Size(source.shape[len(reduced):]).numel()), values, mode.tracer.card)
    if sizes is not None:
        tracer, stream = mode.tracer, mode.tracer.stream
        buffer, semaphores = tracer.alloc(sizes[0]), tracer.alloc(sizes[1])
        tracer.free(semaphores, sizes[1], stream)
        tracer.free(buffer, sizes[0], stream)
    return out


_FLOATS = (torch.float32, torch.bfloat16, torch.float16)
REDUCTIONS = {torch.ops.aten.sum.dim_IntList: _sum}
