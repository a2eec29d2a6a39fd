"""`alloctune.sweep` end to end on this GPU-less machine: the shipped H200 trace replayed through the simulator,
real files written, resumed after an interruption, and the CLI as a user runs it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import alloctune
from alloctune.errors import WorkloadError
from alloctune.results.folder import ResultsFolder
from clirun import cli, in_process

ROOT = Path(__file__).resolve().parents[2]
VARLEN = ROOT / "workloads" / "transformer-varlen.yaml"
GRID = ["default", "expandable_segments:True", "max_split_size_mb:128", "backend:cudaMallocAsync"]

pytestmark = pytest.mark.usefixtures("no_visible_gpu")   # exercises the no-GPU fallback, on any machine


def run_sweep(tmp_path, **kw):
    notices = []
    outcome = alloctune.sweep(VARLEN, preset="h200", grid=GRID, results_root=tmp_path, notice=notices.append, **kw)
    return outcome, notices


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """(results root, outcome, notices) of one sweep of GRID, for the tests that read it; a test that resumes or
    damages the sweep works on a copy of its folder (`copied`)."""
    root = tmp_path_factory.mktemp("swept")
    with pytest.MonkeyPatch.context() as patch:   # no_visible_gpu, for the module
        patch.setenv("CUDA_VISIBLE_DEVICES", "")
        return (root, *run_sweep(root))


def copied(swept, tmp_path) -> Path:
    """The module's finished sweep copied into tmp_path, as if it had been swept there."""
    folder = swept[1].folder.path
    return Path(shutil.copytree(folder, tmp_path / folder.name))


@pytest.mark.slow
def test_sim_fallback_writes_a_complete_results_folder(swept):
    root, outcome, notices = swept
    assert outcome.backend == "sim"
    assert any("No CUDA GPU is visible" in n for n in notices)
    assert [s.reason for s in outcome.skipped if s.conf == "backend:cudaMallocAsync"] == [
        "cannot be simulated: the CUDA driver's pool holds its memory, which the simulator does not model block "
        "by block: measure it on the GPU"]
    folder = outcome.folder.path
    assert folder.parent == root and folder.name.startswith("transformer-varlen-h200-")
    for name in ("sweep.json", "trials.jsonl", "choice.json", "summary.md", "best.env", "plot.png"):
        assert (folder / name).is_file(), name
    [choice] = outcome.choices
    assert choice.best.conf == "expandable_segments:True" and choice.backend == "sim"
    summary = (folder / "summary.md").read_text()
    assert "simulated" in summary.lower() and "cudaMallocAsync" in summary
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in (folder / "best.env").read_text()
    records = outcome.folder.trials()
    assert {r.conf for r in records} == {"", "expandable_segments:True", "max_split_size_mb:128"}
    assert all(r.backend == "sim" and r.measurement.throughput is None for r in records)
    # The simulated peaks are the GPU's: 37.60 GiB default, 26.87 GiB with expandable segments (results/).
    peaks = {r.conf: r.measurement.peak_reserved_bytes for r in records}
    assert peaks[""] == 38504 * 2**20 and peaks["expandable_segments:True"] == 27518 * 2**20


@pytest.mark.slow
def test_same_sweep_resumes_and_skips_finished_trials(swept, tmp_path):
    first = copied(swept, tmp_path)
    trials = first / "trials.jsonl"
    lines = trials.read_text().splitlines()
    # Interrupted: the last trial's line torn mid-write, no choice made yet.
    trials.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])
    (first / "choice.json").unlink()
    with pytest.warns(UserWarning, match="truncated"):
        assert len(ResultsFolder(first).trials()) == 2  # the torn trial does not count as finished
    with pytest.warns(UserWarning, match="truncated"):   # the resumed sweep reads it too, and says so
        second, notices = run_sweep(tmp_path)
    assert second.folder.path == first
    assert f"Resuming the sweep in {first} (use fresh=True to start a new one)" in notices
    records = [json.loads(line) for line in trials.read_text().splitlines()]  # torn line gone, trial ran again
    assert sorted(r["conf"] for r in records) == ["", "expandable_segments:True", "max_split_size_mb:128"]
    assert records[:2] == [json.loads(line) for line in lines[:2]]  # finished trials untouched
    assert (first / "choice.json").is_file()
    third, _ = run_sweep(tmp_path, fresh=True)
    assert third.folder.path != first


def test_a_bad_workload_file_stops_before_anything_runs(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(VARLEN.read_text().replace("steps: 80", "steps: ten"))
    with pytest.raises(WorkloadError, match=r"bad.yaml: key 'steps': expected an integer from 1 to 2\*\*63 - 1, got 'ten'"):
        alloctune.sweep(bad, results_root=tmp_path / "results")
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_cli_sweep_then_export(tmp_path):
    def cli(*args):
        env = dict(os.environ, PYTHONPATH=str(ROOT))  # works whether or not the package is installed
        return subprocess.run([sys.executable, "-m", "alloctune", *map(str, args)], capture_output=True, text=True,
                              cwd=tmp_path, timeout=300, env=env)

    # the sweep in this process (what it prints is the subject); export and a refusal in fresh interpreters
    proc = in_process("sweep", VARLEN, "--preset", "h200", "--conf", "expandable_segments:True", "--results", "out",
                      cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "No CUDA GPU is visible" in proc.stderr
    assert "Next: alloctune export" in " ".join(proc.stdout.split())   # on its line, or below it when too long
    [folder] = (tmp_path / "out").iterdir()
    exported = cli("export", folder, "--format", "shell")
    assert exported.returncode == 0 and "export PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True'" in exported.stdout
    missing = cli("sweep", tmp_path / "nope.yaml")
    assert missing.returncode == 2 and "nope.yaml" in missing.stderr and "Traceback" not in missing.stderr


def test_hybrid_sends_the_default_and_the_best_simulated_settings_to_the_gpu():
    from alloctune.results.records import Measurement, TrialRecord, TrialState
    from alloctune.settings.conf import AllocConf
    from alloctune.decide.finalists import finalists
    from alloctune.sweeper.options import HYBRID_FINALISTS

    peaks = {"": 40, "expandable_segments:True": 27, "max_split_size_mb:128": 139, "max_split_size_mb:512": 139,
             "roundup_power2_divisions:4": 35, "roundup_power2_divisions:8": 36}
    records = [TrialRecord(workload="w", workload_hash="h", conf=c, repeat=0, env_id="sim:torch-2.11.0",
                           backend="sim", state=TrialState.OK,
                           measurement=Measurement(peak_reserved_bytes=p * 2**30, peak_allocated_bytes=27 * 2**30))
               for c, p in peaks.items()]
    planned = {"torch-2.11.0": [AllocConf.parse(c) for c in [*peaks, "backend:cudaMallocAsync"]]}
    [chosen] = finalists(records, planned, 0.02, HYBRID_FINALISTS).values()
    # The three lowest simulated peaks, the baseline, and what replay cannot judge (measured only on the GPU).
    assert HYBRID_FINALISTS == 3
    assert [str(c) for c in chosen] == ["", "expandable_segments:True", "roundup_power2_divisions:4",
                                        "roundup_power2_divisions:8", "backend:cudaMallocAsync"]


@pytest.mark.slow
def test_a_dry_runs_gpu_plan_counts_no_search_still_to_come(tmp_path):
    """`sweep --dry-run --search`: its search has run by the time the plan is told, and what it found was
    replayed; where the replays prefer the default (a tiny job), the GPU would run the recording and the default,
    and no trial for a search's leader."""
    (tmp_path / "job.py").write_text("import torch\nw = torch.nn.Linear(64, 64).cuda()\n"
                                     "w(torch.randn(8, 64, device='cuda')).sum().backward()\n")
    done = cli("sweep", "--dry-run", "--search", "8", "--out", tmp_path / "s", "--json", "--", sys.executable,
               "job.py", cwd=tmp_path)   # a dry run traces in a process of its own (not in_process's streams)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)["gpu_plan"]
    assert list(plan["measured"].values()) == [["default"]] and plan["trials"] == 2


@pytest.mark.slow
def test_another_trace_is_another_sweep_and_resuming_does_not_repeat_skips(swept, tmp_path):
    first = copied(swept, tmp_path)
    again, _ = run_sweep(tmp_path)
    assert again.folder.path == first
    skipped = [s.conf for s in again.folder.info().skipped]
    assert skipped.count("backend:cudaMallocAsync") == 1  # recorded once however often the sweep resumes
    elsewhere, notices = run_sweep(tmp_path, trace=str(foreign_snapshot(tmp_path)))
    assert elsewhere.folder.path != first  # same workload and grid, other trace: never resumed into
    assert any("carries no alloctune metadata" in n for n in notices)   # accepted, with a notice


def foreign_snapshot(tmp_path) -> Path:
    """A torch snapshot as `torch.cuda.memory._dump_snapshot` writes it, with no alloctune metadata."""
    import pickle

    entries = []
    for i in range(1, 40):
        e = {"addr": i * 2**24, "size": i * 2**20, "stream": 0, "frames": []}
        entries += [dict(e, action="alloc"), dict(e, action="free_requested"), dict(e, action="free_completed")]
    path = tmp_path / "foreign.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [entries], "allocator_settings": {}}))
    return path


@pytest.mark.slow
def test_a_trace_of_another_workload_is_refused_before_a_folder_exists(tmp_path):
    from alloctune.errors import AlloctuneError

    other = ROOT / "workloads" / "traces" / "transformer-packed-h200.xz"
    with pytest.raises(AlloctuneError, match="recorded from workload 'transformer-packed', not 'transformer-varlen'"):
        run_sweep(tmp_path, trace=str(other))
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_nonsense_budgets_and_missing_traces_stop_before_a_folder_exists(tmp_path):
    from alloctune.errors import AlloctuneError, SizeError

    with pytest.raises(SizeError, match="fraction"):
        alloctune.sweep(VARLEN, preset="h200", budget="2", results_root=tmp_path)
    with pytest.raises(AlloctuneError, match="no recorded allocation trace"):
        alloctune.sweep(VARLEN, results_root=tmp_path)  # the 24gib preset ships no trace
    assert not any(tmp_path.iterdir())


def _trace_of(path: Path, torch_version: str) -> Path:
    """A trace recorded (its meta says) under `torch_version`: requests of 1-2 GiB, each freed before the next."""
    from alloctune.sim.trace import ALLOC, FREE, Trace, save_trace

    kinds, ids, sizes = [], [], []
    for i, size in enumerate([1100, 300, 1300, 700] * 3):
        kinds += [ALLOC, FREE]
        ids += [i, i]
        sizes += [size * 2**20] * 2
    save_trace(Trace(kinds, ids, sizes, [0] * len(kinds), 0, {"torch_version": torch_version,
                                                              "device_total_bytes": 16 * 2**30}), path)
    return path


def test_a_replayed_sweeps_environment_names_the_torch_it_simulated(tmp_path):
    """A sweep that only replays follows the trace's torch (2.9 here, not this interpreter's): its trials, skips,
    choice, summary and text are named after it, as --json's simulated_torch says; told the job's interpreter
    (--python), it replays that torch and keeps that interpreter's id. compare keeps the two apart, and apart from
    a measured folder of the trace's torch, each column named after the torch its figures rest on."""
    import torch
    from folders import make_folder, repeats

    trace = _trace_of(tmp_path / "job.xz", "2.9.1+cu128")
    swept = ("sweep", VARLEN, "--preset", "tiny", "--backend", "sim", "--trace", trace, "--conf", "default",
             "--conf", "roundup_power2_divisions:4", "--conf", "garbage_collection_threshold:0.6",
             "--conf", "backend:cudaMallocAsync")
    ids = {}
    for name, told in (("trace", ()), ("told", ("--python", sys.executable))):
        proc = in_process(*swept, *told, "--out", tmp_path / name)
        assert proc.returncode == 0, proc.stderr
        folder = ResultsFolder(tmp_path / name)
        [ids[name]] = {r.env_id for r in folder.trials()}
        assert {s.env_id for s in folder.info().skipped} == {ids[name]}   # a rule's skip and a replay's alike
        assert json.loads((folder.path / "choice.json").read_text())["choices"][0]["env_id"] == ids[name]
        assert f"### {ids[name]}\n" in (folder.path / "summary.md").read_text()
        assert f" · {ids[name]} · replayed" in proc.stdout
    assert ids == {"trace": "sim:torch-2.9.1+cu128", "told": f"sim:torch-{torch.__version__}"}
    info = json.loads((tmp_path / "trace" / "sweep.json").read_text())
    measured = make_folder(tmp_path / "gpu", repeats("", env_id="torch-2.9.1+cu128", torch="2.9.1+cu128",
                                                     workload=info["workload_name"], whash=info["workload_hash"]),
                           workload=info["workload_name"], whash=info["workload_hash"])
    compared = in_process("compare", measured.path, tmp_path / "trace", tmp_path / "told", "--json")
    assert compared.returncode == 0, compared.stderr
    columns = [(c["label"], c["backend"], c.get("simulated_torch")) for c in json.loads(compared.stdout)["columns"]]
    here = ".".join(torch.__version__.split(".")[:2])
    assert columns == [("torch-2.9.1+cu128", "cuda", None), ("sim:torch-2.9.1+cu128", "sim", "2.9"),
                       (f"sim:torch-{torch.__version__}", "sim", here)]


def test_a_replayed_sweep_judges_its_settings_as_the_torch_it_replays(tmp_path):
    """A sweep that only replays a 2.11 trace skips a setting for 2.11's known problem, not for this interpreter's
    torch's (2.12 on made the pair a growth bug; 2.9-2.11 ignore the key): the skip, its reason and its id follow
    the torch its replays simulate, as search judges; told the job's interpreter (--python), that torch judges."""
    import torch
    from alloctune.settings.conf import AllocConf
    from alloctune.settings.known import forbidden_combination

    pair = "expandable_segments:True,max_split_size_mb:128"
    trace = _trace_of(tmp_path / "job.xz", "2.11.0+cu130")
    for name, told, version in (("trace", (), "2.11.0+cu130"),
                                ("told", ("--python", sys.executable), torch.__version__)):
        proc = in_process("sweep", VARLEN, "--preset", "tiny", "--backend", "sim", "--trace", trace, "--conf",
                          "default", "--conf", pair, *told, "--out", tmp_path / name)
        assert proc.returncode == 0, proc.stderr
        [skip] = ResultsFolder(tmp_path / name).info().skipped
        problem = forbidden_combination(AllocConf.parse(pair), version)
        assert problem is not None
        assert (skip.conf, skip.problem, skip.reason) == (pair, problem.id, problem.reason)
    assert ResultsFolder(tmp_path / "trace").info().skipped[0].problem == "expandable-ignores-max-split"
