"""How much one trace or snapshot may hold (its events, its bytes per item listed, what its metadata lists), each
checked before what it declares is expanded, and how such a file is opened: within those limits, '-' for standard
input (files.open_input reads in bounded pieces); the device memory and overhead a replay assumes, how many settings
a search replays and which cards a fit answers for unless told (here, where the CLI's help reads them without
loading the simulator)."""
from __future__ import annotations

from typing import TypeGuard

from ..errors import TraceError
from ..files import open_input
from ..units import MiB

# What one trace may hold: 16.8 M allocation events, 43 times the largest shipped trace (llm-decode-h200, 387 k).
# A loaded trace costs about 170 bytes and 1.5 us per event (4 M events: 716 MB and 6 s on the 2-core development
# machine), so this bounds a load at about 3 GB and half a minute; a larger declaration is refused before anything
# is inflated or allocated.
MAX_EVENTS = 1 << 24
INT64 = 1 << 63   # a trace's integers (addresses, times, keys) are int64: [-INT64, INT64 - 1]


def is_int(value: object, low: int = -INT64, high: int = INT64 - 1) -> TypeGuard[int]:
    """An int (not a bool) in [low, high]: what the readers of a trace's entries and metadata accept."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high

# A snapshot pickle: 128 bytes for each of MAX_EVENTS trace entries (a frameless entry pickles to about 120).
MAX_SNAPSHOT_BYTES = MAX_EVENTS * 128
# The device memory a replay assumes when neither its caller nor the trace says (replay, search, fit, fleet, a
# simulated sweep): an H200's, as torch reports it.
DEFAULT_DEVICE_MEMORY = 143771 * MiB
# Device memory the allocator cannot have, when a trace does not say (a PyTorch snapshot from elsewhere): the CUDA
# context, kernels and libraries. On the H200 (torch 2.11) it was 755-783 MiB below torch's total_memory
# (143156 MiB) and 1.36 GiB below nvidia-smi's 143771 MiB; 1 GiB is within 0.4% of either on a card that fills.
DEFAULT_OVERHEAD = 1024 * MiB
# A snapshot's bytes for each segment, block and trace entry it lists, at least: torch pickles each as a dict of its
# own, of 13 bytes (a block of two keys) to hundreds, while a reference to one already read takes 2. A file listing
# more is repeating some by reference (one segment of 3,000 blocks listed 3,000 times: 9 M blocks in 11 KB), and
# reading what it lists would take work out of all proportion to its size: it is refused before anything is read.
MIN_ITEM_BYTES = 8
# What a trace's metadata may list, checked before any item is read. Measured runs: alloctune writes one per
# recording (the shipped traces hold 7), one per setting at most; each costs some 50 us to check, so 6 M runs, which
# JSON holds in 18 MB (a 4 KB xz), took minutes. Warnings: each distinct one is kept once, with how often it came
# (a recording gives a few; a trace repeating one 500,000 times printed each), and the first MAX_WARNINGS of them.
MAX_MEASURED = 4096
MAX_WARNINGS = 20
DEFAULT_MAX_SETTINGS = 400   # the settings a search replays unless told
# The cards `fit` answers for unless told (--cards), in GiB: common sizes as sold. What torch reports a card to hold
# is a little less (an H200: 139.8 GiB); give --cards exact figures to plan to the byte.
DEFAULT_CARDS_GIB = (16, 24, 40, 48, 80, 96, 141)


def open_trace(where: str, what: str):
    """`where` opened for reading as `what` ('a trace', 'a snapshot'), within MAX_SNAPSHOT_BYTES."""
    try:
        return open_input(where, MAX_SNAPSHOT_BYTES, what, TraceError)
    except OSError as exc:
        raise TraceError(f"cannot read {what.removeprefix('a ')} {where!r}: {exc.strerror or exc}") from None
