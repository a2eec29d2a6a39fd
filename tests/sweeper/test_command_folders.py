"""Which results folder a sweep of your own command goes on in, and what it leaves: an edited script starts a new
sweep (saying which file changed) where the same script resumes its own; a folder from before the command's files
were kept resumes, saying it cannot tell; a sweep that stops before its first trial ends leaves no folder, and
`report` of a folder of results passes such a one by in a line; `alloctune.sweep()` takes a command's words as
`sweep -- COMMAND` does."""
from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import pytest
from clirun import cli, in_process
from folders import choice, make_folder, new_folder, repeats

import alloctune
from alloctune.errors import AlloctuneError
from alloctune.results.folder import ResultsFolder, SweepInfo
from alloctune.sweeper.options import SweepOptions
from alloctune.sweeper.resume import command_files, open_folder
from alloctune.workload.command import check_command, command_workload

# A job whose peak grows with HIDDEN: its dry run (no GPU) is a sweep's recording trial.
JOB = """import torch
HIDDEN = {hidden}
w = torch.nn.Linear(HIDDEN, HIDDEN).cuda()
w(torch.randn(8, HIDDEN, device="cuda")).sum().backward()
"""
SWEEP = ("sweep", "--dry-run", "--conf", "expandable_segments:True", "--", sys.executable, "job.py")


def said(done) -> str:
    """Standard error as one line of words (the console breaks its lines where it likes)."""
    return " ".join(done.stderr.split())


def peak(folder: Path) -> int:
    return max(r.measurement.peak_reserved_bytes for r in ResultsFolder(folder).trials() if r.measurement)


@pytest.mark.slow
def test_an_edited_script_starts_a_new_sweep_and_the_same_script_resumes_its_own(tmp_path, monkeypatch):
    """Swept, edited (a larger layer), swept again: a new folder, its figures the edited job's, and one notice
    naming the file; edited back, the API's sweep of the same words resumes the first folder, as the CLI's would."""
    script = tmp_path / "job.py"
    script.write_text(JOB.format(hidden=64))
    first = cli(*SWEEP, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    [small] = (tmp_path / "alloctune-results").iterdir()
    script.write_text(JOB.format(hidden=4096))
    second = cli(*SWEEP, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    [large] = set((tmp_path / "alloctune-results").iterdir()) - {small}
    assert (f"notice: {script} has changed since the sweep in alloctune-results/{small.name}: starting a new sweep "
            f"in alloctune-results/{large.name}") in said(second)
    assert "Resuming" not in said(second) and peak(large) > 2 * peak(small)
    script.write_text(JOB.format(hidden=64))
    monkeypatch.chdir(tmp_path)
    for given in ({"workload": [sys.executable, "job.py"]}, {"command": (sys.executable, "job.py")}):
        notices: list[str] = []
        outcome = alloctune.sweep(**given, dry_run=True, grid=["expandable_segments:True"], notice=notices.append)
        assert outcome.folder.path.resolve() == small.resolve(), notices
        assert f"Resuming the sweep in alloctune-results/{small.name} (use fresh=True to start a new one)" in notices


def command_info(tmp_path: Path, *argv: str) -> SweepInfo:
    """What a sweep of `python ARGV` in tmp_path asks (sweeper/plan.sweep_info's fields that tell sweeps apart)."""
    spec = command_workload(check_command([sys.executable, *argv], cwd=str(tmp_path)))
    return SweepInfo(spec.name, spec.digest(), spec.to_dict(), [""])


def opened(info: SweepInfo, tmp_path: Path, **options) -> tuple[Path, list[str]]:
    """The folder the sweep `info` opens under tmp_path/results (its notices), as it is left when the sweep goes
    on: no trial runs here."""
    notices: list[str] = []
    with contextlib.ExitStack() as held:
        folder = open_folder(info, SweepOptions(results_root=tmp_path / "results", **options), notices.append, held)
    return folder.path, notices


def test_a_folder_from_before_the_files_were_kept_resumes_saying_it_cannot_tell(tmp_path):
    (tmp_path / "job.py").write_text("pass\n")
    folder, _ = opened(command_info(tmp_path, "job.py"), tmp_path)
    kept = json.loads((folder / "sweep.json").read_text())
    assert [(f["path"], f["size"]) for f in kept.pop("files")] == [(str(tmp_path / "job.py"), 5)]
    (folder / "sweep.json").write_text(json.dumps(kept))   # as an older alloctune wrote it
    (tmp_path / "job.py").write_text("pass  # edited\n")
    again, [notice] = opened(command_info(tmp_path, "job.py"), tmp_path)
    assert again == folder
    assert notice == (f"Resuming the sweep in {folder} (use fresh=True to start a new one); its folder is from an "
                      f"older alloctune, which kept no record of the command's files: whether {tmp_path / 'job.py'} "
                      f"changed since cannot be told")


def test_out_holding_the_sweep_of_a_changed_script_is_refused_in_one_line(tmp_path):
    (tmp_path / "job.py").write_text("pass\n")
    out = tmp_path / "mine"
    opened(command_info(tmp_path, "job.py"), tmp_path, out=out)
    before = (out / "sweep.json").read_text()
    (tmp_path / "job.py").write_text("pass  # edited\n")
    with pytest.raises(AlloctuneError) as refused:
        opened(command_info(tmp_path, "job.py"), tmp_path, out=out)
    assert str(refused.value) == (f"{out} holds the sweep of {tmp_path / 'job.py'} as it was before it changed; "
                                  f"choose another out, or leave it out to start a new folder")
    assert (out / "sweep.json").read_text() == before


def test_a_command_swept_without_warmup_steps_resumes_a_folder_swept_with_its_default(tmp_path, monkeypatch):
    """Left out, --warmup-steps is 2 for a command, as before it could be told from given: the folder an earlier
    sweep of the same command made (its workload holding that 2) is the same sweep, from the CLI and the API."""
    made = []

    def plan(spec, *_):
        made.append(spec)
        raise AlloctuneError("planned")

    monkeypatch.setattr("alloctune.api.sweep.make_plan", plan)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.py").write_text("pass\n")
    before = command_workload(check_command([sys.executable, "job.py"]), warmup_steps=2)
    folder, _ = opened(SweepInfo(before.name, before.digest(), before.to_dict(), [""]), tmp_path)
    done = in_process("sweep", "--", sys.executable, "job.py", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr == "alloctune: error: planned\n", done.stderr
    with pytest.raises(AlloctuneError, match="planned"):
        alloctune.sweep([sys.executable, "job.py"])
    assert len(made) == 2
    for spec in made:
        again, notices = opened(SweepInfo(spec.name, spec.digest(), spec.to_dict(), [""]), tmp_path)
        assert again == folder and spec.to_dict()["warmup_steps"] == 2, notices
        assert notices == [f"Resuming the sweep in {folder} (use fresh=True to start a new one)"]


def test_the_files_a_command_names(tmp_path):
    """Its script, an --option=FILE, a -m module under its folder and a program given as a file count; a folder, a
    word that names no file and the Python interpreter do not."""
    for name in ("job.py", "conf.yaml", "pkg/train.py", "run.sh"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(name)
    (tmp_path / "run.sh").chmod(0o755)
    info = command_info(tmp_path, "job.py", "--config=conf.yaml", "pkg", "--steps", "3", "-m", "pkg.train")
    assert [f.path for f in command_files(info.workload)] == [str(tmp_path / n) for n in
                                                              ("job.py", "conf.yaml", "pkg/train.py")]
    shell = command_workload(check_command(["./run.sh", "job.py"], cwd=str(tmp_path)))
    assert [f.path for f in command_files(shell.to_dict())] == [str(tmp_path / "run.sh"), str(tmp_path / "job.py")]


@pytest.mark.slow
def test_a_sweep_refused_before_its_first_trial_leaves_no_folder(tmp_path):
    """A job that never touches CUDA leaves no trace to replay: refused, and nothing left behind (not even the
    results folder it would have been made in), so that `report` of that folder never meets an empty one."""
    (tmp_path / "cpu.py").write_text("import torch\nprint(torch.ones(2).sum())\n")
    done = cli("sweep", "--dry-run", "--", sys.executable, "cpu.py", cwd=tmp_path)
    assert done.returncode == 2 and "recorded no trace" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cpu.py"]


def test_report_of_a_folder_of_results_passes_one_without_trials_by_in_a_line(tmp_path):
    """As an interrupted sweep of an older alloctune left it: sweep.json alone. The folders beside it are reported
    (exit 0), export chooses among those; a folder of only such is one line, exit 2."""
    results = tmp_path / "results"
    make_folder(results / "w-1", repeats("expandable_segments:True"), [choice("expandable_segments:True")])
    new_folder(results / "w-2", ResultsFolder(results / "w-1").info())
    done = in_process("report", results)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if "w-2" in line] == [
        f"{results / 'w-2'} holds no trials (a sweep that stopped before its first trial ended): not reported"]
    assert str(results / "w-1") in done.stdout and "w-2" not in done.stdout
    assert "expandable_segments:True" in alloctune.export_results(results, "env").text
    (results / "w-1" / "trials.jsonl").unlink()
    done = in_process("report", results)
    assert done.returncode == 2 and done.stderr == (
        f"alloctune: error: {results}: no results folder here holds trials (w-1, w-2: each a sweep that stopped "
        f"before its first trial ended)\n")


@pytest.mark.parametrize("call, message", [
    (lambda: alloctune.sweep(None), "sweep(): expected a workload file's path, a WorkloadSpec or your command's "
                                    "words, e.g. ['python3', 'train.py'], got None"),
    (lambda: alloctune.sweep(command=["python3", 5]), "a command is a non-empty list of non-empty strings, got "
                                                      "['python3', 5]"),
    (lambda: alloctune.sweep([]), "a command is a non-empty list of non-empty strings, got []"),
    (lambda: alloctune.sweep("w.yaml", command=["python3", "x.py"]),
     "sweep(): give a workload, or a command's words as command, not both"),
    (lambda: alloctune.sweep(["python3", "x.py"], preset="h200"),   # only what was given is named
     "preset applies to a workload file, not to '-- COMMAND'"),
    (lambda: alloctune.sweep(["python3", "x.py"], preset="h200", trace="t.xz"),
     "preset and trace apply to a workload file, not to '-- COMMAND'"),
    (lambda: alloctune.sweep("w.yaml", unit="samples", steps=5),
     "unit and steps apply to '-- COMMAND'; a workload file gives its own"),
    (lambda: alloctune.sweep("w.yaml", warmup_steps=5),
     "warmup_steps applies to '-- COMMAND'; a workload file gives its own"),
    (lambda: alloctune.sweep("w.yaml", warmup_steps=0, metric_regex=""),   # given, though neither is true
     "metric_regex and warmup_steps apply to '-- COMMAND'; a workload file gives its own"),
    (lambda: alloctune.sweep(["python3", "x.py"], unit="32 samples", metric_regex="([0-9]+) tok/s"),
     "unit 32 samples: a count per step applies to the steps alloctune counts; metric_regex reads the throughput "
     "from the output"),
    (lambda: alloctune.sweep(["python3", "x.py"], metric_regex=5), "metric_regex: expected a str, got 5"),
    # a WorkloadSpec (here a command's) gives its own: it was said to be a workload file, and preset was ignored
    (lambda: alloctune.sweep(command_workload(check_command([sys.executable])), steps=5),
     "steps applies where a WorkloadSpec is made (load_workload's preset, command_workload's arguments); the "
     "WorkloadSpec given has its own"),
    (lambda: alloctune.sweep(command_workload(check_command([sys.executable])), preset="nope"),
     "preset applies where a WorkloadSpec is made (load_workload's preset, command_workload's arguments); the "
     "WorkloadSpec given has its own"),
    (lambda: alloctune.sweep(["python3", "x.py"], cwd=""), "cwd must be a non-empty path, got ''"),
    (lambda: alloctune.sweep([sys.executable], cwd=Path("/no/such/folder")),
     "cwd: expected an existing folder, got PosixPath('/no/such/folder')"),
    (lambda: alloctune.sweep(["python3", "x.py"], isolate_cwd="yes"), "isolate_cwd: expected True or False, got 'yes'"),
])
def test_a_wrong_command_is_refused_in_one_line(call, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AlloctuneError) as refused:
        call()
    assert str(refused.value) == message
    assert list(tmp_path.iterdir()) == []


def test_the_command_line_and_sweep_make_one_workload_of_a_command_and_its_options(tmp_path, monkeypatch):
    """`sweep -- COMMAND` with each option of a command, and `alloctune.sweep()` given the same as keywords: one
    WorkloadSpec (the API makes both; its cwd a str or a Path), stopped where the sweep would plan its trials."""
    made = []

    def plan(spec, *_):
        made.append(spec)
        raise AlloctuneError("planned")

    monkeypatch.setattr("alloctune.api.sweep.make_plan", plan)
    (tmp_path / "job.py").write_text("pass\n")
    given = dict(metric_regex="([0-9.]+) tok/s", unit="tokens", warmup_steps=3, steps=7, step_on="forward", name="mine",
                 cwd=str(tmp_path), isolate_cwd=True, timeout_s=60.0)
    flags = ["--metric-regex", given["metric_regex"], "--unit", "tokens", "--warmup-steps", "3", "--steps", "7",
             "--step-on", "forward", "--name", "mine", "--cwd", str(tmp_path), "--isolate-cwd", "--timeout", "60"]
    done = in_process("sweep", *flags, "--", sys.executable, "job.py", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr == "alloctune: error: planned\n", done.stderr
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AlloctuneError, match="planned"):
        alloctune.sweep([sys.executable, "job.py"], **given)
    with pytest.raises(AlloctuneError, match="planned"):   # cwd as a Path: it was said not to be a folder
        alloctune.sweep([sys.executable, "job.py"], **dict(given, cwd=tmp_path))
    line, api, path = made
    assert line == api == path
    assert (api.name, api.unit, api.warmup_steps, api.steps, api.timeout_s) == ("mine", "tokens", 3, 7, 60.0)
    assert api.command == dict(api.command, argv=[sys.executable, str(tmp_path / "job.py")], cwd=str(tmp_path),
                               metric_regex=given["metric_regex"], isolate_cwd=True, step_on="forward")
