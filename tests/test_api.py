"""The Python API as the README shows it (issue 29): its objects chained together on the CPU (a simulated sweep
of the README's workload, shipped traces, committed fits, a committed OOM snapshot, a committed GPU sweep), each use
case once end to end, recording and calibrating through a stand-in GPU interpreter, the README's block run as a
script, and every function given wrong types and values: each refuses with an AlloctuneError of one line, never
another exception or a silent answer."""
from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest
import torch
from clirun import ROOT, in_process
from scaled import scaled_trace

import alloctune
from alloctune.results.calibration import read_calibration
from alloctune.sim.trace import save_trace
from alloctune.trial.calibration import RUNS
from alloctune.results.folder import ResultsFolder
from standin import CALIBRATION, PROBE_AS_ONE_GPU

WORKLOAD = ROOT / "workloads" / "transformer-varlen.yaml"
TRACE = ROOT / "workloads" / "traces" / "detection-h200.xz"
SNAPSHOT = ROOT / "tests" / "fixtures" / "oom" / "h200" / "frag" / "oom-rank0.pickle"
FITS = {b: ROOT / "tests" / "fixtures" / "fits" / f"hf-trainer-gpt2-batch-{b}.xz" for b in (8, 16, 32)}
CNN = ROOT / "workloads" / "traces" / "cnn-varres-h200.xz"
GPU_SWEEP = ROOT / "results" / "transformer-varlen-h200-20261129-234646"   # the README's, measured on an H200


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    return alloctune.sweep(WORKLOAD, preset="h200", backend="sim", results_root=tmp_path_factory.mktemp("api"),
                           notice=lambda text: None)


def test_the_readme_objects_fit_each_other(outcome, tmp_path):
    assert isinstance(outcome.folder, ResultsFolder) and outcome.choices[0].best.conf is not None
    for folder in (outcome.folder, outcome.folder.path, str(outcome.folder.path)):
        analysis = alloctune.analyze(folder)
        assert [c.best.conf for c in analysis.choices] == [c.best.conf for c in outcome.choices]
        assert {s.conf for s in analysis.settings} == {s.conf for s in outcome.settings}
        assert analysis.changes == [] and analysis.best_env[0] == analysis.best_env[1]
        exported = alloctune.export_results(folder, "env")
        assert f"PYTORCH_CUDA_ALLOC_CONF={outcome.choices[0].best.conf}\n" in exported.text
        assert exported.choice.conf == outcome.choices[0].best.conf and exported.folder.path == outcome.folder.path
    compared = alloctune.compare([GPU_SWEEP, outcome.folder], output=tmp_path / "cmp")
    assert [c.backend for c in compared.comparison.columns] == ["cuda", "sim"]
    assert compared.markdown == tmp_path / "cmp" / "compare.md" and compared.plot.stat().st_size > 0
    trace = alloctune.load_trace(TRACE)
    by_size = alloctune.replay(trace, ["", "expandable_segments:True"], device_memory="24GiB").outcomes
    by_bytes = alloctune.replay(TRACE, ["", "expandable_segments:True"], device_memory=24 * 2**30).outcomes
    assert [(o.conf, o.result.peak_reserved_bytes, o.result.num_ooms) for o in by_size] == \
        [(o.conf, o.result.peak_reserved_bytes, o.result.num_ooms) for o in by_bytes]
    d = alloctune.diagnose(SNAPSHOT)
    assert d.verdict is not None and d.verdict.cause and d.verdict.summary and d.next_steps
    assert alloctune.load_workload(WORKLOAD).name == "transformer-varlen"
    alloctune.step(units=128)   # outside a trial: nothing


def test_each_use_case_end_to_end_and_what_one_returns_the_next_takes(tmp_path):
    trace = alloctune.load_trace(TRACE)
    # replay: the CLI's default device (the recording GPU's), the default always beside the settings named, and a
    # setting that cannot be simulated kept with its reason
    replayed = alloctune.replay(trace, ["expandable_segments:True", "backend:cudaMallocAsync"], jobs=1)
    assert replayed.replays[0].device_memory == trace.meta["device_total_bytes"]
    by_conf = {o.conf: o for o in replayed.outcomes}
    assert set(by_conf) == {"default", "expandable_segments:True", "backend:cudaMallocAsync"}
    assert by_conf["backend:cudaMallocAsync"].result is None and "driver" in by_conf["backend:cudaMallocAsync"].reason
    assert replayed.to_json()["trace"] == "trace #1" and alloctune.replay(TRACE, jobs=1).to_json()["trace"] == \
        str(TRACE)
    two = alloctune.replay(options=alloctune.ReplayOptions([TRACE, trace], ["expandable_segments:True"], jobs=1))
    assert len(two.replays) == 2 and {row.conf for row in two.maximum} == {"default", "expandable_segments:True"}
    # search: the front of the space, each member with its reason
    found = alloctune.search(trace, max_settings=20, device_memory="24GiB", jobs=1)
    assert found.front and all(m.reason for m in found.front) and found.to_json()["warnings"] == []
    # fit: traces by value, as paths and as Traces, answered per card; written where asked
    fit = alloctune.fit("batch", traces={8: FITS[8], 16: alloctune.load_trace(FITS[16]), 32: FITS[32]},
                        confs=["expandable_segments:True"], cards=["24GiB", "80GiB"], out=tmp_path / "fit", jobs=1)
    small, large = fit.fit.limits
    assert [a.conf for a in small.answers] == ["", "expandable_segments:True"]
    assert all(a.largest is not None and b.largest is not None and a.largest <= b.largest
               for a, b in zip(small.answers, large.answers))
    assert fit.folder == tmp_path / "fit" and (fit.folder / "fit.json").exists()
    # fleet: jobs by their traces' names, the setting that loses least
    fleet = alloctune.fleet([trace, CNN], ["expandable_segments:True"], jobs=1)
    assert fleet.jobs == ("trace #1", "cnn-varres-h200") and fleet.best is not None
    assert fleet.to_json()["best"] == str(fleet.best.setting)
    # diagnose: the recommended setting is one replay takes
    d = alloctune.diagnose(options=alloctune.DiagnoseOptions([SNAPSHOT], jobs=1))
    assert d.recommended_conf and alloctune.replay(trace, d.recommended_conf, jobs=1).outcomes


def test_a_sweep_that_falls_back_to_replay_says_so_as_a_warning_unless_told_where(tmp_path):
    """Without a GPU, `backend` auto replays: a caller who passed no `notice` gets it as a SweepNotice (pointing at
    its own line), one who did gets it there; the outcome keeps it either way."""
    with pytest.warns(alloctune.SweepNotice, match="^No CUDA GPU is visible: judging the grid by replaying") as said:
        outcome = alloctune.sweep(WORKLOAD, preset="h200", grid=["expandable_segments:True"],
                                  results_root=tmp_path / "a")
    # (and, the trace being 2.11's, that this machine's torch is replayed: sim/target.py)
    assert said[0].filename == __file__ and outcome.notices == tuple(str(w.message) for w in said)
    told: list[str] = []
    again = alloctune.sweep(WORKLOAD, preset="h200", grid=["expandable_segments:True"], results_root=tmp_path / "b",
                            notice=told.append)
    assert told == list(again.notices) == list(outcome.notices)


def test_a_result_names_the_default_default_where_a_user_reads_it(tmp_path):
    """The house rule in the API's results: search's front and its candidates, and fleet's ranked settings, name
    the default "default" in `conf`, as replay's outcomes and every JSON do (a typed field keeps the AllocConf:
    `setting`); on traces built here, where the default loses nothing."""
    for value in (8, 16):
        save_trace(scaled_trace(value), tmp_path / f"{value}.xz")
    found = alloctune.search(tmp_path / "8.xz", max_settings=12, jobs=1)
    [member] = [m for m in found.front if m.reason.startswith("the default")]
    assert member.candidate.conf == found.search.default.conf == "default" and member.candidate.setting.is_default
    assert "default" in [m["conf"] for m in found.to_json()["front"]]
    assert "default" in [o.conf for o in alloctune.replay(tmp_path / "8.xz", jobs=1).outcomes]
    fleet = alloctune.fleet([tmp_path / "8.xz", tmp_path / "16.xz"], ["max_split_size_mb:128"], jobs=1)
    assert fleet.best is not None and fleet.best.setting.is_default
    assert fleet.best.conf == fleet.to_json()["best"] == "default"


def test_grid_is_a_file_in_replay_fleet_and_fit_and_the_settings_in_sweep_and_each_refuses_the_other(tmp_path):
    """Replay, fleet and fit take their settings as `confs` and a file of more as `grid` (--grid FILE); sweep's
    `grid` is the settings themselves (--conf). Settings given where a file is taken, or a file where settings are,
    are refused in one line before anything runs, pointing at the option that takes them; in the API and the CLI."""
    traces = {}
    for value in (8, 16):
        save_trace(scaled_trace(value), traces.setdefault(value, tmp_path / f"{value}.xz"))
    grid = tmp_path / "grid.yaml"
    grid.write_text("- expandable_segments:True\n")
    replayed = alloctune.replay(traces[8], grid=grid, jobs=1).outcomes
    assert {o.conf for o in replayed} == {"default", "expandable_segments:True"}
    calls = {"replay": lambda g: alloctune.replay(traces[8], grid=g),
             "fleet": lambda g: alloctune.fleet(list(traces.values()), grid=g),
             "fit": lambda g: alloctune.fit("batch", traces=traces, grid=g)}
    for name, call in calls.items():
        for settings in (["expandable_segments:True"], ("default",), "expandable_segments:True"):
            with pytest.raises(alloctune.AlloctuneError) as refused:
                call(settings)
            said = str(refused.value)
            assert said.startswith("grid is a file listing settings") and said.endswith(
                "the settings themselves go in confs") and "\n" not in said, (name, settings, said)
    for given in (grid, str(grid), [str(grid)], ["expandable_segments:True", grid]):
        with pytest.raises(alloctune.AlloctuneError, match="^grid takes the settings themselves, .* not a file "):
            alloctune.sweep(WORKLOAD, grid=given, results_root=tmp_path / "results", notice=lambda text: None)
    assert not (tmp_path / "results").exists()
    for args, says in ((["replay", traces[8], "--grid", "expandable_segments:True"], "--grid is a file listing"),
                       (["fleet", traces[8], traces[16], "--grid", "default"], "settings themselves go in --conf"),
                       (["sweep", WORKLOAD, "--conf", grid], "--conf takes the settings themselves")):
        run = in_process(*args, cwd=tmp_path)
        assert run.returncode == 2 and run.stdout == "" and len(run.stderr.splitlines()) == 1, run
        assert says in run.stderr, run.stderr


# A stand-in GPU interpreter (tests/standin.py): the probe answers as one GPU, the calibration child with the
# committed H200 costs, and a trial child asked to record copies a shipped trace where the snapshot goes.
RECORDER = """
import json, os, shutil, sys
""" + PROBE_AS_ONE_GPU + """
spec = json.load(open(sys.argv[3]))
shutil.copy({trace!r}, spec["record_trace"])
json.dump({{"state": "ok", "env": {{}}, "measurement": {{"peak_reserved_bytes": 2**30, "peak_allocated_bytes": 2**29,
           "unit": "tokens"}}}}, open(spec["result"], "w"))
"""


@pytest.fixture
def gpu_python(tmp_path) -> str:
    python = tmp_path / "gpu-python"
    python.write_text("#!" + sys.executable + "\n" + textwrap.dedent(
        RECORDER.format(torch=torch.__version__, python=sys.executable, trace=str(TRACE))))
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return str(python)


def test_record_and_calibrate_through_a_stand_in_gpu(tmp_path, gpu_python, monkeypatch):
    """What record returns, replay takes; what calibrate measures is kept in the per-user store and written."""
    recording = alloctune.record(WORKLOAD, tmp_path / "varlen.xz", alloctune.RecordOptions(preset="tiny"),
                                 python=gpu_python)
    assert recording.paths == [tmp_path / "varlen.xz"] and recording.traces[0].trace.num_allocs > 0
    assert recording.to_json()[0]["trace"] == str(tmp_path / "varlen.xz")
    [o] = alloctune.replay(recording.paths[0], [""], device_memory="141GiB").outcomes
    assert o.result.peak_reserved_bytes > 0
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    calibrated = alloctune.calibrate(python=gpu_python, output=tmp_path / "gpu.json")
    assert calibrated.stored.parent == tmp_path / "cache" / "alloctune" / "calibration"
    assert read_calibration(calibrated.stored) == read_calibration(tmp_path / "gpu.json") == calibrated.calibration
    # each of the children said the H200's figures: pooled, the same, with all their repeats
    [sync] = read_calibration(CALIBRATION).sync.samples
    assert calibrated.calibration.sync.samples == [replace(sync, runs=RUNS * sync.runs)]


def readme_block() -> str:
    """The README's Python API block."""
    text = (ROOT / "README.md").read_text()
    return re.search(r"^## Python API\n.*?^```python\n(.*?)^```", text, flags=re.M | re.S).group(1)


@pytest.mark.slow
def test_the_readme_block_runs_as_a_script(tmp_path):
    """As a new user runs it from a checkout, without a GPU: in a scratch folder holding copies of the paths it
    names (each file with its folder), so that nothing lands in the checkout."""
    block = readme_block()
    for name in sorted(set(re.findall(r'"([\w./{}-]+/[\w./{}-]+)"', block))):
        source = ROOT / name if "{" not in name else (ROOT / name).parent   # an f-string's file: its folder
        if source.exists():
            folder = source if source.is_dir() else source.parent
            shutil.copytree(folder, tmp_path / folder.relative_to(ROOT), dirs_exist_ok=True)
    (tmp_path / "readme.py").write_text(block)
    run = subprocess.run([sys.executable, "readme.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES=""))
    assert run.returncode == 0, run.stderr
    assert "SweepNotice: No CUDA GPU is visible" in run.stderr   # the fallback to replay, said
    assert "recording needs a CUDA GPU" in run.stdout            # a wrong input: one line


def test_dump_on_oom_and_step_in_a_script_without_cuda(tmp_path):
    code = (f"import alloctune; print(alloctune.dump_on_oom({str(tmp_path / 'oom')!r}))\n"
            "for i in range(3): alloctune.step(units=64)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == 0 and run.stdout == "None\n" and run.stderr.count("\n") == 1, run.stderr


def test_a_sweep_from_python_records_the_call_that_runs_it_again(tmp_path):
    """sweep.json's command, summary.md's "Command:", of a sweep started from Python is the call itself with the
    options given, however given (it was sys.argv: '-c' here, a kernel launcher's in a notebook); run again it
    resumes the folder. The command line's sweep, another command, resumes it too, the call kept; a fresh one
    keeps its own line."""
    def from_python(call: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", f"import alloctune\n{call}\n"], cwd=tmp_path, text=True,
                              capture_output=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))

    def commands() -> dict[str, str]:
        return {path.name: ResultsFolder(path).info().command for path in sorted((tmp_path / "res").iterdir())}

    run = from_python(f"import pathlib\nalloctune.sweep({str(WORKLOAD)!r}, alloctune.SweepOptions(repeats=3), "
                      "preset='h200', backend='sim', grid=('expandable_segments:True',), "
                      "results_root=pathlib.Path('res'))")
    assert run.returncode == 0, run.stderr[-2000:]
    call = (f"alloctune.sweep({str(WORKLOAD)!r}, preset='h200', grid=['expandable_segments:True'], repeats=3, "
            "backend='sim', results_root='res')")
    (folder, recorded), = commands().items()
    assert recorded == call and f"- Command: `{call}`" in (tmp_path / "res" / folder / "summary.md").read_text()
    again = from_python(call)
    assert again.returncode == 0 and f"Resuming the sweep in res/{folder}" in again.stderr, again.stderr[-2000:]
    line = ["sweep", WORKLOAD, "--preset", "h200", "--conf", "expandable_segments:True", "--repeats", "3",
            "--backend", "sim", "--results", "res"]
    assert "Resuming the sweep" in in_process(*line, cwd=tmp_path).stderr and commands() == {folder: call}
    assert in_process(*line, "--fresh", cwd=tmp_path).returncode == 0
    assert sorted(commands().values()) == sorted([call, shlex.join(["alloctune", *map(str, line), "--fresh"])])


def test_settings_given_as_allocconfs_are_recorded_as_the_call_takes_them_back(tmp_path, monkeypatch):
    """`grid=[AllocConf...]` was recorded as `AllocConf(backend=None, ...)`, which the call cannot run (AllocConf is
    no name of the API): each is its setting's text, the default 'default'; run, the call recorded asks the same."""
    from alloctune.settings.conf import AllocConf

    asked = []

    def plan(spec, options, *_):
        asked.append(options)
        raise alloctune.AlloctuneError("planned")

    monkeypatch.setattr("alloctune.api.sweep.make_plan", plan)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(alloctune.AlloctuneError, match="planned"):
        alloctune.sweep(WORKLOAD, grid=[AllocConf.parse("expandable_segments:True"), AllocConf()], backend="sim")
    call = asked[0].started_as
    assert call == f"alloctune.sweep({str(WORKLOAD)!r}, grid=['expandable_segments:True', 'default'], backend='sim')"
    with pytest.raises(alloctune.AlloctuneError, match="planned"):
        eval(call, {"alloctune": alloctune})   # noqa: S307 - the call recorded, run as a user would paste it
    assert asked[1].started_as == call


def wrong_calls(folder: str) -> list[tuple[str, object, str]]:
    """(what, a call with a wrong argument, what its message says)."""
    trace = alloctune.load_trace(TRACE)
    return [
        ("analyze(123)", lambda: alloctune.analyze(123), "a results folder: expected a path"),
        ("analyze('')", lambda: alloctune.analyze(""), "a results folder: expected a path"),
        ("analyze(missing)", lambda: alloctune.analyze(folder + "-not-there"), "no results folder here"),
        ("analyze(max_slowdown=2)", lambda: alloctune.analyze(folder, max_slowdown=2), "max_slowdown must be"),
        ("analyze(max_slowdown=nan)", lambda: alloctune.analyze(folder, max_slowdown=math.nan), "max_slowdown"),
        ("analyze(folder, 0.5)", lambda: alloctune.analyze(folder, 0.5),
         "the options must be of type AnalyzeOptions, got float"),
        ("analyze(slowdown=)", lambda: alloctune.analyze(folder, slowdown=0.1), "analyze() has no option 'slowdown'"),
        ("export_results(None)", lambda: alloctune.export_results(None), "a results folder: expected a path"),
        ("export_results(fmt=5)", lambda: alloctune.export_results(folder, 5), "unknown export format 5"),
        ("export_results(conf=123)", lambda: alloctune.export_results(folder, conf=123), "conf: expected a str"),
        ("export_results(env_id=3)", lambda: alloctune.export_results(folder, env_id=3), "env_id: expected a str"),
        ("export_results(workload=[])", lambda: alloctune.export_results(folder, workload=[]), "workload: expected"),
        ("export_results(allow_incomplete='yes')",
         lambda: alloctune.export_results(folder, allow_incomplete="yes"), "allow_incomplete: expected True"),
        ("export_results(fmt=)", lambda: alloctune.export_results(folder, fmt="env"), "has no option 'fmt'"),
        ("compare(one)", lambda: alloctune.compare([folder], output=None), "compare needs at least two"),
        ("compare(factor=2)", lambda: alloctune.compare([folder, folder], factor=2), "factor must be a fraction"),
        ("compare(5)", lambda: alloctune.compare([5]), "a results folder: expected a path"),
        ("compare([])", lambda: alloctune.compare([]), "compare: expected results folders"),
        ("compare(None)", lambda: alloctune.compare(None), "compare: expected results folders"),
        ("record([])", lambda: alloctune.record([], "t.xz"), "give a workload file, or '-- COMMAND ...'"),
        ("record(steps=)", lambda: alloctune.record(WORKLOAD, "t.xz", steps=5), "steps applies to '-- COMMAND'"),
        ("record(warmup_steps=)", lambda: alloctune.record(WORKLOAD, "t.xz", warmup_steps=2),
         "warmup_steps applies to '-- COMMAND'; a workload file says its steps itself"),
        ("record(gpus=-1)", lambda: alloctune.record(WORKLOAD, "t.xz", gpus=[-1]), "gpus must be distinct GPU"),
        ("record(conf=)", lambda: alloctune.record(WORKLOAD, "t.xz", conf="max_split_size_mb"), "max_split_size_mb"),
        ("record(timeout_s=0)", lambda: alloctune.record(WORKLOAD, "t.xz", timeout_s=0), "timeout_s must be"),
        ("record(conf=5)", lambda: alloctune.record(WORKLOAD, "t.xz", conf=5), "conf: expected a str"),
        # the output refused before the run (on a GPU, after it the recording would be lost)
        ("record(output=None)", lambda: alloctune.record(WORKLOAD, None), "output: expected a path"),
        ("record(output=folder)", lambda: alloctune.record(["python3", "x.py"], ROOT), "is a folder; give the trace"),
        ("record(preset=, cmd)", lambda: alloctune.record(["python", "x.py"], "t.xz", preset="h200"),
         "preset applies to a workload file"),
        ("record(preset='', cmd)", lambda: alloctune.record(["python", "x.py"], "t.xz", preset=""),   # given
         "preset applies to a workload file"),
        ("record(warmup_steps=2**70)", lambda: alloctune.record(["python", "x.py"], "t.xz", warmup_steps=2**70),
         "warmup_steps must be a whole number of steps from 0 to 2**63 - 1"),
        ("calibrate(gpu=-1)", lambda: alloctune.calibrate(gpu=-1), "gpu must be a GPU index >= 0, got -1"),
        ("calibrate(python=5)", lambda: alloctune.calibrate(python=5), "python must be an interpreter's path"),
        ("load_trace(5)", lambda: alloctune.load_trace(5), "a trace: expected a path"),
        ("load_trace(NUL)", lambda: alloctune.load_trace("a\0b"), "a trace: expected a path"),
        ("load_trace(folder)", lambda: alloctune.load_trace(ROOT), "is a directory, not a trace"),
        ("load_trace(device='x')", lambda: alloctune.load_trace(TRACE, device="x"), "device: expected"),
        ("replay(nan)", lambda: alloctune.replay(trace, [""], device_memory=math.nan), "device_memory: expected a "
                                                                                      "finite size"),
        ("replay(-1)", lambda: alloctune.replay(trace, [""], device_memory=-1), "device_memory: a size cannot be "
                                                                              "negative"),
        ("replay(0)", lambda: alloctune.replay(trace, [""], device_memory=0), "device_memory must be above 0"),
        ("replay(True)", lambda: alloctune.replay(trace, [""], device_memory=True), "device_memory: expected a "
                                                                                   "size"),
        ("replay('lots')", lambda: alloctune.replay(trace, [""], device_memory="lots"), "device_memory: expected"),
        ("replay(budget=-5)", lambda: alloctune.replay(trace, [""], device_memory="24GiB", budget=-5),
         "budget: a size cannot be negative"),
        ("replay(budget_bytes=5)", lambda: alloctune.replay(trace, budget_bytes=5), "no option 'budget_bytes'"),
        ("replay(misspelt)", lambda: alloctune.replay(trace, ["expandabel_segments:True"]),
         "does not know the key 'expandabel_segments'"),
        ("replay()", lambda: alloctune.replay(), "traces: expected a trace's path"),
        ("replay([])", lambda: alloctune.replay([]), "traces: expected"),
        ("replay(min_memory=1)", lambda: alloctune.replay(trace, min_memory=1), "min_memory: expected True"),
        ("replay(confs=[5])", lambda: alloctune.replay(trace, [5], device_memory="24GiB"), "a setting is a str"),
        ("replay(jobs=0)", lambda: alloctune.replay(trace, [""], device_memory="24GiB", jobs=0), "jobs must be"),
        ("replay(torch_version=2)", lambda: alloctune.replay(trace, [""], device_memory="24GiB", torch_version=2),
         "torch_version: expected"),
        ("replay(5)", lambda: alloctune.replay(5, [""], device_memory="24GiB"), "traces: expected a trace's path"),
        ("search([a, b])", lambda: alloctune.search([TRACE, TRACE]), "trace: one trace"),
        ("search(max_settings=0)", lambda: alloctune.search(trace, max_settings=0), "max_settings must be"),
        ("search(python='')", lambda: alloctune.search(trace, python=""), "python: expected a path"),
        ("search(budget='lots')", lambda: alloctune.search(trace, budget="lots"), "budget: expected a size"),
        ("fit()", lambda: alloctune.fit(), "param '': expected a name such as batch"),
        ("fit(options=5)", lambda: alloctune.fit(options=5), "the options must be of type FitOptions"),
        ("fit('8')", lambda: alloctune.fit("8", traces=FITS), "param '8': expected a name"),
        ("fit(no source)", lambda: alloctune.fit("batch"), "give command, or traces"),
        ("fit(one trace)", lambda: alloctune.fit("batch", traces={8: FITS[8]}), "two values at least"),
        ("fit(traces=[...])", lambda: alloctune.fit("batch", traces=[FITS[8]]), "traces: expected the traces by"),
        ("fit(value 0)", lambda: alloctune.fit("batch", traces={0: FITS[8], 8: FITS[8]}),
         "value must be a whole number above 0"),
        ("fit(values=[8])", lambda: alloctune.fit("batch", command=["python3"], values=[8]),
         "values [8]: expected at least two"),
        ("fit(cards=[0])", lambda: alloctune.fit("batch", traces=FITS, cards=[0]), "card memories above 0"),
        ("fit(confirm)", lambda: alloctune.fit("batch", traces=FITS, confirm=["default"]), "confirm runs"),
        ("fit(command='x')", lambda: alloctune.fit("batch", command="python3 x.py", values=[8, 16]),
         "command: expected the command as a list"),
        ("fit(timeout_s=0)", lambda: alloctune.fit("batch", traces=FITS, timeout_s=0), "timeout_s must be"),
        ("fit(traces, gpu=)", lambda: alloctune.fit("batch", traces=FITS, gpu=1, warmup_steps=2),
         "gpu and warmup_steps apply to a command's runs; traces given with traces were recorded already"),
        ("fleet(twice)", lambda: alloctune.fleet([TRACE, TRACE]), "each job's trace once"),
        ("fleet(device_memory=0)", lambda: alloctune.fleet([TRACE], device_memory=0), "device_memory must be above"),
        ("fleet(confs=[5])", lambda: alloctune.fleet([TRACE], [5]), "a setting is a str"),
        ("load_workload(5)", lambda: alloctune.load_workload(5), "a workload file: expected a path"),
        ("load_workload(preset=5)", lambda: alloctune.load_workload(WORKLOAD, preset=5), "unknown preset 5"),
        ("diagnose(5)", lambda: alloctune.diagnose(5), "diagnose: expected a path"),
        ("diagnose()", lambda: alloctune.diagnose(), "diagnose needs"),
        ("diagnose(device=-1)", lambda: alloctune.diagnose(SNAPSHOT, device=-1), "device: expected"),
        ("diagnose(all_problems=1)", lambda: alloctune.diagnose(SNAPSHOT, all_problems=1), "all_problems: expected"),
        ("sweep(5)", lambda: alloctune.sweep(5), "sweep(): expected a workload file's path, a WorkloadSpec or your "
                                                 "command's words"),
        ("sweep(repeats='x')", lambda: alloctune.sweep(WORKLOAD, repeats="x"), "repeats must be"),
        ("sweep(results_root='')", lambda: alloctune.sweep(WORKLOAD, results_root=""), "results_root must be a "
                                                                                      "non-empty path"),
        ("sweep(unknown=1)", lambda: alloctune.sweep(WORKLOAD, unknown=1), "unknown"),
        ("sweep(time_budget_s=inf)", lambda: alloctune.sweep(WORKLOAD, time_budget_s=math.inf),
         "time_budget_s must be a positive, finite number of seconds, got inf"),
        ("dump_on_oom(5)", lambda: alloctune.dump_on_oom(5), "folder must be a path"),
        ("dump_on_oom(max_entries=0)", lambda: alloctune.dump_on_oom("x", max_entries=0), "max_entries must be"),
        ("step('x')", lambda: alloctune.step("x"), "units must be a finite number"),
        ("step(-1)", lambda: alloctune.step(-1), "units must be a finite number"),
        ("step(nan)", lambda: alloctune.step(math.nan), "units must be a finite number"),
    ]


def test_every_api_function_refuses_a_wrong_argument_in_one_line(outcome, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # nothing any of them might write lands in the checkout
    failures = []
    for what, call, says in wrong_calls(str(outcome.folder.path)):
        try:
            call()
            failures.append(f"{what}: no error")
        except alloctune.AlloctuneError as exc:
            if says not in str(exc) or "\n" in str(exc):
                failures.append(f"{what}: {exc}")
        except Exception as exc:   # noqa: BLE001 - what the test is about
            failures.append(f"{what}: {type(exc).__name__}: {exc}")
    assert not failures, "\n".join(failures)
    assert os.listdir(tmp_path) == []
