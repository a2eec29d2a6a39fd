"""Hard limits on hostile input: xz bombs, YAML alias bombs, deep nesting, names that would be paths."""
from __future__ import annotations

import json
import lzma
import resource
import textwrap
from pathlib import Path

import pytest

import alloctune
from alloctune.errors import AlloctuneError, TraceError, WorkloadError
from alloctune.sim.compact import FORMAT, FORMAT_VERSION
from alloctune.sim.trace import load_trace
from alloctune.workload.loader import load_workload

ROOT = Path(__file__).resolve().parents[2]


def compact(path, arrays, body: bytes, meta=None):
    header = {"format": FORMAT, "version": FORMAT_VERSION, "device": 0, "meta": meta or {}, "arrays": arrays}
    path.write_bytes(lzma.compress(json.dumps(header).encode() + b"\n" + body, preset=0))
    return path


SMALL = {"kinds": ["|u1", 2], "sizes": ["<i8", 1], "streams": ["<i8", 1], "frees": ["<i8", 1], "pools": ["<i8", 0],
         "pool_streams": ["<i8", 0], "requests": ["<i8", 0]}


def test_an_xz_bomb_is_refused_before_it_fills_memory(tmp_path):
    bomb = compact(tmp_path / "bomb.xz", SMALL, bytes(26) + bytes(256 * 2**20))
    assert bomb.stat().st_size < 2**20  # a small file that inflates 256 MiB past what its header announces
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(TraceError, match="inflates to more than"):
        load_trace(bomb)
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before  # KiB
    assert grew < 64 * 1024


@pytest.mark.parametrize("arrays, meta, expected", [
    ({**SMALL, "sizes": ["<i8", 10**12]}, {}, "announces"),
    ({**SMALL, "sizes": ["<i8", -1]}, {}, "array layout"),
    ({**SMALL, "sizes": ["|O", 1]}, {}, "array layout"),
    (SMALL, {"device_total_bytes": "24GiB"}, "device_total_bytes"),
    (SMALL, {"overhead_bytes": -5}, "overhead_bytes"),
    (SMALL, {"measured": [1, 2]}, "measured"),
])
def test_malformed_compact_traces_are_one_line(tmp_path, arrays, meta, expected):
    body = bytes([0, 1]) + (64).to_bytes(8, "little") + bytes(16)
    with pytest.raises(TraceError, match=expected):
        load_trace(compact(tmp_path / "t.xz", arrays, body, meta))


def workload(tmp_path, text: str):
    path = tmp_path / "w.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_yaml_alias_bombs_and_deep_nesting_are_refused(tmp_path):
    laughs = ", ".join(["*a"] * 9)
    bomb = workload(tmp_path, f"""
        name: w
        entry: m:f
        steps: 1
        unit: x
        params:
          a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]
          b: &b [{laughs}]
          c: [{laughs.replace('*a', '*b')}]
    """)
    with pytest.raises(WorkloadError, match="aliases"):
        load_workload(bomb)
    deep = workload(tmp_path, "name: w\nentry: m:f\nsteps: 1\nunit: x\nparams: {a: " + "[" * 100_000
                    + "]" * 100_000 + "}\n")
    with pytest.raises(WorkloadError, match="nested more than"):
        load_workload(deep)


@pytest.mark.parametrize("name", ["okw\n", "a/b", "../x"])
def test_names_are_whole_names(tmp_path, name):
    with pytest.raises(WorkloadError, match="'name'"):
        load_workload(workload(tmp_path, f"name: {json.dumps(name)}\nkind: hpsearch\nsteps: 1\nunit: tokens\n"))


def test_a_preset_name_cannot_put_results_outside_the_results_root(tmp_path):
    path = workload(tmp_path, """
        name: w
        kind: hpsearch
        steps: 1
        unit: tokens
        default_preset: "x/../../../victim/pwned"
        presets:
          "x/../../../victim/pwned": {}
    """)
    with pytest.raises(WorkloadError, match="presets"):
        load_workload(path)
    with pytest.raises(AlloctuneError, match="unknown preset"):
        alloctune.sweep(ROOT / "workloads" / "hpsearch.yaml", preset="/../../escaped",
                        results_root=tmp_path / "a" / "b" / "results")
    assert list(tmp_path.iterdir()) == [path]
