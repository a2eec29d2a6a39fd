"""Built-in workload kinds: their declared parameters, and the resolver that finds a workload's factory.

This package runs inside trial children under interpreters that may lack pyyaml, scipy or rich: it imports only
the standard library (torch is imported by the kind modules, and only when a factory is resolved), so that the
parent can validate workload files against these declarations without importing torch.

Factory contract (built-in kinds and user entries alike):
    make(params: dict, device: torch.device, seed: int) -> step;   step(i: int) -> float
`step(i)` runs step i (called with i = 0, 1, 2, ... in order) and returns the units of work it did. Factories draw
shapes from their own `random.Random(seed)`, so the sequence of allocations is the same in every process.

The kinds, a module each: `transformer` (variable batch shapes, or packed), `cnn` (multi-scale image training),
`decode` (LLM serving with a growing KV cache), `hpsearch` (models built and dropped in one process), `detection`
(a variable number of objects per image); the torch helpers they share (`common`).
"""
from __future__ import annotations

import importlib
import importlib.util
import math
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ...errors import WorkloadError

_EXPECTED = {
    "int": "a positive integer",
    "float": "a positive number",
    "bool": "true or false",
    "range": "a positive integer or [low, high] with 1 <= low <= high",
    "ints": "a non-empty list of positive integers",
}


@dataclass(frozen=True)
class Param:
    """One declared parameter of a built-in kind."""

    type: str       # a key of _EXPECTED
    default: object
    help: str

    @property
    def expected(self) -> str:
        return _EXPECTED[self.type]

    def check(self, value):
        """The value in normal form ('range' always [low, high]); ValueError saying what was expected."""
        if self.type == "int" and _positive_int(value):
            return value
        if self.type == "float" and isinstance(value, (int, float)) and not isinstance(value, bool) \
                and math.isfinite(value) and value > 0:
            return float(value)
        if self.type == "bool" and isinstance(value, bool):
            return value
        if self.type == "range":
            if _positive_int(value):
                return [value, value]
            if isinstance(value, list) and len(value) == 2 and all(map(_positive_int, value)) \
                    and value[0] <= value[1]:
                return list(value)
        if self.type == "ints" and isinstance(value, list) and value and all(map(_positive_int, value)):
            return list(value)
        hint = ""
        if self.type == "float" and isinstance(value, str) and _is_number(value):
            hint = " (YAML reads 3e-4 as text: write 3.0e-4)"
        raise ValueError(f"expected {self.expected}, got {value!r}{hint}")


@dataclass(frozen=True)
class Kind:
    """A built-in workload kind: module `alloctune.workload.builtin.<name>` with a `make` factory."""

    name: str
    unit: str              # what step() counts; a workload file of this kind must declare the same unit
    description: str
    params: dict[str, Param]
    rules: tuple[tuple[str, Callable[[dict], bool]], ...] = field(default=())  # (what must hold, predicate over full params)

    def resolve(self, params: Mapping) -> dict:
        """Defaults filled in, every value checked and normalised, cross-parameter rules checked.
        ValueError names the parameter and what was expected."""
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            raise ValueError(f"unknown parameter {unknown[0]!r} for kind {self.name!r}; "
                             f"expected one of: {', '.join(self.params)}")
        full = {}
        for name, param in self.params.items():
            try:
                full[name] = param.check(params[name] if name in params else param.default)
            except ValueError as exc:
                raise ValueError(f"parameter {name!r}: {exc}") from None
        for text, holds in self.rules:
            if not holds(full):
                raise ValueError(f"{text} (kind {self.name!r})")
        return full


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# The model parameters the language-model kinds share (hpsearch draws layers and d_model instead).
_LM = {
    "layers": Param("int", 2, "decoder blocks"),
    "d_model": Param("int", 64, "model width"),
    "heads": Param("int", 4, "attention heads (must divide d_model)"),
    "vocab": Param("int", 512, "vocabulary size (embedding, logits)"),
}


_HEADS_DIVIDE = ("d_model must be a multiple of heads", lambda p: p["d_model"] % p["heads"] == 0)
_TRAIN = {"lr": Param("float", 3e-4, "AdamW learning rate")}

KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("transformer", "tokens",
         "decoder-only transformer training (AdamW, bf16 autocast on CUDA) on batches of variable shape, "
         "or packed to a fixed shape",
         {**_LM,
          "batch": Param("range", [2, 4], "sequences per step, drawn uniformly per step"),
          "seq_len": Param("range", [16, 64], "tokens per sequence, drawn uniformly per step"),
          "packed": Param("bool", False, "every step is batch[high] x seq_len[high] (sequences packed into "
                                         "full rows: the static case)"),
          **_TRAIN},
         (_HEADS_DIVIDE,)),
    Kind("cnn", "images",
         "ResNet-style image classification training at a resolution drawn per step (multi-scale training)",
         {"blocks": Param("ints", [1, 1, 1, 1], "residual blocks per stage; width doubles each stage"),
          "width": Param("int", 16, "channels of the first stage"),
          "classes": Param("int", 10, "output classes"),
          "batch": Param("range", [2, 4], "images per step, drawn uniformly per step"),
          "resolution": Param("range", [32, 64], "square image side, drawn per step in multiples of 32"),
          **_TRAIN},
         (("resolution low must be at least 32", lambda p: p["resolution"][0] >= 32),)),
    Kind("decode", "tokens",
         "LLM serving: per step one batch of requests is prefilled and decoded token by token, its KV cache "
         "growing by concatenation each token (naive HF-style cache); units = generated tokens",
         {**_LM,
          "batch": Param("range", [1, 4], "requests per batch, drawn per step"),
          "prompt_len": Param("range", [8, 32], "prompt tokens, drawn per step"),
          "gen_len": Param("range", [4, 16], "generated tokens, drawn per step"),
          },
         (_HEADS_DIVIDE,)),
    Kind("hpsearch", "tokens",
         "a naive hyperparameter search: every `steps_per_model` steps the current model and optimizer are "
         "dropped and a new model of a drawn size is built and trained, all in one process",
         {**_LM,
          "d_model": Param("ints", [32, 64, 96], "model widths to draw from, one per trial"),
          "layers": Param("range", [1, 3], "decoder blocks, drawn per trial"),
          "batch": Param("range", [2, 4], "sequences per step, drawn per trial"),
          "seq_len": Param("int", 32, "tokens per sequence"),
          "steps_per_model": Param("int", 2, "train steps per trial before the model is dropped"),
          **_TRAIN},
         (("every d_model must be a multiple of heads", lambda p: all(d % p["heads"] == 0 for d in p["d_model"])),)),
    Kind("detection", "images",
         "two-stage detection training: a ResNet trunk, anchor matching against a variable number of boxes per "
         "image (IoU matrices of variable width) and a second-stage head over a variable number of positives",
         {"blocks": Param("ints", [1, 1, 1, 1], "residual blocks per stage of the trunk"),
          "width": Param("int", 16, "channels of the first stage"),
          "classes": Param("int", 5, "object classes"),
          "batch": Param("range", [2, 3], "images per step, drawn per step"),
          "image_size": Param("range", [64, 128], "square image side, drawn per step in multiples of 32"),
          "max_boxes": Param("int", 8, "objects per image are drawn from 1..max_boxes"),
          "anchors": Param("int", 3, "anchor scales per feature-map location"),
          "hidden": Param("int", 64, "width of the second-stage head"),
          **_TRAIN},
         (("image_size low must be at least 64", lambda p: p["image_size"][0] >= 64),)),
)}

# 'package.module:function' or 'path/to/file.py:function'
# ('$' would match before a final newline: both are fullmatched)
_MODULE_ENTRY = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
_FILE_ENTRY = re.compile(r"(?P<path>.+\.py):(?P<func>[A-Za-z_]\w*)")


def entry_path(entry: str) -> str | None:
    """The file of a 'path/to/file.py:function' entry, or None for a 'package.module:function' entry.
    ValueError when the entry is neither."""
    match = _FILE_ENTRY.fullmatch(entry)
    if match:
        return match.group("path")
    if _MODULE_ENTRY.fullmatch(entry):
        return None
    raise ValueError(f"expected 'package.module:function' or 'path/to/file.py:function', got {entry!r}")


def resolve_factory(spec):
    """The workload's `make` factory: the built-in kind's, or the user's entry imported.

    `spec` is a WorkloadSpec or its `to_dict()` (what the trial child receives). A file entry must be absolute
    (load_workload makes it so); its folder goes first on sys.path so that the script can import its neighbours.
    """
    get = spec.get if isinstance(spec, Mapping) else lambda key: getattr(spec, key)
    kind, entry = get("kind"), get("entry")
    if kind is not None:
        if kind not in KINDS:
            raise WorkloadError(f"unknown workload kind {kind!r}; expected one of: {', '.join(KINDS)}")
        return importlib.import_module(f"{__name__}.{kind}").make
    if entry is None:
        raise WorkloadError("the workload names neither a built-in 'kind' nor an 'entry'")
    try:
        path = entry_path(entry)
    except ValueError as exc:
        raise WorkloadError(f"workload entry: {exc}") from None
    target, _, func = entry.rpartition(":")
    try:
        if path is None:
            module = importlib.import_module(target)
        else:
            folder = os.path.dirname(path)
            if folder not in sys.path:
                sys.path.insert(0, folder)
            module_spec = importlib.util.spec_from_file_location(
                f"alloctune_entry_{os.path.splitext(os.path.basename(path))[0]}", path)
            if module_spec is None or module_spec.loader is None:
                raise ImportError(f"cannot import {path}")
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
    except (ImportError, OSError) as exc:
        raise WorkloadError(f"workload entry {entry!r}: cannot import {target}: {exc}") from exc
    make = getattr(module, func, None)
    if not callable(make):
        raise WorkloadError(f"workload entry {entry!r}: {target} has no function {func!r}")
    return make
