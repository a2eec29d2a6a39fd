"""Operators that have a kernel of their own on the CPU and on CUDA, and a composite of other operators for backends
without one (silu_backward, mish_backward, native_channel_shuffle). A CPU-only build has no CUDA kernel, so for a
CUDA tensor it would run the composite, each of its operators an allocation a GPU does not make. A stand-in kernel at
the CUDA key puts them back on the path a CUDA build takes: the fake tensor's own mode answers them above that key,
so the stand-in is never called."""
from __future__ import annotations

from typing import Any

import torch


def _never(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("alloctune dry run: a fake CUDA tensor reached a CUDA kernel")


def install() -> Any:
    """The stand-ins, on a build without CUDA kernels; the library returned must be kept alive (None: none needed)."""
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    names = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")
             and has(n, "CPU") and has(n, "CompositeImplicitAutograd") and not has(n, "CUDA")]
    if not names:
        return None
    library = torch.library.Library("aten", "IMPL")
    for name in names:
        library.impl(name.removeprefix("aten::"), _never, "CUDA")
    return library
