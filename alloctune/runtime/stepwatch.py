"""Where the start-up hook (`hook/sitecustomize.py`) sees a step of the user's program without changing its code:
every optimizer's step() through torch's global post-hook, the returns of the callable that --step-on names
(outermost calls only), and the calls of a top-level module (--step-on forward) through the global forward hooks.

Each is given the module it patches as that module loads (`imports.after_import`) and calls `step` once per step
it sees; counting them, without ever raising into the program, is the hook's (`counting.py`). Standard library
only, and nothing here imports torch: this runs inside every Python process of the user's job.
"""
from __future__ import annotations

import functools
import threading

TYPE_CHECKING = False   # typing is not imported inside the user's processes
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any, Callable


def optimizer_steps(optimizer_module: ModuleType, step: Callable[[Any], None]) -> bool:
    """`step(optimizer)` after every optimizer's step(); False where torch lacks the global post-hook (before 2.0:
    no zero-code steps)."""
    register = getattr(optimizer_module, "register_optimizer_step_post_hook", None)
    if register is not None:
        register(lambda optimizer, args, kwargs: step(optimizer))
    return register is not None


def callable_returns(module: ModuleType, qualname: str, step: Callable[[], None]) -> None:
    """--step-on module:qualname: `step()` at each return of that callable (outermost calls only), wrapped in
    place; a static or class method stays one."""
    *path, attr = qualname.split(".")
    owner: Any = module
    for name in path:
        owner = getattr(owner, name)
    raw = next((vars(k)[attr] for k in owner.__mro__ if attr in vars(k)), None) if isinstance(owner, type) else None
    kind: Any = None
    if isinstance(raw, (staticmethod, classmethod)):
        kind, original = type(raw), raw.__func__
    else:
        original = getattr(owner, attr)
    local = threading.local()

    @functools.wraps(original)
    def counted(*args: Any, **kwargs: Any) -> Any:
        local.depth = getattr(local, "depth", 0) + 1
        try:
            result = original(*args, **kwargs)
        finally:
            local.depth -= 1
        if local.depth == 0:
            step()
        return result

    setattr(owner, attr, kind(counted) if kind is not None else counted)


def top_level_calls(module_module: ModuleType, step: Callable[[], None]) -> None:
    """--step-on forward: `step()` after each call of a top-level module (a module called while no other module's
    call is under way), through the global forward hooks (which every module call then runs: slower, so only when
    asked)."""
    local = threading.local()

    def before(module: Any, args: Any) -> None:
        local.depth = getattr(local, "depth", 0) + 1

    def after(module: Any, args: Any, output: Any) -> None:
        local.depth = getattr(local, "depth", 1) - 1
        if local.depth == 0:
            step()

    module_module.register_module_forward_pre_hook(before)
    try:
        module_module.register_module_forward_hook(after, always_call=True)   # also when forward raises
    except TypeError:   # a torch without always_call
        module_module.register_module_forward_hook(after)
