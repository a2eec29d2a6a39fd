"""Probe a Python interpreter in a child process: its torch, CUDA and GPUs, and which allocator settings its torch
accepts.

`probe()` runs `PYTHON -m alloctune.trial.probe probe` with our package on PYTHONPATH and reads one JSON line from
its stdout. A `SettingsJudge` keeps one `PYTHON -m alloctune.trial.probe serve` child for as long as it is open: the
child imports torch once and answers every batch of settings sent to it, one JSON line each way (a search sends a
batch per refinement round; starting an interpreter and importing torch costs more than all of its parses). The
child part (everything under "child side") uses only the standard library and torch. At load time this module
imports, besides the standard library, only light alloctune modules, which that interpreter can run without pyyaml,
scipy or torch: errors, processes, settings (conf, versions, validation), provenance, and task (for
`child_environment`, the environment every child gets), which brings results.records, workload.spec and the
built-in kinds' table (workload.builtin). tests/test_layers.py checks that the probe child loads no orchestrator.
"""
from __future__ import annotations

import json
import os
import platform
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, fields
from typing import IO, NoReturn, Sequence

from ..errors import ProbeError
from ..processes import GroupProcess, kill_group, spawn_group
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
    exe = _interpreter(python)
    try:
        # A guarded group (processes.py): the probe, and what its torch starts, die with alloctune, even when
        # alloctune is SIGKILLed while it waits here.
        with spawn_group([exe, "-m", "alloctune.trial.probe", "probe"], env=_environment(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
            try:
                out, err = child.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                raise _too_slow(python, timeout) from None
    except OSError as exc:
        raise ProbeError(f"cannot run Python interpreter {python}: {exc}") from None
    proc = subprocess.CompletedProcess(child.args, child.returncode, out.decode(errors="replace"),
                                       err.decode(errors="replace"))
    lines = _marked(proc.stdout.splitlines())
    if proc.returncode != 0 or not lines:
        raise _failed(python, proc.returncode, lines, proc.stderr, proc.stdout)
    try:
        return ProbeResult.from_json(json.loads(lines[-1]))
    except TypeError as exc:
        raise ProbeError(f"probing {python}: unexpected answer from the child ({exc})") from None


def check_settings(python: str, confs: list, timeout: float = 120) -> dict[str, str | None]:
    """Parse every setting with `python`'s own torch, all in ONE child process: None = accepted, str = why not."""
    return check_settings_detail(python, confs, timeout).verdicts


def check_settings_detail(python: str, confs: list, timeout: float = 120) -> SettingsCheck:
    """`check_settings` with the torch version and how the verdicts were reached. For several batches, keep a
    `SettingsJudge` open instead: one child for all of them."""
    with SettingsJudge(python, timeout) as judge:
        return judge(confs)


class SettingsJudge:
    """A `Validator` (settings/validation.py): `python`'s own torch judges settings, in one child process that
    lives from `open()` (or `with`) to `close()` and never outlives alloctune (`processes.spawn_group`).
    `timeout` bounds the start (the torch import) and each batch. Failures raise ProbeError naming `python`."""

    def __init__(self, python: str = sys.executable, timeout: float = 120):
        self.python, self.timeout = os.fspath(python), timeout
        self._proc: GroupProcess | None = None
        self._stderr: IO[bytes] | None = None
        self._pending = b""          # stdout read past the last full line
        self._noise: list[str] = []  # stdout lines that were not answers: shown when the child fails
        self._hello: dict | None = None

    def __enter__(self) -> "SettingsJudge":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> "SettingsJudge":
        """Start the child (it imports torch while the caller goes on); a no-op when it runs already."""
        if self._proc is None:
            exe = _interpreter(self.python)
            self._stderr = tempfile.TemporaryFile()
            try:
                self._proc = spawn_group([exe, "-m", "alloctune.trial.probe", "serve"], env=_environment(),
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
            except OSError as exc:
                self.close()
                raise ProbeError(f"cannot run Python interpreter {self.python}: {exc}") from None
        return self

    def close(self) -> None:
        proc, self._proc, self._hello = self._proc, None, None
        if proc is not None:
            kill_group(proc)
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __call__(self, confs: Sequence[AllocConf]) -> SettingsCheck:
        confs = list(confs)
        hello = self.hello()
        errors = self.parse_errors([str(conf) for conf in confs]) if hello["parser"] and confs else {}
        return _judged(hello, confs, errors)

    def hello(self) -> dict:
        """What the child said on starting: torch_version, parser (it has a usable run-time parser), checks_keys
        (that parser refuses keys it does not know)."""
        if self._hello is None:
            self.open()
            answer = self._answer()
            if "error" in answer:   # it cannot import torch, and exits
                self._fail(answer)
            self._hello = answer
        return self._hello

    def parse_errors(self, texts: list[str]) -> dict[str, str | None]:
        """Torch's own verdict on each setting string, as given (None = its parser accepts it); the child's parser
        must be usable (`hello()["parser"]`)."""
        self.hello()
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps(texts).encode() + b"\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            self._fail()
        return self._answer()["errors"]

    def _answer(self) -> dict:
        """The next answer line of the child, within the timeout."""
        assert self._proc is not None and self._proc.stdout is not None
        fd, deadline = self._proc.stdout.fileno(), time.monotonic() + self.timeout
        while True:
            while b"\n" not in self._pending:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    self.close()
                    raise _too_slow(self.python, self.timeout)
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    self._fail()
                self._pending += chunk
            line, self._pending = self._pending.split(b"\n", 1)
            text = line.decode(errors="replace")
            if text.startswith(_MARK):
                return json.loads(text[len(_MARK):])
            self._noise = (self._noise + [text])[-10:]

    def _fail(self, answer: dict | None = None) -> NoReturn:
        """The child ended or broke off (`answer`: its last words): why, as ProbeError, once it has exited."""
        assert self._proc is not None and self._stderr is not None
        try:
            code = self._proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            code = None
        self._stderr.seek(0)
        stderr = self._stderr.read().decode(errors="replace")
        stdout = "\n".join(self._noise + [self._pending.decode(errors="replace")])
        self.close()
        raise _failed(self.python, code, [json.dumps(answer)] if answer else [], stderr, stdout)


def _judged(hello: dict, confs: list[AllocConf], errors: dict[str, str | None]) -> SettingsCheck:
    """The verdicts: torch's parse where it judged, alloctune's version table for what it cannot judge."""
    version = hello["torch_version"]
    if not hello["parser"]:
        method = "static"
    elif hello["checks_keys"]:
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


def _interpreter(python: str) -> str:
    python = os.fspath(python)
    exe = shutil.which(python) if os.sep not in python else python
    if not exe or not os.path.isfile(exe) or not os.access(exe, os.X_OK):
        raise ProbeError(f"Python interpreter not found or not executable: {python}")
    return exe


def _environment() -> dict:
    # No allocator setting from the user's shell: it would be parsed at import and colour every verdict.
    return child_environment(AllocConf(), None)


def _marked(lines: list[str]) -> list[str]:
    return [line[len(_MARK):] for line in lines if line.startswith(_MARK)]


def _too_slow(python: str, timeout: float) -> ProbeError:
    return ProbeError(f"probing {python} took longer than {timeout:g} s (is its torch import hanging?)")


def _failed(python: str, code: int | None, lines: list[str], stderr: str, stdout: str) -> ProbeError:
    """Why the child of `python` gave no answer: exit code `code`, `lines` its marked lines."""
    if code == _NO_TORCH_EXIT:
        reason = json.loads(lines[-1])["error"] if lines else stderr.strip()
        return ProbeError(f"{python} cannot import torch ({reason}); install torch >= 2.1 in that environment")
    tail = "\n".join((stderr or stdout).strip().splitlines()[-10:])
    return ProbeError(f"probing {python} failed (exit code {code})"
                      + (f":\n{tail}" if tail else ": it printed nothing; is it a Python interpreter?"))


# ---- child side: standard library and torch only --------------------------------------------------------------


def _child_main(argv: list[str]) -> int:
    mode = argv[0] if argv else "probe"
    try:
        import torch
    except Exception as exc:   # ImportError, or a broken install raising anything at import
        print(_MARK + json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return _NO_TORCH_EXIT
    if mode == "serve":
        return _serve(torch)
    print(_MARK + json.dumps(_child_probe(torch)), flush=True)
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


def _serve(torch) -> int:
    """Say the torch version and what its parser can do, then answer each line of settings (a JSON list) with
    the parser's error per setting, until stdin ends (the parent closed it, or died)."""
    parse = _settings_parser(torch)
    # A parser that refuses even the empty setting cannot work here (e.g. it wants a CUDA driver): don't use it.
    usable = parse is not None and _parse_isolated(parse, "") is None
    in_place = parse is not None and parse is getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    hello = {"torch_version": torch.__version__, "parser": usable,
             "checks_keys": usable and _parse_isolated(parse, _CANARY) is not None}
    print(_MARK + json.dumps(hello), flush=True)
    for line in sys.stdin:
        errors = ({text: _judge(parse, _without_backend(text), in_place) for text in json.loads(line)}
                  if usable else {})
        print(_MARK + json.dumps({"errors": errors}), flush=True)
    return 0


def _without_backend(text: str) -> str:
    """The setting without its `backend:` item. The backend is chosen once, when torch loads, and a run-time
    re-parse that names another one fails an internal assertion rather than judging the setting."""
    return re.sub(r"(?:^|,)\s*backend\s*:[^,]*", "", text).strip(" ,")


# What a parse leaves behind for the next one, on the parser of torch 2.9 on (AcceleratorAllocatorConfig in
# c10/core/AllocatorConfig.{h,cpp}; a CUDA build adds a hook for its own keys, which reads none of these):
# max_split_size_mb, garbage_collection_threshold and roundup_power2_divisions are reset at the start of every parse
# (2.13: max_non_split_rounding_mb too, to large_segment_size_mb's value; no check reads it otherwise).
# large_segment_size_mb and expandable_segments persist, and large_segment_size_mb is the minimum of
# max_split_size_mb and max_non_split_rounding_mb in every later parse (tests/trial/test_probe.py shows it): after a
# setting that names either, that key is parsed again at its default (2.13's AllocatorConfig.h: 20 MiB, False). A
# setting of these keys alone is thus parsed in this process; any other key (pinned_*, the CUDA builds' own, keys
# no torch knows), or any key under an older parser, in a fork of it.
_IN_PLACE_KEYS = frozenset({"max_split_size_mb", "max_non_split_rounding_mb", "garbage_collection_threshold",
                            "roundup_power2_divisions", "expandable_segments", "large_segment_size_mb"})
_DEFAULTS = {"large_segment_size_mb": "20", "expandable_segments": "False"}


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
    sys.exit(_child_main(sys.argv[1:]))
