"""Run code right after a module is imported, without importing it: what the start-up hook and the feature watch
(`features.py`) use inside a user's job to patch torch modules as they load.

`after_import([(name, patch), ...], failed)` calls `patch(module)` once module `name` has executed (now, for a
module already imported), before the code that imported it continues, so `from torch.cuda import x` already
sees what the patch put there. It puts a meta-path finder that takes the spec from the finders after it (which
keep their turn) and wraps only that spec's loader; the finder leaves `sys.meta_path` once every module is
patched. A patch that raises is given to `failed(name, exc)`, never to the importer: the user's program must not
break. Standard library only: this runs at start-up in every Python process of the job.
"""
from __future__ import annotations

import sys

TYPE_CHECKING = False   # typing is not imported at start-up
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Callable, Iterable, Sequence

    Patch = Callable[[ModuleType], None]
    Failed = Callable[[str, Exception], None]


def after_import(patches: Iterable[tuple[str, Patch]], failed: Failed) -> None:
    """Call each patch on its module once that module has executed; several patches of one module run in order."""
    pending: dict[str, list[Patch]] = {}
    for name, patch in patches:
        pending.setdefault(name, []).append(patch)
    for name in list(pending):
        module = sys.modules.get(name)
        if module is not None:
            _patch(name, pending.pop(name), module, failed)
    if pending:
        sys.meta_path.insert(0, _ImportWatch(pending, failed))


class _ImportWatch:
    """A meta-path finder that wraps the loader of each pending module, so the module is patched right after it
    executes."""

    def __init__(self, pending: dict[str, list[Patch]], failed: Failed):
        self.pending = pending
        self.failed = failed

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        patches = self.pending.get(name)
        if patches is None:
            return None
        if self not in sys.meta_path:   # taken out by someone else: leave the import alone
            return None
        spec = None
        for finder in sys.meta_path[sys.meta_path.index(self) + 1:]:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        del self.pending[name]
        if not self.pending:
            sys.meta_path.remove(self)
        loader_exec = spec.loader.exec_module
        failed = self.failed

        def exec_module(module: ModuleType) -> None:
            loader_exec(module)
            if module.__name__ == name:   # a loader shared between modules patches only this one
                _patch(name, patches, module, failed)

        setattr(spec.loader, "exec_module", exec_module)
        return spec


def _patch(name: str, patches: list[Patch], module: ModuleType, failed: Failed) -> None:
    for patch in patches:
        try:
            patch(module)
        except Exception as exc:  # an API this torch lacks or changed: said, never raised into the program
            failed(name, exc)
