"""Workload files: schema validation (every error names the file and the key), presets, digest, shipped files."""
from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
import torch

from alloctune.errors import WorkloadError
from alloctune.workload.builtin import KINDS
from alloctune.workload.loader import load_workload, resolve_factory
from alloctune.workload.spec import WorkloadSpec

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "workloads").glob("*.yaml"))

GOOD = """\
name: t
kind: transformer
unit: tokens
steps: 3
params: {layers: 2, d_model: 64, heads: 4, batch: [2, 4]}
presets:
  big: {layers: 4, batch: 8, steps: 10, timeout_s: 60}
  small: {d_model: 32}
"""


def write(tmp_path: Path, text: str, name: str = "w.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_good_file_and_defaults(tmp_path):
    spec = load_workload(write(tmp_path, GOOD))
    assert spec.name == "t" and spec.kind == "transformer" and spec.entry is None and spec.preset is None
    assert spec.steps == 3 and spec.warmup_steps == 2 and spec.seed == 0 and spec.timeout_s is None
    assert spec.unit == "tokens" and spec.grid is None and spec.trace is None and spec.description == ""
    # the kind's defaults are filled in, ranges normalised
    assert spec.params == {**{k: p.default for k, p in KINDS["transformer"].params.items()},
                           "layers": 2, "d_model": 64, "heads": 4, "batch": [2, 4]}
    assert spec.source == str((tmp_path / "w.yaml").resolve())


def test_preset_merges_params_and_run_keys(tmp_path):
    path = write(tmp_path, GOOD)
    big = load_workload(path, "big")
    assert big.preset == "big" and big.params["layers"] == 4 and big.params["d_model"] == 64
    assert big.params["batch"] == [8, 8] and big.steps == 10 and big.timeout_s == 60.0
    small = load_workload(path, "small")
    assert small.params["d_model"] == 32 and small.params["layers"] == 2 and small.steps == 3


def test_default_preset_applies_unless_another_is_asked(tmp_path):
    path = write(tmp_path, GOOD + "default_preset: small\n")
    assert load_workload(path).preset == "small"
    assert load_workload(path, "big").preset == "big"


def test_unknown_preset(tmp_path):
    with pytest.raises(WorkloadError, match=r"w\.yaml: unknown preset 'huge'; expected one of: big, small"):
        load_workload(write(tmp_path, GOOD), "huge")
    no_presets = GOOD.split("presets:")[0]
    with pytest.raises(WorkloadError, match="defines no presets"):
        load_workload(write(tmp_path, no_presets), "big")


BAD = [
    # (file text, key named in the message, fragment of what was expected)
    (GOOD.replace("steps: 3", "steps: ten"), "steps", "expected an integer from 1 to 2**63 - 1, got 'ten'"),
    (GOOD.replace("steps: 3", "steps: 0"), "steps", "an integer from 1 to"),
    (GOOD.replace("steps: 3", "steps: true"), "steps", "an integer from 1 to"),
    (GOOD.replace("steps: 3", "steps: 2.5"), "steps", "an integer from 1 to"),
    (GOOD.replace("steps: 3", f"steps: {2**63}"), "steps", "an integer from 1 to 2**63 - 1, got 9223372036854775808"),
    (GOOD.replace("steps: 3\n", ""), "steps", "missing"),
    (GOOD.replace("name: t\n", ""), "name", "missing"),
    (GOOD.replace("name: t", "name: 'a b/c'"), "name", "letters, digits"),
    (GOOD.replace("name: t", "name: ''"), "name", "letters, digits"),
    (GOOD + "warmup_steps: -1\n", "warmup_steps", "integer from 0 to"),
    (GOOD + "seed: -3\n", "seed", "integer from 0 to"),
    (GOOD + f"seed: {2**64}\n", "seed", "integer from 0 to 2**63 - 1, got 18446744073709551616"),
    (GOOD + "seed: '7'\n", "seed", "integer from 0 to"),
    (GOOD + "timeout_s: 0\n", "timeout_s", "positive number of seconds"),
    (GOOD + "timeout_s: fast\n", "timeout_s", "positive number of seconds"),
    (GOOD + "description: [1]\n", "description", "a string"),
    (GOOD + "stepz: 3\n", "stepz", "unknown key"),
    (GOOD.replace("unit: tokens", "unit: images"), "unit", "'tokens' (what kind 'transformer' counts)"),
    (GOOD.replace("unit: tokens", "unit: ''"), "unit", "unit of work"),
    (GOOD.replace("kind: transformer", "kind: bert"), "kind", "one of transformer, cnn"),
    (GOOD.replace("kind: transformer\n", ""), "kind", "exactly one of 'kind'"),
    (GOOD + "entry: m:f\n", "kind", "exactly one of 'kind'"),
    (GOOD.replace("params: {", "params: {depth: 3, "), "params.depth", "unknown parameter of kind 'transformer'"),
    (GOOD.replace("layers: 2,", "layers: two,"), "params.layers", "positive integer, got 'two'"),
    (GOOD.replace("layers: 2,", "layers: 0,"), "params.layers", "positive integer, got 0"),
    (GOOD.replace("batch: [2, 4]", "batch: [4, 2]"), "params.batch", "[low, high] with 1 <= low <= high"),
    (GOOD.replace("batch: [2, 4]", "batch: [2, 4, 8]"), "params.batch", "[low, high]"),
    (GOOD.replace("batch: [2, 4]", "batch: [2, 4], packed: 1"), "params.packed", "true or false"),
    (GOOD.replace("batch: [2, 4]", "batch: [2, 4], lr: -1"), "params.lr", "positive number"),
    (GOOD.replace("batch: [2, 4]", "batch: [2, 4], lr: 3e-4"), "params.lr", "got '3e-4' (YAML reads 3e-4 as text"),
    (GOOD.replace("heads: 4", "heads: 5"), "params", "d_model must be a multiple of heads"),
    (GOOD.replace("params: {layers: 2, d_model: 64, heads: 4, batch: [2, 4]}", "params: [1, 2]"), "params",
     "a mapping with string keys"),
    (GOOD.replace("{layers: 4, batch: 8,", "{layers: 4, batch: x,"), "presets.big.batch", "[low, high]"),
    (GOOD.replace("{layers: 4, batch: 8,", "{layerz: 4, batch: 8,"), "presets.big.layerz", "unknown parameter"),
    (GOOD.replace("steps: 10,", "steps: -10,"), "presets.big.steps", "an integer from 1 to"),
    (GOOD.replace("timeout_s: 60", "timeout_s: soon"), "presets.big.timeout_s", "positive number of seconds"),
    (GOOD.replace("small: {d_model: 32}", "small: {d_model: 30}"), "presets.small",
     "d_model must be a multiple of heads"),
    (GOOD.replace("small: {d_model: 32}", "small: 3"), "presets.small", "a mapping"),
    (GOOD + "default_preset: huge\n", "default_preset", "the name of a preset (big, small)"),
    (GOOD + "grid: expandable_segments:True\n", "grid", "a non-empty list"),
    (GOOD + "grid: []\n", "grid", "a non-empty list"),
    (GOOD + "grid: [default, 7]\n", "grid[1]", "an allocator setting string"),
    (GOOD + "grid: [default, 'expandable_segments:true']\n", "grid[1]", "'True' or 'False'"),
    (GOOD + "grid: [default, 'max_split_size_mb']\n", "grid[1]", "key:value"),
    (GOOD + "grid: ['', 'expandable_segments:True', default]\n", "grid[2]", "listed twice"),
    (GOOD + "trace: nowhere.trace\n", "trace", "existing trace file"),
]


@pytest.mark.parametrize("text, key, expected", BAD, ids=[f"{i}-{b[1]}" for i, b in enumerate(BAD)])
def test_bad_file_names_file_and_key(tmp_path, text, key, expected):
    path = write(tmp_path, text, "bad.yaml")
    with pytest.raises(WorkloadError) as info:
        load_workload(path)
    message = str(info.value)
    assert message.startswith(f"{path}: key {key!r}:"), message
    assert expected in message, message


@pytest.mark.parametrize("text, expected", [
    ("name: [unclosed\n", "not valid YAML: line 2, column 1: expected ',' or ']', but got '<stream end>' "
                          "(while parsing a flow sequence at line 1, column 7)"),
    ("name: t\nkind: \x01\n", "not valid YAML: line 2, column 7: unacceptable character #x0001: special characters "
                              "are not allowed"),
    ("- a\n- b\n", "expected a mapping of keys"),
    ("", "expected a mapping of keys (name, kind or entry, steps, unit, ...), got nothing (an empty document)"),
    ("name: t\nname: u\nkind: cnn\nunit: images\nsteps: 1\n", "key 'name' given twice (line 2)"),
    ("name: t\nkind: cnn\nunit: images\nsteps: 1\nparams: {width: 8, width: 9}\n", "key 'width' given twice"),
])
def test_unreadable_or_malformed_yaml(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(WorkloadError, match=re.escape(str(path)) + ": .*" + re.escape(expected)):
        load_workload(path)


def test_missing_file(tmp_path):
    with pytest.raises(WorkloadError, match=r"nope\.yaml: cannot read workload file"):
        load_workload(tmp_path / "nope.yaml")


def test_grid_is_canonicalised(tmp_path):
    spec = load_workload(write(tmp_path, GOOD + "grid: [default, 'max_split_size_mb:128, expandable_segments:True', "
                                                "'roundup_power2_divisions:[256:1,>:4]']\n"))
    assert spec.grid == ("default", "expandable_segments:True,max_split_size_mb:128",
                         "roundup_power2_divisions:[256:1,>:4]")


def test_trace_resolved_relative_to_file_and_set_per_preset(tmp_path):
    (tmp_path / "traces").mkdir()
    for name in ("t.trace", "big.trace"):
        (tmp_path / "traces" / name).write_bytes(b"x")
    text = GOOD.replace("timeout_s: 60}", "timeout_s: 60, trace: traces/big.trace}") + "trace: traces/t.trace\n"
    path = write(tmp_path, text)
    assert load_workload(path).trace == str((tmp_path / "traces" / "t.trace").resolve())
    assert load_workload(path, "big").trace == str((tmp_path / "traces" / "big.trace").resolve())
    assert load_workload(path, "small").trace == load_workload(path).trace
    bad = write(tmp_path, text.replace("big.trace}", "gone.trace}"), "bad.yaml")
    with pytest.raises(WorkloadError, match=r"bad\.yaml: key 'presets\.big\.trace': expected an existing trace"):
        load_workload(bad)


USER = """\
import random
import torch

def make(params, device, seed):
    rng = random.Random(seed)
    w = torch.zeros(params["width"], device=device)

    def step(i):
        n = rng.randint(1, params["width"])
        return float((w[:n] + 1).sum())
    return step
"""


def user_file(tmp_path: Path, entry: str = "code/job.py:make", params: str = "{width: 8, note: [a, {b: 1}]}") -> Path:
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "job.py").write_text(USER)
    return write(tmp_path, f"name: mine\nentry: {entry}\nunit: samples\nsteps: 2\nparams: {params}\n"
                           "presets:\n  wide: {width: 16, anything: goes}\n")


def test_user_file_entry_resolves_and_runs(tmp_path):
    spec = load_workload(user_file(tmp_path))
    assert spec.kind is None and spec.entry == f"{(tmp_path / 'code' / 'job.py').resolve()}:make"
    assert spec.params == {"width": 8, "note": ["a", {"b": 1}]}
    step = resolve_factory(spec)(spec.params, torch.device("cpu"), spec.seed)
    assert all(1 <= step(i) <= 8 for i in range(5))
    # the child gets to_dict(): the same resolution works from a plain dict
    assert callable(resolve_factory(json.loads(json.dumps(spec.to_dict()))))
    assert load_workload(tmp_path / "w.yaml", "wide").params == {"width": 16, "note": ["a", {"b": 1}],
                                                                 "anything": "goes"}


def test_module_entry_is_kept_as_given(tmp_path, monkeypatch):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "work.py").write_text(USER)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = load_workload(write(tmp_path, "name: m\nentry: mypkg.work:make\nunit: samples\nsteps: 1\n"
                                         "params: {width: 4}\n"))
    assert spec.entry == "mypkg.work:make"
    assert resolve_factory(spec)(spec.params, torch.device("cpu"), 0)(0) > 0


@pytest.mark.parametrize("entry, expected", [
    ("job", "'package.module:function' or 'path/to/file.py:function'"),
    ("'mypkg.work:'", "'package.module:function'"),
    ("'my-pkg:make'", "'package.module:function'"),
    ("'code/job.py:make()'", "'package.module:function'"),
    ("code/missing.py:make", "existing Python file"),
    ("7", "'package.module:function'"),
])
def test_bad_entries(tmp_path, entry, expected):
    path = user_file(tmp_path, entry)
    with pytest.raises(WorkloadError) as info:
        load_workload(path)
    assert str(info.value).startswith(f"{path}: key 'entry':") and expected in str(info.value)


def test_user_params_must_be_json_able(tmp_path):
    path = user_file(tmp_path, params="{when: 2024-01-01}")
    with pytest.raises(WorkloadError, match=r"key 'params\.when': expected a JSON-able value"):
        load_workload(path)


def test_entry_that_does_not_resolve(tmp_path):
    spec = load_workload(user_file(tmp_path, "code/job.py:build"))
    with pytest.raises(WorkloadError, match="has no function 'build'"):
        resolve_factory(spec)
    with pytest.raises(WorkloadError, match="cannot import no_such_module_xyz"):
        resolve_factory({"kind": None, "entry": "no_such_module_xyz:make"})
    with pytest.raises(WorkloadError, match="unknown workload kind 'bert'"):
        resolve_factory({"kind": "bert", "entry": None})


def test_digest_stable_and_sensitive(tmp_path):
    path = write(tmp_path, GOOD)
    base = load_workload(path)
    assert base.digest() == load_workload(path).digest() == WorkloadSpec.from_dict(base.to_dict()).digest()
    assert len(base.digest()) == 16
    # what does not change the measurement does not change the digest
    moved = write(tmp_path, GOOD.replace("name: t", "name: other") + "description: x\ntimeout_s: 9\n"
                                                                      "grid: [default]\n", "other.yaml")
    assert load_workload(moved).digest() == base.digest()
    # what does, does
    changed = [GOOD.replace("steps: 3", "steps: 4"), GOOD + "seed: 1\n", GOOD + "warmup_steps: 3\n",
               GOOD.replace("layers: 2", "layers: 3"), GOOD.replace("kind: transformer", "kind: hpsearch")
               .replace("params: {layers: 2, d_model: 64, heads: 4, batch: [2, 4]}", "params: {}")
               .split("presets:")[0]]
    digests = {load_workload(write(tmp_path, text, f"c{i}.yaml")).digest() for i, text in enumerate(changed)}
    assert len(digests) == len(changed) and base.digest() not in digests
    assert load_workload(path, "big").digest() != base.digest()
    # an explicit default equals an omitted one: the digest sees the full parameters
    explicit = GOOD.replace("batch: [2, 4]}", "batch: [2, 4], packed: false}")
    assert load_workload(write(tmp_path, explicit, "e.yaml")).digest() == base.digest()


def test_digest_of_file_entry_follows_content_not_location(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = load_workload(user_file(tmp_path / "a")), load_workload(user_file(tmp_path / "b"))
    assert a.entry != b.entry and a.digest() == b.digest()
    (tmp_path / "b" / "code" / "job.py").write_text(USER + "\n# changed\n")
    assert load_workload(tmp_path / "b" / "w.yaml").digest() != a.digest()


def test_round_trip_and_from_dict_checks_keys(tmp_path):
    spec = load_workload(write(tmp_path, GOOD + "grid: [default, 'expandable_segments:True']\n"), "big")
    data = json.loads(json.dumps(spec.to_dict()))
    assert WorkloadSpec.from_dict(data) == spec
    with pytest.raises(WorkloadError, match="unknown keys \\['extra'\\]"):
        WorkloadSpec.from_dict({**data, "extra": 1})
    del data["unit"]
    with pytest.raises(WorkloadError, match="missing keys \\['unit'\\]"):
        WorkloadSpec.from_dict(data)


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_workloads_load_with_every_preset(path):
    default = load_workload(path)
    assert default.preset == "24gib" and default.kind in KINDS
    for preset in ("24gib", "h200", "tiny"):
        spec = load_workload(path, preset)
        assert spec.name == path.stem and spec.unit == KINDS[spec.kind].unit
        assert spec.timeout_s and spec.steps >= 1
    assert load_workload(path, "h200").digest() != default.digest()


def test_the_shipped_set():
    assert {p.name for p in SHIPPED} >= {"transformer-varlen.yaml", "transformer-packed.yaml", "cnn-varres.yaml",
                                         "llm-decode.yaml", "hpsearch.yaml", "detection.yaml"}
    assert {load_workload(p).kind for p in SHIPPED} == set(KINDS)


def test_readme_documents_every_key_and_parameter():
    readme = (ROOT / "workloads" / "README.md").read_text()
    for key in ("name", "description", "kind", "entry", "params", "presets", "default_preset", "warmup_steps",
                "steps", "unit", "seed", "timeout_s", "grid", "trace"):
        assert f"`{key}`" in readme, key
    for kind in KINDS.values():
        assert f"`{kind.name}`" in readme
        for name in kind.params:
            assert f"`{name}`" in readme, (kind.name, name)


def test_unit_is_optional_for_built_in_kinds_and_required_for_entry(tmp_path):
    # Each built-in kind has its own unit: a file of that kind need not repeat it.
    for kind, unit in (("transformer", "tokens"), ("cnn", "images"), ("decode", "tokens"), ("hpsearch", "tokens"),
                       ("detection", "images")):
        assert KINDS[kind].unit == unit
        assert load_workload(write(tmp_path, f"name: t\nkind: {kind}\nsteps: 1\n")).unit == unit
    (tmp_path / "job.py").write_text(USER)
    with pytest.raises(WorkloadError, match="key 'unit': missing \\(required with 'entry'"):
        load_workload(write(tmp_path, "name: m\nentry: job.py:make\nsteps: 1\n"))


def test_no_file_of_the_project_sends_readers_outside_it():
    # The allocator facts live in docs/ALLOCATOR.md; a user's clone has nothing beside the repository.
    offenders = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and p.suffix in (".py", ".md", ".sh")
                 and ".git" not in p.parts and "../" + "shared" in p.read_text(errors="replace")]
    assert offenders == [] and (ROOT / "docs" / "ALLOCATOR.md").is_file()
