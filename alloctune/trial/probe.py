"""Probe a Python interpreter in a child process: its torch, CUDA and GPUs, and which allocator settings its torch
accepts.

`probe()` runs `PYTHON -m alloctune.child.probe probe` with our package on PYTHONPATH and reads one JSON line from
its stdout; `probe_and_judge()` sends that child the sweep's settings too, so a sweep's start imports torch once
(about a second less); `Probes` probes each interpreter once for one run (a fit's). A `SettingsJudge` keeps one
`PYTHON -m alloctune.child.probe serve` child for as long as it is open: the child imports torch once and answers
every batch of settings sent to it, one JSON line each way (a search sends a batch per refinement round; starting an
interpreter and importing torch costs more than all of its parses). What the child does is `child/probe.py`'s, a
light module (tests/test_layers.py): this module is the parent's side only.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, fields
from typing import IO, Callable, NoReturn, Sequence

from ..child.probe import MARK, NO_TORCH_EXIT
from ..errors import ProbeError
from ..processes import GroupProcess, kill_group, spawn_group
from ..results.records import torch_env_id
from ..settings.conf import AllocConf
from ..settings.validation import SettingsCheck
from ..settings.versions import check_conf, check_keys
from .task import child_environment



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
    env_id: str               # results.records.torch_env_id (the caller makes it unique across interpreters)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "ProbeResult":
        """Keys we do not know (written by a newer alloctune) are ignored; a missing one raises TypeError."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def probe(python: str = sys.executable, timeout: float = 120) -> ProbeResult:
    """Facts about `python`'s torch and GPUs, from a child process. ProbeError (naming `python`) if it fails."""
    return probe_and_judge(python, [], timeout)[0]


# How an interpreter is probed: `probe`, or a run's `Probes` (each interpreter once); what `probes=` parameters take.
ProbeFn = Callable[[str], ProbeResult]


class Probes:
    """`probe`, each interpreter once: for one run (a fit's), which asks of its command's interpreter before each
    recording and confirmation, while the answer cannot change within it (the same interpreter, the same
    environment) and each probe imports torch again, seconds each. A failure (ProbeError) is kept and raised again."""

    def __init__(self) -> None:
        self._seen: dict[str, ProbeResult | ProbeError] = {}

    def __call__(self, python: str) -> ProbeResult:
        if python not in self._seen:
            try:
                self._seen[python] = probe(python)
            except ProbeError as exc:
                self._seen[python] = exc
        seen = self._seen[python]
        if isinstance(seen, ProbeError):
            raise seen
        return seen


def probe_and_judge(python: str, confs: Sequence[AllocConf],
                    timeout: float = 120) -> tuple[ProbeResult, SettingsCheck | None]:
    """`probe`, and `python`'s torch's verdicts on `confs` (as `check_settings_detail`), from ONE child: a sweep's
    start then imports torch once. The verdicts are None where no settings were asked or the interpreter answered
    the probe without judging them (a stand-in, or a wrapper that answers the probe itself)."""
    exe = _interpreter(python)
    request = json.dumps([str(conf) for conf in confs]).encode() if confs else b""
    try:
        # A guarded group (processes.py): the probe, and what its torch starts, die with alloctune, even when
        # alloctune is SIGKILLed while it waits here.
        with spawn_group([exe, "-m", "alloctune.child.probe", "probe"], env=_environment(), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
            try:
                out, err = child.communicate(request, timeout=timeout)
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
        answer = json.loads(lines[-1])
        facts = ProbeResult.from_json({"env_id": torch_env_id(str(answer.get("torch_version"))), **answer})
    except TypeError as exc:
        raise ProbeError(f"probing {python}: unexpected answer from the child ({exc})") from None
    judged = answer.get("settings")
    return facts, (_judged(judged, list(confs), judged["errors"]) if confs and judged else None)


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
                self._proc = spawn_group([exe, "-m", "alloctune.child.probe", "serve"], env=_environment(),
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
            if text.startswith(MARK):
                return json.loads(text[len(MARK):])
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
    return [line[len(MARK):] for line in lines if line.startswith(MARK)]


def _too_slow(python: str, timeout: float) -> ProbeError:
    return ProbeError(f"probing {python} took longer than {timeout:g} s (is its torch import hanging?)")


def _failed(python: str, code: int | None, lines: list[str], stderr: str, stdout: str) -> ProbeError:
    """Why the child of `python` gave no answer: exit code `code`, `lines` its marked lines."""
    if code == NO_TORCH_EXIT:
        reason = json.loads(lines[-1])["error"] if lines else stderr.strip()
        return ProbeError(f"{python} cannot import torch ({reason}); install torch >= 2.1 in that environment")
    tail = "\n".join((stderr or stdout).strip().splitlines()[-10:])
    return ProbeError(f"probing {python} failed (exit code {code})"
                      + (f":\n{tail}" if tail else ": it printed nothing; is it a Python interpreter?"))

