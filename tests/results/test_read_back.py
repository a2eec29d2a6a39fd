"""Whatever alloctune writes reads back: a record is checked with the typed reader's own checks before it is
written; a figure the job gave that is no throughput (-5 from a --metric-regex, 1e999, negative units of
alloctune.step) becomes a trial without one, saying why; a command of thousands of CUDA processes still makes a
line the reader takes; integers beyond 64 bits in a workload or an option are refused before any folder exists."""
from __future__ import annotations

import json
import sys
import textwrap
from dataclasses import replace

import pytest
from clirun import ROOT, in_process
from folders import choice, make_folder, repeats, trial

import alloctune
from alloctune.errors import AlloctuneError, OptionError, ResultsError, WorkloadError
from alloctune.api.analyze import analyze
from alloctune.results.figures import SettingFigures
from alloctune.results.folder import ResultsFolder
from alloctune.results.records import MAX_PROCESS_ROWS, TrialState
from alloctune.results.trials import MAX_LINE_BYTES
from alloctune.settings.conf import AllocConf
from alloctune.sweeper.options import SweepOptions
from alloctune.trial.command import run_command_trial
from alloctune.runtime.peaks import DevicePeaks, ProcessReport
from alloctune.trial.task import TrialTask
from alloctune.child.timing import timed_pass
from alloctune.workload.command import check_command, command_workload

MiB = 2**20


def _job(tmp_path, report: ProcessReport, prints: str = "") -> list[str]:
    """No GPU here: the job writes the report a CUDA process's hook would, and prints `prints`."""
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(f"""
        import os
        with open(os.path.join(os.environ["ALLOCTUNE_HOOK_OUT"], "proc-1.json"), "w") as f:
            f.write({json.dumps(json.dumps(report.to_json()))})
        print({prints!r})
        """))
    return [sys.executable, str(path)]


def _trial(argv, metric_regex=None, **workload):
    spec = command_workload(check_command(argv, metric_regex=metric_regex), **workload)
    task = TrialTask(spec.to_dict(), spec.digest(), AllocConf.parse(""), 0, sys.executable, "torch-test",
                     timeout_s=120)
    return run_command_trial(task)


def _kept(tmp_path, record):
    """`record` through a results folder and back, and the folder reported."""
    folder = make_folder(tmp_path / "r", [record, replace(record, conf="expandable_segments:True")])
    (back, _) = folder.trials()
    analyze(folder)
    return back


ONE = ProcessReport(pid=1, cuda=True, effective_conf="", devices=[DevicePeaks(0, 64 * MiB, 40 * MiB)])


@pytest.mark.parametrize("printed", ["throughput: -5", "throughput: 0", "throughput: 1e999"])
def test_a_metric_that_is_no_throughput_is_left_out_saying_why(tmp_path, printed):
    record = _trial(_job(tmp_path, ONE, printed), metric_regex=r"throughput: (\S+)")
    assert record.state is TrialState.OK and record.measurement.throughput is None
    assert record.error.startswith("no throughput: metric_regex gave ") and "expected a finite number above 0" \
        in record.error
    back = _kept(tmp_path, record)
    assert back.measurement.peak_reserved_bytes == 64 * MiB and back.error == record.error


def test_negative_units_of_alloctune_step_are_no_throughput(tmp_path):
    marks = [(float(t), -100.0) for t in range(5)]
    record = _trial(_job(tmp_path, replace(ONE, steps=marks)), warmup_steps=1)
    assert record.state is TrialState.OK and record.measurement.throughput is None
    assert record.error.startswith("no throughput: step_marks gave -100.0 units/s")
    assert _kept(tmp_path, record).measurement.throughput is None


def test_a_command_of_thousands_of_cuda_processes_makes_a_line_the_reader_takes(tmp_path):
    many = replace(ONE, devices=[DevicePeaks(d, (1 + d) * MiB, MiB) for d in range(6000)])
    record = _trial(_job(tmp_path, many))
    assert record.state is TrialState.OK and len(record.processes) == 6000
    line = json.dumps(record.to_json())
    assert len(line) > MAX_LINE_BYTES   # as the hook gave it, the line would not read back
    back = _kept(tmp_path, record)
    assert len(back.processes) == MAX_PROCESS_ROWS
    assert back.measurement.peak_reserved_bytes == 6000 * MiB == max(r["peak_reserved_bytes"] for r in back.processes)


def test_a_long_error_is_kept_by_its_end(tmp_path):
    record = replace(trial(state=TrialState.CRASHED), error="\x1b" * 10**6 + "the last line")
    assert _kept(tmp_path, record).error.endswith("the last line")


def test_a_workload_step_that_returns_no_count_of_work_fails_its_trial():
    for units in (-100, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="step 1 returned .* units of work"):
            timed_pass(lambda i: 1.0 if i == 0 else units, [0, 1, 2], lambda: None)
    assert timed_pass(lambda i: 2.0, [0, 1], lambda: None).units == 4.0


def test_the_writer_refuses_what_the_reader_would_refuse_and_writes_nothing(tmp_path):
    folder = make_folder(tmp_path / "r", repeats("") + repeats("expandable_segments:True"),
                         [choice("expandable_segments:True")])
    trials, choices = (folder.path / "trials.jsonl").read_bytes(), (folder.path / "choice.json").read_bytes()
    bad = trial(reserved=2**64 / 2**30)
    with pytest.raises(ResultsError, match="not written, as it would not read back: .*peak_reserved_bytes"):
        folder.store.append(bad)
    with pytest.raises(ResultsError, match=r"not written, as it would not read back: .*settings\[0\]\.memory'"):
        folder.write_choice([replace(choice(""), settings=(SettingFigures("", memory=2**64),))])
    with pytest.raises(ResultsError, match="not written.*Out of range float"):
        folder.write_choice([replace(choice(""), throughput_ratio=float("nan"))])
    assert (folder.path / "trials.jsonl").read_bytes() == trials
    assert (folder.path / "choice.json").read_bytes() == choices
    assert len(ResultsFolder(folder.path).trials()) == 6


def test_an_integer_beyond_64_bits_in_a_workload_is_refused_before_any_folder(tmp_path):
    for key, value in (("seed", 2**64), ("steps", 2**63), ("warmup_steps", 10**30)):
        path = tmp_path / "w.yaml"
        path.write_text(f"name: w\nkind: transformer\nunit: tokens\nsteps: 3\n{key}: {value}\n".replace(
            "steps: 3\nsteps:", "steps:"))
        with pytest.raises(WorkloadError, match=f"key '{key}': expected an integer from . to 2\\*\\*63 - 1"):
            alloctune.sweep(path, results_root=tmp_path / "results")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("option", [dict(search=2**70, backend="sim"),
                                    dict(finalists=2**63), dict(check_growth=2**80)])
def test_an_integer_beyond_64_bits_in_an_option_is_refused(option):
    with pytest.raises(OptionError, match="must be .*whole number from .* to 2\\*\\*63 - 1"):
        SweepOptions(**option)


def test_the_cli_refuses_a_search_beyond_64_bits_before_any_folder(tmp_path):
    done = in_process("sweep", "--search", str(2**64), "--results", tmp_path / "results", "--backend", "sim",
                      ROOT / "workloads" / "transformer-varlen.yaml")
    assert done.returncode == 2 and "from 1 to 2**63 - 1" in done.stderr, done.stderr
    assert not (tmp_path / "results").exists()


def test_a_sweep_json_that_would_not_read_back_makes_no_folder(tmp_path):
    from alloctune.results.folder import SweepInfo, sweep_text

    info = SweepInfo(workload_name="w", workload_hash="h", workload={"params": {"layers": 2**70}}, grid=[""])
    with pytest.raises(AlloctuneError, match="not written, as it would not read back: .*workload.params.layers"):
        sweep_text(info)
