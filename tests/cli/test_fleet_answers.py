"""`alloctune fleet` answers only for what it was given: a job's trace given twice under any spelling (./a.xz and
a.xz, a link to it) is refused; jobs no setting runs on their card are named as left out, and where that is every
job no setting is named best; the settings the grid's rules skip (a garbage collection threshold without a budget)
are said with why, and --budget ranks them. Each on traces written here, through the command line."""
from __future__ import annotations

import json
import os

import pytest
from clirun import in_process
from scaled import scaled_trace

from alloctune.sim.trace import save_trace
from alloctune.units import GiB

GRID = ["--conf", "default", "--conf", "expandable_segments:True", "--jobs", "1"]


@pytest.fixture
def jobs(tmp_path) -> list[str]:
    """Two jobs' traces, by their names in tmp_path (the tests run there); b.xz's peak is about 4 times a.xz's."""
    for name, value in (("a", 8), ("b", 64)):
        save_trace(scaled_trace(value), tmp_path / f"{name}.xz")
    return ["a.xz", "b.xz"]


def fleet(tmp_path, *args):
    return in_process("fleet", *args, cwd=tmp_path)


def test_one_trace_given_twice_however_spelt_is_refused(tmp_path, jobs):
    os.symlink("a.xz", tmp_path / "link.xz")
    (tmp_path / "sub").mkdir()
    for twice in (["./a.xz", "a.xz"], ["a.xz", "link.xz"], ["a.xz", "sub/../a.xz"], ["b.xz", str(tmp_path / "a.xz"),
                                                                                     "a.xz"]):
        run = fleet(tmp_path, *twice, *GRID)
        assert run.returncode == 2 and run.stdout == "", run
        [line] = run.stderr.splitlines()
        assert "each job's trace once: " in line and "are one trace" in line, line
    run = fleet(tmp_path, *jobs, *GRID, "--json")   # two files: two jobs
    assert run.returncode == 0 and json.loads(run.stdout)["best"] is not None, run.stderr


def test_jobs_no_setting_runs_are_left_out_by_name_and_none_left_names_no_best(tmp_path, jobs):
    # On 4 GiB a.xz runs (2 GiB of weights, a little more and its context) and b.xz runs out of memory under every setting.
    run = fleet(tmp_path, *jobs, *GRID, "--device-memory", "4GiB")
    assert run.returncode == 0, run.stderr
    assert "left out: b, which no setting runs on its card" in " ".join(run.stdout.split())
    assert "Least loss across the 1 job: " in run.stdout and "across the 2 jobs" not in run.stdout
    answer = json.loads(fleet(tmp_path, *jobs, *GRID, "--device-memory", "4GiB", "--json").stdout)
    assert answer["left_out"] == ["b"] and answer["best"] is not None
    for args in ([], ["--json"]):   # on 1 GiB no setting runs either job
        run = fleet(tmp_path, *jobs, *GRID, "--device-memory", "1GiB", *args)
        assert run.returncode == 0, run.stderr
        if args:
            answer = json.loads(run.stdout)
            assert answer["best"] is None and answer["left_out"] == ["a", "b"]
        else:
            assert "No setting runs any job." in run.stdout and "Least loss" not in run.stdout, run.stdout
            assert "across the 0 jobs" not in run.stdout


def test_settings_a_budget_acts_on_are_skipped_with_why_and_ranked_under_one(tmp_path, jobs):
    gc = "garbage_collection_threshold:0.8"
    run = fleet(tmp_path, *jobs, *GRID, "--conf", gc)
    assert run.returncode == 0, run.stderr
    assert f"skipped {gc}: garbage_collection_threshold does nothing without a memory fraction below 1: give " \
           "--budget to try it" in " ".join(run.stdout.split())
    answer = json.loads(fleet(tmp_path, *jobs, *GRID, "--conf", gc, "--json").stdout)
    assert [s["conf"] for s in answer["skipped"]] == [gc] and gc not in [s["conf"] for s in answer["settings"]]
    for budget in ("0.5", f"{70 * GiB}", "70GiB"):
        answer = json.loads(fleet(tmp_path, *jobs, *GRID, "--conf", gc, "--budget", budget, "--json").stdout)
        assert answer["skipped"] == [] and gc in [s["conf"] for s in answer["settings"]], budget
    # a budget too small for either job: every setting fails both, as on a card that small
    answer = json.loads(fleet(tmp_path, *jobs, *GRID, "--budget", "1GiB", "--json").stdout)
    assert answer["best"] is None and answer["left_out"] == ["a", "b"]
    run = fleet(tmp_path, *jobs, "--budget", "lots")
    assert run.returncode == 2 and run.stderr.startswith("alloctune: error: --budget") \
        and len(run.stderr.splitlines()) == 1, run.stderr
