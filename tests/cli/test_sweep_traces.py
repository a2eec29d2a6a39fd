"""A trace where sweep takes a workload or a command is named as a trace, with the commands that take one; a trace
of another definition of the sweep's workload (another preset, other parameters) is refused before any folder
exists, naming the preset it was recorded from where the workload file has it. Each through the command line."""
from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import pytest
from clirun import ROOT, in_process

import alloctune
from alloctune.sim.trace import load_trace
from alloctune.workload.loader import load_workload, presets_with_trace

NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}
TRACES = ROOT / "workloads" / "traces"


def one_line(run) -> str:
    assert run.returncode == 2 and run.stdout == "", run
    [line] = run.stderr.splitlines()
    assert line.startswith("alloctune: error: ")
    return line


@pytest.fixture
def traces(tmp_path) -> list[str]:
    """Traces in both formats under names that say nothing of either, one of them executable, one a link."""
    shutil.copy(TRACES / "detection-h200.xz", tmp_path / "run")
    os.chmod(tmp_path / "run", 0o755)
    entries = [{"action": a, "addr": 2**24, "size": 2**20, "stream": 0, "frames": []} for a in ("alloc", "free")]
    (tmp_path / "snap.bin").write_bytes(pickle.dumps({"segments": [], "device_traces": [entries]}))
    os.symlink(tmp_path / "snap.bin", tmp_path / "link.yaml")
    return ["run", "./run", "snap.bin", "link.yaml"]


def test_a_trace_given_as_the_workload_or_the_command_names_replay_and_trace(tmp_path, traces):
    for name in traces:
        for args in ([name], ["--", name], ["--", name, "--epochs", "1"]):
            line = one_line(in_process("sweep", *args, "--results", tmp_path / "r", cwd=tmp_path, env=NO_GPU))
            assert f"{name} is an allocation trace, not a workload file or a command" in line, line
            assert f"`alloctune replay {name}`" in line and line.endswith("with --trace FILE"), line
    assert not (tmp_path / "r").exists()
    with pytest.raises(alloctune.AlloctuneError, match=r"allocation trace.*with trace=FILE$"):
        alloctune.sweep(tmp_path / "run", results_root=tmp_path / "r")


@pytest.fixture
def workload(tmp_path) -> Path:
    """transformer-varlen's file and its H200 trace, copied: the trace's definition is its h200 preset's."""
    (tmp_path / "traces").mkdir()
    shutil.copy(TRACES / "transformer-varlen-h200.xz", tmp_path / "traces")
    return Path(shutil.copy(ROOT / "workloads" / "transformer-varlen.yaml", tmp_path / "w.yaml"))


def test_a_trace_of_another_preset_is_refused_naming_its_preset(tmp_path, workload):
    trace = tmp_path / "traces" / "transformer-varlen-h200.xz"
    for preset in ("24gib", "tiny"):
        run = in_process("sweep", workload, "--preset", preset, "--backend", "sim", "--trace", trace, "--results",
                         tmp_path / "r", cwd=tmp_path, env=NO_GPU)
        line = one_line(run)
        assert f"the trace {trace} was recorded from preset 'h200' of transformer-varlen, not preset '{preset}'" \
            in line and "sweep that preset (--preset h200)" in line, line
    assert not (tmp_path / "r").exists()
    run = in_process("sweep", workload, "--preset", "h200", "--backend", "sim", "--conf", "expandable_segments:True",
                     "--trace", trace, "--results", tmp_path / "r", cwd=tmp_path, env=NO_GPU)
    assert run.returncode == 0, run.stderr   # its own preset: swept


def test_a_trace_of_other_parameters_is_refused(tmp_path, workload):
    workload.write_text(workload.read_text().replace("h200: {layers: 12,", "h200: {layers: 13,"))
    line = one_line(in_process("sweep", workload, "--preset", "h200", "--backend", "sim", "--results",
                               tmp_path / "r", cwd=tmp_path, env=NO_GPU))
    assert "another definition of transformer-varlen (other parameters), not preset 'h200'" in line, line
    assert not (tmp_path / "r").exists()


def test_every_shipped_trace_is_its_own_preset_s():
    """What keeps the refusal above from meeting a shipped preset: each trace a workload file ships was recorded
    from that preset's definition (a change to a built-in kind's parameters calls for new traces)."""
    checked = 0
    for path in sorted((ROOT / "workloads").glob("*.yaml")):
        for preset in presets_with_trace(path):
            spec = load_workload(path, preset)
            assert load_trace(spec.trace).meta["workload_hash"] == spec.digest(), (path.name, preset)
            checked += 1
    assert checked >= 5
