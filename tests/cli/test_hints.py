"""The next commands a sweep suggests must work as printed: the GPU confirmation of a simulated sweep keeps every
option but the simulated folder; without a GPU, a preset that ships a trace is suggested before recording one."""
from __future__ import annotations

import pytest
from clirun import in_process, suggested

VARLEN = "workloads/transformer-varlen.yaml"

pytestmark = pytest.mark.usefixtures("no_visible_gpu")   # exercises the no-GPU fallback, on any machine


@pytest.mark.slow
def test_confirm_on_a_gpu_keeps_every_option_but_the_simulated_folder(tmp_path):
    proc = in_process("sweep", VARLEN, "--preset", "h200", "--conf", "expandable_segments:True", "--repeats", "5",
                      "--out", tmp_path / "sim", "--results", tmp_path / "r")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("Confirm on a GPU:") == 1
    words = suggested(proc.stdout, "Confirm on a GPU:")
    assert words == ["alloctune", "sweep", VARLEN, "--preset", "h200", "--conf", "expandable_segments:True",
                     "--repeats", "5", "--results", str(tmp_path / "r"), "--backend", "cuda"]


@pytest.mark.slow
def test_without_a_trace_the_preset_that_ships_one_is_suggested(tmp_path):
    proc = in_process("sweep", VARLEN, "--results", tmp_path / "r")   # default preset 24gib: no trace
    assert proc.returncode == 2
    assert f"preset 'h200' ships one: alloctune sweep {VARLEN} --preset h200" in proc.stderr
    assert f"alloctune record {VARLEN} --preset 24gib -o trace.xz" in proc.stderr
    assert not (tmp_path / "r").exists()
