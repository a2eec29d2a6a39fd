"""The calls a dry run answers above the operators (a TorchFunctionMode over the whole program): attention by the
backend the card would choose (`attention.py`), a fake tensor's values read on the host (`values.py`), a tensor
recorded on another stream (nothing to do: its free is the one the program makes), and what a dry run does not trace
(CUDA graphs, torch.compile), refused in one line."""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from . import values
from .attention import attend, is_fake_cuda
from .cards import Card, Row
from .refusal import Refused
from .tracer import Tracer

_ORIGINAL_SDPA = F.scaled_dot_product_attention
_SDPA = {F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention}


class DryRunFunctions(TorchFunctionMode):
    def __init__(self, tracer: Tracer, row: Row, card: Card):
        super().__init__()
        self.tracer, self.row, self.card = tracer, row, card
        self.on_host: dict[Any, Callable[[Tracer, Any], Any]] = {
            torch.Tensor.tolist: values.tolist, torch.Tensor.numpy: values.numpy,
            torch.Tensor.__array__: values.numpy}

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if args and is_fake_cuda(args[0]):
            if func in _SDPA:
                return attend(self.row, self.card, _ORIGINAL_SDPA, *args, **kwargs)
            if func is torch.Tensor.record_stream:
                return None
        if args and func in self.on_host and isinstance(args[0], torch._subclasses.fake_tensor.FakeTensor):
            return self.on_host[func](self.tracer, args[0])
        return func(*args, **kwargs)


def _refusing(what: str) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise Refused(f"{what} is not traced by a dry run (it traces eager execution on one stream per call); "
                      f"record on a GPU instead")
    return refused


def refuse_untraced(torch: Any, refuse: Callable[[str], None]) -> None:
    """CUDA graphs and torch.compile end the dry run with one line, wherever the program calls them."""
    def ending(what: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                _refusing(what)()
            except Refused as refused:
                refuse(str(refused))
        return call

    torch.compile = ending("torch.compile")
    for name in ("CUDAGraph", "graph", "make_graphed_callables"):
        setattr(torch.cuda, name, ending(f"torch.cuda.{name} (CUDA graphs)"))
