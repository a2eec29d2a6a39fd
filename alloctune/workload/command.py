"""The user's own command as a workload (`alloctune sweep -- CMD ARGS...`, workload files with `command:`): the
checked `CommandSpec` (the program exists and is executable, the regex compiles, --step-on names a callable),
which interpreter's torch it uses, and its `WorkloadSpec`: its `steps` is the --steps window (0: the whole run),
its unit what a step counts (`--unit "32 samples"`: 32 per counted step). Running one trial of it is
`trial/command.py`."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..errors import OptionError, OptionText, WorkloadError, shown
from ..files import read_head
from ..settings.known import ALLOC_CONF_VARS
from ..units import MAX_INT, MAX_INT_TEXT
from .spec import DEFAULT_WARMUP_STEPS, NAME_PATTERN, WORKLOAD_SUFFIXES, WorkloadSpec

_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")   # fullmatch, as every validating pattern here
_DOTTED = r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*"
_CALLABLE = re.compile(f"{_DOTTED}:{_DOTTED}")   # --step-on module:qualname
STEP_ON_FORWARD = "forward"                       # --step-on forward: calls of a top-level nn.Module
_UNIT = re.compile(r"\s*(?:(?P<count>\d+(?:\.\d*)?|\.\d+)\s+)?(?P<name>\S.*?)\s*")   # '[COUNT ]NAME'
# Fields added since command workloads were first hashed: left out of to_dict() while unset, so that the digest of
# a command that does not use them (and resuming its results folder) stays what it was.
_ADDED = {"step_on": None, "units_per_step": None}


@dataclass(frozen=True)
class CommandSpec:
    """What a command trial runs and how its throughput is read. JSON-able via `to_dict`/`from_dict`."""

    argv: tuple[str, ...]
    cwd: str | None = None                 # absolute; None = where alloctune runs
    env: dict = field(default_factory=dict)   # added to the inherited environment
    metric_regex: str | None = None        # a number in the output, group 1 (or the whole match)
    isolate_cwd: bool = False              # each trial in its own empty working directory
    step_on: str | None = None             # count steps as returns of 'module:qualname', or 'forward' calls
    units_per_step: float | None = None    # what one counted step is worth in the workload's unit (None: 1)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["argv"] = list(self.argv)
        return {k: v for k, v in data.items() if k not in _ADDED or v != _ADDED[k]}

    @classmethod
    def from_dict(cls, data: dict) -> "CommandSpec":
        return cls(**{**data, "argv": tuple(data["argv"])})


def check_command(argv, cwd: str | os.PathLike | None = None, env=None, metric_regex=None, isolate_cwd=False,
                  folder: str | os.PathLike | None = None, step_on: str | None = None) -> CommandSpec:
    """A validated CommandSpec: the program exists and is executable, `env` does not set the allocator
    variables, the regex compiles, `step_on` is 'forward' or 'module:qualname'. WorkloadError (exit 2) saying
    what is wrong, before any trial runs. A relative `cwd` is relative to `folder` (the workload file's), else to
    the current directory."""
    if not isinstance(argv, (list, tuple)) or not argv or not all(isinstance(a, str) and a for a in argv):
        raise WorkloadError(f"a command is a non-empty list of non-empty strings, got {shown(argv)}")
    for arg in argv:
        if "\0" in arg:   # no program can be given one: exec refuses it
            raise WorkloadError(f"a command's argument cannot hold a NUL character, got {shown(arg)}")
    base, where = Path(folder or os.getcwd()), None   # where: `cwd`, absolute
    if cwd is not None:
        text = os.fspath(cwd) if isinstance(cwd, os.PathLike) else cwd
        if not isinstance(text, str) or not (base / text).is_dir():
            raise WorkloadError(OptionText("{cwd}: expected an existing folder, got {got}", got=shown(cwd)))
        where = str((base / text).resolve())
    env = env or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise WorkloadError(f"command env: expected a mapping of names to strings, got {shown(env)}")
    # What an environment cannot hold: a name with '=' (it would read as another name and value) or none, a NUL.
    for name, value in env.items():
        if not name or "=" in name or "\0" in name + value:
            raise WorkloadError(f"command env: {shown(name)} cannot be set: a variable's name is not empty and has no "
                                f"'=', and neither name nor value holds a NUL character")
    if set(env) & set(ALLOC_CONF_VARS):
        raise WorkloadError(f"command env sets {', '.join(sorted(set(env) & set(ALLOC_CONF_VARS)))}: the sweep sets "
                            f"the allocator variable itself, one setting per trial")
    if metric_regex is not None:
        try:
            re.compile(metric_regex)
        except re.error as exc:
            raise WorkloadError(OptionText("{metric_regex} {regex!r}: {error}", regex=metric_regex,
                                           error=exc)) from None
    if step_on is not None and not (step_on == STEP_ON_FORWARD or isinstance(step_on, str)
                                    and _CALLABLE.fullmatch(step_on)):
        raise WorkloadError(OptionText("{step_on} {given!r}: expected 'forward' (calls of the top-level model) or "
                                       "module:qualname of a callable in a module the job imports, e.g. "
                                       "transformers.generation.utils:GenerationMixin.generate", given=step_on))
    argv = list(argv)
    argv[0] = resolve_program(argv[0], where, env)
    if isolate_cwd:  # the trial runs elsewhere: arguments naming files here must still find them
        here = Path(where or os.getcwd())
        argv[1:] = [str((here / a).resolve()) if not a.startswith("-") and (here / a).exists() else a
                    for a in argv[1:]]
    return CommandSpec(tuple(argv), where, dict(env), metric_regex, bool(isolate_cwd), step_on)


def resolve_program(program: str, cwd: str | None = None, env: dict | None = None) -> str:
    """The absolute path of the program to run; WorkloadError when it is not there or not executable."""
    path = Path(cwd or os.getcwd()) / program
    if os.sep in program:
        if not path.exists():
            raise WorkloadError(f"command not found: {program}")
        if not path.is_file() or not os.access(path, os.X_OK):
            raise WorkloadError(_not_a_program(program, path))
        # Absolute, links kept: a virtual environment's python is a link whose target lacks the environment.
        return os.path.abspath(path)
    search = {**os.environ, **(env or {})}.get("PATH", os.defpath)
    found = shutil.which(program, path=search)
    if found is None:
        if not path.is_file():
            raise WorkloadError(f"command not found: {program} (not on PATH)")
        if os.access(path, os.X_OK):   # as a shell, only PATH is searched for a bare name
            raise WorkloadError(f"command not found: {program} (not on PATH; ./{program} runs the file here)")
        raise WorkloadError(_not_a_program(program, path))
    return found


def _not_a_program(program: str, path: Path) -> str:
    """Why `path`, given as a command's program, is none: a file that is not executable (`sweep data.txt`, meant as
    a workload or to be run by its interpreter) is said to be a file; a workload file's name among a command's words
    (`sweep w.yaml extra`, `sweep(['w.yaml'])`), one."""
    if path.is_file() and program.lower().endswith(WORKLOAD_SUFFIXES):
        return (f"{program} is a workload file, not a command: sweep or record it by its path alone "
                f"(`alloctune sweep {shlex.quote(program)}`; from Python, `sweep({program!r})`)")
    if path.is_file():
        return f"{program} is a file, not a command (it is not executable) or a workload file (.yaml, .yml)"
    return f"command is not an executable file: {program}"


def is_python(program: str) -> bool:
    return bool(_PYTHON.fullmatch(os.path.basename(program)))


def command_python(command: CommandSpec) -> str | None:
    """The interpreter whose torch the command uses: the program itself when it is Python, else the one its
    `#!` line names (torchrun, accelerate, a console script); None when neither says (a shell script, a binary)."""
    program = command.argv[0]
    if is_python(program):
        return program
    try:
        first = read_head(program, 256, "a program", WorkloadError).split(b"\n")[0].decode("utf-8", "replace")
    except (OSError, WorkloadError):   # none, or no file (a FIFO is never waited on)
        return None
    if first.startswith("#!"):
        words = first[2:].split()
        if words and os.path.basename(words[0]) == "env":
            words = [w for w in words[1:] if not w.startswith("-")]
            words[:1] = [shutil.which(words[0]) or words[0]] if words else []
        if words and is_python(words[0]) and os.path.exists(words[0]):
            return words[0]
    return None


def target_python(command: CommandSpec) -> str:
    """`command_python`, else this one."""
    return command_python(command) or sys.executable


def command_name(argv) -> str:
    """A results-folder name for a command: its script's name (train.py -> cmd-train), else its program's."""
    script = next((a for a in argv[1:] if a.endswith(".py")), None)
    stem = Path(script or argv[0]).stem
    if stem == "-m" or not stem:
        stem = "command"
    return "cmd-" + (re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-") or "command")


def command_workload(command: CommandSpec, *, name: str | None = None, unit: str | None = None,
                     warmup_steps: int = DEFAULT_WARMUP_STEPS, steps: int = 0, timeout_s: float | None = None,
                     description: str = "", source: str | None = None,
                     grid: tuple[str, ...] | None = None) -> WorkloadSpec:
    """The WorkloadSpec of a command. `steps`: end each trial after this many steps past the warm-up (the --steps
    window); 0: the command decides how much work a run does. `unit`: what the throughput counts, optionally
    with what one counted step is worth ('32 samples')."""
    if name is not None and not (isinstance(name, str) and NAME_PATTERN.fullmatch(name)):
        raise WorkloadError(OptionText("{name} {given}: expected letters, digits, '.', '_', '-'", given=shown(name)))
    check_steps(warmup_steps, steps)
    count, unit = _unit(unit)
    if count is not None:
        if command.metric_regex is not None:
            raise WorkloadError(OptionText("{unit} {count:g} {name}: a count per step applies to the steps alloctune "
                                           "counts; {metric_regex} reads the throughput from the output",
                                           count=count, name=unit))
        command = replace(command, units_per_step=count)
    return WorkloadSpec(name=name or command_name(command.argv), description=description or " ".join(command.argv),
                        source=source, kind=None, entry=None, params={}, preset=None, warmup_steps=warmup_steps,
                        steps=steps, unit=unit or ("runs" if command.metric_regex is None else "units"), seed=0,
                        timeout_s=timeout_s, grid=grid, trace=None, command=command.to_dict())


def check_steps(warmup_steps: object, steps: object) -> None:
    """A command's --steps window, as sweep, record and fit take it (each checks it as its options are made) and
    `command_workload`: `warmup_steps` before it and `steps` in it (0: the command's own end), each a whole number
    of steps from 0 to MAX_INT (a results file holds no larger)."""
    for option, value in (("warmup_steps", warmup_steps), ("steps", steps)):
        if not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_INT):
            raise OptionError(option, "{%s} must be a whole number of steps from 0 to %s, got {got}"
                              % (option, MAX_INT_TEXT), got=shown(value))


def _unit(text: str | None) -> tuple[float | None, str | None]:
    """'32 samples' -> (32.0, 'samples'); 'samples' -> (None, 'samples')."""
    if not text:
        return None, None
    match = _UNIT.fullmatch(text)
    if match is None:
        raise WorkloadError(OptionText("{unit} {given!r}: expected a unit such as 'samples', or what one step is "
                                       "worth such as '32 samples'", given=text))
    count = float(match["count"]) if match["count"] else None
    if count is not None and count <= 0:
        raise WorkloadError(OptionText("{unit} {given!r}: a step is worth more than 0", given=text))
    return count, match["name"]
