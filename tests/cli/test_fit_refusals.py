"""`alloctune fit` refusing what cannot work, each as a class of inputs, before any recording or replay, in one line,
leaving no folder behind and nothing of another's changed: a parameter given in a variable alloctune sets itself, a
folder that is not this fit's (another command's fit, a sweep's results, files of the user's), a card no job runs
on or that holds less than the context, one trace given at two values, values too many to answer, and two fits on
one folder at once."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from bounded import bounded_cli, one_line_error
from clirun import in_process
from scaled import write_traces
from waiting import wait_until

import alloctune
from alloctune.errors import OptionError
from alloctune.results.names import FIT_FILE, PLOT_FILE, SWEEP_FILE
from alloctune.settings.conf import AllocConf
from alloctune.sim.trace import save_trace
from alloctune.trial.command import hook_environment, run_command
from alloctune.trial.task import SET_VARIABLES, child_environment, set_by_alloctune

pytestmark = pytest.mark.usefixtures("no_visible_gpu")   # a command is refused for its GPU only after these checks


def refused(*args, cwd=None) -> str:
    """`alloctune fit ARGS`: exit 2 and one line on standard error, which is returned."""
    done = in_process("fit", *args, **({"cwd": cwd} if cwd else {}))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_the_variables_alloctune_sets_are_every_one_its_environment_builders_change(tmp_path):
    """Built from a base holding each variable the builders touch (and one they do not), with every option on:
    each variable added, changed or removed is one `set_by_alloctune` names."""
    base = {name: "user" for name in (*SET_VARIABLES, "ALLOCTUNE_HOOK_RECORD", "BATCH")}
    env = hook_environment(child_environment(AllocConf.parse("expandable_segments:True"), 0, base), "x",
                           budget_bytes=2**30, record=True, window_steps=3, step_on="forward", growth_steps=2,
                           early_stop=True)
    run = run_command(["env", "-0"], env, None, 60, str(tmp_path))   # what the child's process sees
    final = dict(e.split("=", 1) for e in Path(run.stdout).read_text().split("\0") if e)
    changed = {k for k in {*base, *final} if base.get(k) != final.get(k)}
    assert changed and all(set_by_alloctune(k) for k in changed), sorted(k for k in changed if not set_by_alloctune(k))
    assert not set_by_alloctune("BATCH") and final["BATCH"] == "user"


@pytest.mark.parametrize("name", [*SET_VARIABLES, "ALLOCTUNE_HOOK_OUT", "ALLOCTUNE_ANYTHING"])
def test_a_parameter_in_a_variable_alloctune_sets_is_refused_unless_the_command_says_where_it_goes(tmp_path, name):
    out = tmp_path / "fit"
    line = refused("--param", f"{name}=1,2", "--out", out, "--", "python3", "-c", "pass")
    assert f"alloctune sets {name} in your command's environment itself" in line and "{" + name + "}" in line
    assert not out.exists()
    # with {NAME} in the command the value goes there: refused only later, for the GPU the command lacks
    line = refused("--param", f"{name}=1,2", "--out", out, "--", "python3", "-c", f"print({{{name}}})")
    assert "needs a CUDA GPU" in line and not out.exists()


def test_a_command_whose_interpreter_cannot_import_torch_is_refused_before_it_is_recorded(tmp_path):
    venv, out = tmp_path / "venv", tmp_path / "fit"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    line = refused("--param", "batch=1,2", "--out", out, "--", venv / "bin" / "python", "-c", "print({batch})")
    assert f"{venv / 'bin' / 'python'} cannot import torch (ModuleNotFoundError" in line and not out.exists()


def test_a_refused_fit_leaves_no_folder_not_even_the_default_one(tmp_path):
    line = refused("--param", "batch=8,16", "--", "python3", "-c", "print({batch})", cwd=tmp_path)
    assert "needs a CUDA GPU" in line and os.listdir(tmp_path) == []


def test_a_folder_that_is_not_this_fits_is_refused_and_left_as_it_was(tmp_path):
    traces = write_traces(tmp_path, [8, 16])
    theirs = tmp_path / "theirs"
    done = in_process("fit", "--param", "batch", *traces, "--cards", "24GiB", "--jobs", "1", "--out", theirs)
    assert done.returncode == 0, done.stderr
    before = {p.name: p.read_bytes() for p in theirs.iterdir() if p.name != ".lock"}
    line = refused("--param", "batch=8,16", "--out", theirs, "--", "python3", "t.py", "{batch}")
    assert "holds the fit of another command or parameter (batch: traces recorded before)" in line
    line = refused("--param", "seq", *traces, "--out", theirs)
    assert "holds the fit of another command or parameter" in line
    assert {p.name: p.read_bytes() for p in theirs.iterdir() if p.name != ".lock"} == before
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / SWEEP_FILE).write_text("{}")
    (sweep / PLOT_FILE).write_bytes(b"the sweep's plot")
    assert "is a sweep's results folder (sweep.json)" in refused("--param", "batch", *traces, "--out", sweep)
    assert (sweep / PLOT_FILE).read_bytes() == b"the sweep's plot" and not (sweep / FIT_FILE).exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert "holds files a fit does not write ('notes.txt')" in refused("--param", "batch", *traces, "--out", mine)
    assert os.listdir(mine) == ["notes.txt"]


def test_recordings_another_command_left_in_the_folder_are_refused(tmp_path):
    """A fit killed before it wrote fit.json leaves only its recordings: each says whose it is (meta 'fit')."""
    from scaled import scaled_trace

    out = tmp_path / "fit"
    out.mkdir()
    for value in (8, 16):
        trace = scaled_trace(value)
        trace.meta["fit"] = {"command": ["python3", "other.py", "{batch}"], "param": "batch", "value": value}
        save_trace(trace, out / f"trace.batch-{value}.xz")
    before = sorted(os.listdir(out))
    line = refused("--param", "batch=8,16", "--out", out, "--", "python3", "t.py", "{batch}")
    assert "trace.batch-8.xz was recorded for another command ('python3 other.py {batch}')" in line
    assert sorted(os.listdir(out)) == before or sorted(os.listdir(out)) == [".lock", *before]   # the lock: its own rule


@pytest.mark.parametrize("args, says", [
    (["--cards", "1000"], "--cards '1000': 1000 B is less than any card that runs a job (1.00 GiB)"),
    (["--cards", "512MiB"], "--cards '512MiB': 512.00 MiB is less than any card that runs a job"),
    (["--cards", "24GiB", "--overhead", "24GiB"], "a card must hold more than the CUDA context each process holds "
                                                  "(24.00 GiB, as given by --overhead)"),
    (["--cards", "1200MiB"], "(2.00 GiB, as the recordings measured it)"),
    # the default cards, the smallest 16 GiB: it said 'assumed: the recordings do not say' of a context given
    (["--overhead", "20GiB"], "(20.00 GiB, as given by --overhead)"),
])
def test_a_card_no_job_runs_on_is_refused_before_any_replay_and_leaves_no_folder(tmp_path, args, says):
    from scaled import scaled_trace

    paths = []
    for value in (8, 16):   # traces whose recording measured a context of 2 GiB
        trace = scaled_trace(value)
        trace.meta["overhead_bytes"] = 2 * 2**30
        save_trace(trace, tmp_path / f"{value}.xz")
        paths += ["--trace", f"{value}={tmp_path / f'{value}.xz'}"]
    out = tmp_path / "fit"
    assert says in refused("--param", "batch", *paths, *args, "--out", out)
    assert not out.exists()


@pytest.mark.parametrize("mark", ["{btch}", "--batch-size={bs}", "out-{batchs}.log"])
def test_a_misspelt_mark_is_refused_before_anything_runs_and_the_parameters_suggested(tmp_path, mark):
    """'--batch-size {btch}' was passed as it is: the script failed and fit said 'python3 exited with status 2'."""
    out = tmp_path / "fit"
    line = refused("--param", "batch=8,16", "--dry-run", "--out", out, "--", "python3", "mlp.py", mark)
    wrong = mark[mark.index("{"):mark.index("}") + 1]
    assert line == f"alloctune: error: your command after '--' says {wrong}, which is not the parameter: fit puts " \
                   "each value of batch where the command says {batch}; did you mean {batch}?"
    assert not out.exists()


def test_braces_that_are_the_commands_own_are_left_to_it(tmp_path):
    """python -c code and JSON hold braces: only a mark that stands as a word's value, or is named like the
    parameter, is taken for a misspelt one (these are refused later, for the GPU the command lacks)."""
    for command in (["python3", "-c", "x = 1; print(f'{x} {batch}')"], ["python3", "t.py", '{"lr": 1}', "{batch}"]):
        assert "needs a CUDA GPU" in refused("--param", "batch=8,16", "--out", tmp_path / "f", "--", *command)


def test_one_trace_given_at_two_values_is_refused_as_fleet_refuses_one_job_given_twice(tmp_path):
    """A curve through one recording at two values is flat: it answered '4+ extrapolated, margin +0.0%'."""
    path = write_traces(tmp_path, [8])[1].partition("=")[2]
    (tmp_path / "link.xz").symlink_to(path)
    out = tmp_path / "fit"
    for other in (path, tmp_path / "link.xz", f"{tmp_path}/./job-8.xz"):
        line = refused("--param", "batch", f"--trace=1={path}", f"--trace=2={other}", "--out", out)
        assert f"each value's trace once: {path} and {other} are one trace, and one recording at two " \
               f"values would fit a flat line" in line
    assert not out.exists()
    fleet = in_process("fleet", path, tmp_path / "link.xz")
    assert fleet.returncode == 2 and "each job's trace once: " in fleet.stderr and "are one trace" in fleet.stderr


def test_a_budget_larger_than_the_recording_gpu_is_refused_as_it_would_limit_nothing(tmp_path):
    """It was answered as 'Under budget 200GiB (200.00 GiB) of the recording GPU: 139.06 GiB for the allocator, the
    rest holds the context': the card's room, under the budget's name."""
    out = tmp_path / "fit"
    line = refused("--param", "batch", *write_traces(tmp_path, [8, 16]), "--budget", "0.5", "--budget", "200GiB",
                   "--out", out)
    assert line == "alloctune: error: --budget '200GiB' (200.00 GiB) is more than the recording GPU's 139.80 GiB: " \
                   "it limits nothing; give --cards for a larger card"
    assert not out.exists()


def test_the_options_of_a_commands_runs_are_refused_beside_traces_naming_those_given(tmp_path):
    """A fit of traces records and confirms nothing: --warmup-steps, --steps, --gpu, --timeout and
    --extra-recordings were ignored in silence. Each given is named, its default given too (--warmup-steps 2)."""
    traces, out = write_traces(tmp_path, [8, 16]), tmp_path / "fit"
    line = refused("--param", "batch", *traces, "--budget", "40GiB", "--warmup-steps", "5", "--steps", "3", "--gpu",
                   "1", "--timeout", "10", "--extra-recordings", "1", "--out", out)
    assert line == "alloctune: error: --extra-recordings, --gpu, --timeout, --warmup-steps and --steps apply to a " \
                   "command's runs; traces given with --trace were recorded already"
    assert refused("--param", "batch", *traces, "--warmup-steps", "2", "--out", out) == "alloctune: error: " \
        "--warmup-steps applies to a command's runs; traces given with --trace were recorded already"
    assert not out.exists()
    with pytest.raises(OptionError) as caught:
        alloctune.fit("batch", traces={8: traces[1].partition("=")[2], 16: traces[3].partition("=")[2]},
                      warmup_steps=0)
    assert str(caught.value) == "warmup_steps applies to a command's runs; traces given with traces were recorded " \
                                "already"


@pytest.mark.parametrize("value", ["²", "٣", "9" * 5000, "-4", "0x10", "1_000"])
def test_a_value_that_is_no_whole_number_is_one_line(tmp_path, value):
    traces = write_traces(tmp_path, [8, 16])
    line = refused("--param", "batch", f"--trace={value}={traces[1].partition('=')[2]}", traces[2], traces[3])
    assert "each trace's value must be a whole number above 0" in line or "expected VALUE=FILE" in line
    assert len(line) < 300


@pytest.mark.parametrize("typed, why", [
    ("batch=x,16", "'x' is not a whole number; "),
    ("batch=8,,16", "'' is not a whole number; "),
    ("batch=-1,4", "-1 is not above 0; "),
    ("batch=8,8", "8 is given twice; "),
    ("batch=99999999999999999999,8", "99999999999999999999 is above 2**63 - 1; "),
    ("batch=8", ""),
    ("batch", ""),
])
def test_param_values_are_refused_as_typed_naming_the_value_that_is_wrong(typed, why):
    """It said "--param ('x', 16): expected ...": the Python values the command line became, not what was typed."""
    line = refused("--param", typed, "--", "python3", "-c", "pass")
    assert line == f"alloctune: error: --param {typed!r}: {why}expected at least two distinct whole numbers above " \
                   "0, e.g. batch=8,16,32"


def test_a_param_without_a_name_is_refused_as_typed_and_the_api_shows_what_its_caller_gave():
    assert refused("--param", "=8,16", "--", "python3", "-c", "pass") == \
        "alloctune: error: --param '=8,16': expected a name such as batch"
    with pytest.raises(OptionError) as caught:
        alloctune.fit("batch", command=["python3", "-c", "pass"], values=["x", 16])
    assert str(caught.value) == "values ['x', 16]: 'x' is not a whole number; expected at least two distinct whole " \
                                "numbers above 0, e.g. batch=8,16,32"


@pytest.mark.parametrize("args, says", [
    (["--cards", ""], "--cards '': expected card memories above 0"),   # it answered for the default cards
    (["--budget", "lots"], "--budget: expected a size such as '24GiB'"),   # it named the option 'budget'
])
def test_an_empty_card_list_and_a_budget_that_is_no_size_are_refused_naming_their_flag(tmp_path, args, says):
    line = refused("--param", "batch", *write_traces(tmp_path, [8, 16]), *args, "--jobs", "1")
    assert says in line


def test_values_too_far_apart_for_their_step_are_refused_at_once_within_bounded_memory(tmp_path):
    traces = write_traces(tmp_path, [1, 2])
    far = ["--trace", traces[1], "--trace", f"100000000={traces[3].partition('=')[2]}"]
    run = bounded_cli("fit", "--param", "batch", *far, "--out", tmp_path / "fit", timeout=60)
    line = one_line_error(run)
    assert "values 1 to 100000000 in steps of 1 make 200,000,002 values to answer, more than 10,000: give a " \
           "larger --step" in line
    assert run.seconds < 30 and not (tmp_path / "fit").exists()
    fine = in_process("fit", "--param", "batch", *far, "--step", "50000000", "--cards", "80GiB", "--jobs", "1")
    assert fine.returncode == 0, fine.stderr


def test_two_fits_on_one_folder_at_once_the_second_is_refused(tmp_path):
    """The first holds the folder's lock while it replays (a slow one: many settings); the second, started then,
    is refused at once and the first finishes."""
    traces = write_traces(tmp_path, [8, 16, 24, 32], steps=40)
    out = tmp_path / "fit"
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    first = subprocess.Popen([sys.executable, "-m", "alloctune", "fit", "--param", "batch", *traces, "--jobs", "1",
                              "--out", str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    try:
        wait_until(lambda: (out / ".lock").exists() or first.poll() is not None, 60, "the first fit's lock")
        assert first.poll() is None, "the first fit ended before the second could start"
        line = refused("--param", "batch", *traces, "--jobs", "1", "--out", out)
        assert "is being written by another alloctune" in line
    finally:
        assert first.wait(300) == 0, first.stderr.read() if first.stderr else ""
    assert (out / FIT_FILE).exists()
