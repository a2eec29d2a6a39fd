"""Settings the user named (--conf, --grid FILE, a workload's grid:) that the target torch rejects stop sweep and
replay with exit 2 and a did-you-mean; only default-grid entries are dropped quietly. Valid but pointless named
settings stay skipped, said loudly before anything runs."""
from __future__ import annotations

from pathlib import Path

import pytest
from clirun import cli, in_process

from alloctune.settings.conf import AllocConf
from alloctune.settings.versions import did_you_mean, known_keys

ROOT = Path(__file__).resolve().parents[2]
HPSEARCH = ROOT / "workloads" / "hpsearch.yaml"
TRACE = ROOT / "workloads" / "traces" / "hpsearch-h200.xz"

no_gpu = pytest.mark.usefixtures("no_visible_gpu")   # exercises the no-GPU fallback, on any machine


def test_did_you_mean_looks_among_the_keys_that_torch_version_knows():
    assert did_you_mean(AllocConf.parse("expandable_segment:True"), "2.13.0") == " (did you mean 'expandable_segments'?)"
    assert did_you_mean(AllocConf.parse("max_split_size:64"), "2.11.0") == " (did you mean 'max_split_size_mb'?)"
    # large_segment_size_mb arrived in 2.11: torch 2.6 knows no key close to it.
    assert "large_segment_size_mb" not in known_keys("2.6.0")
    assert did_you_mean(AllocConf.parse("large_segment_size:64"), "2.6.0") is None
    assert did_you_mean(AllocConf.parse("completely_unrelated:1"), "2.13.0") is None


@pytest.mark.slow
@no_gpu
@pytest.mark.parametrize("how", ["--conf", "--grid", "workload"])
def test_sweep_stops_on_a_named_setting_torch_rejects(tmp_path, how):
    if how == "--conf":
        args = [HPSEARCH, "--conf", "expandable_segment:True", "--conf", "max_split_size_mb:64"]
    elif how == "--grid":
        (tmp_path / "grid.txt").write_text("expandable_segment:True\nmax_split_size_mb:64\n")
        args = [HPSEARCH, "--grid", "grid.txt"]
    else:
        text = HPSEARCH.read_text().replace("traces/hpsearch-h200.xz", str(TRACE))
        (tmp_path / "w.yaml").write_text(text + "grid: ['expandable_segment:True', 'max_split_size_mb:64']\n")
        args = ["w.yaml"]
    proc = in_process("sweep", *args, "--preset", "h200", "--results", "out", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if "error" in x]
    assert "'expandable_segment'" in line and "did you mean 'expandable_segments'?" in line
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


@pytest.mark.slow
@no_gpu
def test_named_but_pointless_settings_are_said_loudly_and_the_default_grid_stays_quiet(tmp_path):
    proc = in_process("sweep", HPSEARCH, "--preset", "h200", "--conf", "garbage_collection_threshold:0.6",
                      "--results", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "you named 'garbage_collection_threshold:0.6', but it will not run" in proc.stderr
    assert "--budget" in proc.stderr
    quiet = in_process("sweep", HPSEARCH, "--preset", "h200", "--results", "out2", cwd=tmp_path)
    assert quiet.returncode == 0 and "you named" not in quiet.stderr
    assert "skipped garbage_collection_threshold:0.6" in quiet.stdout   # still listed with its reason


def test_replay_stops_on_a_named_setting_torch_rejects(tmp_path):
    proc = cli("replay", TRACE, "--conf", "expandable_segment:True", cwd=tmp_path)
    assert proc.returncode == 2
    assert "did you mean 'expandable_segments'?" in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / "g.yaml").write_text("- max_split_size:64\n")
    proc = cli("replay", TRACE, "--grid", "g.yaml", cwd=tmp_path)
    assert proc.returncode == 2 and "did you mean 'max_split_size_mb'?" in proc.stderr
