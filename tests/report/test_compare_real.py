"""compare and export on result folders from real runs, no hand-made records: the H200 sweeps committed under
results/ (read in place, never written), and folders made here by real replays of the shipped H200 trace of
transformer-packed through the public `alloctune.sweep` API.

Which real runs give which mark:
  no significant change  the same workload swept twice on the H200; and measured against simulated peaks
  incomparable           a setting only in one sweep's grid; one that cannot be simulated; a different workload
                         definition; both fit under different budgets; (2.1 venv) a key torch 2.1 rejects
  new / fixed failure    the same replay without a budget and under one it does not fit (and back)
  fails in both          two budgets it fits in neither
  regression/improvement need a real behaviour change: torch 2.1.2 against this torch (garbage collection under a
                         fraction of the whole device, BEHAVIOUR_CHANGES 2.8). That test needs a second interpreter
                         (scripts/compare_torch_versions.sh makes one) and skips without it.
"""
import json
import multiprocessing
import os
import shutil
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
import yaml
from test_export import docker_env_file, shell_read

import alloctune
from alloctune.cli.main import main
from alloctune.errors import ResultsError
from alloctune.decide.regression import Mark
from alloctune.api.compare import compare_folders
from alloctune.report.compare_output import write_compare_md
from alloctune.api.export import export_results
from alloctune.report.export import FORMATS
from alloctune.results.folder import ResultsFolder
from alloctune.workload.spec import WorkloadSpec

dotenv_values = pytest.importorskip("dotenv").dotenv_values   # CI has it (test extra); a bare GPU box may not

REPO = Path(__file__).resolve().parents[2]
GPU_A = REPO / "results" / "transformer-packed-h200-20261129-234801"   # default grid, 3 repeats
GPU_B = REPO / "results" / "transformer-packed-h200-20261129-235232"   # default + expandable_segments, 3 repeats
GPU_VARLEN = REPO / "results" / "transformer-varlen-h200-20261129-234646"
# Named, never globbed: the README's first command adds results/transformer-varlen-h200-<now>/ to a checkout.
GPU_FOLDERS = [REPO / "results" / name for name in (
    "cnn-varres-h200-20261129-235416", "detection-h200-20261129-235653", "hpsearch-h200-20261129-235903",
    "llm-decode-h200-20261129-235417", "transformer-packed-h200-20261129-234801",
    "transformer-packed-h200-20261129-235232", "transformer-varlen-h200-20261129-234646")]
TRACE = REPO / "workloads" / "traces" / "transformer-packed-h200.xz"
OLD_PYTHON = Path(os.environ.get("ALLOCTUNE_OLD_PYTHON", REPO.parent / "venv-torch21" / "bin" / "python"))
VAR = "PYTORCH_CUDA_ALLOC_CONF"   # what every torch reads first: the one variable export writes
# Replayed on top of the default. Under 9.5 GiB (the packed model allocates 9.32 GiB at its peak) the default and
# divisions:4 run out of memory while expandable segments (9.37 GiB) and max_split_size_mb:128 squeeze in.
GRID = ["expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4", "backend:cudaMallocAsync"]
TIGHT, TINY = "9.5GiB", "4GiB"

needs_trace = pytest.mark.skipif(not TRACE.exists(), reason=f"shipped trace {TRACE} is missing")


def _sweep(kwargs: dict) -> str:
    return str(alloctune.sweep(backend="sim", **kwargs).folder.path)


def sweeps(jobs: dict[str, dict]) -> dict[str, ResultsFolder]:
    """Real sweeps through the public API, side by side in forked processes (each mostly waits on its probes)."""
    with ProcessPoolExecutor(len(jobs), mp_context=multiprocessing.get_context("fork")) as pool:
        paths = dict(zip(jobs, pool.map(_sweep, jobs.values())))
    return {name: ResultsFolder(path) for name, path in paths.items()}


def marks(comparison, column=1) -> dict[str, Mark]:
    return {row.conf: row.deltas[column].mark for row in comparison.rows}


def notes(comparison, column=1) -> dict[str, str]:
    return {row.conf: row.notes[column] for row in comparison.rows}


@pytest.fixture(scope="module")
def packed_spec() -> WorkloadSpec:
    """The exact definition the H200 sweeps measured (from their sweep.json), so replays compare with them."""
    return WorkloadSpec.from_dict(ResultsFolder(GPU_A).info().workload)


@pytest.fixture(scope="module")
def replays(tmp_path_factory, packed_spec):
    """Real sim sweeps of the H200 trace: no budget, a tight one, a tiny one, and another definition."""
    if not TRACE.exists():
        pytest.skip(f"shipped trace {TRACE} is missing")
    root = tmp_path_factory.mktemp("replays")
    other = WorkloadSpec.from_dict({**packed_spec.to_dict(), "steps": 30})   # another definition, same name
    jobs = {"free": {}, "tight": {"budget": TIGHT}, "tiny": {"budget": TINY}, "other": {"workload": other}}
    return sweeps({name: {"workload": packed_spec, "grid": GRID, "trace": str(TRACE), "out": root / name, **job}
                   for name, job in jobs.items()})


# ---- the H200 sweeps, as committed -----------------------------------------------------------------------------

def test_same_workload_swept_twice_on_the_h200_shows_no_significant_change():
    c = compare_folders([ResultsFolder(GPU_A), ResultsFolder(GPU_B)])
    assert [col.env_id for col in c.columns] == ["torch-2.11.0+cu130"] * 2
    assert [col.label for col in c.columns] == [GPU_A.name, GPU_B.name]   # same torch twice: told apart by folder
    m = marks(c)
    assert m[""] is m["expandable_segments:True"] is Mark.SAME
    for conf in ("", "expandable_segments:True"):
        delta = next(r for r in c.rows if r.conf == conf).deltas[1]
        assert delta.reserved == pytest.approx(0, abs=0.001)   # memory identical (deterministic workload)
        assert abs(delta.throughput) < 0.05 and delta.p_value > 0.05   # throughput within noise, 3 repeats each
    # B's grid held only those two: every other setting of A is incomparable, and says why
    others = {row.conf: row for row in c.rows if row.conf not in ("", "expandable_segments:True")}
    assert {row.deltas[1].mark for row in others.values()} == {Mark.INCOMPARABLE}
    ran = {conf for conf, row in others.items() if row.cells[0] is not None}
    assert ran == {"max_split_size_mb:128", "max_split_size_mb:512", "roundup_power2_divisions:4",
                   "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", "backend:cudaMallocAsync"}
    assert {notes(c)[conf] for conf in ran} == {f"not in its grid in {GPU_B.name}"}
    # the GC settings of the default grid ran nowhere: no budget was given on the H200
    for conf in set(others) - ran:
        assert conf.startswith("garbage_collection_threshold") and "give --budget" in notes(c)[conf]
    assert c.columns[0].best == c.columns[1].best == "expandable_segments:True" and c.best_changed(1) is False


def test_cli_on_the_h200_sweeps_writes_outputs_and_leaves_the_folders_alone(tmp_path, capsys):
    before = {p: p.stat().st_mtime_ns for d in (GPU_A, GPU_B) for p in d.iterdir()}
    assert main(["compare", str(GPU_A), str(GPU_B), "-o", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())   # a long path goes on a line of its own
    assert "alloctune compare" in out and f"wrote {tmp_path / 'compare.md'}" in out
    md = (tmp_path / "compare.md").read_text()
    assert "- = no significant change (memory within the factor, throughput within noise): 2" in md
    assert "- ? incomparable (a side missing, or another workload or budget): 7" in md
    assert "- − regression (more memory, or less throughput, beyond the factor): 0" in md
    assert "`expandable_segments:True` (" in md and (tmp_path / "compare.png").stat().st_size > 10_000
    assert {p: p.stat().st_mtime_ns for d in (GPU_A, GPU_B) for p in d.iterdir()} == before


@pytest.mark.parametrize("folder", GPU_FOLDERS, ids=lambda p: p.name)
def test_export_of_every_h200_sweep_reads_back_in_every_format(folder, tmp_path):
    """What the sweep chose, through every consumer: docker --env-file rules, python-dotenv, bash and sh, YAML, JSON,
    Dockerfile ENV. torch 2.11 reads PYTORCH_CUDA_ALLOC_CONF first: it alone is written."""
    conf = json.loads((folder / "choice.json").read_text())["choices"][0]["conf"]
    want = {VAR: conf}
    texts = {fmt: export_results(folder, fmt).text for fmt in FORMATS}
    assert docker_env_file(texts["env"]) == want
    (tmp_path / "alloc.env").write_text(texts["env"])
    assert dotenv_values(tmp_path / "alloc.env") == want
    (tmp_path / "alloc.sh").write_text(texts["shell"])
    for sh in ("bash", "sh"):
        assert shell_read(tmp_path / "alloc.sh", sh, (VAR,)) == [f"set|{conf}"]
    assert yaml.safe_load(texts["k8s"]) == {"env": [{"name": VAR, "value": conf}]}
    data = json.loads(texts["json"])
    assert data["env"] == want and data["torch_version"] == "2.11.0+cu130" and data["simulated"] is False
    assert f'ENV PYTORCH_CUDA_ALLOC_CONF="{conf}"' in texts["docker"]
    for fmt in ("env", "shell", "docker", "k8s"):   # the provenance leads, but for k8s's env: line (pasted first)
        first = texts[fmt].splitlines()[fmt == "k8s"]
        assert first.startswith("# ") and "NVIDIA H200" in first and str(folder) in first, fmt


def test_export_of_the_h200_sweeps_by_workload_and_setting(tmp_path):
    results = tmp_path / "results"   # a folder holding exactly these committed sweeps, whatever else results/ holds
    for folder in (GPU_A, GPU_B, GPU_VARLEN, REPO / "results" / "transformer-varlen-24gib-20261129-233651"):
        shutil.copytree(folder, results / folder.name)
    varlen = export_results(GPU_VARLEN, "env").text
    assert docker_env_file(varlen) == {VAR: "expandable_segments:True"}
    for swept_twice in ("transformer-packed", "transformer-varlen"):  # two folders each (presets or repeats)
        with pytest.raises(ResultsError, match="holds 2 results folders"):
            export_results(results, workload=swept_twice)
    divisions = "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"   # brackets, commas, colons and '>'
    text = export_results(GPU_A, "shell", conf=divisions).text
    (tmp_path / "d.sh").write_text(text)
    assert shell_read(tmp_path / "d.sh", "sh", (VAR,)) == [f"set|{divisions}"]
    assert not list(tmp_path.glob(":*")), "'>' was taken as a redirection"
    with pytest.raises(ResultsError, match="was not run"):
        export_results(GPU_B, conf="max_split_size_mb:128")   # not in that sweep's grid


# ---- replays of the shipped H200 trace -----------------------------------------------------------------------

@pytest.mark.slow
@needs_trace
def test_replays_match_the_h200_measurements(replays):
    """Measured (A) against simulated: the same definition, so rows line up; memory agrees within the factor."""
    c = compare_folders([ResultsFolder(GPU_A), replays["free"]])
    assert [(col.backend, col.torch_version) for col in c.columns] == [
        ("cuda", "2.11.0+cu130"), ("sim", c.columns[1].torch_version)]
    assert c.columns[1].trace_torch == "2.11.0+cu130"
    m, n = marks(c), notes(c)
    for conf in ("", *GRID[:3]):
        assert m[conf] is Mark.SAME, conf
        assert abs(next(r for r in c.rows if r.conf == conf).deltas[1].reserved) < 0.01, conf
    assert m["backend:cudaMallocAsync"] is Mark.INCOMPARABLE
    assert n["backend:cudaMallocAsync"].startswith("skipped: cannot be simulated")
    assert m["max_split_size_mb:512"] is Mark.INCOMPARABLE and n["max_split_size_mb:512"].startswith("not in its grid")


@pytest.mark.slow
@needs_trace
def test_a_budget_it_does_not_fit_in_is_a_new_failure_and_back_a_fixed_one(replays):
    free, tight = replays["free"], replays["tight"]
    new = compare_folders([free, tight])
    m, n = marks(new), notes(new)
    assert m[""] is m["roundup_power2_divisions:4"] is Mark.NEW_FAILURE
    assert n[""] == "oom in 1 of 1 trials; budget differs (none vs 9.50 GiB)"
    # both fit: peaks under different limits do not compare
    assert m["expandable_segments:True"] is m["max_split_size_mb:128"] is Mark.INCOMPARABLE
    assert "both fit" in n["expandable_segments:True"]
    assert new.columns[1].best == "expandable_segments:True" and new.best_changed(1) is False

    fixed = marks(compare_folders([tight, free]))
    assert fixed[""] is fixed["roundup_power2_divisions:4"] is Mark.FIXED_FAILURE


@pytest.mark.slow
@needs_trace
def test_two_budgets_it_fits_in_neither(replays):
    c = compare_folders([replays["tight"], replays["tiny"]])
    m = marks(c)
    assert m[""] is m["roundup_power2_divisions:4"] is Mark.BOTH_FAIL
    assert m["expandable_segments:True"] is m["max_split_size_mb:128"] is Mark.NEW_FAILURE
    assert c.columns[1].best is None   # nothing fits in 4 GiB: no choice to export
    with pytest.raises(ResultsError, match="nothing to export"):
        export_results(replays["tiny"].path)


@pytest.mark.slow
@needs_trace
def test_another_workload_definition_is_incomparable(replays):
    c = compare_folders([replays["free"], replays["other"]])
    m, n = marks(c), notes(c)
    simulated = [conf for conf in m if conf != "backend:cudaMallocAsync"]
    assert {m[conf] for conf in simulated} == {Mark.INCOMPARABLE}
    assert all(n[conf].startswith("workload definition differs") for conf in simulated)


@pytest.mark.slow
@needs_trace
def test_compare_cli_on_replays_and_export_of_a_replay(replays, tmp_path, capsys):
    folder = tmp_path / "copy"
    shutil.copytree(replays["free"].path, folder)
    assert main(["compare", str(folder), str(replays["tight"].path), "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "new failure" in out and "budget 9.50 GiB" in out
    md = (tmp_path / "compare.md").read_text()
    assert "- ✗ new failure (fits in the baseline, not here): 2" in md and "| sim |" in md
    data = json.loads(export_results(folder, "json").text)
    assert data["simulated"] is True and data["conf"] == "expandable_segments:True"
    assert "replayed with torch 2.11's allocator from a trace" in data["source"] and data["basis"] == "replayed"


# ---- two real torch versions -----------------------------------------------------------------------------------

@pytest.mark.skipif(not OLD_PYTHON.exists(), reason=f"no second interpreter at {OLD_PYTHON} (set ALLOCTUNE_OLD_PYTHON;"
                                                    " scripts/compare_torch_versions.sh makes one)")
def test_two_torch_versions_regression_improvement_and_keys_one_rejects(tmp_path):
    """hpsearch replayed as torch 2.1.2 and as this torch, under a budget of the whole device: before 2.8 that
    fraction still switched garbage collection on, since then it does not, so GC's saving disappears."""
    trace = REPO / "workloads" / "traces" / "hpsearch-h200.xz"
    if not trace.exists():
        pytest.skip(f"shipped trace {trace} is missing")
    grid = ["garbage_collection_threshold:0.2", "max_non_split_rounding_mb:64"]

    made = sweeps({name: dict(workload=REPO / "workloads" / "hpsearch.yaml", preset="h200", grid=grid, budget="1.0",
                              pythons=[str(python)], trace=str(trace), out=tmp_path / name)
                   for name, python in (("old", OLD_PYTHON), ("new", sys.executable))})
    old, new = made["old"], made["new"]
    upgrade = compare_folders([old, new])
    assert upgrade.columns[0].torch_version.startswith("2.1.")
    m, n = marks(upgrade), notes(upgrade)
    assert m[""] is Mark.SAME
    assert m["garbage_collection_threshold:0.2"] is Mark.REGRESSION
    gc = next(r for r in upgrade.rows if r.conf == "garbage_collection_threshold:0.2").deltas[1]
    assert gc.reserved > 0.2
    assert m["max_non_split_rounding_mb:64"] is Mark.INCOMPARABLE
    assert "rejects it" in n["max_non_split_rounding_mb:64"] and "max_non_split_rounding_mb" in n[
        "max_non_split_rounding_mb:64"]
    assert marks(compare_folders([new, old]))["garbage_collection_threshold:0.2"] is Mark.IMPROVEMENT
    md = write_compare_md(upgrade, tmp_path / "compare.md").read_text()
    assert f"## Allocator changes between torch {upgrade.columns[0].torch_version} and" in md
    assert "- 2.8: a memory fraction of exactly 1.0" in md and "- 2.6: max_non_split_rounding_mb" in md
    # the variable each version's job must set: the one both read first (2.1 reads no other)
    assert list(docker_env_file(export_results(old.path).text)) == list(docker_env_file(export_results(new.path).text)) == [VAR]
