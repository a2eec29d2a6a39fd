"""`alloctune fit` on traces at several values of one job (synthetic: real ones come from the GPU) and `alloctune
fleet` on the shipped H200 traces, as a user runs them: the answers against replays at the recorded points, the
results folder read back, and bad input as one line and exit 2."""
from __future__ import annotations

import json
import sys

import pytest
import torch

from clirun import ROOT, cli, in_process
from scaled import CONTEXT, H200_BYTES, scaled_trace, write_traces

from alloctune.results.fits import FitFile, OverheadFrom
from alloctune.results.names import FIT_FILE, PLOT_FILE
from alloctune.results.typed import load_json
from alloctune.sim.replay import replay
from alloctune.units import MiB

TRACES = sorted((ROOT / "workloads" / "traces").glob("*.xz"))
GRID = ["--conf", "default", "--conf", "expandable_segments:True"]


def _fit(*args) -> dict:
    run = in_process("fit", "--param", "batch", *GRID, "--jobs", "1", "--json", *args)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_a_card_between_two_recorded_values_gets_the_value_between_and_the_replays_agree(tmp_path):
    traces = write_traces(tmp_path, [8, 16, 32])
    need = {v: replay(scaled_trace(v), "", 1 << 60, overhead_bytes=CONTEXT, jobs=1)[0].result.peak_reserved_bytes
            for v in (16, 24, 32)}
    card = (need[24] + need[32]) // 2 + CONTEXT      # 24 fits by the curve, 32 does not, by its replay
    fit = _fit(*traces, "--cards", str(card))
    [limit] = fit["limits"]
    default = next(a for a in limit["answers"] if a["conf"] == "default")   # the shared names (vocabulary.py)
    assert default["runs"] == [True, True, False]
    assert (default["largest"], default["basis"], default["curve"], default["next_value"]) == \
        (24, "predicted", "interpolated", 32)
    assert abs(default["need_bytes"] - need[24]) < 0.01 * need[24]
    assert default["copies"] == [1, 1, 0] and limit["capacity_bytes"] == card - CONTEXT
    curve = fit["settings"][0]["reserved"]
    assert curve["points"] == 3 and curve["loo_weak"] and curve["max_error"] < 0.01


def test_json_prints_the_answer_in_the_shared_names_while_fit_json_keeps_its_own_as_the_help_says(tmp_path):
    traces = write_traces(tmp_path, [8, 16, 32])
    printed = _fit(*traces, "--budget", "0.035", "--out", tmp_path / "fit")
    stored = load_json(tmp_path / "fit" / FIT_FILE)
    shown, kept = (next(a for a in data["limits"][0]["answers"] if a["conf"] in ("", "default")) for data in
                   (printed, stored))
    assert (shown["conf"], shown["basis"], shown["curve"], kept["conf"], kept["basis"], kept["curve"]) == \
        ("default", "predicted", "extrapolated", "", "predicted", "extrapolated")
    assert shown["margin"] == kept["margin"] == stored["settings"][0]["reserved"]["loo_error"]
    assert printed["overhead_from"] == stored["overhead_from"] == "measured"
    words = " ".join(in_process("fit", "--help", env={"COLUMNS": "200"}).stdout.split())
    assert "fit.json's object" not in words
    assert ("--json print the answer as JSON in the names every command's --json shares: a setting 'default' for "
            "the default, each point's peaks replayed without a memory limit as unlimited_peak_reserved_bytes and "
            "unlimited_peak_allocated_bytes, each answer's basis replayed or predicted (with its curve and margin; "
            "margin null with margin_why where nothing tested the curve), where the context came from as "
            "overhead_from; fit.json keeps its stored form ('' for the default, the peaks as peak_*_bytes)") in words


def test_a_budget_is_a_share_of_the_recording_gpu_and_values_beyond_the_recorded_are_extrapolated(tmp_path):
    traces = write_traces(tmp_path, [8, 16, 32])
    fit = _fit(*traces, "--budget", "0.035")
    [limit] = fit["limits"]
    assert limit["budget"] == "0.035" and limit["budget_bytes"] == int(0.035 * H200_BYTES)
    default = next(a for a in limit["answers"] if a["conf"] == "default")
    assert (default["basis"], default["curve"], default["largest"], default["next_value"], default["capped"]) == \
        ("predicted", "extrapolated", 56, 64, False)
    per_step = 8 * (6 * 8 + 3) * MiB   # a step of 8 adds 8 units of six 8 MiB activations and a 3 MiB temporary
    assert default["need_bytes"] <= limit["capacity_bytes"] < default["need_bytes"] + per_step


def test_the_square_of_a_sequence_length_is_fitted_by_a_parabola_and_the_folder_reads_back(tmp_path):
    traces = write_traces(tmp_path, [128, 256, 384, 512], per_unit=MiB, square=4096)
    out = tmp_path / "fit"
    run = in_process("fit", "--param", "seq", *traces, *GRID, "--cards", "24GiB,80GiB", "--jobs", "1",
                     "--out", out, env={"COLUMNS": "100"})
    assert run.returncode == 0, run.stderr
    assert "parabola in seq" in run.stdout and "On a 24 GiB card" in run.stdout
    fit = FitFile.from_json(load_json(out / FIT_FILE), str(out / FIT_FILE))
    assert fit.values == [128, 256, 384, 512] and fit.step == 128
    assert fit.overhead_from is OverheadFrom.MEASURED
    assert fit.settings[0].reserved is not None and len(fit.settings[0].reserved.coefficients) == 3
    assert (out / PLOT_FILE).stat().st_size > 10_000
    small, large = fit.limits
    assert all(a.largest is not None and b.largest is not None and a.largest < b.largest
               for a, b in zip(small.answers, large.answers))


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    traces = write_traces(tmp_path, [8, 16])
    for args, says in [
        (["--param", "batch=8,x", "--", "python3", "-c", "pass"], "expected at least two distinct whole numbers"),
        (["--param", "8=1,2", "--", "python3", "-c", "pass"], "expected a name such as batch"),
        (["--param", "batch", "--trace", "8=a.xz"], "two values at least"),
        (["--param", "batch", "--trace", "8=a.xz", "--trace", "8=b.xz"],
         "--trace '8=b.xz': the value 8 is given twice ('a.xz' first): one trace per value"),
        (["--param", "batch", "--trace", "8"], "--trace '8': expected VALUE=FILE"),
        (["--param", "batch"], "give your command after '--'"),
        (["--param", "batch", *traces, "--cards", "0"], "card memories above 0"),
        (["--param", "batch", *traces, "--confirm", "default"], "--confirm runs"),
        (["--param", "batch=8,16,32", *traces], "--param gives the values"),
    ]:
        run = in_process("fit", *args)
        assert run.returncode == 2 and says in run.stderr, (args, run.stderr)
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_a_command_without_a_gpu_is_refused_in_one_line_before_anything_runs(tmp_path):
    run = cli("fit", "--param", "batch=8,16", "--out", tmp_path / "f", "--", "python3", "-c", "print({batch})")
    assert run.returncode == 2 and "needs a CUDA GPU" in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert not list((tmp_path / "f").glob("trace.*"))


def test_fleet_ranks_the_shipped_jobs_and_names_the_setting_that_loses_least():
    run = in_process("fleet", *TRACES, "--jobs", "1", "--json")
    assert run.returncode == 0, run.stderr
    ranking = json.loads(run.stdout)
    # On the H200 recordings expandable segments reserved the least for every shipped job.
    assert ranking["best"] == "expandable_segments:True"
    first, *rest = ranking["settings"]
    assert first["worst"] == 0.0 and len(first["jobs"]) == len(TRACES)
    worst = [s["worst"] for s in rest]
    assert worst == sorted(worst) and all(w > 0 for w in worst)
    assert [s["conf"] for s in ranking["not_simulated"]] == ["backend:cudaMallocAsync"]
    text = in_process("fleet", *TRACES[:2], "--conf", "default", "--conf", "max_split_size_mb:128", "--jobs", "1")
    assert text.returncode == 0 and "Least loss across the 2 jobs: default" in text.stdout


def test_fleet_on_a_smaller_card_counts_a_job_that_needs_alloc_retries():
    # On 24 GiB the CNN needs alloc retries under the default (42 GiB on the H200): it fits, with them, and ranks
    # after expandable segments (20.4 GiB), which need none.
    run = in_process("fleet", *TRACES[:2], *GRID, "--device-memory", "24GiB", "--jobs", "1", "--json")
    assert run.returncode == 0, run.stderr
    expandable, default = json.loads(run.stdout)["settings"]
    assert expandable["conf"] == "expandable_segments:True" and not expandable["failed"] and not expandable["retried"]
    assert default["failed"] == [] and default["retried"] == ["cnn-varres-h200"]


def test_fleet_bad_input_is_one_line_and_exit_2():
    for args, says in [([str(TRACES[0]), str(TRACES[0])], "each job's trace once"),
                       (["-", "-"], "'-' (stdin) can be given once"),
                       ([str(TRACES[0]), "--conf", "max_split_size_mb:x"], "max_split_size_mb")]:
        run = in_process("fleet", *args)
        assert run.returncode == 2 and says in run.stderr, (args, run.stderr)


def test_the_value_goes_where_the_command_says_it_else_into_the_environment():
    from alloctune.sweeper.fitrun import at_value

    assert at_value(["python", "t.py", "--batch-size", "{batch}", "--x={batch}"], "batch", 16) == \
        (["python", "t.py", "--batch-size", "16", "--x=16"], {})
    assert at_value(["python", "t.py"], "BATCH", 8) == (["python", "t.py"], {"BATCH": "8"})


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_fit_records_a_command_at_each_value_and_the_gpu_confirms_the_answer(tmp_path):
    # n blocks of 64 MiB live at once, a segment each: n * 64 MiB reserved, exactly a line. Under 800 MiB, 12 blocks
    # (768 MiB) fit and 16 do not: the answer lies between the recorded 8 and 16, so 12 is recorded too and its
    # replay answers.
    script = tmp_path / "job.py"
    script.write_text("import sys, torch\nx = [torch.empty(2**26, dtype=torch.uint8, device='cuda') "
                      "for _ in range(int(sys.argv[1]))]\ntorch.cuda.synchronize()\n")
    out = tmp_path / "fit"
    run = cli("fit", "--param", "n=4,8,16", "--conf", "default", "--budget", "800MiB", "--confirm", "default",
              "--out", out, "--json", "--", sys.executable, script, "{n}")
    assert run.returncode == 0, run.stderr
    fit = FitFile.from_json(load_json(tmp_path / "fit" / FIT_FILE), FIT_FILE)
    [limit] = fit.limits
    [answer] = limit.answers
    assert (answer.largest, answer.basis, answer.next_value, answer.exact) == (12, "replayed", 16, True)
    assert fit.exact is not None and fit.exact.values == [12]
    assert [(c.value, c.predicted_runs) for c in limit.confirmed] == [(12, True), (16, False)]
    assert all(c.agreed for c in limit.confirmed), limit.confirmed
    assert sorted(p.name for p in out.glob("trace.*")) == ["trace.n-12.xz", "trace.n-16.xz", "trace.n-4.xz",
                                                           "trace.n-8.xz"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_copies_at_once_run_together_on_the_gpu_in_the_memory_the_prediction_shares(tmp_path):
    # n blocks of 64 MiB and a context each: at n=2 several copies share a 2 GiB budget and one context, while a
    # ballast holds the rest of the GPU; every copy runs
    script = tmp_path / "job.py"
    script.write_text("import sys, time, torch\nx = [torch.empty(2**26, dtype=torch.uint8, device='cuda') "
                      "for _ in range(int(sys.argv[1]))]\ntorch.cuda.synchronize()\ntime.sleep(2)\n")
    run = cli("fit", "--param", "n=2,4", "--conf", "default", "--budget", "2GiB", "--confirm", "default",
              "--confirm-copies", "2", "--extra-recordings", "0", "--out", tmp_path / "fit", "--json", "--",
              sys.executable, script, "{n}")
    assert run.returncode == 0, run.stderr
    fit = FitFile.from_json(load_json(tmp_path / "fit" / FIT_FILE), FIT_FILE)
    [limit] = fit.limits
    [copies] = limit.copies_confirmed
    assert copies.predicted >= 2 and len(copies.runs) == copies.predicted and copies.said, copies
    leave = limit.capacity_bytes + fit.overhead_bytes
    assert copies.free_bytes is not None and abs(copies.free_bytes - leave) < 64 * MiB


H200_BATCHES = {v: ROOT / "tests" / "fixtures" / "fits" / f"hf-trainer-gpt2-batch-{v}.xz" for v in (8, 16, 32)}


def test_on_traces_recorded_on_the_h200_every_answer_leaves_room_it_has(tmp_path):
    """A setting's largest value is judged by its replay under the limit, and so is the room it leaves: never less
    than none (max_split_size_mb reserves far more without a limit than under one; the first version took the
    unlimited peak and printed -46 GiB of headroom on a 48 GiB card)."""
    traces = [f"--trace={v}={path}" for v, path in H200_BATCHES.items()]
    out = json.loads(in_process("fit", "--param", "batch", *traces, "--cards", "24GiB,48GiB,80GiB", "--json",
                                "--out", str(tmp_path / "fit")).stdout)
    answers = [a for limit in out["limits"] for a in limit["answers"] if a["largest"] is not None]
    assert answers and all(0 <= a["headroom_bytes"] and a["need_bytes"] <= limit["capacity_bytes"]
                           for limit in out["limits"] for a in limit["answers"] if a["largest"] is not None)
    by = {(limit["device_bytes"], a["conf"]): a["largest"] for limit in out["limits"] for a in limit["answers"]}
    # the default's line misses its points by up to 10% (leave-one-out 36%): batch 24 is not promised on the curve
    # alone (the bare line put it at 37.7 GiB; on the H200 it retried an allocation under 42.9 GiB)
    assert by[(48 * 2**30, "default")] == 16 and by[(48 * 2**30, "max_split_size_mb:128")] == 16
    assert by[(48 * 2**30, "expandable_segments:True")] == 24   # a line within 0.4% of its points
