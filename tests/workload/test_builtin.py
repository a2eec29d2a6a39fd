"""Built-in workload kinds: every kind runs on CPU with tiny parameters, shapes follow the seed (in and across
processes), parameters are checked, and the child-side modules need nothing but the stdlib and torch."""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import re
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from alloctune.workload.builtin import KINDS, Kind, Param, resolve_factory
from alloctune.workload.loader import load_workload

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")
# Tiny models: one thread is several times faster than many contending ones on a small shared machine.
torch.set_num_threads(1)
CHILD_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
# The tiny preset of the shipped file of each kind.
TINY = {spec.kind: spec for spec in (load_workload(p, "tiny") for p in sorted((ROOT / "workloads").glob("*.yaml")))}


class ShapeLog(TorchDispatchMode):
    """Records the shape of every tensor each aten op returns: the sequence of allocations, seen on CPU."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor):
                self.shapes.append((str(func), tuple(t.shape)))
        return out


_GLOBAL_SEEDS = itertools.count(1000)


def shapes(kind: str, seed: int, steps: int = 3, **overrides) -> tuple[list, list]:
    spec = TINY[kind]
    # The global RNGs get a new seed every call: shapes must come from the factory's own generators.
    torch.manual_seed(next(_GLOBAL_SEEDS))
    random.seed(next(_GLOBAL_SEEDS))
    step = resolve_factory(spec)({**spec.params, **overrides}, CPU, seed)
    with ShapeLog() as log:
        units = [step(i) for i in range(steps)]
    return log.shapes, units


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_kind_runs_on_cpu_and_counts_units(kind):
    spec = TINY[kind]
    step = resolve_factory(spec)(spec.params, CPU, spec.seed)
    units = [step(i) for i in range(spec.warmup_steps + spec.steps)]
    assert all(isinstance(u, float) and u > 0 for u in units)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_same_seed_same_shapes_other_seed_other_shapes(kind):
    first, units = shapes(kind, 0)
    again, units_again = shapes(kind, 0)
    assert first == again and units == units_again and len(first) > 50
    assert shapes(kind, 1)[0] != first   # every kind draws its shapes from the seed


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_step_run_again_draws_the_same_shapes(kind):
    """The trial child times a second pass over steps it already ran: step(i) must depend on i alone."""
    spec = TINY[kind]
    step = resolve_factory(spec)({**spec.params, **({"steps_per_model": 2} if kind == "hpsearch" else {})}, CPU, 0)

    def run(i):
        with ShapeLog() as log:
            units = step(i)
        return log.shapes, units

    first = [run(i) for i in range(6)]
    assert [run(i) for i in range(2, 6)] == first[2:]
    assert len({repr(s) for s, _ in first}) > 1   # and the steps do differ from each other


@pytest.mark.slow
def test_shapes_identical_across_processes():
    """A fresh interpreter (with another hash seed) replays the same shape sequence for every kind."""
    script = (
        "import hashlib, json\n"
        "from tests.workload.test_builtin import KINDS, shapes\n"
        "print(json.dumps({k: hashlib.sha256(repr(shapes(k, 5)).encode()).hexdigest() for k in sorted(KINDS)}))\n"
    )
    env = {**CHILD_ENV, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    there = json.loads(out.stdout.strip().splitlines()[-1])
    assert there == {k: hashlib.sha256(repr(shapes(k, 5)).encode()).hexdigest() for k in sorted(KINDS)}


def test_packed_transformer_has_one_shape():
    _, units = shapes("transformer", 0, steps=4, packed=True, batch=[2, 4], seq_len=[16, 64])
    assert units == [4 * 64.0] * 4
    _, units = shapes("transformer", 0, steps=6, packed=False, batch=[2, 4], seq_len=[16, 64])
    assert len(set(units)) > 1


def test_decode_grows_its_cache_by_concatenation():
    spec = TINY["decode"]
    log, units = shapes("decode", 0, steps=1, batch=2, prompt_len=8, gen_len=5, layers=2)
    cats = [s for f, s in log if f.startswith("aten.cat")]
    # per generated token after the first, each of 2 layers concatenates k and v one position longer
    heads, head_dim = spec.params["heads"], spec.params["d_model"] // spec.params["heads"]
    assert cats == [(2, heads, 8 + t, head_dim) for t in range(1, 5) for _ in range(4)]
    assert units == [2 * 5.0]


def test_hpsearch_drops_each_model_before_building_the_next():
    spec = TINY["hpsearch"]
    params = {**spec.params, "steps_per_model": 2}
    models = []
    real = torch.nn.Module.__init__

    def track(self, *args, **kwargs):
        real(self, *args, **kwargs)
        if type(self).__name__ == "Decoder":
            models.append(weakref.ref(self))

    torch.nn.Module.__init__ = track
    try:
        step = resolve_factory(spec)(params, CPU, 0)
        for i in range(6):
            step(i)
            assert sum(ref() is not None for ref in models) == 1   # only the current model is alive
    finally:
        torch.nn.Module.__init__ = real
    assert len(models) == 3


def test_detection_positive_counts_vary_with_the_boxes():
    log, _ = shapes("detection", 0, steps=4)
    hidden = TINY["detection"].params["hidden"]
    rows = {s[0] for _, s in log if len(s) == 2 and s[1] == hidden}
    assert len(rows) > 1   # the second-stage head sees a different number of rows per step


def test_resolve_fills_defaults_and_checks():
    kind = KINDS["cnn"]
    assert kind.resolve({}) == {name: p.default for name, p in kind.params.items()}
    assert kind.resolve({"batch": 8})["batch"] == [8, 8]
    with pytest.raises(ValueError, match="unknown parameter 'depth' for kind 'cnn'"):
        kind.resolve({"depth": 3})
    with pytest.raises(ValueError, match="parameter 'blocks': expected a non-empty list of positive integers"):
        kind.resolve({"blocks": []})
    with pytest.raises(ValueError, match="resolution low must be at least 32"):
        kind.resolve({"resolution": [16, 64]})
    # a factory called directly checks too
    with pytest.raises(ValueError, match="parameter 'width'"):
        resolve_factory({"kind": "cnn", "entry": None})({"width": 0}, CPU, 0)


@pytest.mark.parametrize("ptype, good, normal, bad", [
    ("int", 3, 3, [0, -1, 2.0, True, "3", None]),
    ("float", 2, 2.0, [0, -0.5, float("nan"), float("inf"), False, "1e-3"]),
    ("bool", False, False, [0, 1, "true", None]),
    ("range", [2, 5], [2, 5], [[5, 2], [0, 3], [1], [1, 2, 3], (1, 2), "1-2", [1.0, 2]]),
    ("ints", [1, 2], [1, 2], [[], [0], [1, "2"], 3]),
])
def test_param_types(ptype, good, normal, bad):
    param = Param(ptype, good, "")
    assert param.check(good) == normal
    for value in bad:
        with pytest.raises(ValueError, match=re.escape(f"expected {param.expected}, got {value!r}")):
            param.check(value)


def test_every_declared_default_is_valid():
    for kind in KINDS.values():
        assert isinstance(kind, Kind) and kind.unit and kind.description
        kind.resolve({})


@pytest.mark.slow
def test_child_side_needs_only_stdlib_and_torch(tmp_path):
    """What a trial child imports works where pyyaml, scipy, numpy, rich and matplotlib are missing."""
    spec = TINY["cnn"]
    script = (
        "import sys\n"
        "for name in ('yaml', 'scipy', 'rich', 'matplotlib'):\n"
        "    sys.modules[name] = None  # makes 'import name' fail\n"
        "import json, torch\n"
        "from alloctune.workload.builtin import resolve_factory\n"
        "from alloctune.workload.spec import WorkloadSpec\n"
        "import alloctune.workload.builtin.transformer, alloctune.workload.builtin.cnn, alloctune.workload.builtin.decode\n"
        "import alloctune.workload.builtin.hpsearch, alloctune.workload.builtin.detection\n"
        "spec = WorkloadSpec.from_dict(json.loads(sys.argv[1]))\n"
        "print(resolve_factory(spec)(spec.params, torch.device('cpu'), spec.seed)(0))\n"
    )
    out = subprocess.run([sys.executable, "-c", script, json.dumps(spec.to_dict())], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env=CHILD_ENV)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip()) > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_kind_runs_on_cuda_with_bf16(kind):
    spec = TINY[kind]
    step = resolve_factory(spec)(spec.params, torch.device("cuda"), spec.seed)
    assert all(step(i) > 0 for i in range(3))
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() > 0
