"""Workload files (YAML): the schema and its validation, giving the frozen `WorkloadSpec` (spec.py) a sweep runs.

Schema (the full reference with examples is `workloads/README.md`):

    name: transformer-varlen        # required; letters, digits, '.', '_', '-' (it names the results folder)
    description: ...                # optional text
    kind: transformer               # a built-in kind (alloctune.workload.builtin.KINDS), or instead:
    entry: mypkg.train:make         #   user code, 'package.module:function' or 'path/to/file.py:function'
                                    #   (a path is relative to this file); exactly one of kind / entry
    params: {layers: 12, ...}       # passed to the factory; a built-in kind checks names and types
    presets:                        # optional named overrides of params, and of warmup_steps/steps/timeout_s/trace
      h200: {layers: 24, steps: 40}
    default_preset: 24gib           # the preset used when none is asked for
    warmup_steps: 2                 # steps run before the measured window (default 2)
    steps: 20                       # measured steps; required
    unit: tokens                    # what a step's return value counts; required with entry (a kind has its own)
    seed: 0                         # default 0
    timeout_s: 300                  # per-trial time limit; default: the runner's
    grid: [default, "expandable_segments:True"]   # optional grid override
    trace: traces/x.trace           # optional shipped allocation trace (relative to this file)

A command workload (your own program, run as is: see `command.py`) gives instead of kind/entry/params/presets:

    command: [python3, train.py, --steps, "60"]   # argv; the program must exist and be executable
    cwd: ../jobs                    # optional working folder (relative to this file)
    env: {HF_HUB_OFFLINE: "1"}      # optional variables added to the environment
    metric_regex: '([0-9.]+) tok/s' # optional: throughput read from the output (else alloctune.step marks,
                                    #   else counted steps, else one run = one unit); `unit` is optional
    step_on: forward                # optional: count steps as top-level model calls, or module:qualname returns
    steps: 200                      # optional: end each trial after this many steps past the warm-up (a window)
    isolate_cwd: true               # optional: each trial in its own empty working folder

The path `-` reads the file from standard input; its relative paths are then relative to the current folder.

Every error raises `WorkloadError` naming the file, the key and what was expected; nothing runs before the whole
file has been checked. pyyaml is imported only by `load_workload`, so trial children (which may lack it) can
still rebuild a spec with `WorkloadSpec.from_dict`.
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path

from ..errors import ConfError, WorkloadError
from ..files import checked_path, not_a_file, read_text, yaml_problem
from ..settings.conf import AllocConf
from ..units import MAX_INT, MAX_INT_TEXT
from .builtin import KINDS, entry_path, resolve_factory  # noqa: F401  (resolve_factory: part of this API)
from .command import check_command, command_workload
from .spec import DEFAULT_WARMUP_STEPS, MAX_TIMEOUT_S, NAME_PATTERN, WORKLOAD_SUFFIXES, WorkloadSpec

_TOP_KEYS = ("name", "description", "kind", "entry", "params", "presets", "default_preset", "warmup_steps",
             "steps", "unit", "seed", "timeout_s", "grid", "trace", "command", "cwd", "env", "metric_regex",
             "isolate_cwd", "step_on")
_COMMAND_ONLY = ("cwd", "env", "metric_regex", "isolate_cwd", "step_on")
_NOT_FOR_COMMANDS = ("kind", "entry", "params", "presets", "default_preset", "seed", "trace")
# What a preset may set besides params. A trace belongs to the parameters it was recorded with: a preset that
# changes them should name its own trace.
_PRESET_RUN_KEYS = ("warmup_steps", "steps", "timeout_s", "trace")
MAX_NESTING = 32  # levels of lists and mappings in a workload file


def names_workload(target: list[str]) -> bool:
    """Whether a command line's words name a workload file, not a command to run: one word, '-' (standard input)
    or a name ending in .yaml or .yml in any case (W.YAML too: one missing is then said to be missing)."""
    return len(target) == 1 and (target[0] == "-" or target[0].lower().endswith(WORKLOAD_SUFFIXES))


class _Checker:
    """Validation of one file: every error names the file and the key."""

    def __init__(self, source: str, folder: Path):
        self.source = source
        self.folder = folder   # relative paths in the file are relative to it

    def fail(self, key: str, message: str) -> WorkloadError:
        return WorkloadError(f"{self.source}: key {key!r}: {message}")

    def expect(self, key: str, value, ok: bool, expected: str):
        if not ok:
            raise self.fail(key, f"expected {expected}, got {value!r}")
        return value

    def integer(self, key: str, value, minimum: int):
        """An integer from `minimum` to MAX_INT (64 bits: what a results file holds)."""
        ok = isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= MAX_INT
        return self.expect(key, value, ok, f"an integer from {minimum} to {MAX_INT_TEXT}")

    def run_value(self, key: str, value):
        """warmup_steps, steps, timeout_s or trace (at the top level or in a preset; `key` ends with the name)."""
        name = key.rpartition(".")[2]
        if name == "trace":
            self.text(key, value, expected="a path to an allocation trace file")
            full = (self.folder / value).resolve()
            if problem := not_a_file(full):
                raise self.fail(key, f"expected an existing trace file, {full} {problem}")
            return str(full)
        if name != "timeout_s":
            return self.integer(key, value, 1 if name == "steps" else 0)
        if value is None:
            return None
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= MAX_TIMEOUT_S
        return float(self.expect(key, value, ok, f"a positive number of seconds up to {MAX_TIMEOUT_S:.0f}, "
                                                 f"or null"))

    def text(self, key: str, value, pattern: re.Pattern | None = None, expected: str = "a non-empty string"):
        ok = isinstance(value, str) and bool(value.strip()) and (pattern is None or bool(pattern.fullmatch(value)))
        return self.expect(key, value, ok, expected)

    def mapping(self, key: str, value) -> dict:
        ok = isinstance(value, dict) and all(isinstance(k, str) for k in value)
        return self.expect(key, value, ok, "a mapping with string keys")


def _json_able(value) -> bool:
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(map(_json_able, value))
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_able(v) for k, v in value.items())
    return False


# The shipped workload files take at most 1.4 KB; a file seven hundred times that is not a workload.
MAX_WORKLOAD_BYTES = 2**20


def _read(path: Path) -> tuple[str, str, Path, str]:
    """(text, name for messages, folder its relative paths start from, absolute path or '' for stdin).
    `-` is standard input: its relative paths start from the current folder."""
    source = "<stdin>" if str(path) == "-" else str(path)
    try:
        text = read_text(path, MAX_WORKLOAD_BYTES, "a workload file", WorkloadError)
        if source == "<stdin>":
            return text, source, Path.cwd(), ""
        return text, source, path.parent, str(path.resolve())
    except OSError as exc:
        raise WorkloadError(f"{source}: cannot read workload file: {exc.strerror or exc}") from None


def _load_yaml(text: str, source: str):
    import yaml  # here, not at the top: trial children import this module and may lack pyyaml

    class Loader(yaml.SafeLoader):
        """SafeLoader that refuses a key given twice (PyYAML silently keeps the last one)."""

    def construct_mapping(loader, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=True)
            if key in seen:
                raise WorkloadError(f"{source}: key {key!r} given twice (line {key_node.start_mark.line + 1})")
            seen.add(key)
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)

    depth = 0

    def compose_node(loader, parent, index):
        # Aliases let a few lines stand for billions of values (a "billion laughs"), and nesting deep enough
        # overflows the composer's recursion: a workload file needs neither.
        nonlocal depth
        if loader.check_event(yaml.AliasEvent):
            mark = loader.peek_event().start_mark
            raise WorkloadError(f"{source}: line {mark.line + 1}: YAML aliases (*name) are not accepted in a "
                                f"workload file; write the value out")
        depth += 1
        try:
            if depth > MAX_NESTING:
                mark = loader.peek_event().start_mark
                raise WorkloadError(f"{source}: line {mark.line + 1}: nested more than {MAX_NESTING} levels deep")
            return yaml.SafeLoader.compose_node(loader, parent, index)
        finally:
            depth -= 1

    Loader.compose_node = compose_node
    try:
        return yaml.load(text, Loader=Loader)
    except yaml.YAMLError as exc:
        raise WorkloadError(f"{source}: not valid YAML: {yaml_problem(exc, text)}") from None


def load_workload(path: str | os.PathLike, preset: str | None = None) -> WorkloadSpec:
    """Read and validate a workload file, apply `preset` (else the file's `default_preset`, else none)."""
    text, source, folder, resolved = _read(Path(checked_path(path, "a workload file")))
    c = _Checker(source, folder)
    doc = _document(c, text)
    if "command" in doc:
        return _command_workload(c, doc, resolved)
    if extra := [k for k in _COMMAND_ONLY if k in doc]:
        raise c.fail(extra[0], "applies to a 'command' workload only")
    for required in ("name", "steps"):
        if required not in doc:
            raise c.fail(required, "missing (required)")
    name = c.text("name", doc["name"], NAME_PATTERN, "a name of letters, digits, '.', '_', '-'")
    description = _description(c, doc)
    unit = _unit(c, doc)
    seed = c.integer("seed", doc.get("seed", 0), 0)
    run = {k: c.run_value(k, doc[k]) for k in _PRESET_RUN_KEYS if k in doc}
    run.setdefault("warmup_steps", DEFAULT_WARMUP_STEPS)
    run.setdefault("timeout_s", None)
    run.setdefault("trace", None)
    kind, entry, unit = _kind_or_entry(c, doc, unit)
    base = c.mapping("params", doc.get("params") or {})
    _check_params(c, kind, "params", base)
    _resolve(c, kind, "params", base)
    presets = _presets(c, doc, kind, base)
    chosen = _chosen_preset(c, doc, presets, preset)
    params = base
    if chosen is not None:
        overrides = presets[chosen]
        run.update({k: v for k, v in overrides.items() if k in _PRESET_RUN_KEYS})
        params = {**base, **{k: v for k, v in overrides.items() if k not in _PRESET_RUN_KEYS}}
    params = _resolve(c, kind, f"presets.{chosen}" if chosen else "params", params)
    return WorkloadSpec(name=name, description=description, source=resolved, kind=kind, entry=entry,
                        params=params, preset=chosen, seed=seed, unit=unit, **run,
                        grid=_grid(c, doc["grid"]) if "grid" in doc else None)


def _document(c: _Checker, text: str) -> dict:
    """The file as a mapping of known top-level keys."""
    doc = _load_yaml(text, c.source)
    if not isinstance(doc, dict):
        raise WorkloadError(f"{c.source}: expected a mapping of keys (name, kind or entry, steps, unit, ...), "
                            f"got {'nothing (an empty document)' if doc is None else type(doc).__name__}")
    unknown = [k for k in doc if k not in _TOP_KEYS]
    if unknown:
        raise c.fail(str(unknown[0]), f"unknown key; expected one of: {', '.join(_TOP_KEYS)}")
    return doc


def _description(c: _Checker, doc: dict) -> str:
    description = doc.get("description")
    if description is None:
        return ""
    return c.expect("description", description, isinstance(description, str), "a string")


def _unit(c: _Checker, doc: dict) -> str | None:
    if "unit" not in doc:
        return None
    return c.text("unit", doc["unit"], expected="a unit of work such as 'tokens', 'samples', 'images'")


def _kind_or_entry(c: _Checker, doc: dict, unit: str | None) -> tuple[str | None, str | None, str]:
    """(kind, entry, unit): exactly one of a built-in kind (whose unit the file may only repeat) and the user's
    entry (whose unit the file must give)."""
    if ("kind" in doc) == ("entry" in doc):
        raise c.fail("kind", "give exactly one of 'kind' (a built-in workload) and 'entry' (your own code)")
    if "entry" in doc:
        entry = _entry(c, doc["entry"])
        if unit is None:   # a built-in kind has its own unit; user code must say what its steps count
            raise c.fail("unit", "missing (required with 'entry': what a step's return value counts)")
        return None, entry, unit
    kind = c.expect("kind", doc["kind"], doc["kind"] in KINDS, f"one of {', '.join(KINDS)}")
    if unit is None:
        unit = KINDS[kind].unit
    c.expect("unit", unit, unit == KINDS[kind].unit, f"{KINDS[kind].unit!r} (what kind {kind!r} counts)")
    return kind, None, unit


def _presets(c: _Checker, doc: dict, kind: str | None, base: dict) -> dict[str, dict]:
    """Each preset checked on its own and over `base`: its run values and its parameters."""
    presets = {}
    for pname, overrides in c.mapping("presets", doc.get("presets") or {}).items():
        key = f"presets.{pname}"
        c.text(key, pname, NAME_PATTERN,
               "a preset name of letters, digits, '.', '_', '-' (it names the results folder)")
        presets[pname] = overrides = {k: c.run_value(f"{key}.{k}", v) if k in _PRESET_RUN_KEYS else v
                                      for k, v in c.mapping(key, overrides or {}).items()}
        params = {k: v for k, v in overrides.items() if k not in _PRESET_RUN_KEYS}
        _check_params(c, kind, key, params)
        _resolve(c, kind, key, {**base, **params})
    return presets


def _chosen_preset(c: _Checker, doc: dict, presets: dict[str, dict], preset: str | None) -> str | None:
    """The preset asked for, else the file's default_preset, else None."""
    default_preset = doc.get("default_preset")
    if default_preset is not None:
        c.expect("default_preset", default_preset, isinstance(default_preset, str) and default_preset in presets,
                 f"the name of a preset ({', '.join(presets) or 'the file has none'})")
    chosen = preset if preset is not None else default_preset
    if chosen is not None and chosen not in presets:
        raise WorkloadError(f"{c.source}: unknown preset {chosen!r}; expected one of: "
                            f"{', '.join(presets) or '(the file defines no presets)'}")
    return chosen


def _command_workload(c: _Checker, doc: dict, source: str) -> WorkloadSpec:
    """A workload file that runs the user's own command (see the module docstring)."""
    if "name" not in doc:
        raise c.fail("name", "missing (required)")
    if extra := [k for k in _NOT_FOR_COMMANDS if k in doc]:
        raise c.fail(extra[0], "does not apply to a 'command' workload (the command itself says what it runs)")
    argv = doc["command"]
    c.expect("command", argv, isinstance(argv, list) and bool(argv) and all(
        isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in argv),
        "a non-empty list of arguments, e.g. [python3, train.py, --steps, 100]")
    try:
        isolate = c.expect("isolate_cwd", doc.get("isolate_cwd", False), isinstance(doc.get("isolate_cwd", False),
                                                                              bool), "true or false")
        command = check_command([str(a) for a in argv], doc.get("cwd"), doc.get("env"), doc.get("metric_regex"),
                                isolate, folder=c.folder, step_on=doc.get("step_on"))
    except WorkloadError as exc:
        raise c.fail("command", str(exc)) from None
    unit = doc.get("unit")
    if unit is not None:
        c.text("unit", unit, expected="a unit of work such as 'tokens', 'samples', 'images'")
    return command_workload(
        command, name=c.text("name", doc["name"], NAME_PATTERN, "a name of letters, digits, '.', '_', '-'"), unit=unit,
        warmup_steps=c.run_value("warmup_steps", doc.get("warmup_steps", DEFAULT_WARMUP_STEPS)),
        steps=c.run_value("steps", doc["steps"]) if "steps" in doc else 0,
        timeout_s=c.run_value("timeout_s", doc.get("timeout_s")), description=_description(c, doc),
        source=source, grid=_grid(c, doc["grid"]) if "grid" in doc else None)


def presets_with_trace(path: str | os.PathLike) -> list[str]:
    """The presets of a workload file that ship an allocation trace (what a sweep without a GPU can replay)."""
    return [p for p in _preset_names(path) if load_workload(path, p).trace]


def preset_of(path: str | os.PathLike, digest: str) -> str | None:
    """The preset of a workload file whose definition is `digest` (WorkloadSpec.digest: a trace's
    `workload_hash` says which it was recorded from); None where none is."""
    return next((p for p in _preset_names(path) if load_workload(path, p).digest() == digest), None)


def _preset_names(path: str | os.PathLike) -> list[str]:
    doc = _load_yaml(*_read(Path(path))[:2])
    presets = doc.get("presets") if isinstance(doc, dict) else None
    return list(presets or {})


def _entry(c: _Checker, value) -> str:
    c.text("entry", value, expected="'package.module:function' or 'path/to/file.py:function'")
    try:
        path = entry_path(value)
    except ValueError as exc:
        raise c.fail("entry", str(exc)) from None
    if path is None:
        return value
    full = (c.folder / path).resolve()
    if problem := not_a_file(full):
        raise c.fail("entry", f"expected an existing Python file, {full} {problem}")
    return f"{full}:{value.rpartition(':')[2]}"


def _check_params(c: _Checker, kind: str | None, key: str, params: dict) -> None:
    """Each value on its own: a built-in kind's declared name and type, or JSON-able for user code."""
    for name, value in params.items():
        if kind is None:
            c.expect(f"{key}.{name}", value, _json_able(value), "a JSON-able value (null, bool, number, string, "
                                                                 "list, mapping with string keys)")
            continue
        param = KINDS[kind].params.get(name)
        if param is None:
            raise c.fail(f"{key}.{name}", f"unknown parameter of kind {kind!r}; expected one of: "
                                          f"{', '.join(KINDS[kind].params)}")
        try:
            param.check(value)
        except ValueError as exc:
            raise c.fail(f"{key}.{name}", str(exc)) from None


def _resolve(c: _Checker, kind: str | None, key: str, params: dict) -> dict:
    """The full parameters: a built-in kind's defaults filled in and its cross-parameter rules checked."""
    if kind is None:
        return dict(params)
    try:
        return KINDS[kind].resolve(params)
    except ValueError as exc:
        raise c.fail(key, str(exc)) from None


def _grid(c: _Checker, value) -> tuple[str, ...]:
    c.expect("grid", value, isinstance(value, list) and bool(value), "a non-empty list of allocator settings")
    labels: list[str] = []
    for i, item in enumerate(value):
        key = f"grid[{i}]"
        c.expect(key, item, isinstance(item, str), "an allocator setting string such as "
                                                   "'expandable_segments:True' or 'default'")
        try:
            label = AllocConf.parse(item).label
        except ConfError as exc:
            raise c.fail(key, str(exc)) from None
        if label in labels:
            raise c.fail(key, f"setting {label!r} is listed twice")
        labels.append(label)
    return tuple(labels)
