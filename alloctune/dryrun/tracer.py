"""The allocations and frees the caching allocator would see, from a run on fake tensors.

`DryRunMode` (a TorchDispatchMode over the whole program) sends every operator that touches a fake tensor, or makes
a tensor on "cuda", to the fake-tensor mode, and leaves the rest (the program's CPU work) to run for real. Each
output of a fake operator is looked at once: a storage not seen before is an allocation of its size in bytes, on the
current stream, and a finalizer on its Python storage object is its free. torch keeps a storage's Python object alive
as long as the storage itself (PyObject preservation), so the finalizer runs when the last reference goes, wherever
it was held (a tensor the program dropped, a tensor saved for backward and released by autograd, an optimizer's
state): frees come in the order the program releases them. A storage that grows in place (`resize_`) is a free and a
new allocation, as the allocator does it.

`Tracer` keeps what was seen as the entries of a PyTorch memory snapshot (`alloc`, `free_requested`,
`free_completed`, `segment_free` for the program's `empty_cache()`), with the time of each in µs, the clock of the
step marks of the start-up hook: `snapshot()` is what `torch.cuda.memory._snapshot()` returns in a dry run, and what
the trace is made from. What the card adds (`cards.Row`): the cuBLAS workspace at the first matrix multiply on each
stream.
"""
from __future__ import annotations

import time
import weakref
from collections import Counter
from typing import Any, Callable

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from .cards import Card, Row, cublas_workspace
from .refusal import Refused

_aten = torch.ops.aten
# Operators that run a cuBLAS matrix multiply, which takes the stream's workspace the first time.
GEMMS = {_aten.mm.default, _aten.addmm.default, _aten.bmm.default, _aten.baddbmm.default, _aten.addbmm.default,
         _aten.mv.default, _aten.addmv.default, _aten._addmm_activation.default, _aten.dot.default,
         _aten.vdot.default, _aten._int_mm.default}
LT_GEMMS = {_aten.addmm.default, _aten._addmm_activation.default}   # through cuBLASLt (with a 1-D bias)


def block_size(size: int) -> int:
    """What the allocator counts in allocated_bytes for a request of `size` bytes (kMinBlockSize = 512)."""
    return max(512, (size + 511) // 512 * 512)


class Tracer:
    """What the caching allocator of device 0 would have been asked for, in order."""

    def __init__(self, row: Row, card: Card):
        self.row, self.card = row, card
        self.entries: list[dict[str, Any]] = []
        self.live: dict[int, tuple[int, int, int]] = {}   # storage key -> (allocation id, bytes, stream)
        self.stream = 0                                    # the current stream, as the program set it
        self.workspaces: set[tuple] = set()                # (library, stream, backward) that got a workspace
        self.next_id = 1
        self.allocated = self.peak_allocated = 0
        self.invented: Counter[str] = Counter()           # values and shapes the dry run had to make up
        self.accumulating: tuple[int, set[int]] | None = None   # see `accumulated`
        self.describe: Callable[[], dict[str, Any]] | None = None   # the trace's own metadata (start.meta)

    def _entry(self, action: str, ident: int, size: int, stream: int) -> None:
        self.entries.append({"action": action, "addr": ident, "size": size, "stream": stream,
                             "time_us": time.time_ns() // 1000})

    def alloc(self, size: int, stream: int | None = None) -> int:
        self.accumulating = None
        ident, self.next_id = self.next_id, self.next_id + 1
        self._entry("alloc", ident, size, self.stream if stream is None else stream)
        self.allocated += block_size(size)
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return ident

    def free(self, ident: int, size: int, stream: int) -> None:
        self._entry("free_requested", ident, size, stream)
        self._entry("free_completed", ident, size, stream)
        self.allocated -= block_size(size)

    def empty_cache(self) -> None:
        """The program's torch.cuda.empty_cache(): a release, which the replay performs under every setting."""
        self.entries.append({"action": "segment_free", "addr": -1, "size": 0, "stream": self.stream,
                             "time_us": time.time_ns() // 1000})

    def storage(self, storage: Any, size: int | None = None) -> None:
        """An output's storage: a new allocation if not seen before, a free and an allocation if it grew. `size`:
        what a GPU allocates for it, where that is not what the fake kernel gives."""
        key, size = storage._cdata, storage.nbytes() if size is None else size
        known = self.live.get(key)
        if known is not None and known[1] == size:
            return
        if known is None:
            weakref.finalize(storage, self._released, key)
        else:
            self.free(*known)
        if size:
            self.live[key] = (self.alloc(size), size, self.stream)
        else:
            self.live.pop(key, None)

    def _released(self, key: int) -> None:
        known = self.live.pop(key, None)
        if known is not None and not self._taken_over(key, known):
            self.free(*known)

    def accumulated(self, out: Any, operands: list[Any]) -> None:
        """The autograd engine has just added two gradients for one input (`old + new`). On a GPU it adds in place
        into whichever of the two it holds the only reference to (torch/csrc/autograd/input_buffer.cpp, `accumulate`;
        a tensor subclass such as a fake tensor always gets a new one): if one of them is released before anything
        else is allocated, the sum takes over its memory instead of being a new allocation."""
        key = out._cdata
        if key in self.live and self.entries and self.entries[-1]["addr"] == self.live[key][0]:
            self.accumulating = (key, {o._cdata for o in operands})

    def _taken_over(self, key: int, known: tuple[int, int, int]) -> bool:
        if self.accumulating is None or key not in self.accumulating[1]:
            return False
        total, self.accumulating = self.accumulating[0], None
        ident, size, stream = self.live[total]
        if size != known[1] or self.entries[-1]["addr"] != ident:
            return False
        self.entries.pop()   # the sum's allocation: it is the operand's memory
        self.allocated -= block_size(size)
        self.live[total] = known
        return True

    def gemm(self, lt: bool) -> None:
        """A matrix multiply on the current stream: the first in its thread takes the cuBLAS workspace, the first
        through cuBLASLt (`lt`) its workspace too, each kept to the end. Backward runs in the autograd engine's
        device thread on a GPU (here it runs in the program's), which has handles of its own."""
        backward = torch._C._current_autograd_node() is not None
        for library, size in (("cublas", cublas_workspace(self.row)), ("cublaslt", self.row.cublaslt_workspace_bytes)):
            if (library == "cublas" or lt) and (library, self.stream, backward) not in self.workspaces:
                self.workspaces.add((library, self.stream, backward))
                self.alloc(size)

    def snapshot(self) -> dict[str, Any]:
        """The trace so far, shaped as torch.cuda.memory._snapshot() (device 0 only; no segments)."""
        own = {"alloctune": self.describe()} if self.describe is not None else {}
        return {"segments": [], "device_traces": [list(self.entries)], "allocator_settings": {}, **own}


def is_cuda(value: Any) -> bool:
    try:
        return value is not None and torch.device(value).type == "cuda"
    except (RuntimeError, TypeError):
        return False


def on_gpu(args: tuple, kwargs: dict) -> bool:
    """The call works on the fake GPU: it takes a fake tensor, or makes a tensor on "cuda"."""
    return is_cuda(kwargs.get("device")) or any(isinstance(a, FakeTensor) for a in tree_leaves((args, kwargs)))


Handler = Callable[["DryRunMode", Any, tuple, dict], Any]


def _accumulation(out: Any, args: tuple) -> bool:
    """An addition the autograd engine makes of two gradients of one input, outside any create_graph."""
    return (len(args) == 2 and not torch.is_grad_enabled() and torch._C._current_autograd_node() is not None
            and all(isinstance(a, FakeTensor) and a.shape == out.shape and a.dtype == out.dtype for a in args))


class DryRunMode(TorchDispatchMode):
    """Every operator of the program: the fake GPU's to the fake-tensor mode (`fake`), traced; the rest run."""

    def __init__(self, tracer: Tracer, fake: Any, handlers: dict[Any, Handler], default: Handler,
                 refuse: Callable[[str], None]):
        super().__init__()
        self.tracer, self.fake, self.handlers, self.default, self.refuse = tracer, fake, handlers, default, refuse

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if not on_gpu(args, kwargs):
            return func(*args, **kwargs)
        try:
            if func is _aten._to_copy.default and is_cuda(kwargs.get("device")):
                return self.moved(func, args, kwargs)
            return self.handlers.get(func, self.default)(self, func, args, kwargs)
        except Refused as refused:
            self.refuse(str(refused))   # ends the process: what the program would catch is not its own error
            raise

    def run(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """`func` on fake tensors, its new storages traced."""
        out = self.untraced(func, args, kwargs)
        self.traced(out, func, args)
        return out

    def untraced(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """`func` on fake tensors, for a handler that traces what of it a GPU allocates."""
        with self.fake:
            out = func(*args, **kwargs)
        self.forget_host_tensors()
        return out

    def forget_host_tensors(self) -> None:
        """The fake mode's memo of the host tensors it met (a fake copy of each, held by a weak reference) is let go
        after each call: a module's parameter that is one of those copies could not be swapped for a moved one."""
        converter = self.fake.fake_tensor_converter.meta_converter
        if converter.tensor_memo:
            converter.tensor_memo.clear()
            converter.storage_memo.clear()

    def moved(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """A host tensor copied to the GPU (`.to("cuda")`, `.cuda()`): a new fake tensor of its shape, dtype and
        layout, made directly, so that the fake mode keeps no memo of the host tensor (a memo holds a weak reference
        to its fake copy, and a module's parameter with one cannot be swapped for a moved one)."""
        source = args[0]
        if isinstance(source, FakeTensor) or not isinstance(source, torch.Tensor) or source.is_sparse:
            return self.run(func, args, kwargs)
        keep = kwargs.get("memory_format") in (None, torch.preserve_format) and (
            source.is_contiguous() or source.dim() == 4 and source.is_contiguous(memory_format=torch.channels_last))
        made = {"dtype": kwargs.get("dtype") or source.dtype, "device": kwargs["device"]}
        if keep:
            return self.run(_aten.empty_strided.default, (list(source.shape), list(source.stride())), made)
        return self.run(_aten.empty.memory_format, (list(source.shape),), made)

    def traced(self, out: Any, func: Any = None, args: tuple = ()) -> None:
        for t in tree_leaves(out):
            if isinstance(t, FakeTensor) and t.fake_device.type == "cuda":
                self.tracer.storage(t.untyped_storage())
        if func is _aten.add.Tensor and _accumulation(out, args):
            self.tracer.accumulated(out.untyped_storage(), [a.untyped_storage() for a in args[:2]])
        if func in GEMMS:   # the workspaces come after the output, as cuBLAS takes them when the kernel is launched
            self.tracer.gemm(func in LT_GEMMS and args[0].dim() == 1)
