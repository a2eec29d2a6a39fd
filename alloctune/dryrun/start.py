"""A dry run inside the user's program, started by alloctune's start-up hook (`runtime/hook/sitecustomize.py`, when
`alloctune record --dry-run` sets ALLOCTUNE_HOOK_DRYRUN to the card it stands for) before the program runs.

`install` makes CUDA answer without a GPU (`native.py`: the device guard and the accelerator; `device.py`:
torch.cuda), makes every tensor on "cuda" a fake one (`tracer.DryRunMode` over torch's FakeTensorMode, with
`values.py`'s answers where the program reads the GPU's data, and `functions.py`'s above the operators), and from
then on the tracer notes what the caching allocator would be asked for. Foreach optimizers and gradient clipping take
the same path on fake tensors as on real ones (torch's lists of the tensor types they accept get FakeTensor), and the
autograd engine runs backward on the calling thread (no device threads to start). At exit the hook writes the trace
from `torch.cuda.memory._snapshot()` as a recording would, with the dry run's own metadata (`meta`).
"""
from __future__ import annotations

import os
from typing import Any

from . import cards
from .refusal import Refused, refuse

_state: dict[str, Any] = {}


def install(folder: str, arch: str) -> None:
    """Start the dry run in this process (the start-up hook's folder `folder`, the card `arch` stands for)."""
    try:
        _install(folder, arch)
    except Refused as refused:
        refuse(folder, str(refused))
    except Exception as exc:   # a torch this dry run does not know how to fake: the program must not run for real
        refuse(folder, f"cannot start on torch {_torch_version()}: {type(exc).__name__}: {exc}")


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def _install(folder: str, arch: str) -> None:
    card = cards.card(arch)
    if card is None:
        raise Refused(f"no card is known for --arch {arch!r} (known: {', '.join([*cards.CARDS, *cards.ARCHES])})")
    import torch

    from . import native
    native.hide_gpus(torch)   # before anything asks CUDA (importing torch.cuda's modules may)
    import torch._subclasses.fake_tensor as fake_tensor
    import torch.cuda.memory
    import torch.cuda.nvtx
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    from . import attention, device, kernels
    from .functions import DryRunFunctions, refuse_untraced
    from .tracer import DryRunMode, Tracer
    from .composites import COMPOSITES
    from .reductions import REDUCTIONS
    from .values import DATA_DEPENDENT, checked_run

    class Fake(FakeTensorMode):
        avoid_device_init = True   # no device to put constants on: torch's own path for a GPU it cannot use

    fake = Fake(allow_non_fake_inputs=True)   # first: it loads torch._dynamo, which asks the real torch.cuda
    # A fake tensor's first device makes a real tensor there (so that backward finds a CUDA context): on a CUDA
    # build that reaches the CUDA runtime, which sees no GPU. Nothing runs on the device here to need a context.
    fake_tensor.init_gpu_context = lambda device: None
    row = cards.row(torch.__version__, card.arch)
    native.install(torch)
    tracer = Tracer(row, card)
    tracer.describe = meta
    device.install(torch, card, tracer)
    refuse_untraced(torch, lambda message: refuse(folder, message))
    torch.autograd.set_multithreading_enabled(False)
    torch._C._set_only_lift_cpu_tensors(True)   # torch.tensor(..., device="cuda"): made on the host, then moved
    # module.to("cuda"): the host parameter becomes the fake one in place (swapped), as `param.data = ...` keeps the
    # same object on a GPU; a new parameter object instead would untie weights that modules share (GPT-2's lm_head)
    torch.__future__.set_swap_module_params_on_conversion(True)
    _accept_fake(FakeTensor)
    modes: list[Any] = [DryRunMode(tracer, fake, {**DATA_DEPENDENT, **COMPOSITES, **attention.KERNELS,
                                                    **REDUCTIONS}, checked_run, lambda m: refuse(folder, m)),
             DryRunFunctions(tracer)]
    for mode in modes:
        mode.__enter__()
    _state.update(tracer=tracer, card=card, row=row, arch=arch, modes=modes, attention=attention.install(row, card),
                  kernels=kernels.install())


def _accept_fake(fake_tensor: type) -> None:
    import importlib

    for name in ("torch.optim.optimizer", "torch.utils._foreach_utils"):   # torch.optim drops its submodules' names
        supported = importlib.import_module(name)._foreach_supported_types
        if fake_tensor not in supported:
            supported.append(fake_tensor)


def meta() -> dict[str, Any]:
    """What the trace says of the dry run (results/provenance.DryRun): the card, the table row used, the values it
    made up. Replaces a recording's measured figures (none: nothing ran on a GPU)."""
    from dataclasses import asdict

    from ..results.provenance import DryRun

    tracer, card, row = _state["tracer"], _state["card"], _state["row"]
    record = DryRun(_state["arch"], card.name, row.key, row.source,
                    cards.cublas_workspace(row) if tracer.workspaces else 0, dict(tracer.invented), os.getpid())
    return {"measured": [], "overhead_bytes": row.overhead_bytes, "device_total_bytes": card.total_memory,
            "dry_run": asdict(record)}
