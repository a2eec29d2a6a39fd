"""`alloctune fit -- COMMAND` answering from replays: after the curve's first answers, the answer's value and the next
one are recorded and replayed under every setting, a recording at a time, until each answer fits by its replay and
the next does not. Without a GPU, on a stand-in interpreter that answers the probe as a one-GPU machine and, asked to
record the command at a batch, leaves the H100 recording of examples/gpt2_train.py at that batch where the start-up
hook leaves a trace (tests/fixtures/fits/README.md); the replays, curves and answers are the real ones.

GPT-2 small under a 12 GiB budget: recorded at batch 2 and 4, the line puts batch 6 at 12.43 GiB, so the curve answers
4 under the default; batch 6 replays to 11.67 GiB and batch 8 to 15.38 GiB, so the replays answer 6."""
from __future__ import annotations

import json
import stat
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch
from clirun import cli, in_process
from standin import PROBE_AS_ONE_GPU

from alloctune.results.fits import FitFile
from alloctune.results.names import FIT_FILE
from alloctune.results.typed import load_json
from alloctune.sim.target import simulated_torch
from alloctune.sim.trace import load_trace

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "fits"
ES = "expandable_segments:True"
GiB = 2**30

# The stand-in Python: the probe answers as one GPU; a recording of `job.py --batch B` leaves the fixture recorded at
# B (none: the command fails, as one out of memory would); a trial reports the peaks that recording measured, after
# sleeping a little so that trials started together overlap; every run is logged with its start and end, every probe
# in a log of its own.
PYTHON = """
import importlib.metadata, json, os, shutil, sys, time
if sys.argv[1:4] == ["-m", "alloctune.child.probe", "probe"]:
    with open({log!r} + ".probes", "a") as f:
        f.write("probe\\n")
""" + PROBE_AS_ONE_GPU + """
if sys.argv[1:3] == ["-m", "alloctune.child.ballast"]:
    with open({log!r}, "a") as f:
        f.write(json.dumps(["ballast", int(sys.argv[3])]) + "\\n")
    print("ALLOCTUNE-BALLAST " + sys.argv[3], flush=True)
    sys.stdin.read()
    sys.exit(0)
batch = int(sys.argv[sys.argv.index("--batch") + 1])
out, start = os.environ["ALLOCTUNE_HOOK_OUT"], time.time()
recording = os.environ.get("ALLOCTUNE_HOOK_RECORD") == "1"
trace = os.path.join({fixtures!r}, "gpt2-h100-batch-%d.xz" % batch)
if not os.path.exists(trace):
    sys.exit("out of memory (the stand-in has no recording at this batch)")
measured = json.load(open(trace + ".json"))
if recording:
    shutil.copy(trace, os.path.join(out, "trace-%d.pickle" % os.getpid()))
else:
    time.sleep(0.5)
device = dict(device=0, peak_reserved_bytes=measured["peak_reserved_bytes"],
              peak_allocated_bytes=measured["peak_allocated_bytes"], num_alloc_retries=0, num_ooms=0)
json.dump(dict(pid=os.getpid(), cuda=True, torch_version=importlib.metadata.version("torch"),
               effective_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), devices=[device]),
          open(os.path.join(out, "proc-%d.json" % os.getpid()), "w"))
with open({log!r}, "a") as f:
    f.write(json.dumps(["record" if recording else "trial", batch, start, time.time()]) + "\\n")
"""


@pytest.fixture
def standin(tmp_path) -> tuple[Path, Path]:
    """The stand-in interpreter (bin/python3), the fixtures' measured peaks beside copies of them, and its log."""

    fixtures = tmp_path / "fixtures"
    fixtures.mkdir()
    for path in FIXTURES.glob("gpt2-h100-batch-*.xz"):
        (fixtures / path.name).write_bytes(path.read_bytes())
        [run] = load_trace(path).meta["measured"]
        (fixtures / (path.name + ".json")).write_text(json.dumps(run))
    (tmp_path / "bin").mkdir()
    python, log = tmp_path / "bin" / "python3", tmp_path / "ran.log"
    python.write_text("#!" + sys.executable + "\n" + textwrap.dedent(PYTHON.format(
        torch=torch.__version__, python=sys.executable, log=str(log), fixtures=str(fixtures))))
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "job.py").write_text("# run by the stand-in\n")
    return python, log


def fit(tmp_path: Path, python: Path, *args: str, values: str = "2,4") -> FitFile:
    done = cli("fit", "--param", f"batch={values}", "--conf", "default", "--conf", ES, "--jobs", "1",
                      "--json", "--out", tmp_path / "fit", *args, "--", python, tmp_path / "job.py", "--batch",
                      "{batch}")
    assert done.returncode == 0, done.stderr
    stored = FitFile.from_json(load_json(tmp_path / "fit" / FIT_FILE), FIT_FILE)
    said = json.loads(done.stdout)   # the same, under the names every command's --json shares
    recorded = load_trace(stored.traces[0]).meta["torch_version"]   # the fixtures' torch, not this machine's
    assert said == stored.shared_json(said["simulated_torch"]) and said["simulated_torch"] == simulated_torch(recorded)
    return stored


def ran(log: Path) -> list[list]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_the_answer_and_the_next_value_are_recorded_and_the_replays_answer(tmp_path, standin):
    python, log = standin
    curve = fit(tmp_path, python, "--budget", "12GiB", "--extra-recordings", "0")
    [default, expandable] = curve.limits[0].answers
    assert (default.largest, default.basis, default.next_value, default.exact) == (4, "replayed", 6, False)
    assert not expandable.exact and expandable.margin is None and expandable.margin_why is not None   # 2 values
    assert curve.exact is not None and curve.exact.not_run == "none"
    exact = fit(tmp_path, python, "--budget", "12GiB")
    assert [(r[0], r[1]) for r in ran(log)] == [("record", 2), ("record", 4), ("record", 6), ("record", 8)]
    assert exact.values == [2, 4, 6, 8] and exact.exact is not None and exact.exact.values == [6, 8]
    for answer in exact.limits[0].answers:
        assert (answer.largest, answer.basis, answer.next_value, answer.exact, answer.margin) == \
            (6, "replayed", 8, True, None)
        assert answer.runs == [True, True, True, False]
    assert sorted(p.name for p in (tmp_path / "fit").glob("trace.*")) == \
        [f"trace.batch-{b}.xz" for b in (2, 4, 6, 8)]
    # the recordings say whose they are, and the same fit again records nothing
    again = fit(tmp_path, python, "--budget", "12GiB")
    assert len(ran(log)) == 4 and again.exact is not None and again.exact.values == []
    assert [a.largest for a in again.limits[0].answers] == [6, 6]


def test_a_value_that_cannot_be_recorded_is_said_and_its_answers_stay_the_curves(tmp_path, standin):
    """Under 20 GiB the answers lie at batch 10 (the stand-in has no recording there: its run fails as an OOM
    would) and 12; a failed recording costs one of the recordings allowed and is not tried again."""
    python, log = standin
    out = fit(tmp_path, python, "--budget", "20GiB", "--extra-recordings", "4")
    assert out.exact is not None and [u.value for u in out.exact.failed] == [10]
    assert "exited with status 1" in out.exact.failed[0].why
    assert [r[1] for r in ran(log)] == [2, 4, 8, 12] and out.exact.values == [8, 12]   # 10 left no line
    default = out.limits[0].answers[0]
    assert (default.largest, default.basis, default.curve, default.exact, default.next_value) == \
        (10, "predicted", "interpolated", False, 12)
    assert default.margin is not None and default.runs == [True, True, True, False]
    text = cli("fit", "--param", "batch=2,4", "--conf", "default", "--budget", "20GiB", "--jobs", "1",
                      "--out", tmp_path / "fit", "--extra-recordings", "4", "--", python, tmp_path / "job.py",
                      "--batch", "{batch}", env={"COLUMNS": "120"})
    words = " ".join(text.stdout.split())
    assert "batch=10: not recorded" in words and "the leave-one-out error of its line" in words


def test_copies_at_once_start_together_in_the_memory_the_prediction_shares(tmp_path, standin):
    """Under 12 GiB two copies of batch 2 are predicted to fit at once (each 5.05 GiB and a 742 MiB context, in 12 GiB
    and one context): both start together while a ballast leaves that much free, and both run."""
    python, log = standin
    out = fit(tmp_path, python, "--budget", "12GiB", "--confirm", "default", "--confirm-copies", "2",
              "--extra-recordings", "0")
    [limit] = out.limits
    [copies] = limit.copies_confirmed
    assert (copies.conf, copies.value, copies.predicted, copies.said, copies.agreed) == ("", 2, 2, True, True)
    leave = limit.capacity_bytes + out.overhead_bytes
    assert copies.free_bytes == leave
    lines = ran(log)
    assert ["ballast", leave] in lines
    trials = [r for r in lines if r[0] == "trial" and r[1] == 2]
    assert len(trials) == 2 and max(r[2] for r in trials) < min(r[3] for r in trials)   # they ran at once
    # the same fit again keeps what the GPU said of the same answers and copies: nothing runs
    again = fit(tmp_path, python, "--budget", "12GiB", "--confirm", "default", "--confirm-copies", "2",
                "--extra-recordings", "0")
    assert len(ran(log)) == len(lines) and again.limits == out.limits


def test_one_fit_probes_the_commands_interpreter_once(tmp_path, standin):
    """Each recording, the exact ones, the confirmations and the copies at once ask whether the command's interpreter
    sees a GPU; the answer cannot change within a fit and each probe imports torch again: one probe answers them all
    (a probe before each made nine)."""
    python, log = standin
    out = fit(tmp_path, python, "--budget", "12GiB", "--confirm", "default", "--confirm-copies", "2")
    [limit] = out.limits
    assert out.exact is not None and out.exact.values == [6, 8] and limit.confirmed and limit.copies_confirmed
    assert Path(f"{log}.probes").read_text().splitlines() == ["probe"]


def test_copies_of_a_value_not_recorded_are_refused_before_anything_runs(tmp_path, standin):
    python, log = standin
    done = in_process("fit", "--param", "batch=2,4", "--budget", "12GiB", "--confirm", "default",
                      "--confirm-copies", "3", "--out", tmp_path / "fit", "--", python, tmp_path / "job.py")
    assert done.returncode == 2 and "--confirm-copies 3: copies at once are predicted at the values recorded" in \
        done.stderr
    assert not log.exists() and not (tmp_path / "fit").exists()


def test_two_fits_into_one_folder_at_once_take_its_lock(tmp_path, standin):
    """The second is refused while the first holds the folder (the first waits on the stand-in's log to exist)."""
    from alloctune.results.fits import claimed

    folder = tmp_path / "fit"
    held, release = threading.Event(), threading.Event()

    def first() -> None:
        with claimed(folder, "batch", None):
            held.set()
            release.wait(30)

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert held.wait(30)
        python, _ = standin
        done = in_process("fit", "--param", "batch=2,4", "--out", folder, "--", python, tmp_path / "job.py")
        assert done.returncode == 2 and "is being written by another alloctune" in done.stderr
    finally:
        release.set()
        thread.join()
