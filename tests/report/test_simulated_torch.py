"""The same trace is simulated as the same torch in every command (sim/target.py): its own, unless the command is
told the torch that will run the job. A trace recorded under torch 2.9 (not this machine's), whose '>' in a
divisions list rounds its 1-2 GiB requests otherwise than 2.10 and later do: replay, search and fleet state 2.9 and
rank alike, and so does a sim sweep; search and a sim sweep told this interpreter (--python) replay this machine's
torch and say both versions in one line."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from clirun import ROOT, in_process

import alloctune
from alloctune.results.folder import ResultsFolder
from alloctune.results.vocabulary import FITS, PEAK_RESERVED, SETTING, SIMULATED_TORCH
from alloctune.sim.target import Target, simulated_torch
from alloctune.sim.trace import ALLOC, FREE, Trace, save_trace

MiB = 2**20
RECORDED = "2.9.1+cu128"
HERE = simulated_torch(torch.__version__)
LIST = "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"   # before 2.10, '>' also overwrote 1024:4 with 8
BOTH = f"recorded under torch 2.9, replayed as torch {HERE}: the job's"


def _trace(path, torch_version: str = RECORDED) -> None:
    """Requests of 1-2 GiB, each freed before the next: how they round decides the peak."""
    kinds, ids, sizes = [], [], []
    for i, size in enumerate([1100 * MiB, 300 * MiB, 1300 * MiB, 700 * MiB] * 3):
        kinds += [ALLOC, ALLOC, FREE]
        ids += [2 * i, 2 * i + 1, 2 * i]
        sizes += [size, MiB // 2, size]
    meta = {"torch_version": torch_version, "device_total_bytes": 16 * 2**30, "overhead_bytes": 0}
    save_trace(Trace(kinds, ids, sizes, [0] * len(kinds), 0, meta), path)


def _json(*args) -> dict:
    run = in_process(*args, "--json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, dict]:
    path = tmp_path_factory.mktemp("recorded") / "job.xz"
    _trace(path)
    _trace(path.with_name("again.xz"))
    search = ("search", path, "--max-settings", "20", "--jobs", "1")
    fit = _fit_args(path)
    return {"replay": _json("replay", path, "--jobs", "1"), "search": _json(*search),
            "fleet": _json("fleet", path, path.with_name("again.xz"), "--jobs", "1"),
            "told": _json(*search, "--python", sys.executable),
            "fit": _json(*fit), "fit text": {"out": in_process(*fit).stdout}}


def _fit_args(path) -> tuple:
    return ("fit", "--param", "batch", "--trace", f"1={path}", "--trace", f"2={path.with_name('again.xz')}",
            "--conf", "default", "--conf", "roundup_power2_divisions:4")


def test_replay_search_and_fleet_simulate_the_traces_torch_and_rank_alike(outputs):
    assert HERE != "2.9"   # the test's point: a torch other than this machine's
    replay, search, fleet = outputs["replay"], outputs["search"], outputs["fleet"]
    assert replay[SIMULATED_TORCH] == search[SIMULATED_TORCH] == outputs["fit"][SIMULATED_TORCH] == "2.9"
    assert "Replayed with torch 2.9's allocator." in " ".join(outputs["fit text"]["out"].split())
    assert {job[SIMULATED_TORCH] for job in fleet["jobs"]} == {"2.9"}
    assert search["validated_by"] == "static"   # 2.9 is not installed here: its version table judges
    ranked = [(r[SETTING], r[FITS], r[PEAK_RESERVED]) for r in replay["results"]]
    fleet_ranked = [(s[SETTING], s["jobs"][0][FITS], s["jobs"][0][PEAK_RESERVED]) for s in fleet["settings"]]
    searched = {c[SETTING]: (c[SETTING], c[FITS], c[PEAK_RESERVED]) for c in search["candidates"]}
    assert fleet_ranked == ranked and [searched[conf] for conf, _, _ in ranked] == ranked
    peak = {conf: p for conf, _, p in ranked}
    assert peak[LIST] < peak["roundup_power2_divisions:4"]   # 2.9's reading of '>' (8 divisions from 1 GiB)
    assert not any(BOTH in w for out in (replay, search) for w in out["warnings"])


def test_search_told_the_jobs_torch_replays_it_and_says_both(outputs):
    told, replay = outputs["told"], outputs["replay"]
    assert told[SIMULATED_TORCH] == HERE and told["validated_by"] != "static"
    [line] = [w for w in told["warnings"] if BOTH in w]
    assert line.endswith("the job's (--python)")
    peaks = {c[SETTING]: c[PEAK_RESERVED] for c in told["candidates"]}
    # from 2.10, '>' leaves 1024:4 alone: the list rounds those requests as divisions 4 do
    assert peaks[LIST] == peaks["roundup_power2_divisions:4"]
    assert peaks[LIST] != {r[SETTING]: r[PEAK_RESERVED] for r in replay["results"]}[LIST]


def test_the_rule_in_one_place():
    assert Target(RECORDED).simulated == "2.9" and Target(None).simulated == "2.11"
    assert Target(RECORDED, "2.13.0+cpu", "python").simulated == "2.13"
    assert Target(RECORDED, "2.9.0", "python").warnings() == []   # the same minor version: nothing to say
    assert any("does not say which torch" in w for w in Target(None).warnings())
    [line] = Target(RECORDED, "2.13.0", "python").warnings()
    assert line == "the trace was recorded under torch 2.9, replayed as torch 2.13: the job's (python)"


SWEPT = (ROOT / "workloads" / "transformer-varlen.yaml", "--preset", "tiny", "--backend", "sim",
         "--conf", LIST, "--conf", "roundup_power2_divisions:4")


@pytest.mark.usefixtures("no_visible_gpu")
def test_a_sim_sweep_replays_the_traces_torch_as_replay_does(tmp_path, outputs):
    """A sweep that only replays runs the job nowhere: its interpreter (this machine's torch) is not told the job's
    torch, so the 2.9 trace is replayed as 2.9, as replay does, with no line of two versions; its search too."""
    trace = tmp_path / "job.xz"
    _trace(trace)
    swept = _json("sweep", *SWEPT, "--trace", trace, "--results", tmp_path / "grid")
    [choice] = swept["choices"]
    assert choice[SIMULATED_TORCH] == outputs["replay"][SIMULATED_TORCH] == "2.9"
    assert choice["torch_version"] == RECORDED and not any(BOTH in n for n in swept["notices"])
    peaks = {s[SETTING]: s[PEAK_RESERVED] for s in choice["settings"]}
    replayed = {r[SETTING]: r[PEAK_RESERVED] for r in outputs["replay"]["results"]}
    assert peaks == {conf: replayed[conf] for conf in peaks} and peaks[LIST] < peaks["roundup_power2_divisions:4"]
    searched = _json("sweep", *SWEPT, "--trace", trace, "--search", "20", "--results", tmp_path / "search")
    [front] = json.loads((Path(searched["folder"]) / "search.json").read_text()).values()
    assert (front[SIMULATED_TORCH], front["validated_by"]) == ("2.9", "static")   # 2.9's table judges, as search's
    assert searched["choices"][0][SIMULATED_TORCH] == "2.9"


@pytest.mark.usefixtures("no_visible_gpu")
def test_a_sim_sweeps_search_progress_names_the_torch_its_tables_name(tmp_path):
    """The search's progress line named the interpreter's own environment (this machine's torch) while every
    replay and table of the sweep named the trace's."""
    trace = tmp_path / "job.xz"
    _trace(trace)
    run = in_process("sweep", *SWEPT, "--trace", trace, "--search", "4", "--out", tmp_path / "s")
    assert run.returncode == 0, run.stderr
    [env_id] = {t.env_id for t in ResultsFolder(tmp_path / "s").trials()}
    assert env_id.startswith(f"sim:torch-{RECORDED.split('+')[0]}") and f" · {env_id} · " in run.stdout
    assert f"search {env_id} " in run.stderr and "search torch-" not in run.stderr, run.stderr


@pytest.mark.usefixtures("no_visible_gpu")
def test_a_sim_sweep_told_the_jobs_interpreter_replays_its_torch_and_says_both_by_the_flag(tmp_path):
    """--python names the interpreter that will run the job: its torch is replayed, and the one line that says
    both versions names the flag in --json as in the text."""
    trace = tmp_path / "job.xz"
    _trace(trace)
    run = in_process("sweep", *SWEPT, "--trace", trace, "--python", sys.executable, "--results", tmp_path, "--json")
    assert run.returncode == 0, run.stderr
    swept = json.loads(run.stdout)
    assert swept["choices"][0][SIMULATED_TORCH] == HERE
    [line] = [n for n in swept["notices"] if BOTH in n]
    assert line.endswith("the job's (--python)") and line in " ".join(run.stderr.split())


def test_fleet_says_when_its_jobs_traces_come_from_different_torches(tmp_path, outputs):
    """Each job follows its own trace's torch, and one line says they differ, in --json and in the text; traces of
    one torch have no such line."""
    _trace(tmp_path / "old.xz")
    _trace(tmp_path / "new.xz", "2.11.0")
    mixed = _json("fleet", tmp_path / "old.xz", tmp_path / "new.xz", "--jobs", "1")
    assert [job[SIMULATED_TORCH] for job in mixed["jobs"]] == ["2.9", "2.11"]
    [line] = mixed["warnings"]
    assert "different torches (torch 2.11: new; torch 2.9: old)" in line
    text = " ".join(in_process("fleet", tmp_path / "old.xz", tmp_path / "new.xz", "--jobs", "1").stdout.split())
    assert "warning: the jobs' traces come from different torches" in text
    # each job's line states its torch as replay's header does
    assert "job 1: old, replayed with torch 2.9's allocator" in text
    assert "job 2: new, replayed with torch 2.11's allocator" in text
    assert "replayed with torch 2.9's allocator" in " ".join(in_process("replay", tmp_path / "old.xz").stdout.split())
    assert outputs["fleet"]["warnings"] == []

