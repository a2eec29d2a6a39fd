"""The calls a dry run answers above the operators (a TorchFunctionMode over the whole program): a fake tensor's
values read on the host (`values.py`), a tensor recorded on another stream (nothing to do: its free is the one the
program makes), and what a dry run does not trace (CUDA graphs, torch.compile), refused in one line."""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.overrides import TorchFunctionMode

from . import values
from .tracer import Tracer


class DryRunFunctions(TorchFunctionMode):
    def __init__(self, tracer: Tracer):
        super().__init__()
        self.tracer = tracer
        self.on_host: dict[Any, Callable[[Tracer, Any], Any]] = {
            torch.Tensor.tolist: values.tolist, torch.Tensor.numpy: values.numpy,
            torch.Tensor.__array__: values.numpy}

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if args and isinstance(args[0], FakeTensor):
            if func is torch.Tensor.record_stream:
                return None
            if func in self.on_host:
                return self.on_host[func](self.tracer, args[0])
        return func(*args, **kwargs)


def _refused(what: str) -> str:
    return f"{what} is not traced by a dry run (it traces eager execution); record on a GPU instead"


def refuse_untraced(torch: Any, refuse: Callable[[str], None]) -> None:
    """CUDA graphs and torch.compile end the dry run with one line, wherever the program calls them (classes stay
    classes: libraries name them in annotations)."""
    def ending(what: str) -> Callable[..., Any]:
        return lambda *args, **kwargs: refuse(_refused(what))

    def ending_class(what: str) -> type:
        return type(what.rpartition(".")[2], (), {"__init__": lambda self, *a, **k: refuse(_refused(what))})

    torch.compile = ending("torch.compile")
    torch.cuda.make_graphed_callables = ending("torch.cuda.make_graphed_callables (CUDA graphs)")
    torch.cuda.CUDAGraph = ending_class("torch.cuda.CUDAGraph")
    torch.cuda.graph = ending_class("torch.cuda.graph")
