"""The Python API as the README shows it (issue 29): its objects chained together on the CPU (a simulated sweep
of the README's workload, a shipped trace, a committed OOM snapshot), and every function given wrong types and
values: each refuses with an AlloctuneError of one line, never another exception or a silent answer."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
from clirun import ROOT

import alloctune
from alloctune.results.folder import ResultsFolder

WORKLOAD = ROOT / "workloads" / "transformer-varlen.yaml"
TRACE = ROOT / "workloads" / "traces" / "detection-h200.xz"
SNAPSHOT = ROOT / "tests" / "fixtures" / "oom" / "h200" / "frag" / "oom-rank0.pickle"


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    return alloctune.sweep(WORKLOAD, preset="h200", backend="sim", results_root=tmp_path_factory.mktemp("api"),
                           notice=lambda text: None)


def test_the_readme_objects_fit_each_other(outcome):
    assert isinstance(outcome.folder, ResultsFolder) and outcome.choices[0].best.conf is not None
    for folder in (outcome.folder, outcome.folder.path, str(outcome.folder.path)):
        settings, choices = alloctune.analyze(folder)
        assert [c.best.conf for c in choices] == [c.best.conf for c in outcome.choices]
        assert {s.conf for s in settings} == {s.conf for s in outcome.settings}
        text = alloctune.export_results(folder, "env")
        assert f"PYTORCH_CUDA_ALLOC_CONF={outcome.choices[0].best.conf}\n" in text
    trace = alloctune.load_trace(TRACE)
    by_size = alloctune.replay(trace, ["", "expandable_segments:True"], device_memory="24GiB")
    by_bytes = alloctune.replay(TRACE, ["", "expandable_segments:True"], device_memory=24 * 2**30)
    assert [(o.conf, o.result.peak_reserved_bytes, o.result.num_ooms) for o in by_size] == \
        [(o.conf, o.result.peak_reserved_bytes, o.result.num_ooms) for o in by_bytes]
    d = alloctune.diagnose(SNAPSHOT)
    assert d.verdict is not None and d.verdict.cause and d.verdict.summary and d.next_steps
    assert alloctune.load_workload(WORKLOAD).name == "transformer-varlen"
    alloctune.step(units=128)   # outside a trial: nothing


def test_dump_on_oom_and_step_in_a_script_without_cuda(tmp_path):
    code = (f"import alloctune; print(alloctune.dump_on_oom({str(tmp_path / 'oom')!r}))\n"
            "for i in range(3): alloctune.step(units=64)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == 0 and run.stdout == "None\n" and run.stderr.count("\n") == 1, run.stderr


def wrong_calls(folder: str) -> list[tuple[str, object, str]]:
    """(what, a call with a wrong argument, what its message says)."""
    trace = alloctune.load_trace(TRACE)
    return [
        ("analyze(123)", lambda: alloctune.analyze(123), "a results folder: expected a path"),
        ("analyze('')", lambda: alloctune.analyze(""), "a results folder: expected a path"),
        ("analyze(missing)", lambda: alloctune.analyze(folder + "-not-there"), "no results folder here"),
        ("analyze(max_slowdown=2)", lambda: alloctune.analyze(folder, max_slowdown=2), "max_slowdown must be"),
        ("analyze(max_slowdown=nan)", lambda: alloctune.analyze(folder, max_slowdown=math.nan), "max_slowdown"),
        ("export_results(None)", lambda: alloctune.export_results(None), "a results folder: expected a path"),
        ("export_results(fmt=5)", lambda: alloctune.export_results(folder, 5), "unknown export format 5"),
        ("export_results(conf=123)", lambda: alloctune.export_results(folder, conf=123), "conf: expected a str"),
        ("export_results(env_id=3)", lambda: alloctune.export_results(folder, env_id=3), "env_id: expected a str"),
        ("export_results(workload=[])", lambda: alloctune.export_results(folder, workload=[]), "workload: expected"),
        ("export_results(allow_incomplete='yes')",
         lambda: alloctune.export_results(folder, allow_incomplete="yes"), "allow_incomplete: expected True"),
        ("load_trace(5)", lambda: alloctune.load_trace(5), "a trace: expected a path"),
        ("load_trace(NUL)", lambda: alloctune.load_trace("a\0b"), "a trace: expected a path"),
        ("load_trace(folder)", lambda: alloctune.load_trace(ROOT), "is a directory, not a trace"),
        ("load_trace(device='x')", lambda: alloctune.load_trace(TRACE, device="x"), "device: expected"),
        ("replay(nan)", lambda: alloctune.replay(trace, [""], device_memory=math.nan), "device_memory: expected a "
                                                                                      "finite size"),
        ("replay(-1)", lambda: alloctune.replay(trace, [""], device_memory=-1), "device_memory: a size cannot be "
                                                                              "negative"),
        ("replay(0)", lambda: alloctune.replay(trace, [""], device_memory=0), "device_memory must be at least 1"),
        ("replay(True)", lambda: alloctune.replay(trace, [""], device_memory=True), "device_memory: expected a "
                                                                                   "size"),
        ("replay('lots')", lambda: alloctune.replay(trace, [""], device_memory="lots"), "device_memory: expected"),
        ("replay(budget_bytes=-5)", lambda: alloctune.replay(trace, [""], device_memory="24GiB", budget_bytes=-5),
         "budget_bytes: a size cannot be negative"),
        ("replay(confs=[5])", lambda: alloctune.replay(trace, [5], device_memory="24GiB"), "a setting is a str"),
        ("replay(jobs=0)", lambda: alloctune.replay(trace, [""], device_memory="24GiB", jobs=0), "jobs: expected"),
        ("replay(torch_version=2)", lambda: alloctune.replay(trace, [""], device_memory="24GiB", torch_version=2),
         "torch_version: expected"),
        ("replay(5)", lambda: alloctune.replay(5, [""], device_memory="24GiB"), "a trace: expected a path"),
        ("load_workload(5)", lambda: alloctune.load_workload(5), "a workload file: expected a path"),
        ("load_workload(preset=5)", lambda: alloctune.load_workload(WORKLOAD, preset=5), "unknown preset 5"),
        ("diagnose(5)", lambda: alloctune.diagnose(5), "diagnose: expected a path"),
        ("diagnose()", lambda: alloctune.diagnose(), "diagnose needs"),
        ("sweep(5)", lambda: alloctune.sweep(5), "a workload file: expected a path"),
        ("sweep(repeats='x')", lambda: alloctune.sweep(WORKLOAD, repeats="x"), "repeats must be"),
        ("sweep(results_root='')", lambda: alloctune.sweep(WORKLOAD, results_root=""), "results_root must be a "
                                                                                      "non-empty path"),
        ("sweep(unknown=1)", lambda: alloctune.sweep(WORKLOAD, unknown=1), "unknown"),
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
