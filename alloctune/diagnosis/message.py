"""Read the numbers out of a CUDA out-of-memory message, in every format PyTorch has printed.

The caching allocator (`c10/cuda/CUDACachingAllocator.cpp`, the `TORCH_CHECK_WITH(OutOfMemoryError, ...)` after
a failed malloc) has printed three layouts; sizes always come from `format_size`: "N bytes", or KiB / MiB / GiB
with two decimals, so each figure is exact to half a unit of its last digit.

- early 1.x: `Tried to allocate X (GPU g; T total capacity; A already allocated; F free; C cached)`, where C is
  the cache beyond A (reports show C < A)
- 1.x to 2.0: the same with `R reserved in total by PyTorch` for the cache, `L allowed; ` before it when a
  memory fraction is set, and later the hint `If reserved memory is >> allocated memory try setting
  max_split_size_mb ...`.
- 2.1 onwards: `Tried to allocate X. GPU g has a total capacity of T of which F is free. ` then one sentence
  per process NVML lists on the device (`Process P has M memory in use. `, or for this very process
  `Including non-PyTorch memory, this process has M memory in use. `), `L allowed; ` under a memory fraction,
  `Of the allocated memory A is allocated by PyTorch, [with P allocated in private pools (e.g., CUDA Graphs), ]
  and U is reserved by PyTorch but unallocated.` 2.1 spells "capacty" and hints max_split_size_mb; later
  versions spell "capacity" and hint `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`. P is the free memory
  of CUDA graphs' private pools, which torch counts in A and leaves out of U (`allocated_bytes +
  allocated_in_private_pools`, `reserved_bytes - allocated_bytes - allocated_in_private_pools`): the live tensors
  are A - P, the cache's unused memory U + P.

`backend:cudaMallocAsync` prints its own table ("Allocation on device g would exceed allowed memory"); it is read
too. Whitespace is normalised and terminal colour codes are removed first, so a message wrapped over lines of a
log, or coloured by a traceback formatter, still parses. A text may hold several messages (a log of several ranks,
or of a job that caught an OOM and ran on): every one is read (`parse_messages`), with its rank where the launcher
put one before each line (torchrun's `[rank1]: `, `[default1]:` under --tee: the local rank).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from ..errors import DiagnoseError, shown
from ..runtime.oom import LIKELY_MARKS, OOM_TYPE, OUTSIDE_MARKS, likely_oom, outside_allocator
from ..settings.known import Versions
from ..settings.versions import parse_version

_UNITS = {"bytes": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_SIZE = r"(-?\d+(?:\.\d+)?) ?(bytes|B|KiB|MiB|GiB|TiB)"   # a negative one is read, for diagnose to refuse it

_START = re.compile(r"(CUDA out of memory\.|Allocation on device \d+ would exceed allowed memory)")
_REQUEST = re.compile(r"Tried to allocate " + _SIZE)
_NEW = re.compile(r"GPU (\d+) has a total (capac(?:i)?ty) of " + _SIZE + r" of which " + _SIZE + r" is free")
_PROCESS = re.compile(r"Process (\d+) has " + _SIZE + r" memory in use")
_SELF = re.compile(r"this process has " + _SIZE + r" memory in use")
_ALLOWED = re.compile(_SIZE + r" allowed;")
_ALLOCATED = re.compile(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch,(?: with " + _SIZE
                        + r" allocated in private pools \(e\.g\., CUDA Graphs\),)? and " + _SIZE
                        + r" is reserved by PyTorch but unallocated")
_OLD = re.compile(r"\(GPU (\d+); " + _SIZE + r" total capacity; " + _SIZE + r" already allocated; " + _SIZE
                  + r" free; (?:" + _SIZE + r" allowed; )?" + _SIZE + r" (reserved in total by PyTorch|cached)")
_ASYNC = {name: re.compile(pattern + r" ?: ?" + _SIZE) for name, pattern in (
    ("allocated", r"Currently allocated"), ("requested", r"Requested"), ("limit", r"Device limit"),
    ("free", r"Free \(according to CUDA\)"), ("allowed", r"PyTorch limit \(set by user-supplied memory fraction\)"))}


@dataclass(frozen=True)
class OomMessage:
    """The figures of one OOM message, in bytes; None where this format does not print them.

    `allocated` is the live tensors (less the graph pools' free memory a 2.1+ message counts in its figure),
    `reserved` the allocator's whole cache (allocated + reserved but unallocated). `precision` is the
    largest rounding error of any figure read (half a unit of the last printed digit of the largest unit).
    """

    format: str                     # which layout, with the torch versions that print it
    requested: int
    gpu: int | None
    device_total: int | None
    device_free: int | None
    allocated: int | None
    reserved: int | None
    allowed: int | None = None
    this_process: int | None = None             # NVML: this process's memory, CUDA context included
    processes: tuple[tuple[int, int], ...] = ()  # other processes NVML listed: (pid, bytes)
    private_pools: int | None = None
    hint: str | None = None                     # the setting the message itself suggests
    precision: int = 0
    text: str = field(default="", repr=False)
    notes: tuple[str, ...] = ()
    rank: int | None = None                     # the rank the launcher's line prefix names, where it names one

    @property
    def predates_expandable_segments(self) -> bool:
        """The layouts torch 2.0 and older printed: a torch without expandable_segments (added in 2.1)."""
        return self.format.startswith(("torch 1.x-2.0", "early torch 1.x"))

    @property
    def torch_versions(self) -> Versions | None:
        """The torch releases that print this layout (None: any, as cudaMallocAsync's table)."""
        if self.format.startswith("torch 2.1 "):
            return Versions(parse_version("2.1"), parse_version("2.2"))
        if self.format.startswith("torch 2.2+"):
            return Versions(parse_version("2.2"))
        return Versions(fixed=parse_version("2.1")) if self.predates_expandable_segments else None

    def to_json(self) -> dict:
        return {"format": self.format, "requested_bytes": self.requested, "gpu": self.gpu,
                "device_total_bytes": self.device_total, "device_free_bytes": self.device_free,
                "allocated_bytes": self.allocated, "reserved_bytes": self.reserved, "allowed_bytes": self.allowed,
                "this_process_bytes": self.this_process,
                "other_processes": [{"pid": p, "bytes": b} for p, b in self.processes],
                "private_pools_bytes": self.private_pools, "hint": self.hint, "precision_bytes": self.precision,
                "rank": self.rank}


# Terminal colour and cursor codes (CSI sequences), as a coloured traceback (rich, loguru) leaves them in a log
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


# What launchers put before every line of a rank's output: torchrun's `[rank0]: ` (--local-ranks-filter) and
# `[default0]:` (--tee)
_LINE_PREFIX = re.compile(r"^(?:\[(?:rank|default)(\d+)\]: ?)+")


def _flat(text: str) -> str:
    """One line, colours removed, runs of whitespace (line ends of any system, log wrapping) as one space."""
    return " ".join(_ANSI.sub("", text).split())


def _ranks(text: str) -> list[tuple[int | None, list[str]]]:
    """The text's lines by the rank their launcher prefix names (None: no prefix), prefixes removed, in the order
    the ranks first appear: the ranks of one job print into one log, their lines interleaved."""
    ranks: dict[int | None, list[str]] = {}
    for line in _ANSI.sub("", text).replace("\r", "").split("\n"):
        prefix = _LINE_PREFIX.match(line)
        ranks.setdefault(int(prefix.group(1)) if prefix else None, []).append(line[prefix.end():] if prefix else line)
    return list(ranks.items())


def _joined(lines: list[str]) -> list[str]:
    """Lines as one line, in the two ways a log may have broken them: joined by a space (a word wrap took the
    space), then joined by nothing (a hard wrap at a fixed width cuts anywhere, even inside a word, and keeps every
    character, spaces included)."""
    return [_flat(" ".join(lines)), _flat("".join(lines))]


def readings(text: str) -> list[str]:
    """The text as one line, each line's launcher prefix removed (`_joined`): what `looks_like_message`,
    `outside_error` and `likely_error` search, made once by a caller that asks more than one of them
    (`parse_messages` reads a text rank by rank, `_ranks`, not so)."""
    return _joined([_LINE_PREFIX.sub("", line) for line in _ANSI.sub("", text).replace("\r", "").split("\n")])


# Words of every OOM message and error read here (`_START`, and runtime/oom.py's words and marks of the others), one
# of which outlives any one break (a wrap, a launcher's prefix, a colour code) of a message's first sentence or
# figures; in the cases they are printed in (ignoring case makes the search of a long log ten times slower)
_NEAR = re.compile(r"CUDA\s+out|of\s+memory|OF\s+MEMORY|Tried\s+to|to\s+allocate|by\s+PyTorch|Allocation\s+on"
                   r"|would\s+exceed|_STATUS_|ALLOC_FAILED|ALLOCATION_FAILED|Cuda\s+failure|" + OOM_TYPE + "|"
                   + "|".join(r"\s+".join(map(re.escape, mark.split())) for mark in OUTSIDE_MARKS + LIKELY_MARKS))
# Characters kept on either side of each: far more than a message wrapped over many lines, its traceback and the
# lines other ranks put between
_AROUND = 1 << 18


def excerpt(text: str) -> str:
    """The whole lines of `text` within _AROUND characters of _NEAR's words, the parts apart on lines of their own:
    all that reading a log needs; the rest of a training log (tens of megabytes) would only be joined and searched."""
    spans: list[list[int]] = []
    for m in _NEAR.finditer(text):
        if spans and m.start() - _AROUND <= spans[-1][1]:
            spans[-1][1] = m.end() + _AROUND
        else:
            spans.append([max(m.start() - _AROUND, 0), m.end() + _AROUND])
    parts = []
    for lo, hi in spans:
        end = text.find("\n", hi)
        parts.append(text[text.rfind("\n", 0, lo) + 1:end if end >= 0 else len(text)])
    return "\n".join(parts)


def looks_like_message(read: list[str]) -> bool:
    """Whether a text's `readings` hold the start of an OOM message."""
    return any(_START.search(reading) for reading in read)


def outside_error(read: list[str]) -> str | None:
    """The out-of-memory error from outside the caching allocator that a text's `readings` hold, however a log broke
    its lines (runtime/oom.py's words: CUDA's, NCCL's, a library's); None if they hold none. It carries no figures."""
    return next((m for m in map(outside_allocator, read) if m), None)


def likely_error(read: list[str]) -> str | None:
    """The error in a text's `readings` that is most often, not always, out of memory (runtime/oom.py: cuDNN found no
    convolution algorithm to run); None if they hold none. It carries no figures."""
    return next((m for m in map(likely_oom, read) if m), None)


def parse_message(text: str) -> OomMessage:
    """The last OOM message in `text` (see `parse_messages`)."""
    return parse_messages(text)[-1]


def parse_messages(text: str) -> list[OomMessage]:
    """Every OOM message in `text` (a message, a traceback, a whole log), rank by rank (`_ranks`), in the order they
    appear within a rank; however the log broke its lines, the reading of a rank's lines (`_joined`) that gives
    the most messages and figures (the first, on a tie). A message printed twice (a chained traceback, the
    launcher's summary of a rank's error) is read once."""
    failed: DiagnoseError | None = None
    found: list[OomMessage] = []
    for rank, lines in _ranks(text):
        best: list[OomMessage] = []
        for reading in _joined(lines):
            read, error = _parse_all(reading)
            failed = failed or error
            if (len(read), sum(map(_figures, read))) > (len(best), sum(map(_figures, best))):
                best = read
        found += [replace(m, rank=rank) for m in best]
    if found:
        return _once(found)
    if failed is None:
        raise DiagnoseError("no CUDA out-of-memory message found (expected 'CUDA out of memory. Tried to "
                            "allocate ...' as torch prints it)")
    if looks_like_message(readings(text)):   # a message is there, but not whole: say how to mend it
        raise DiagnoseError(f"{failed}; if the log broke the message over lines (wrapped, or a prefix on each "
                            "line), join them into the one line torch printed and give that")
    raise failed


def _figures(m: OomMessage) -> int:
    """How many figures a reading gave."""
    return sum(x is not None for x in (m.gpu, m.device_total, m.device_free, m.allocated, m.reserved, m.allowed,
                                       m.this_process)) + len(m.processes)


def _once(messages: list[OomMessage]) -> list[OomMessage]:
    """Each message once: a repeat of the same figures on the same rank dropped, and a copy without a rank of one
    a rank printed. In one pass, by hashable keys: a log of a job that caught its OOMs holds tens of thousands."""
    def key(m: OomMessage) -> OomMessage:
        return replace(m, rank=None, text="", notes=())

    ranked = {key(m) for m in messages if m.rank is not None}
    seen: set[tuple[OomMessage, int | None]] = set()
    out: list[OomMessage] = []
    for m in messages:
        k = key(m)
        if (k, m.rank) in seen or (m.rank is None and k in ranked):
            continue
        seen.add((k, m.rank))
        out.append(m)
    return out


def _parse_all(flat: str) -> tuple[list[OomMessage], DiagnoseError | None]:
    """The messages of one reading, and the first error of one that could not be read."""
    read: list[OomMessage] = []
    failed = None
    for msg in _messages(flat):
        try:
            read.append(_parse_one(msg))
        except DiagnoseError as exc:
            failed = failed or exc
    return read, failed


class _Sizes:
    """Reads a message's figures in bytes (None where the message has none) and keeps each as printed, for the
    precision of the whole reading."""

    def __init__(self) -> None:
        self.read: list[tuple[str, str]] = []

    def __call__(self, number: str | None, unit: str | None) -> int | None:
        if number is None or unit is None:
            return None
        self.read.append((number, unit))
        return _bytes(number, unit)

    @property
    def precision(self) -> int:
        return _precision(self.read)


def _messages(flat: str) -> list[str]:
    """The OOM messages of `flat`, each up to what follows it (a traceback, the next error, the next message)."""
    starts = [m.start() for m in _START.finditer(flat)]
    out = []
    for start, end in zip(starts, starts[1:] + [len(flat)]):
        msg = flat[start:end]
        nxt = re.search(r"\s(?:Traceback \(most recent call last\)|\S+Error:)", msg[20:])
        out.append(msg[:20 + nxt.start()] if nxt else msg)
    return out


def _parse_one(msg: str) -> OomMessage:
    if msg.startswith("Allocation on device"):
        return _parse_async(msg)
    size = _Sizes()
    request = _REQUEST.search(msg)
    if not request:
        raise DiagnoseError("a CUDA out-of-memory message without 'Tried to allocate SIZE': cannot read it")
    requested = size(*request.groups())
    assert requested is not None
    if new := _NEW.search(msg):
        return _parse_new(msg, new, requested, size)
    if old := _OLD.search(msg):
        return _parse_old(msg, old, requested, size)
    raise DiagnoseError("a CUDA out-of-memory message in a layout this reader does not know: it names the "
                       "request but not the device's memory (expected 'GPU g has a total capacity of ...' or "
                       "'(GPU g; ... total capacity; ...)')")


def _parse_new(msg: str, new: re.Match, requested: int, size: _Sizes) -> OomMessage:
    """torch 2.1 and later: 'GPU g has a total capacity of T of which F is free. ...'."""
    gpu, spelling, *rest = new.groups()
    total, free = size(rest[0], rest[1]), size(rest[2], rest[3])
    alloc = _ALLOCATED.search(msg)
    printed = size(*alloc.group(1, 2)) if alloc else None   # the live tensors and the graph pools' free memory
    private = size(*alloc.group(3, 4)) if alloc else None
    unallocated = size(*alloc.group(5, 6)) if alloc else None   # outside the graph pools
    reserved = printed + unallocated if printed is not None and unallocated is not None else None
    allocated = printed - (private or 0) if printed is not None else None
    allowed_m = _ALLOWED.search(msg)
    allowed = size(*allowed_m.groups()) if allowed_m else None
    self_m = _SELF.search(msg)
    this_process = size(*self_m.groups()) if self_m else None
    processes = tuple((_whole(p, "a process id"), size(n, u) or 0) for p, n, u in _PROCESS.findall(msg))
    fmt = (f"torch 2.1 ('GPU {gpu} has a total capacty of ...', spelt so)" if spelling == "capacty"
           else f"torch 2.2+ ('GPU {gpu} has a total capacity of ...')")
    hint = ("expandable_segments:True" if "expandable_segments:True" in msg
            else "max_split_size_mb" if "max_split_size_mb" in msg else None)
    # NVML sometimes reports nonsense per process (17179869184.00 GiB, seen under WSL): drop what cannot be
    notes = []
    if total is not None and this_process is not None and this_process > total:
        notes.append(f"ignored the impossible figure NVML gave for this process ({self_m.group(1)} "
                     f"{self_m.group(2)})" if self_m else "")
        this_process = None
    if total is not None and any(b > total for _, b in processes):
        notes.append("ignored processes NVML reported with more memory than the card has")
        processes = tuple(p for p in processes if p[1] <= total)
    return OomMessage(fmt, requested, _whole(gpu, "a GPU number"), total, free, allocated, reserved, allowed,
                      this_process, processes, private, hint, size.precision, msg, tuple(notes))


def _parse_old(msg: str, old: re.Match, requested: int, size: _Sizes) -> OomMessage:
    """torch 1.x to 2.0: '(GPU g; T total capacity; A already allocated; F free; ... reserved/cached)'."""
    g = old.groups()
    gpu = _whole(g[0], "a GPU number")
    total, allocated, free = size(g[1], g[2]), size(g[3], g[4]), size(g[5], g[6])
    allowed = size(g[7], g[8])
    cache = size(g[9], g[10])
    assert cache is not None and allocated is not None
    if g[11].startswith("reserved"):
        fmt, reserved = "torch 1.x-2.0 (... reserved in total by PyTorch)", cache
    else:  # 'cached' was the cache beyond what is allocated (it can be less than 'already allocated')
        fmt, reserved = "early torch 1.x (... cached)", allocated + cache
    hint = "max_split_size_mb" if "max_split_size_mb" in msg else None
    return OomMessage(fmt, requested, gpu, total, free, allocated, reserved, allowed, hint=hint,
                      precision=size.precision, text=msg)


def _parse_async(msg: str) -> OomMessage:
    size, found = _Sizes(), {}
    for name, pattern in _ASYNC.items():
        if (m := pattern.search(msg)) and (figure := size(m.group(1), m.group(2))) is not None:
            found[name] = figure
    if "requested" not in found:
        raise DiagnoseError("a cudaMallocAsync out-of-memory message without 'Requested': cannot read it")
    gpu = _whole(re.search(r"device (\d+)", msg).group(1), "a GPU number")  # type: ignore[union-attr]
    # Without a memory fraction the limit printed is the largest 64-bit size (17179869184.00 GiB): no budget.
    if "allowed" in found and "limit" in found and found["allowed"] > found["limit"]:
        del found["allowed"]
    # This backend reports no cache of its own: the driver's pool holds what PyTorch freed.
    return OomMessage("backend:cudaMallocAsync (Allocation on device g would exceed allowed memory)",
                      found["requested"], gpu, found.get("limit"), found.get("free"), found.get("allocated"),
                      found.get("allocated"), found.get("allowed"), precision=size.precision, text=msg)


def _bytes(number: str, unit: str) -> int:
    """A figure of the message in bytes. Torch prints sizes of 64 bits (cudaMallocAsync's "no limit" is the largest,
    17179869184.00 GiB); one beyond that (or thousands of digits: infinite) means the text is not torch's."""
    value = float(number) * _UNITS[unit]
    if not value <= 2**64:
        raise DiagnoseError(f"the message gives a size of {shown(number, 40)} {unit}, beyond 64 bits: torch never "
                            "printed that; is the message edited?")
    return round(value)


def _whole(digits: str, what: str) -> int:
    if len(digits) > 19:   # more than 64 bits
        raise DiagnoseError(f"the message gives {what} of {len(digits)} digits: torch never printed that; is the "
                            "message edited?")
    return int(digits)


def _precision(sizes: list[tuple[str, str]]) -> int:
    """Half a unit of the last digit of the coarsest figure: the most any figure can be off."""
    worst = 0.0
    for number, unit in sizes:
        decimals = len(number.split(".")[1]) if "." in number else 0
        worst = max(worst, 0.5 * 10 ** -decimals * _UNITS[unit])
    return int(worst)
