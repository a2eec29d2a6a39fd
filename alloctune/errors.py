"""One error hierarchy for everything the user can get wrong; `cli.main` catches it once. And `shown`, the one way
an error message shows a value taken from the user's data."""
from __future__ import annotations

import reprlib


class AlloctuneError(Exception):
    """Base class: the message is shown to the user as is, and the CLI exits with `exit_code`."""

    exit_code = 2


class ConfError(AlloctuneError):
    """A PYTORCH_CUDA_ALLOC_CONF string or grid entry that cannot be parsed or is invalid."""


class WorkloadError(AlloctuneError):
    """A workload file that fails validation: the message names the file, the key and what was expected."""


class SizeError(AlloctuneError):
    """A size such as '24GiB' that cannot be parsed."""


class TraceError(AlloctuneError):
    """A trace or snapshot file that cannot be loaded (corrupt, truncated, hostile, unknown format)."""


class ResultsError(AlloctuneError):
    """A results folder or trials file that cannot be read (missing, unknown schema version, no choice made)."""


class ProbeError(AlloctuneError):
    """The target Python interpreter could not be probed (missing, no torch, crashed)."""


class DiagnoseError(AlloctuneError):
    """An OOM message, snapshot or results folder that holds nothing `diagnose` can read."""


class _Capped(reprlib.Repr):
    """reprlib's bounded repr (a few items per container, a few levels deep: its work and its text stay small
    whatever the value, a tree of shared references or a list nested 200,000 deep), with integers too long to
    print (Python refuses to write more than 4,300 digits) said by their size."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxtuple, self.maxdict = 3, 4, 4, 4
        self.maxstring = self.maxother = self.maxlong = 60

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 200:   # over 60 digits: reprlib would cut them anyway
            return f"<an integer of about {x.bit_length() * 30103 // 100000} digits>"
        return super().repr_int(x, level)


_CAPPED = _Capped()


def shown(value: object, limit: int = 80) -> str:
    """`value` as an error message shows it: its repr, bounded in the time it takes and cut to `limit`
    characters."""
    try:
        text = _CAPPED.repr(value)
    except Exception:  # a str subclass or an object whose repr fails: say what it is
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 3] + "..."
