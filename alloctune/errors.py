"""One error hierarchy for everything the user can get wrong; `cli.main` catches it once."""


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
