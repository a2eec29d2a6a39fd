"""The simulated section of summary.md names where its trace was recorded (issue 19): a command's trace recorded
by the start-up hook said its torch only as `trace_torch` before it said its GPU too."""
from __future__ import annotations

from dataclasses import replace

from clirun import in_process
from folders import make_folder, trial


def sim_trial(conf, reserved, env):
    return replace(trial(conf, reserved=reserved, tput=None, backend="sim", env_id="sim:torch-2.11.0"), env=env)


def summary_of(tmp_path, env) -> str:
    folder = make_folder(tmp_path / f"w-{len(list(tmp_path.iterdir()))}",
                         [sim_trial("", 15.0, env), sim_trial("expandable_segments:True", 10.0, env)],
                         envs={"torch-2.11.0": {"torch_version": "2.11.0+cu130"}})
    run = in_process("report", folder.path)
    assert run.returncode == 0, run.stderr
    return (folder.path / "summary.md").read_text()


def test_the_simulated_section_names_the_recording_gpu_and_torch(tmp_path):
    hook = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "trace_torch": "2.11.0+cu130"}   # what the hook writes now
    assert "Replayed from a trace recorded on NVIDIA H200 with torch 2.11.0+cu130" in summary_of(tmp_path, hook)
    older = {"trace": "trace.xz", "trace_torch": "2.11.0+cu130", "simulated_as": "2.11.0+cu130"}
    text = summary_of(tmp_path, older)
    assert "with torch 2.11.0+cu130" in text and "(unrecorded version)" not in text
