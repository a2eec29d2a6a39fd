"""The trials file under damage and contention: real files, real writer processes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from alloctune.errors import ResultsError
from alloctune.results.records import Measurement, TrialRecord, TrialState
from alloctune.results.trials import TrialStore

ROOT = str(Path(__file__).resolve().parents[2])


def record(conf="", repeat=0, error=None):
    return TrialRecord(workload="w", workload_hash="h", conf=conf, repeat=repeat, env_id="e", backend="cuda",
                       state=TrialState.OK, measurement=Measurement(peak_reserved_bytes=2, peak_allocated_bytes=1),
                       error=error)


def test_a_complete_last_line_without_its_newline_is_kept(tmp_path):
    store = TrialStore(tmp_path / "trials.jsonl")
    store.append(record())
    store.path.write_bytes(store.path.read_bytes().rstrip(b"\n"))  # e.g. an editor that drops the final newline
    assert store.load() == [record()]
    store.append(record(repeat=1))
    assert store.load() == [record(), record(repeat=1)]  # the first one was not cut: it never runs again
    assert store.path.read_bytes().count(b"\n") == 2


def test_concurrent_writers_never_lose_or_cut_a_line(tmp_path):
    """Several processes append big lines at once; every line arrives whole."""
    path = tmp_path / "trials.jsonl"
    writer = textwrap.dedent(f"""
        import sys
        from alloctune.results.records import Measurement, TrialRecord, TrialState
        from alloctune.results.trials import TrialStore
        store = TrialStore({str(path)!r})
        for i in range(int(sys.argv[2])):
            store.append(TrialRecord(workload="w", workload_hash="h", conf="", repeat=i, env_id=sys.argv[1],
                                     backend="cuda", state=TrialState.CRASHED, error="x" * int(sys.argv[3])))
    """)
    writers, per_writer = 4, 40
    procs = [subprocess.Popen([sys.executable, "-c", writer, f"w{n}", str(per_writer), str(size)],
                              env=dict(os.environ, PYTHONPATH=ROOT))
             for n, size in enumerate((200_000, 2_000, 200_000, 50))]
    assert [p.wait(timeout=300) for p in procs] == [0] * writers
    records = TrialStore(path).load()
    assert len(records) == writers * per_writer
    assert {(r.env_id, r.repeat) for r in records} == {(f"w{n}", i) for n in range(writers) for i in range(per_writer)}


@pytest.mark.parametrize("damage, field", [
    ({"repeat": "1"}, "repeat"),
    ({"measurement": {"peak_reserved_bytes": float("nan"), "peak_allocated_bytes": 1}},
     "measurement.peak_reserved_bytes"),
    ({"wall_seconds": 1e400}, "wall_seconds"),
    ({"state": "exploded"}, "state"),
    ({"env": {"gpu": {"memory": float("inf")}}}, "env.gpu.memory"),
    ({"measurement": [1, 2]}, "measurement"),
])
def test_damaged_fields_are_one_line_naming_the_file_line_and_field(tmp_path, damage, field):
    store = TrialStore(tmp_path / "trials.jsonl")
    store.append(record())
    line = json.dumps({**record().to_json(), **damage})  # NaN and inf as Python's json writes them
    with open(store.path, "a") as f:
        f.write(line + "\n")
    with pytest.raises(ResultsError, match=rf"trials.jsonl:2: field '{field}'"):
        store.load()


def test_missing_keys_and_invalid_utf8_are_one_line(tmp_path):
    store = TrialStore(tmp_path / "trials.jsonl")
    data = record().to_json()
    del data["conf"]
    store.path.write_text(json.dumps(data) + "\n")
    with pytest.raises(ResultsError, match="trials.jsonl:1: field 'conf': missing"):
        store.load()
    store.path.write_bytes(json.dumps(record().to_json()).encode().replace(b'"w"', b'"\xff"') + b"\n")
    with pytest.raises(ResultsError, match="trials.jsonl:1: not UTF-8"):
        store.load()
    store.path.write_text("[" * 100_000 + "\n" + json.dumps(record().to_json()) + "\n")
    with pytest.raises(ResultsError, match="trials.jsonl:1: not valid JSON"):
        store.load()
