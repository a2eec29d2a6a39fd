"""Memory first, counted in GPU trials: `sweep -- CMD` as a user runs it on a GPU, and workload sweeps, without a
GPU. A stand-in interpreter answers the probe as a one-GPU machine and runs each trial as the start-up hook (for a
command) or the trial child (for a workload) would report it: peaks from the shipped transformer-packed H200 trace
replayed under the trial's setting, a throughput at a chosen rate with ±0.5% noise, and the recorded trace where
one is asked for. The sweep, its replays, its rounds and its statistics are the real ones.

With the default grid on that trace, expandable segments wins on memory (9.37 GiB against the default's 9.91 GiB;
every other setting reserves more than the default) and reserves within 1% of the program's 9.32 GiB of live
bytes, so cudaMallocAsync cannot beat it. Before memory first, auto repeats ran 22 GPU trials on this command (17
with --backend hybrid); with auto rounds 10; confirmed (the default, `--repeats confirm`), 3: no setting makes a
driver call in that trace's steady steps. The transformer-varlen trace's do: expandable segments maps 44 MiB of
pages a step (0.02 maps), which the H200's calibration (the stand-in answers with it) prices at 82 µs: at the
stand-in's 50 steps/s (20 ms a step) that is 0.4% of a step, which the prediction answers alone (three times it is
within the 2% allowance); at 100 steps/s, 0.8%, which it cannot (rounds run); at 300 steps/s it is predicted 2.1%
slower than the default."""
from __future__ import annotations

import importlib.metadata
import json
import stat
import sys
import textwrap
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

import alloctune
from alloctune.decide.reasons import Code
from alloctune.decide.rounds import MIN_ROUNDS
from alloctune.results.records import Backend
from alloctune.settings.conf import AllocConf
from alloctune.settings.grid import DEFAULT_GRID, expand
from alloctune.sim.replay import replay
from alloctune.sim.trace import load_trace
from alloctune.workload.command import check_command, command_workload
from clirun import in_process
from standin import PROBE_AS_ONE_GPU

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "workloads" / "traces" / "transformer-packed-h200.xz"
ES = "expandable_segments:True"
ASYNC = "backend:cudaMallocAsync"
MiB = 2**20

# The stand-in Python. Probe calls: one GPU (parsing settings goes to the real torch). Anything else is the user's
# command: it logs the setting it got ('R' marks a recording run) and writes what the hook would, for one process,
# with the peaks of the trace replayed under that setting (the `peaks` fixture). cudaMallocAsync's pool is taken as
# 6% above the program's live bytes and its context 70 MiB larger than the native allocator's (both as on the H200,
# results/transformer-packed-h200-20261129-234801).
PYTHON = """
import importlib.metadata, json, os, random, shutil, sys, time
""" + PROBE_AS_ONE_GPU + """
conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
spec = json.load(open(sys.argv[3])) if sys.argv[1:3] == ["-m", "alloctune.child.main"] else None   # a workload's
recording = bool(spec["record_trace"]) if spec else os.environ.get("ALLOCTUNE_HOOK_RECORD") == "1"
with open({log!r}, "a") as f:
    f.write(("R" if recording else "") + conf + "\\n")
with open({log!r} + ".peak", "a") as f:   # the step a confirmation may not stop before (0: none asked)
    f.write(conf + " " + os.environ.get("ALLOCTUNE_HOOK_PEAK_STEP", "0") + "\\n")
runs = len(open({log!r}).read().splitlines())
plan = json.loads({plan!r})
m = json.load(open({peaks!r}))["" if "cudaMallocAsync" in conf else conf]
reserved, context = m["peak_reserved_bytes"], 782 * 2**20
if "cudaMallocAsync" in conf:
    reserved, context = int(m["peak_requested_bytes"] * 1.06), 852 * 2**20
device = dict(device=0, peak_reserved_bytes=reserved, peak_allocated_bytes=m["peak_allocated_bytes"],
              peak_requested_bytes=m["peak_requested_bytes"], num_alloc_retries=0, num_ooms=0,
              device_peak_used_bytes=reserved + context)
rate = plan["rate"] * plan["factors"].get(conf, 1.0) * (1 + random.Random(runs).uniform(-plan["noise"], plan["noise"]))
if spec:
    if recording:
        shutil.copy({trace!r}, spec["record_trace"])
    device.pop("device")
    json.dump(dict(state="ok", env={{}}, measurement=dict(device, throughput=rate, unit="tokens",
                                                        measured_seconds=10 / rate, measured_steps=10)),
              open(spec["result"], "w"))
    sys.exit(0)
out = os.environ["ALLOCTUNE_HOOK_OUT"]
t0 = time.perf_counter()
steps = [[t0 + i / rate, 1.0] for i in range(plan["steps"])]
if recording:
    shutil.copy({trace!r}, os.path.join(out, f"trace-{{os.getpid()}}.pickle"))
json.dump(dict(pid=os.getpid(), rank=None, cuda=True, torch_version=importlib.metadata.version("torch"),
               effective_conf=conf, devices=[device], steps=steps),
          open(os.path.join(out, f"proc-{{os.getpid()}}.json"), "w"))
"""


def replayed_peaks(trace_path: Path, folder: Path) -> Path:
    """A file of the peaks of a shipped trace replayed under each setting of the default grid but the backend
    switch (which the simulator cannot replay), as the trial's own torch would: the stand-in's trials read them."""
    trace = load_trace(trace_path)
    confs = [str(c) for c in expand(DEFAULT_GRID) if not c.is_async]
    outcomes = replay(trace, confs, int(trace.meta["device_total_bytes"]), jobs=1,
                      torch_version=importlib.metadata.version("torch"))
    path = folder / "peaks.json"
    path.write_text(json.dumps({"trace": str(trace_path),
                                **{conf: asdict(o.measurement()) for conf, o in zip(confs, outcomes)}}))
    return path


@pytest.fixture(autouse=True)
def own_cache(monkeypatch, tmp_path_factory):
    """Each test's own per-user cache: the calibration a confirmed sweep measures on the stand-in GPU goes there
    (trial/calibration.py's store), never into the home folder of whoever runs the tests."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


@pytest.fixture(scope="module")
def peaks(tmp_path_factory) -> Path:
    """The transformer-packed trace's: no driver calls in its steady steps under any setting."""
    return replayed_peaks(TRACE, tmp_path_factory.mktemp("peaks"))


def standin(tmp_path: Path, peaks: Path, factors: dict | None = None, noise: float = 0.005,
            rate: float = 50.0, steps: int = 12) -> Path:
    """The stand-in GPU interpreter, its trials logged to tmp_path/ran.log, recording the trace `peaks` came from;
    `factors`: throughput per setting, against the default's `rate` (steps per second); `noise`: each run's rate
    is off by up to this share; `steps`: the steps a run reports (the trace's own number, or a short run's)."""
    (tmp_path / "bin").mkdir(exist_ok=True)
    python = tmp_path / "bin" / "python3"   # a name that says Python: a command starting with it runs under it
    plan = json.dumps({"rate": rate, "factors": factors or {}, "noise": noise, "steps": steps})
    python.write_text("#!" + sys.executable + "\n" + textwrap.dedent(PYTHON.format(
        torch=torch.__version__, python=sys.executable, trace=json.loads(peaks.read_text())["trace"],
        peaks=str(peaks), log=str(tmp_path / "ran.log"), plan=plan)))
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return python


def ran(tmp_path: Path) -> list[str]:
    return (tmp_path / "ran.log").read_text().splitlines()


def command_sweep(tmp_path: Path, peaks: Path, factors: dict | None = None, noise: float = 0.005,
                  rate: float = 50.0, steps: int = 12, **kw) -> tuple[alloctune.SweepOutcome, list[str]]:
    """`sweep -- python3 job.py` of the default grid on the stand-in GPU; what ran, in order ('R': recording)."""
    python = standin(tmp_path, peaks, factors, noise, rate, steps)
    job = tmp_path / "job.py"
    job.write_text("# run by the stand-in\n")
    spec = command_workload(check_command([str(python), str(job)]), name="job")
    outcome = alloctune.sweep(spec, out=tmp_path / "out", timeout_s=120, **kw)
    return outcome, ran(tmp_path)


def workload_sweep(tmp_path: Path, peaks: Path, **kw) -> tuple[alloctune.SweepOutcome, list[str]]:
    workload = tmp_path / "w.yaml"
    workload.write_text("name: w\nkind: hpsearch\nunit: tokens\nsteps: 1\n")
    python = standin(tmp_path, peaks)
    outcome = alloctune.sweep(workload, pythons=[str(python)], out=tmp_path / "out", timeout_s=120, **kw)
    return outcome, ran(tmp_path)


def gpu_trials(outcome) -> list:
    return [t for t in outcome.folder.trials() if t.backend == Backend.CUDA]


def measured_choice(outcome):
    [choice] = [c for c in outcome.choices if c.backend == Backend.CUDA]
    return choice


def skipped(outcome) -> set[str]:
    """Settings left unmeasured on the GPU, beside those the grid's rules skip (GC without a budget)."""
    return {s.conf for s in outcome.skipped if s.env_id == "torch-gpu" and not s.conf.startswith("garbage")}


OTHERS = {"max_split_size_mb:512", "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]"}   # the finalists beside ES
# The rounds ES runs against the default at ±0.5% noise before the sequential test accepts it: the first look, after
# MIN_ROUNDS of the 10, spends almost none of its error (decide/sequential.py), the next decides.
ROUNDS = MIN_ROUNDS + 1


def test_a_command_sweep_of_the_default_grid_in_auto_rounds_takes_ten_trials(tmp_path, peaks):
    estimates = []
    outcome, order = command_sweep(tmp_path, peaks, estimate=estimates.append, repeats="auto")
    assert outcome.backend == Backend.HYBRID   # auto, for a command on a GPU
    # one extra trial records the trace; then only ES can win: the default and ES, ROUNDS rounds, closed
    assert order == ["R"] + ["", ES] * ROUNDS + [""] and len(gpu_trials(outcome)) == 10
    choice = measured_choice(outcome)
    assert choice.best.conf == ES and choice.decision.code is Code.SAVES_MEMORY
    assert choice.precision.code is Code.PRECISION_REACHED and choice.precision.figures.detectable <= 0.02
    # the other finalists need more than the default (predicted), and the backend switch cannot beat ES
    assert skipped(outcome) == OTHERS | {ASYNC}
    # sweep.json keeps why as data: predicted to lose on memory, or the backend switch that cannot beat ES
    why = {s.conf: (s.reason, s.why.code) for s in outcome.folder.info().skipped if s.why is not None}
    assert why == {**dict.fromkeys(OTHERS, ("", Code.LOSES_ON_MEMORY)), ASYNC: ("", Code.BACKEND_SKIPPED)}
    # about 9 before anything ran (a leader and the backend switch), 10 once the rounds ran
    assert (estimates[0].trials, estimates[0].done, estimates[0].seconds_left) == (9, 0, None)
    assert (estimates[-1].trials, estimates[-1].done, estimates[-1].seconds_left) == (10, 10, 0.0)
    assert all(e.seconds_left is not None and e.seconds_done > 0 for e in estimates[1:])


def test_a_resumed_sweep_estimates_only_the_trials_it_has_left(tmp_path, peaks):
    """A noisy job runs its rounds to --max-repeats; cut before its last two trials (as an interrupt leaves it) and
    run again, the estimate counts those two, not every round again (found on the H200: 'about 41 trials' for a
    sweep of 23 with 2 left)."""
    full, order = command_sweep(tmp_path, peaks, noise=0.25, max_repeats=5, repeats="auto")
    total = len(gpu_trials(full))
    assert total > 2 * MIN_ROUNDS + 2   # the rounds went past MIN_ROUNDS: the interval stayed wide
    trials = full.folder.path / "trials.jsonl"
    trials.write_text("".join(trials.read_text().splitlines(keepends=True)[:-2]))
    info = json.loads((full.folder.path / "sweep.json").read_text())
    (full.folder.path / "sweep.json").write_text(json.dumps({**info, "finished": False}))
    estimates = []
    again, _ = command_sweep(tmp_path, peaks, noise=0.25, max_repeats=5, estimate=estimates.append,
                             repeats="auto")
    assert len(ran(tmp_path)) == len(order) + 2 and len(gpu_trials(again)) == total
    assert estimates and all(e.trials <= total + 1 for e in estimates), [e.trials for e in estimates]


def test_the_next_candidate_is_measured_once_the_winner_is_refused(tmp_path, peaks):
    """ES 10% slower: refused after its MIN_ROUNDS rounds. Then the default leads the native settings, and it
    reserves 6% above the live bytes, so the backend switch is measured: once, as its device memory is above the
    default's."""
    outcome, order = command_sweep(tmp_path, peaks, factors={ES: 0.9}, repeats="auto")
    assert order == ["R"] + ["", ES] * MIN_ROUNDS + ["", ASYNC, ""]
    choice = measured_choice(outcome)
    assert choice.best.conf == "" and choice.decision.code is Code.KEEP_DEFAULT
    why = {s.conf: r for s, r in choice.runners_up}
    assert why[ES].code is Code.TOO_SLOW
    assert why[ASYNC].code is Code.MORE_MEMORY and why[ASYNC].figures.measure.value == "peak device memory"
    assert skipped(outcome) == OTHERS


def test_a_workload_sweep_measures_every_memory_once_then_rounds_only_what_can_win(tmp_path, peaks):
    outcome, order = workload_sweep(tmp_path, peaks, backend="cuda")
    grid = order[:7]
    assert grid[0] == "" and len(set(grid)) == 7 and ASYNC in grid      # the first round: every setting
    assert order[7:] == ["", ES] * (ROUNDS - 1) + [""]                  # 14 trials (24 before memory first)
    choice = measured_choice(outcome)
    assert choice.best.conf == ES and choice.precision.code is Code.PRECISION_REACHED
    runners = {s.conf: r.code for s, r in choice.runners_up}
    assert runners.pop("") is Code.COSTS_MORE and set(runners.values()) == {Code.MORE_MEMORY} and ASYNC in runners


def test_a_hybrid_workload_sweep_counts_its_recording_as_the_first_default(tmp_path, peaks):
    outcome, order = workload_sweep(tmp_path, peaks, backend="hybrid", repeats="auto")
    # ES runs one round more than in the workload sweep: the stand-in's noise is drawn by run index, and these
    # runs' draws leave the spread a little wider at the second look
    assert order == ["R", ES] + ["", ES] * ROUNDS + [""] and len(gpu_trials(outcome)) == 11
    assert measured_choice(outcome).best.conf == ES and skipped(outcome) == OTHERS | {ASYNC}


def test_the_user_sees_the_estimate_and_what_the_gpu_ran(tmp_path, peaks):
    python = standin(tmp_path, peaks)
    job = tmp_path / "job.py"
    job.write_text("# run by the stand-in\n")
    done = in_process("sweep", "--results", tmp_path / "r", "--", python, job)   # what it prints is the subject
    assert done.returncode == 0, done.stderr
    told = [line for line in done.stderr.splitlines() if line.startswith("estimate: ")]
    assert told[0] == "estimate: about 3 trials" and told[1].startswith("estimate: about 3 trials, ")
    said = " ".join(done.stdout.split())
    assert "GPU trials: 3, " in said and "hybrid: 1 recorded the trace, 6 settings replayed, 2 measured" in said
    assert "1 pair" in said and "consistent with the prediction" in said and "predicted slowdown" in said
    # COLUMNS unset, piped: 80 columns, but for a path, which is never broken
    assert all(len(line) <= 80 for line in done.stdout.splitlines() if "/tmp" not in line)
    help_text = " ".join(in_process("sweep", "--help").stdout.split())
    assert "hybrid for '-- COMMAND'" in help_text


def planned(outcome, code: Code) -> set[str]:
    """The settings sweep.json says the speed plan left unmeasured for `code`."""
    return {s.conf for s in outcome.folder.info().skipped if s.why is not None and s.why.code == code}


def test_a_command_with_no_steady_driver_work_is_answered_in_three_gpu_trials(tmp_path, peaks, monkeypatch):
    estimates = []
    outcome, order = command_sweep(tmp_path, peaks, estimate=estimates.append)
    assert order == ["R", "", ES] and len(gpu_trials(outcome)) == 3   # the recording, then one pair
    choice = measured_choice(outcome)
    assert choice.best.conf == ES and choice.precision is None
    [said] = [r for r in choice.reasons if r.code in (Code.CONFIRMED, Code.DISAGREES)]
    assert said.code is Code.CONFIRMED and said.figures.predicted_ratio == 1.0 and said.figures.calls == 0
    assert choice.predictions[ES].answers_alone(0.02) and choice.predictions[ES].predicted_slowdown == 0.0
    assert planned(outcome, Code.ASYNC_NOT_NEEDED) == {ASYNC}
    assert planned(outcome, Code.LOSES_ON_MEMORY) == OTHERS | {"max_split_size_mb:128", "roundup_power2_divisions:4"}
    assert [(e.trials, e.done) for e in (estimates[0], estimates[-1])] == [(3, 0), (3, 3)]
    kept = json.loads((outcome.folder.path / "calibration.json").read_text())
    assert (kept["gpu"], kept["torch"]) == ("fake", torch.__version__)
    record = json.loads((outcome.folder.path / "choice.json").read_text())["choices"]
    assert record[1]["predictions"][ES]["predicted_slowdown"] == 0.0
    # resumed, with an empty per-user store: the folder's calibration and trials are read back (nothing is
    # measured or run again), and the decision is the same
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    again, order = command_sweep(tmp_path, peaks)
    assert order == ["R", "", ES] and measured_choice(again).reasons == choice.reasons
    assert not (tmp_path / "empty-cache" / "alloctune").exists()


def test_a_hybrid_workload_is_answered_in_two_gpu_trials(tmp_path, peaks):
    """A workload's recording trial is the default's repeat 0: the pair is that trial and the winner's."""
    outcome, order = workload_sweep(tmp_path, peaks, backend="hybrid")
    assert order == ["R", ES] and measured_choice(outcome).best.conf == ES
    [pair] = measured_choice(outcome).best.pairs
    assert pair[0] == gpu_trials(outcome)[0].measurement.throughput


@pytest.fixture(scope="module")
def varlen(tmp_path_factory) -> Path:
    """The transformer-varlen trace's peaks: expandable segments maps pages in its steady steps."""
    return replayed_peaks(ROOT / "workloads" / "traces" / "transformer-varlen-h200.xz",
                          tmp_path_factory.mktemp("varlen"))


def test_a_setting_predicted_slower_than_the_allowance_is_not_measured(tmp_path, varlen):
    outcome, order = command_sweep(tmp_path, varlen, rate=300.0, grid=[ES])
    assert order == ["R", ""]   # ES is not measured: the default is the confirmed answer
    choice = measured_choice(outcome)
    assert choice.best.conf == "" and ES not in {s.conf for s in outcome.settings if s.backend == Backend.CUDA}
    [why] = [s.why for s in outcome.folder.info().skipped if s.conf == ES and s.env_id == "torch-gpu"]
    assert why.code == Code.PREDICTED_TOO_SLOW and 0.02 < why.figures["slowdown"] < 0.025
    assert choice.predictions[ES].predicted_slowdown == why.figures["slowdown"]


def test_a_setting_whose_little_driver_work_its_prediction_answers_is_confirmed_by_one_pair(tmp_path, varlen):
    outcome, order = command_sweep(tmp_path, varlen, grid=[ES])
    assert order == ["R", "", ES]
    p = measured_choice(outcome).predictions[ES]
    assert 0 < p.predicted_slowdown < p.worst_slowdown <= 0.02 and measured_choice(outcome).best.conf == ES


def test_a_setting_whose_driver_work_is_not_negligible_gets_rounds(tmp_path, varlen):
    notices = []
    outcome, order = command_sweep(tmp_path, varlen, rate=100.0, grid=[ES], notice=notices.append)
    assert order[:2] == ["R", ""] and order.count(ES) >= MIN_ROUNDS and order[-1] == ""   # the default, then rounds
    assert order[2:] == [ES, ""] * order.count(ES)
    p = measured_choice(outcome).predictions[ES]
    assert 0 < p.predicted_slowdown < 0.02 < p.worst_slowdown and not p.answers_alone(0.02)
    assert any(n.startswith(f"{ES}: measured in rounds: predicted 0.") for n in notices), notices
    choice = measured_choice(outcome)
    assert choice.best.conf == ES and choice.precision.code is Code.PRECISION_REACHED


def test_cudamallocasync_is_measured_only_where_no_native_setting_meets_the_budget(tmp_path, peaks):
    """Under 9 GiB nothing native fits in the replay (expandable segments needs 9.37), so the backend switch is
    measured (without a budget it is not: the first test)."""
    notices = []
    outcome, order = command_sweep(tmp_path, peaks, budget="9GiB", notice=notices.append)
    assert order[:2] == ["R", ""] and ASYNC in order and ES not in order
    assert any(n.startswith(f"{ASYNC}: measured in rounds: no native setting fits the 9.00 GiB budget")
               for n in notices), notices


def test_a_confirmation_that_disagrees_sends_the_winner_to_rounds(tmp_path, peaks):
    notices = []
    outcome, order = command_sweep(tmp_path, peaks, factors={ES: 0.7}, notice=notices.append)
    assert order == ["R", "", ES] + ["", ES] * (MIN_ROUNDS - 1) + [""]   # refused at the first look
    assert any(n.startswith(f"{ES}: one confirmation pair") and "disagrees with the prediction, slower" in n
               for n in notices), notices
    choice = measured_choice(outcome)
    assert choice.best.conf == "" and dict((s.conf, r.code) for s, r in choice.runners_up)[ES] is Code.TOO_SLOW


def test_a_winner_whose_driver_calls_are_a_material_part_of_a_step_is_not_confirmed_inside_one_process(tmp_path,
                                                                                                       varlen):
    """At 70 steps/s expandable segments' maps are 0.6% of a step (beyond `IN_PROCESS_DRIVER_SHARE`) and still
    answered by its prediction: a pair of processes confirms it, and says why not one process."""
    from alloctune.decide.confirm import IN_PROCESS_DRIVER_SHARE, driver_share

    notices = []
    outcome, order = command_sweep(tmp_path, varlen, rate=70.0, grid=[ES], notice=notices.append)
    assert order == ["R", "", ES]
    p = measured_choice(outcome).predictions[ES]
    assert (share := driver_share(p)) is not None and share > IN_PROCESS_DRIVER_SHARE and p.answers_alone(0.02)
    assert not any("inside one process, in blocks" in n for n in notices)
    [why] = [n for n in notices if n.startswith(f"{ES}: to be confirmed by a pair of processes, not inside one")]
    assert f"prices driver calls at {share:.1%} of a step" in why


def test_the_confirmations_run_to_the_step_of_their_settings_replayed_peak(tmp_path, peaks):
    """Each of the pair is held to the step in which the replay of its setting reached peak reserved (its steps
    before the peak, plus one), so that the memory it measures covers the peak; the recording runs as it is. This
    trace peaks in its second step, long before the automatic window could end: nothing to say."""
    notices: list[str] = []
    outcome, order = command_sweep(tmp_path, peaks, notice=notices.append)
    assert not any("its confirmation runs" in n for n in notices)
    assert order == ["R", "", ES]
    replayed = {t.conf: t.measurement.steps_before_peak for t in outcome.folder.trials()
                if t.backend == Backend.SIM and t.measurement is not None}
    assert replayed[""] is not None and replayed[ES] is not None
    held = [line.split(" ") for line in (tmp_path / "ran.log.peak").read_text().splitlines()]
    assert held == [["", "0"], ["", str(replayed[""] + 1)], [ES, str(replayed[ES] + 1)]]
    assert [t.measurement.held_to_step for t in gpu_trials(outcome) if t.measurement is not None] == \
        [None, replayed[""] + 1, replayed[ES] + 1]


def test_a_confirmation_held_past_its_automatic_window_says_so(tmp_path):
    """The detection trace (data-dependent memory) peaks in step 66 of 70, long after the warm-up and the
    automatic window's 20 steady steps: the sweep says how far each confirmation runs and why."""
    detection = replayed_peaks(ROOT / "workloads" / "traces" / "detection-h200.xz", tmp_path)
    notices: list[str] = []
    command_sweep(tmp_path, detection, grid=[ES], steps=70, notice=notices.append)
    said = [n for n in notices if "its confirmation runs" in n]
    assert said == [f"{label}: its confirmation runs to step 66 of 70, where its replay reached peak reserved, so "
                    f"that the memory it measures covers the peak" for label in ("default", ES)]


@pytest.mark.parametrize("peak, early, said", [
    (22, True, None),                                                        # within the window's earliest end
    (23, False, None),                                                       # not a confirmation
    (23, True, "to step 23 of 70"),
    (71, True, "to the job's end (its replay peaked in the teardown)"),      # past the recording's 68 steady steps
])
def test_how_far_a_held_confirmation_runs_is_said_only_where_it_runs_longer(peak, early, said):
    from alloctune.sweeper.confirm import _held
    from alloctune.trial.task import TrialTask

    spec = command_workload(check_command([sys.executable, "job.py"]), name="job")   # 2 warm-up steps
    task = TrialTask(spec.to_dict(), spec.digest(), AllocConf(), 0, sys.executable, "torch-gpu", early_stop=early,
                     peak_step=peak)
    assert _held(task, (0.02, 68)) == said
    assert _held(task, None) == (None if said is None else f"to step {peak}")   # no recording's window to count
