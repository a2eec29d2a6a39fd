"""What a dry run makes up where the program reads the GPU's data: values (`.item()`, `.tolist()`, `.numpy()`, a
tensor's truth in an `if`) and shapes that depend on values (`nonzero`, boolean masks, `unique`, `masked_select`).
Each one is counted (`Tracer.invented`, by kind) and the trace's metadata says how many there were.

The rules, the same every time so that a dry run is repeatable:
- a value read from the GPU is 0 for floating point (a loss printed, GradScaler's "no inf found"), 1 for integers (a
  count a program divides by), False for booleans (`if torch.isnan(loss).any()`);
- a shape that depends on values takes its largest possible size (every element selected, all of them unique):
  the most memory the call could ask for.
An operator whose output shape depends on values and which is not listed here is refused in one line.
"""
from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException, FakeTensor

from .refusal import Refused

_aten = torch.ops.aten


def invented_value(dtype: torch.dtype) -> bool | int | float:
    if dtype == torch.bool:
        return False
    if dtype.is_floating_point or dtype.is_complex:
        return 0.0
    return 1


def _nested(shape: tuple[int, ...], value: Any) -> Any:
    return value if not shape else [_nested(shape[1:], value) for _ in range(shape[0])]


def tolist(tracer: Any, tensor: FakeTensor) -> Any:
    """`tensor.tolist()` of a fake tensor: nested lists of invented values."""
    tracer.invented["tolist"] += 1
    return _nested(tuple(tensor.shape), invented_value(tensor.dtype))


def numpy(tracer: Any, tensor: FakeTensor) -> Any:
    """`tensor.numpy()` of a fake tensor: an array of invented values, made on the host."""
    tracer.invented["numpy"] += 1
    return torch.full(tuple(tensor.shape), invented_value(tensor.dtype), dtype=tensor.dtype).numpy()


def scalar(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """`_local_scalar_dense` (`.item()`, `bool(t)`, `int(t)`): the fake tensor's constant where it has one."""
    try:
        with mode.fake:
            return func(*args, **kwargs)
    except DataDependentOutputException:
        mode.tracer.invented["item"] += 1
        return invented_value(args[0].dtype)


def _empty(mode: Any, shape: tuple[int, ...], like: FakeTensor, dtype: torch.dtype | None = None) -> FakeTensor:
    return mode.run(_aten.empty.memory_format, (list(shape),), {"dtype": dtype or like.dtype, "device": like.device})


def _nonzero(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    x = args[0]
    mode.tracer.invented["shape"] += 1
    return _empty(mode, (x.numel(), x.dim()), x, torch.long)


def _masked_select(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    x, mask = args[:2]
    mode.tracer.invented["shape"] += 1
    return _empty(mode, (torch.broadcast_shapes(x.shape, mask.shape).numel(),), x)


def _unique(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """unique and unique_consecutive: every element unique, inverse and counts made as the call asks."""
    x = args[0]
    mode.tracer.invented["shape"] += 1
    values = _empty(mode, (x.numel(),), x)
    inverse = _empty(mode, tuple(x.shape), x, torch.long)
    counts = _empty(mode, (x.numel(),), x, torch.long)
    return values, inverse, counts


def _index(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """Indexing with boolean masks: each mask stands for the indices of all its elements."""
    x, indices = args[0], list(args[1])
    if not any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices):
        return mode.run(func, args, kwargs)
    mode.tracer.invented["shape"] += 1
    expanded: list[Any] = []
    for index in indices:
        if isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8):
            n = index.numel()
            expanded += [_empty(mode, (n,), x, torch.long) for _ in range(index.dim())]
        else:
            expanded.append(index)
    return mode.run(func, (x, expanded, *args[2:]), kwargs)


DATA_DEPENDENT = {
    _aten._local_scalar_dense.default: scalar,
    _aten.nonzero.default: _nonzero,
    _aten.masked_select.default: _masked_select,
    _aten._unique2.default: _unique,
    _aten.unique_consecutive.default: _unique,
    _aten.unique_dim.default: _unique,
    _aten.index.Tensor: _index,
    _aten.index_put_.default: _index,
    _aten.index_put.default: _index,
    _aten._index_put_impl_.default: _index,
}


def refused_shape(func: Any) -> Refused:
    return Refused(f"cannot trace {func}: the size of its output depends on the values on the GPU, which a dry run "
                   f"does not have")


def checked_run(mode: Any, func: Any, args: tuple, kwargs: dict) -> Any:
    """A fake call whose output shape turns out to depend on data (an operator not listed above): refused."""
    try:
        return mode.run(func, args, kwargs)
    except (DynamicOutputShapeException, DataDependentOutputException):
        raise refused_shape(func) from None
