"""A sweep resumed in a folder an older alloctune wrote, whose replays are named otherwise than this one names them:
a sweep that only replays named its replays `sim:` + this interpreter's id until they were named after the trace's
torch, and a dry run `sim:` + its interpreter's id ('+cpu' and all) until it was named after that torch's release.
The resumed sweep goes on in the folder's group; where that group followed another torch's allocator than this
sweep would, it is refused in one line, nothing written."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import alloctune.sweeper.sweep as sweeping
from alloctune.results.folder import ResultsFolder
from alloctune.sweeper.plan import Plan
from alloctune.trial.probe import ProbeResult
from clirun import in_process
from test_sweep import VARLEN, _trace_of

pytestmark = pytest.mark.usefixtures("no_visible_gpu")
OLDER = f"sim:torch-{torch.__version__}"   # what the older alloctune named a sweep's replays: this interpreter's id
SWEPT = ("sweep", VARLEN, "--preset", "tiny", "--backend", "sim", "--conf", "default", "--conf",
         "roundup_power2_divisions:4", "--conf", "max_split_size_mb:128")


def older_folder(tmp_path: Path, simulated_as: str) -> tuple[Path, list[str]]:
    """A sim-only sweep of a 2.9 trace as the older alloctune left it, interrupted before its last replay: each
    replay named OLDER and said to have followed `simulated_as` (the trace's torch from d8a6bc9 on, this
    interpreter's before), its skips named OLDER too. Returns the folder and the sweep's arguments."""
    args = [*SWEPT, "--trace", str(_trace_of(tmp_path / "job.xz", "2.9.1+cu128")), "--out", str(tmp_path / "s")]
    done = in_process(*args)
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "s"
    trials = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    assert {t["env_id"] for t in trials} == {"sim:torch-2.9.1+cu128"} and len(trials) == 3
    older = [dict(t, env_id=OLDER, env=dict(t["env"], simulated_as=simulated_as)) for t in trials[:-1]]
    (folder / "trials.jsonl").write_text("".join(json.dumps(t) + "\n" for t in older))
    info = json.loads((folder / "sweep.json").read_text())
    info["skipped"] = [dict(s, env_id=OLDER) for s in info["skipped"]]
    (folder / "sweep.json").write_text(json.dumps(info, indent=2))
    (folder / "choice.json").unlink()
    return folder, args


def test_a_resumed_sweep_goes_on_in_the_group_an_older_alloctune_named(tmp_path):
    """Its replays followed the trace's torch, as this sweep's do: the one left is replayed under the folder's id,
    and the folder keeps one group."""
    folder, args = older_folder(tmp_path, "2.9.1+cu128")
    done = in_process(*args)
    assert done.returncode == 0, done.stderr
    trials = ResultsFolder(folder).trials()
    assert [t.env_id for t in trials] == [OLDER] * 3 and len({t.conf for t in trials}) == 3
    assert [c["env_id"] for c in json.loads((folder / "choice.json").read_text())["choices"]] == [OLDER]


def test_a_resume_that_would_mix_two_torches_is_refused_in_one_line(tmp_path):
    """Its replays followed this interpreter's torch (the older rule), this sweep the trace's (2.9): refused, the
    folder as it was; told to replay as this interpreter's torch (--python), the sweep goes on in that group."""
    folder, args = older_folder(tmp_path, torch.__version__)
    before = {name: (folder / name).read_text() for name in ("trials.jsonl", "sweep.json")}
    here = ".".join(torch.__version__.split(".")[:2])
    done = in_process(*args)
    error = done.stderr.strip().splitlines()[-1]   # after the notices (the trace's, the resume's): one line
    assert done.returncode == 2 and error.startswith("alloctune: error: ") and done.stderr.count("error") == 1
    assert (f"holds replays named {OLDER} that followed torch {here}'s allocator, and this sweep replays the trace "
            f"as torch 2.9's: going on would mix two torches in one group; give --python {sys.executable} to go "
            f"on as torch {here}, or start anew with --fresh") in error
    assert {name: (folder / name).read_text() for name in before} == before
    told = in_process(*args, "--python", sys.executable)
    assert told.returncode == 0, told.stderr
    assert [t.env_id for t in ResultsFolder(folder).trials()] == [OLDER] * 3


def probe(python: str, env_id: str) -> ProbeResult:
    return ProbeResult(python=python, python_version="3.11", torch_version="2.13.0+cpu", torch_git=None,
                       cuda_version=None, cuda_available=False, device_count=0, devices=[], driver=None, host="h",
                       env_id=env_id)


def test_a_dry_runs_replays_are_named_after_the_release_of_each_interpreters_torch():
    """A dry run stands for its torch on the card, not for the build that traced ('+cpu'): its replays follow and
    are named after the release; two interpreters of one torch keep the mark that sets them apart."""
    probes = [probe("/a/python", "torch-2.13.0+cpu"), probe("/b/python", "torch-2.13.0+cpu@/b/python")]
    plan = Plan(None, probes, "sim", [], {}, [], None, False, True, "NVIDIA H100 80GB HBM3")  # type: ignore[arg-type]
    assert [plan.replay_env_id(p) for p in probes] == ["sim:torch-2.13.0", "sim:torch-2.13.0@/b/python"]
    assert {plan.target(p, None).followed for p in probes} == {"2.13.0"}
    plan.dry_run = None   # the same interpreters running the job on a GPU: their own ids
    assert [plan.replay_env_id(p) for p in probes] == ["sim:torch-2.13.0+cpu", "sim:torch-2.13.0+cpu@/b/python"]


def test_a_resumed_sweep_reads_its_trials_once_before_it_goes_on(tmp_path, monkeypatch):
    """The trials a resumed folder holds are read once at its start, for both what goes on under which id and the
    estimate's tally (each read the whole file)."""
    folder, args = older_folder(tmp_path, "2.9.1+cu128")
    reads: list[int] = []
    original = ResultsFolder.trials

    def counted(self):
        reads.append(1)
        return original(self)

    monkeypatch.setattr(ResultsFolder, "trials", counted)
    started: list[int] = []
    tally = sweeping.Tally

    def at_start(*given):   # the estimate's tally, made as the trials start
        started.append(len(reads))
        return tally(*given)

    monkeypatch.setattr(sweeping, "Tally", at_start)
    assert in_process(*args).returncode == 0
    assert started == [1]
