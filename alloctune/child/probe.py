"""The child side of the probe (`trial/probe.py`), run as `PYTHON -m alloctune.child.probe probe|serve` under the
interpreter being probed: `probe` prints that interpreter's torch, CUDA and GPUs, and judges the settings it is
sent on stdin (a JSON list, possibly none) as `serve` would, so that a sweep's start imports torch once; `serve`
says what its settings parser can do, then judges each batch of settings that comes on stdin with that parser, as
a fresh torch would.
Each answer is one line marked MARK on stdout. Standard library and torch only (and `provenance.driver_version`
and the table of keys, `settings.keys`, standard library too).
"""
from __future__ import annotations

import json
import os
import platform
import re
import socket
import sys
import warnings

from ..settings.keys import KEYS
from .provenance import driver_version

MARK = "ALLOCTUNE-PROBE "   # prefixes the result line, so whatever else torch prints on stdout cannot confuse us
NO_TORCH_EXIT = 3
# A key no torch knows: if the interpreter's parser accepts it, that parser does not check keys (a CPU build of
# torch >= 2.10 parses only the device-independent keys and skips the rest), and our version table must.
_CANARY = "alloctune_probe_unknown_key:1"


def child_main(argv: list[str]) -> int:
    mode = argv[0] if argv else "probe"
    try:
        import torch
    except Exception as exc:   # ImportError, or a broken install raising anything at import
        print(MARK + json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return NO_TORCH_EXIT
    if mode == "serve":
        return _serve(torch)
    facts, request = _child_probe(torch), sys.stdin.read()
    if request.strip():
        hello, judge = _judging(torch)
        facts["settings"] = dict(hello, errors=judge(json.loads(request)))
    print(MARK + json.dumps(facts), flush=True)
    return 0


def _child_probe(torch) -> dict:
    cuda_available = bool(torch.cuda.is_available())
    count = torch.cuda.device_count() if cuda_available else 0
    devices = []
    for index in range(count):
        props = torch.cuda.get_device_properties(index)
        devices.append({"index": index, "name": props.name, "total_memory": int(props.total_memory)})
    return {
        "python": sys.executable,
        "python_version": platform.python_version(),
        "torch_version": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "cuda_version": torch.version.cuda,
        "cuda_available": cuda_available,
        "device_count": count,
        "devices": devices,
        "driver": driver_version() if cuda_available else None,
        "host": socket.gethostname(),
    }


def _settings_parser(torch):
    """The function that re-parses an allocator settings string at run time, or None.

    Recent torch (2.9 or so on) has `_accelerator_setAllocatorSettings`, which parses without a GPU even on a CPU
    build (seen on 2.13.0+cpu). Before that only CUDA builds have one, behind
    `torch.cuda.memory._set_allocator_settings`; it only parses and does not touch the device.
    """
    return (getattr(torch._C, "_accelerator_setAllocatorSettings", None)
            or getattr(torch._C, "_cuda_cudaCachingAllocator_set_allocator_settings", None))


def _judging(torch):
    """What this torch's parser can do (the torch version, a usable parser, whether it checks keys), and a function
    giving the parser's error per setting string (none where the parser is not usable)."""
    parse = _settings_parser(torch)
    # A parser that refuses even the empty setting cannot work here (e.g. it wants a CUDA driver): don't use it.
    usable = parse is not None and _parse_isolated(parse, "") is None
    in_place = parse is not None and parse is getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    hello = {"torch_version": torch.__version__, "parser": usable,
             "checks_keys": usable and _parse_isolated(parse, _CANARY) is not None}

    def judge(texts: list[str]) -> dict:
        return {text: _judge(parse, _without_backend(text), in_place) for text in texts} if usable else {}
    return hello, judge


def _serve(torch) -> int:
    """Say the torch version and what its parser can do, then answer each line of settings (a JSON list) with
    the parser's error per setting, until stdin ends (the parent closed it, or died)."""
    hello, judge = _judging(torch)
    print(MARK + json.dumps(hello), flush=True)
    for line in sys.stdin:
        print(MARK + json.dumps({"errors": judge(json.loads(line))}), flush=True)
    return 0


def _without_backend(text: str) -> str:
    """The setting without its `backend:` item. The backend is chosen once, when torch loads, and a run-time
    re-parse that names another one fails an internal assertion rather than judging the setting."""
    return re.sub(r"(?:^|,)\s*backend\s*:[^,]*", "", text).strip(" ,")


# What a parse leaves behind for the next one, on the parser of torch 2.9 on (AcceleratorAllocatorConfig in
# c10/core/AllocatorConfig.{h,cpp}; a CUDA build adds a hook for its own keys, which reads none of these): the
# keys it sets in this process (`in_place` in settings/keys.py), some reset at the start of every parse, others
# kept for the next (`persists`: after a setting that names one, it is parsed again at its default). A setting of
# these keys alone is thus parsed in this process; any other key (pinned_*, the CUDA builds' own, keys no torch
# knows), or any key under an older parser, in a fork of it.
_IN_PLACE_KEYS = frozenset(name for name, key in KEYS.items() if key.in_place)
_DEFAULTS = {name: key.persists for name, key in KEYS.items() if key.persists is not None}


def _judge(parse, text: str, in_place: bool) -> str | None:
    """Parse `text` as a fresh torch would, with nothing left behind by the parses before it. `in_place`: the
    parser is the one whose state the comment above describes."""
    keys = {item.split(":", 1)[0].strip() for item in re.sub(r"\[[^\]]*\]", "", text).split(",") if item.strip()}
    if not (in_place and keys <= _IN_PLACE_KEYS):
        return _parse_isolated(parse, text)
    error = _parse(parse, text)
    if restore := [f"{key}:{_DEFAULTS[key]}" for key in sorted(keys & _DEFAULTS.keys())]:
        _parse(parse, ",".join(restore))
    return error


def _parse_isolated(parse, text: str) -> str | None:
    """Parse `text` in a fork of this process, so that nothing this parse leaves behind can change the verdict
    on the next."""
    if not hasattr(os, "fork"):
        return _parse(parse, text)
    read_fd, write_fd = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # 3.12+ warns about fork with threads; we only parse
        pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            os.write(write_fd, json.dumps(_parse(parse, text)).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        answer = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not answer:
        return f"the parser crashed (wait status {status})"
    return json.loads(answer)


def _parse(parse, text: str) -> str | None:
    try:
        parse(text)
    except Exception as exc:
        # torch appends a C++ backtrace ("Exception raised from ...") on older versions: keep the message.
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        return lines[0] if lines else type(exc).__name__
    return None


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
