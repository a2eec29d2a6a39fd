"""The next commands a sweep suggests must work as printed: the GPU confirmation of a simulated sweep keeps every
option but the simulated folder; without a GPU, a preset that ships a trace is suggested before recording one."""
from __future__ import annotations

import shlex
import sys

import pytest
from clirun import ROOT, cli, in_process, suggested

from alloctune.sim.trace import ALLOC, Trace, save_trace

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
def test_confirm_on_a_gpu_is_this_runs_command_without_fresh(tmp_path):
    """A folder made by `--fresh --json` and resumed as text: the command sweep.json keeps is the first run's; the
    hint is this run's, and --fresh, which would start the GPU sweep over each time it is run again, is left out."""
    first = in_process("sweep", VARLEN, "--preset", "h200", "--budget", "40GiB", "--out", tmp_path / "sim", "--fresh",
                       "--json")
    assert first.returncode == 0, first.stderr
    proc = in_process("sweep", VARLEN, "--preset", "h200", "--budget", "40GiB", "--out", tmp_path / "sim", "--fresh")
    assert proc.returncode == 0, proc.stderr
    assert suggested(proc.stdout, "Confirm on a GPU:") == ["alloctune", "sweep", VARLEN, "--preset", "h200",
                                                           "--budget", "40GiB", "--backend", "cuda"]


def test_an_abbreviated_option_is_refused_not_carried_into_confirm_on_a_gpu(tmp_path):
    """argparse took `--fre` for --fresh, `--ou` for --out and `--back` for --backend, and the GPU command, which
    drops those by name, kept them: a GPU sweep that started over at each run, or wrote into the simulated folder.
    The parser takes options spelled in full only; --fresh=... is refused too."""
    for given in (["--fre"], ["--ou", str(tmp_path / "sim")], ["--back", "sim"], ["--fresh=yes"]):
        proc = in_process("sweep", VARLEN, "--preset", "h200", *given, "--results", tmp_path / "r")
        [line] = proc.stderr.splitlines()
        assert proc.returncode == 2 and given[0].split("=")[0] in line and "(see alloctune sweep --help)" in line
    assert not (tmp_path / "r").exists() and not (tmp_path / "sim").exists()


@pytest.mark.slow
def test_confirm_on_a_gpu_keeps_the_options_of_the_command_after_the_separator(tmp_path):
    """A dry run's command takes options of its own, --fresh and --out among them: only alloctune's are dropped."""
    job = tmp_path / "job.py"
    job.write_text("import torch\nx = torch.empty(2**24, device='cuda')\n")
    mine = ["--", sys.executable, str(job), "--fresh", "--out", "x", "--backend", "sim", "--dry-run"]
    proc = cli("sweep", "--dry-run", "--fresh", "--out=" + str(tmp_path / "sim"), "--conf", "expandable_segments:True",
               *mine)   # a dry run's program writes to real streams
    assert proc.returncode == 0, proc.stderr
    assert suggested(proc.stdout, "Confirm on a GPU:") == ["alloctune", "sweep", "--conf", "expandable_segments:True",
                                                           "--backend", "hybrid", *mine]


@pytest.mark.slow
def test_confirm_on_a_gpu_of_a_sweep_that_read_standard_input_says_it_needs_it_again(tmp_path):
    workload = (ROOT / VARLEN).read_text()   # its trace path is relative: read from workloads/, as its file is
    proc = in_process("sweep", "-", "--preset", "h200", "--results", tmp_path, cwd=ROOT / "workloads", stdin=workload)
    assert proc.returncode == 0, proc.stderr
    assert suggested(proc.stdout, "Confirm on a GPU:") == ["alloctune", "sweep", "-", "--preset", "h200", "--results",
                                                           str(tmp_path), "--backend", "cuda"]
    assert proc.stdout.rstrip().endswith("(needs the workload on standard input again, as this sweep had it)")
    grid = in_process("sweep", VARLEN, "--preset", "h200", "--grid", "-", "--results", tmp_path / "g",
                      stdin="expandable_segments:True\n")
    assert grid.returncode == 0, grid.stderr
    assert "--grid -" in " ".join(suggested(grid.stdout, "Confirm on a GPU:"))
    assert grid.stdout.rstrip().endswith("(needs the settings list on standard input again, as this sweep had it)")


@pytest.mark.slow
def test_without_a_trace_the_preset_that_ships_one_is_suggested(tmp_path):
    proc = in_process("sweep", VARLEN, "--results", tmp_path / "r")   # default preset 24gib: no trace
    assert proc.returncode == 2
    assert f"preset 'h200' ships one: alloctune sweep {VARLEN} --preset h200" in proc.stderr
    assert f"alloctune record {VARLEN} --preset 24gib -o trace.xz" in proc.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_without_a_trace_a_workload_read_from_standard_input_is_recorded_from_it_again(tmp_path):
    """`sweep -` suggested `alloctune record w ...`, the workload's name, which names no file: the record command it
    suggests reads standard input again, and run so it goes as far as the GPU it needs."""
    workload = "name: w\nkind: transformer\nsteps: 4\n"
    proc = in_process("sweep", "-", "--results", tmp_path / "r", cwd=tmp_path, stdin=workload)
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "with 'alloctune record - -o trace.xz' (with the workload on standard input " \
        "again), then pass it with --trace trace.xz" in said, said
    words = shlex.split(said.split("with '")[1].split("'")[0])   # the command quoted
    assert words[:3] == ["alloctune", "record", "-"], words
    record = in_process(*words[1:], cwd=tmp_path, stdin=workload)
    assert record.returncode == 2 and "recording needs a CUDA GPU" in record.stderr, record.stderr


@pytest.mark.slow   # each probes the interpreter's torch
@pytest.mark.parametrize("args", [
    ["sweep", "--", sys.executable, "job.py"],
    ["sweep", "--backend", "sim", "--", sys.executable, "job.py"],   # it once said to record, which needs a GPU too
    ["record", "-o", "t.xz", "--", sys.executable, "job.py"],
    ["fit", "--param", "batch=8,16", "--", sys.executable, "job.py", "--batch", "{batch}"],
])
def test_without_a_gpu_each_command_of_a_program_says_that_its_dry_run_needs_none(tmp_path, args):
    proc = in_process(*args, cwd=tmp_path)
    [line] = proc.stderr.splitlines()
    assert proc.returncode == 2 and "run this again with --dry-run, which traces the command" in line, line
    assert "alloctune record" not in line and not any(tmp_path.iterdir())


@pytest.mark.slow
def test_without_a_gpu_fits_confirmation_does_not_suggest_the_dry_run_it_refuses_beside_confirm(tmp_path):
    proc = in_process("fit", "--param", "batch=8,16", "--budget", "10GiB", "--confirm", "default", "--", sys.executable,
                      "job.py", "--batch", "{batch}", cwd=tmp_path)
    [line] = proc.stderr.splitlines()
    assert proc.returncode == 2 and "needs a CUDA GPU" in line and "--dry-run" not in line, line


@pytest.mark.slow
def test_without_a_gpu_the_python_api_names_its_dry_run_option():
    import alloctune
    from alloctune.errors import AlloctuneError

    with pytest.raises(AlloctuneError, match="; without one, run this again with dry_run=True, which traces"):
        alloctune.record([sys.executable, "job.py"], "t.xz")


@pytest.mark.parametrize("args, said", [
    (["sweep", "--trace", "t.xz", "--", sys.executable, "job.py"], "--trace applies to a workload file"),
    (["sweep", "--preset", "h200", "--trace", "t.xz", "--", sys.executable, "job.py"],
     "--preset and --trace apply to a workload file"),
    (["record", "-o", "t.xz", "--python", sys.executable, "--", sys.executable, "job.py"],
     "--python applies to a workload file"),
    (["sweep", "--unit", "samples", VARLEN], "--unit applies to '-- COMMAND'; a workload file gives its own"),
    (["sweep", "--warmup-steps", "5", VARLEN], "--warmup-steps applies to '-- COMMAND'; a workload file gives its "
                                               "own"),
    (["sweep", "--warmup-steps", "0", "--steps", "5", VARLEN],   # 0, given, is told from not given
     "--warmup-steps and --steps apply to '-- COMMAND'; a workload file gives its own"),
    (["record", "-o", "t.xz", "--warmup-steps", "5", VARLEN],
     "--warmup-steps applies to '-- COMMAND'; a workload file says its steps itself"),
    (["record", "-o", "t.xz", "--warmup-steps", "2", "--steps", "5", VARLEN],   # 2, given, is told from not given
     "--warmup-steps and --steps apply to '-- COMMAND'; a workload file says its steps itself"),
])
def test_an_option_that_does_not_apply_is_refused_by_the_flags_given_only(tmp_path, args, said):
    proc = in_process(*args)
    [line] = proc.stderr.splitlines()
    assert proc.returncode == 2 and f"error: {said}" in line, line


@pytest.mark.slow
def test_a_workload_outside_this_folder_is_suggested_by_its_absolute_path(tmp_path):
    """A path that leaves the current folder is not turned into a relative one ('../../work/w.yaml')."""
    (tmp_path / "files").mkdir()
    (tmp_path / "here").mkdir()
    workload = tmp_path / "files" / "w.yaml"
    workload.write_text("name: w\nkind: transformer\nsteps: 4\n")
    proc = in_process("sweep", workload, "--results", tmp_path / "r", cwd=tmp_path / "here")
    assert proc.returncode == 2 and f"alloctune record {workload} -o trace.xz" in proc.stderr, proc.stderr
    assert ".." not in proc.stderr


@pytest.mark.slow
def test_a_workload_given_by_a_relative_path_outside_this_folder_is_suggested_by_that_path(tmp_path):
    """'../files/w.yaml' stays as typed in the commands suggested, not made absolute; the sweep still finds the file
    and its presets (one ships a trace)."""
    (tmp_path / "files").mkdir()
    (tmp_path / "here").mkdir()
    (tmp_path / "files" / "w.yaml").write_text("name: w\nkind: transformer\nsteps: 4\ndefault_preset: small\n"
                                               "presets: {small: {}, big: {trace: t.xz}}\n")
    save_trace(Trace([ALLOC], [0], [2**20], [0], 0, {}), tmp_path / "files" / "t.xz")
    proc = in_process("sweep", "../files/w.yaml", "--results", tmp_path / "r", cwd=tmp_path / "here")
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "preset 'big' ships one: alloctune sweep ../files/w.yaml --preset big (or record " \
        "this one on a GPU machine: alloctune record ../files/w.yaml --preset small -o trace.xz" in said, said
