"""Probe a Python interpreter in a child process: its torch, CUDA and GPUs, and which allocator settings its torch
accepts.

The parent runs `PYTHON -m alloctune.trial.probe probe|check` with our package on PYTHONPATH and reads one JSON line
from its stdout. The child part (everything under "child side") imports only the standard library and torch, and
this module imports nothing at load time that an older interpreter could not run (`versions`, `errors` are plain).
"""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import warnings
from dataclasses import asdict, dataclass, fields

from ..errors import ProbeError
from ..processes import spawn_group
from ..settings.conf import AllocConf
from ..settings.validation import SettingsCheck
from ..settings.versions import check_conf, check_keys
from .provenance import driver_version
from .task import child_environment

_MARK = "ALLOCTUNE-PROBE "   # prefixes the result line, so whatever else torch prints on stdout cannot confuse us
_NO_TORCH_EXIT = 3
# A key no torch knows: if the interpreter's parser accepts it, that parser does not check keys (a CPU build of
# torch >= 2.10 parses only the device-independent keys and skips the rest), and our version table must.
_CANARY = "alloctune_probe_unknown_key:1"


@dataclass(frozen=True)
class ProbeResult:
    python: str               # absolute path of the interpreter
    python_version: str
    torch_version: str        # '2.11.0+cu130'
    torch_git: str | None
    cuda_version: str | None  # torch.version.cuda
    cuda_available: bool
    device_count: int
    devices: list[dict]       # [{index, name, total_memory}]
    driver: str | None        # NVIDIA driver version; None when unknown
    host: str
    env_id: str               # 'torch-2.11.0+cu130' (the caller makes it unique across interpreters)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "ProbeResult":
        """Keys we do not know (written by a newer alloctune) are ignored; a missing one raises TypeError."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def probe(python: str = sys.executable, timeout: float = 120) -> ProbeResult:
    """Facts about `python`'s torch and GPUs, from a child process. ProbeError (naming `python`) if it fails."""
    data = _run_child(python, "probe", None, timeout)
    try:
        return ProbeResult.from_json(data)
    except TypeError as exc:
        raise ProbeError(f"probing {python}: unexpected answer from the child ({exc})") from None


def check_settings(python: str, confs: list, timeout: float = 120) -> dict[str, str | None]:
    """Parse every setting with `python`'s own torch, all in ONE child process: None = accepted, str = why not."""
    return check_settings_detail(python, confs, timeout).verdicts


def check_settings_detail(python: str, confs: list, timeout: float = 120) -> SettingsCheck:
    """`check_settings` with the torch version and how the verdicts were reached."""
    data = _run_child(python, "check", [str(conf) for conf in confs], timeout)
    version, errors = data["torch_version"], data["errors"]
    if not data["parser"]:
        method = "static"
    elif data["checks_keys"]:
        method = "torch"
    else:
        method = "torch+static"
    verdicts: dict[str, str | None] = {}
    for conf in confs:
        if method == "static":
            verdict = check_conf(conf, version)
        else:
            error = errors.get(str(conf))
            verdict = f"torch {version} rejects it: {error}" if error else None
            # The backend is fixed when torch loads and is never re-parsed (see _without_backend): table it.
            if verdict is None and (method == "torch+static" or conf.backend is not None):
                verdict = check_keys(conf, version)
        verdicts[str(conf)] = verdict
    return SettingsCheck(version, method, verdicts)


def _run_child(python: str, mode: str, payload, timeout: float) -> dict:
    python = os.fspath(python)
    exe = shutil.which(python) if os.sep not in python else python
    if not exe or not os.path.isfile(exe) or not os.access(exe, os.X_OK):
        raise ProbeError(f"Python interpreter not found or not executable: {python}")
    # No allocator setting from the user's shell: it would be parsed at import and colour every verdict.
    env = child_environment(AllocConf(), None)
    try:
        # A guarded group (processes.py): the probe, and what its torch starts, die with alloctune, even when
        # alloctune is SIGKILLed while it waits here.
        with spawn_group([exe, "-m", "alloctune.trial.probe", mode], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
            try:
                out, err = child.communicate(json.dumps(payload).encode(), timeout=timeout)
            except subprocess.TimeoutExpired:
                raise ProbeError(f"probing {python} took longer than {timeout:g} s (is its torch import "
                                 f"hanging?)") from None
    except OSError as exc:
        raise ProbeError(f"cannot run Python interpreter {python}: {exc}") from None
    proc = subprocess.CompletedProcess(child.args, child.returncode, out.decode(errors="replace"),
                                       err.decode(errors="replace"))
    lines = [line[len(_MARK):] for line in proc.stdout.splitlines() if line.startswith(_MARK)]
    if proc.returncode == _NO_TORCH_EXIT:
        reason = json.loads(lines[-1])["error"] if lines else proc.stderr.strip()
        raise ProbeError(f"{python} cannot import torch ({reason}); install torch >= 2.1 in that environment")
    if proc.returncode != 0 or not lines:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-10:])
        raise ProbeError(f"probing {python} failed (exit code {proc.returncode})"
                         + (f":\n{tail}" if tail else ": it printed nothing; is it a Python interpreter?"))
    return json.loads(lines[-1])


# ---- child side: standard library and torch only --------------------------------------------------------------


def _child_main(argv: list[str]) -> int:
    mode = argv[0] if argv else "probe"
    payload = json.loads(sys.stdin.read() or "null")
    try:
        import torch
    except Exception as exc:   # ImportError, or a broken install raising anything at import
        print(_MARK + json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return _NO_TORCH_EXIT
    result = _child_probe(torch) if mode == "probe" else _child_check(torch, payload or [])
    print(_MARK + json.dumps(result), flush=True)
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
        "env_id": f"torch-{torch.__version__}",
    }


def _settings_parser(torch):
    """The function that re-parses an allocator settings string at run time, or None.

    Recent torch (2.9 or so on) has `_accelerator_setAllocatorSettings`, which parses without a GPU even on a CPU
    build (seen on 2.13.0+cpu). Before that only CUDA builds have one, behind
    `torch.cuda.memory._set_allocator_settings`; it only parses and does not touch the device.
    """
    return (getattr(torch._C, "_accelerator_setAllocatorSettings", None)
            or getattr(torch._C, "_cuda_cudaCachingAllocator_set_allocator_settings", None))


def _child_check(torch, settings: list[str]) -> dict:
    parse = _settings_parser(torch)
    # A parser that refuses even the empty setting cannot work here (e.g. it wants a CUDA driver): don't use it.
    usable = parse is not None and _parse_isolated(parse, "") is None
    result = {"torch_version": torch.__version__, "parser": usable, "checks_keys": False, "errors": {}}
    if not usable:
        return result
    result["checks_keys"] = _parse_isolated(parse, _CANARY) is not None
    result["errors"] = {text: _parse_isolated(parse, _without_backend(text)) for text in settings}
    return result


def _without_backend(text: str) -> str:
    """The setting without its `backend:` item. The backend is chosen once, when torch loads, and a run-time
    re-parse that names another one fails an internal assertion rather than judging the setting."""
    return re.sub(r"(?:^|,)\s*backend\s*:[^,]*", "", text).strip(" ,")


def _parse_isolated(parse, text: str) -> str | None:
    """Parse `text` in a fork of this process, so nothing one parse leaves behind (large_segment_size_mb, for one,
    persists and raises the minimum of later max_split_size_mb values) can change the verdict on the next."""
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
    sys.exit(_child_main(sys.argv[1:]))
