"""The trial child's task (`child/exchange.py`'s `ChildSpec`, its spec.json): written by the parent, read back whole
and typed by the child; a task that does not read is one line naming the file and the field, and no result."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import ROOT

from alloctune.child.exchange import SPEC_SCHEMA, ChildSpec, read_spec, write_spec
from alloctune.errors import ResultsError
from alloctune.workload.loader import load_workload



def _spec(tmp_path: Path) -> ChildSpec:
    workload = load_workload(ROOT / "workloads" / "transformer-varlen.yaml")
    return ChildSpec(SPEC_SCHEMA, workload, workload.digest(), "env", "expandable_segments:True",
                     str(tmp_path / "result.json"), budget_fraction=0.5, record_trace=str(tmp_path / "t.pickle"))


def test_the_task_reads_back_as_written(tmp_path):
    spec = _spec(tmp_path)
    path = write_spec(str(tmp_path), spec)
    assert Path(path).name == "spec.json"
    assert read_spec(path) == spec
    assert [p.name for p in tmp_path.iterdir()] == ["spec.json"]   # written whole: no temporary file left


@pytest.mark.parametrize("change, line", [
    (lambda d: d["workload"].update(seed="x"), "field 'workload.seed': expected an integer, got 'x'"),
    (lambda d: d.pop("conf"), "field 'conf': missing"),
    (lambda d: d.update(schema=SPEC_SCHEMA + 1),
     f"field 'schema': expected {SPEC_SCHEMA} (this alloctune's), got {SPEC_SCHEMA + 1}"),
])
def test_a_damaged_task_is_one_line_naming_the_file_and_the_field(tmp_path, change, line):
    data = _spec(tmp_path).to_json()
    change(data)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ResultsError) as caught:
        read_spec(str(path))
    assert str(caught.value) == f"{path}: {line}"
    # the child itself: that line on stderr, exit 2, and no result for the parent to read
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "alloctune.child.main", str(path)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert (out.returncode, out.stderr) == (2, f"alloctune child: {path}: {line}\n")
    assert not (tmp_path / "result.json").exists()
