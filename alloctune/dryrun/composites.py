"""Operators a GPU runs as a composite of others, whose fake kernel gives only the output: run here as their
composite (aten/src/ATen/native), each inner operator traced, so that the temporaries a GPU allocates inside them are
in the trace too. Found by comparing dry runs with GPU recordings of the same jobs."""
from __future__ import annotations

from typing import Any

import torch

_aten = torch.ops.aten


def _embedding(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """at::native::embedding: `weight.index_select(0, indices.reshape(-1))`, viewed back (reshape copies indices that
    are not contiguous, such as a slice of a batch of tokens)."""
    weight, indices = args[:2]
    if weight.dim() != 2:
        return mode.run(func, args, kwargs)
    flat = mode.run(_aten.reshape.default, (indices, [-1]), {})
    picked = mode.run(_aten.index_select.default, (weight, 0, flat), {})
    return mode.run(_aten.view.default, (picked, [*indices.shape, weight.shape[1]]), {})


def _embedding_backward(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """embedding_dense_backward on a GPU takes a contiguous copy of indices that are not (a slice of a batch of
    tokens) before its output, and frees it after."""
    indices = args[1]
    if indices.is_contiguous():
        return mode.run(func, args, kwargs)
    tracer, size = mode.tracer, indices.numel() * indices.element_size()
    copy = tracer.alloc(size)
    out = mode.run(func, args, kwargs)
    tracer.free(copy, size, tracer.stream)
    return out


COMPOSITES = {_aten.embedding.default: _embedding, _aten.embedding_dense_backward.default: _embedding_backward}
