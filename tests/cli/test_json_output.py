"""`--json` on the commands that print results: report and compare on committed H200 folders (copied), and a
sim sweep of a shipped workload and its committed trace."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from clirun import in_process

from alloctune.cli.main import main
from alloctune.report.analysis import named
from alloctune.results.folder import ResultsFolder
from alloctune.results.names import CHOICE_FILE
from alloctune.results.vocabulary import PEAK_RESERVED, setting_name

RESULTS = Path(__file__).resolve().parents[2] / "results"
PACKED = ("transformer-packed-h200-20261129-234801", "transformer-packed-h200-20261129-235232")


def _copies(tmp_path: Path) -> list[Path]:
    return [Path(shutil.copytree(RESULTS / name, tmp_path / name)) for name in PACKED]


def test_report_json_is_what_choice_json_holds_and_schema_1_keys_beside(tmp_path, capsys):
    folder, _ = _copies(tmp_path)
    committed = json.loads((folder / CHOICE_FILE).read_text())   # schema 1: read through its upgrade
    assert main(["report", str(folder), "--json"]) == 0
    (decided,) = json.loads(capsys.readouterr().out)
    assert decided["folder"] == str(folder)
    written = json.loads(json.dumps([named(c) for c in ResultsFolder(folder).choices()]))
    # choice.json's record, every key of it (its settings named as every command's --json names them), and every
    # key the committed file of schema 1 had, with its value (its default named "default": "baseline", the runners-up)
    assert [{k: c[k] for k in w} for c, w in zip(decided["choices"], written)] == written
    assert [{k: c[k] for k in kept} for c, kept in zip(decided["choices"], committed["choices"])] == \
        [dict(kept, runners_up=[dict(r, conf=setting_name(r["conf"])) for r in kept["runners_up"]],
              baseline=setting_name(kept["baseline"])) for kept in committed["choices"]]
    assert written[0]["conf"] == "expandable_segments:True" and committed["schema"] == 1


def test_compare_json_has_every_row_and_the_marks_the_table_shows(tmp_path, capsys):
    a, b = _copies(tmp_path)
    assert main(["compare", str(a), str(b), "-o", str(tmp_path / "cmp"), "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)   # stdout is the JSON alone; the files written are said on stderr
    assert "compare.md" in captured.err and (tmp_path / "cmp" / "compare.png").exists()
    assert len(data["columns"]) == 2 and data["best_changed"] == [False, False]
    rows = {r["conf"]: r for r in data["rows"]}
    both = [r for r in rows.values() if all(r["cells"])]
    assert {r["conf"] for r in both} == {"default", "expandable_segments:True"}
    assert {c["basis"] for c in data["columns"]} == {"measured"}
    for row in both:   # the second sweep repeated the first: memory identical, throughput within noise
        assert row["deltas"][1]["reserved"] == 0.0
        assert row["deltas"][1]["mark"] == "no significant change"


def test_compare_json_names_a_cells_figures_as_every_command_does(capsys):
    """A cell's peak reserved and reserved/allocated under the keys every command's --json gives them, and each delta
    saying whether its mark rests on memory alone (two replays: no throughput on either side). compare writes no file
    that anything reads back (its JSON is output only), so the old keys need no reader."""
    assert main(["compare", str(RESULTS / "torch-2.1-vs-2.13-sim" / "transformer-varlen-h200"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    cells = [c for row in data["rows"] for c in row["cells"] if c and c["failure"] is None]
    assert cells and all({PEAK_RESERVED, "reserved_ratio"} <= set(c) and not {"peak_reserved", "ratio"} & set(c)
                         for c in cells)
    judged = [row["deltas"][1] for row in data["rows"] if row["deltas"][1]["mark"] != "incomparable"]
    assert judged and all(d["memory_alone"] is True for d in judged)
    assert [c["budget_fraction"] for c in data["columns"]] == [1.0, 1.0]


@pytest.mark.slow
def test_sweep_json_is_the_folder_its_decisions_as_report_prints_them_and_the_skips(tmp_path):
    out = tmp_path / "s"
    r = in_process("sweep", "workloads/detection.yaml", "--preset", "h200", "--backend", "sim", "--out", out,
                   "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)   # stdout is the JSON alone; progress stays on stderr
    assert "ok expandable_segments:True (replayed): peak reserved" in r.stderr
    (reported,) = json.loads(in_process("report", out, "--json").stdout)
    # the same decisions, and the report says it changed nothing the sweep wrote
    assert dict(folder=data["folder"], choices=data["choices"], changed=[], best_env_changed=None) == reported
    assert data["folder"] == str(out) and data["choices"][0]["conf"] == "expandable_segments:True"
    skipped = {s["conf"]: s for s in data["skipped"]}
    assert set(skipped) == {"backend:cudaMallocAsync", "garbage_collection_threshold:0.6",
                            "garbage_collection_threshold:0.8"}
    assert skipped["backend:cudaMallocAsync"]["env_id"].startswith("sim:torch-")
    assert skipped["backend:cudaMallocAsync"]["reason"].endswith("measure it on the GPU")
