"""A hybrid sweep of a command of two ranks whose allocations differ (as ranks drawing their own data do), without a
GPU: a stand-in interpreter answers the probe as a one-GPU machine and runs the command as the start-up hook would
report it for two processes, rank 0 replaying one shipped H200 trace and rank 1 another, each with the peaks of its
trace replayed under the trial's setting, and each leaving its trace where the recording asks for them.

The pair is chosen so that the rank that peaks changes with the setting (found on the H200 with ddp_train.py: rank 0
under the default, rank 1 under expandable segments, whose prediction from rank 0's trace alone was 6.7% low): the
replay of a setting is the job's, the maximum over both ranks' replays."""
from __future__ import annotations

import importlib.metadata
import json
import shutil
import stat
import sys
import textwrap
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from clirun import in_process
from standin import PROBE_AS_ONE_GPU

import alloctune
from alloctune.results.records import Backend
from alloctune.settings.conf import AllocConf
from alloctune.sim.replay import replay
from alloctune.sim.trace import load_trace, save_trace
from alloctune.workload.command import check_command, command_workload

TRACES = Path(__file__).resolve().parents[2] / "workloads" / "traces"
# Under the default rank 0 needs more (39.70 GiB against 39.65), under expandable segments rank 1 (27.29 against 18.96)
RANKS = (TRACES / "cnn-varres-h200.xz", TRACES / "hpsearch-h200.xz")
ES = "expandable_segments:True"
CONFS = ("", ES)

# The stand-in Python: the probe answers as one GPU (parsing settings goes to the real torch); the command logs its
# setting ('R': recording) and writes, for each rank, the report the hook would (the peaks of that rank's trace under
# the setting) and, when recording, that rank's trace.
PYTHON = """
import importlib.metadata, json, os, shutil, sys
""" + PROBE_AS_ONE_GPU + """
conf, out = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), os.environ["ALLOCTUNE_HOOK_OUT"]
recording = os.environ.get("ALLOCTUNE_HOOK_RECORD") == "1"
with open({log!r}, "a") as f:
    f.write(("R" if recording else "") + conf + "\\n")
for rank, (trace, peaks) in enumerate(json.loads({ranks!r})):
    pid = os.getpid() * 10 + rank
    m = json.load(open(peaks)).get(conf) or json.load(open(peaks))[""]   # a setting a search found: as the default
    device = dict(device=0, peak_reserved_bytes=m["peak_reserved_bytes"], peak_allocated_bytes=m["peak_allocated_bytes"],
                  num_alloc_retries=0, num_ooms=0)
    if recording:
        shutil.copy(trace, os.path.join(out, f"trace-{{pid}}.pickle"))
    json.dump(dict(pid=pid, rank=rank, cuda=True, torch_version=importlib.metadata.version("torch"),
                   effective_conf=conf, devices=[device]), open(os.path.join(out, f"proc-{{pid}}.json"), "w"))
"""


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[tuple[str, str, dict]]:
    """Per rank: its trace (a shipped one, with the rank and pid the hook's meta carries), a file of its peaks under
    each setting, replayed as the trial's own torch would, and those peaks."""
    folder = tmp_path_factory.mktemp("ranks")
    out = []
    for rank, path in enumerate(RANKS):
        trace = load_trace(path)
        trace.meta.update(rank=rank, pid=1000 + rank)
        save_trace(trace, folder / f"rank{rank}.xz")
        outcomes = replay(trace, list(CONFS), int(trace.meta["device_total_bytes"]), jobs=1,
                          torch_version=importlib.metadata.version("torch"))
        peaks = {conf: asdict(o.measurement()) for conf, o in zip(CONFS, outcomes)}
        (folder / f"peaks{rank}.json").write_text(json.dumps(peaks))
        out.append((str(folder / f"rank{rank}.xz"), str(folder / f"peaks{rank}.json"), peaks))
    return out


def sweep(where: Path, ranks, **kw) -> tuple[alloctune.SweepOutcome, list[str]]:
    """`sweep --grid ES -- python3 job.py` (or what `kw` asks) on the stand-in GPU in `where`, into `where`/out
    unless `out` says (resumed if there); what that stand-in has run so far."""
    (where / "bin").mkdir(exist_ok=True)
    python = where / "bin" / "python3"
    log = where / "ran.log"
    python.write_text("#!" + sys.executable + "\n" + textwrap.dedent(PYTHON.format(
        torch=torch.__version__, python=sys.executable, log=str(log),
        ranks=json.dumps([(trace, peaks) for trace, peaks, _ in ranks]))))
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    (where / "job.py").write_text("# run by the stand-in\n")
    spec = command_workload(check_command([str(python), str(where / "job.py")]), name="job")
    kw = dict(grid=[ES], backend="hybrid", repeats=1, finalists=1, out=where / "out", timeout_s=60) | kw
    outcome = alloctune.sweep(spec, **kw)
    return outcome, log.read_text().splitlines()


@pytest.fixture(scope="module")
def swept(tmp_path_factory, ranks) -> tuple[Path, alloctune.SweepOutcome, list[str]]:
    """The grid sweep of the two ranks, once for the tests that read or resume a copy of it: where its stand-in
    is, the outcome, what ran."""
    where = tmp_path_factory.mktemp("swept")
    return (where, *sweep(where, ranks))


def resumed(swept, ranks, out: Path, change=lambda folder: None) -> tuple[alloctune.SweepOutcome, list[str]]:
    """The swept folder copied to `out`, changed by `change`, and its sweep run again there; what ran now."""
    where, outcome, _ = swept
    shutil.copytree(outcome.folder.path, out)
    change(out)
    before = len((where / "ran.log").read_text().splitlines())
    again, ran = sweep(where, ranks, out=out)
    return again, ran[before:]


def simulated(outcome) -> dict:
    return {t.conf: t for t in outcome.folder.trials() if t.backend == Backend.SIM}


def test_each_setting_is_predicted_by_the_rank_that_peaks_under_it(tmp_path, ranks, swept):
    reserved = [{conf: peaks[conf]["peak_reserved_bytes"] for conf in CONFS} for _, _, peaks in ranks]
    assert reserved[0][""] > reserved[1][""] and reserved[1][ES] > reserved[0][ES]   # the pair is what it says
    _, outcome, ran = swept
    assert ran == ["R", "", ES]   # the recording (an extra trial), then the default and the finalist
    folder = outcome.folder.path
    assert sorted(p.name for p in folder.glob("trace*")) == ["trace.rank0.xz", "trace.rank1.xz"]
    assert json.loads((folder / "sweep.json").read_text())["trace"]["paths"] == ["trace.rank0.xz", "trace.rank1.xz"]
    sim = simulated(outcome)
    for conf, peaked in (("", 0), (ES, 1)):
        assert sim[conf].measurement.peak_reserved_bytes == reserved[peaked][conf]   # the maximum over the ranks
        assert [(r["rank"], r["peak_reserved_bytes"]) for r in sim[conf].processes] == [
            (0, reserved[0][conf]), (1, reserved[1][conf])]
    summary = " ".join((folder / "summary.md").read_text().split())
    assert "## Per process" in summary and f"| {ES} (replayed) | 1 | ok | rank 1 |" in summary
    assert summary.count("+0.00%") == 2   # predicted against measured: each setting's peak rank, exactly
    # resumed (interrupted before its finalist): nothing is recorded or replayed again, the prediction stands
    again, ran = resumed(swept, ranks, tmp_path / "out", cut_last_trial)
    assert ran == [ES] and simulated(again)[ES].measurement.peak_reserved_bytes == reserved[1][ES]


def cut_last_trial(folder: Path) -> None:
    """`folder` as an interrupt leaves it before its last trial."""
    trials = folder / "trials.jsonl"
    trials.write_text("".join(trials.read_text().splitlines(keepends=True)[:-1]))
    info = json.loads((folder / "sweep.json").read_text())
    (folder / "sweep.json").write_text(json.dumps(dict(info, finished=False)))


def as_before(folder: Path) -> None:
    """`folder` as a sweep wrote it before every rank was kept: one trace.xz (the rank that peaked under the
    default) and no list; interrupted before its last trial."""
    (folder / "trace.rank0.xz").rename(folder / "trace.xz")
    (folder / "trace.rank1.xz").unlink()
    info = json.loads((folder / "sweep.json").read_text())
    del info["trace"]["paths"]
    (folder / "sweep.json").write_text(json.dumps(info))
    cut_last_trial(folder)


def test_a_folder_from_before_every_rank_was_kept_still_resumes_and_reports(tmp_path, ranks, swept):
    again, ran = resumed(swept, ranks, tmp_path / "out", as_before)
    assert ran == [ES]   # the trial it lacked, and no recording
    assert again.folder.info().trace_paths == ["trace.xz"] and again.folder.info().finished
    done = in_process("report", tmp_path / "out", "--json")
    assert done.returncode == 0, done.stderr
    [report] = json.loads(done.stdout)
    assert {(c["backend"], c["conf"]) for c in report["choices"]} == {("cuda", ES), ("sim", ES)}


def test_a_search_runs_on_the_rank_peaking_under_the_default_and_its_front_is_replayed_on_each(tmp_path, ranks):
    outcome, _ = sweep(tmp_path, ranks, grid=None, search=4)
    [account] = json.loads((outcome.folder.path / "search.json").read_text()).values()
    assert account["trace"] == "trace.rank0.xz"
    sim = simulated(outcome)
    assert set(sim) == {"", *(str(AllocConf.parse(m["conf"])) for m in account["front"])}   # "default" by name
    assert all([r["rank"] for r in t.processes] == [0, 1] for t in sim.values())
    assert sim[ES].measurement.peak_reserved_bytes == ranks[1][2][ES]["peak_reserved_bytes"]
