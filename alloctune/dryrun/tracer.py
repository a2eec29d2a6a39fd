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

from .cards import Row, cublas_workspace
from .refusal import Refused

_aten = torch.ops.aten
# Operators that run a cuBLAS matrix multiply, which takes the stream's workspace the first time.
GEMMS = {_aten.mm.default, _aten.addmm.default, _aten.bmm.default, _aten.baddbmm.default, _aten.addbmm.default,
         _aten.mv.default, _aten.addmv.default, _aten._addmm_activation.default, _aten.dot.default,
         _aten.vdot.default, _aten._int_mm.default}


def block_size(size: int) -> int:
    """What the allocator counts in allocated_bytes for a request of `size` bytes (kMinBlockSize = 512)."""
    return max(512, (size + 511) // 512 * 512)


class Tracer:
    """What the caching allocator of device 0 would have been asked for, in order."""

    def __init__(self, row: Row):
        self.row = row
        self.entries: list[dict[str, Any]] = []
        self.live: dict[int, tuple[int, int, int]] = {}   # storage key -> (allocation id, bytes, stream)
        self.stream = 0                                    # the current stream, as the program set it
        self.workspaces: set[int] = set()                  # streams that got a cuBLAS workspace
        self.next_id = 1
        self.allocated = self.peak_allocated = 0
        self.invented: Counter[str] = Counter()           # values and shapes the dry run had to make up
        self.describe: Callable[[], dict[str, Any]] | None = None   # the trace's own metadata (start.meta)

    def _entry(self, action: str, ident: int, size: int, stream: int) -> None:
        self.entries.append({"action": action, "addr": ident, "size": size, "stream": stream,
                             "time_us": time.time_ns() // 1000})

    def alloc(self, size: int, stream: int | None = None) -> int:
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

    def storage(self, storage: Any) -> None:
        """An output's storage: a new allocation if not seen before, a free and an allocation if it grew."""
        key, size = storage._cdata, storage.nbytes()
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
        if known is not None:
            self.free(*known)

    def gemm(self) -> None:
        """A matrix multiply on the current stream: its first takes the cuBLAS workspace, kept to the end."""
        if self.stream not in self.workspaces:
            self.workspaces.add(self.stream)
            self.alloc(cublas_workspace(self.row))

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
        with self.fake:
            out = func(*args, **kwargs)
        self.traced(out, func in GEMMS)
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

    def traced(self, out: Any, gemm: bool = False) -> None:
        for t in tree_leaves(out):
            if isinstance(t, FakeTensor) and t.fake_device.type == "cuda":
                self.tracer.storage(t.untyped_storage())
        if gemm:   # the workspace comes after the output, as cuBLAS takes it when the kernel is launched
            self.tracer.gemm()
