"""Which two settings one process can switch between while it runs, and the strings that switch it
(`torch.cuda.memory._set_allocator_settings`): the rule an in-process confirmation rests on (runtime/alternate.py
switches, decide/confirm.py plans with it).

From torch 2.9 the run-time parse is the one `keys.py`'s columns describe: a key that changes in place (`in_place`)
is set in the parsing process; some are put back to their defaults at every parse that does not give them
(`resets`), others keep their last value (`persists`) and must be given their default to undo them. So a setting
can be switched to and from another when every key either names changes in place and is reset or restored that
way: the string for each names its own keys, plus the `persists` keys the other names, at their defaults. A key
that changes in place but neither resets nor has a known default to restore (max_non_split_rounding_mb) cannot be
undone, and a backend is chosen once, when torch loads: those are measured by two processes. The switch is still
read back after each call (runtime/alternate.py): the columns were checked on the GPU for the versions the
registry names, and a torch that does otherwise ends the alternation rather than time the wrong setting.
"""
from __future__ import annotations

from .conf import AllocConf
from .keys import KEYS
from .versions import parse_version

RUN_TIME_PARSE = (2, 9, 0)   # the first torch whose run-time parse follows keys.py's columns


def _undoable(key: str) -> bool:
    spec = KEYS.get(key)
    return spec is not None and spec.in_place and (spec.resets or spec.persists is not None)


def switch_strings(first: AllocConf, second: AllocConf, torch_version: str) -> tuple[str, str] | None:
    """The strings that set `first` and `second` in turn in one process of `torch_version`; None where the pair
    cannot be switched at run time (an older parser, a backend, a key that cannot be undone)."""
    if parse_version(torch_version) < RUN_TIME_PARSE or first.backend or second.backend:
        return None
    keys = set(first.keys) | set(second.keys)
    if not all(_undoable(key) for key in keys):
        return None
    restored = sorted(key for key in keys if KEYS[key].persists is not None)
    return _full(first, restored), _full(second, restored)


def _full(conf: AllocConf, restored: list[str]) -> str:
    """`conf` with each of `restored` it does not name at its default (`persists`)."""
    extra = [f"{key}:{KEYS[key].persists}" for key in restored if key not in conf.keys]
    return ",".join(filter(None, [str(conf), *extra]))
