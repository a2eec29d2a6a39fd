"""One vocabulary (results/vocabulary.py): the same trace through replay, search, fleet and diagnose gives each
setting under the same keys with the same figures, the default named "default" everywhere, every replayed figure
saying it was replayed and the torch the replay followed; a ratio never reads 1.00x beside a direction."""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch
from clirun import ROOT, in_process
from scaled import write_traces

from alloctune.decide.speed import PREDICTION_ERROR
from alloctune.report.analysis import named
from alloctune.results.fits import FitFile
from alloctune.results.folder import ResultsFolder
from alloctune.results.names import FIT_FILE
from alloctune.results.typed import load_json
from alloctune.results.vocabulary import (BASIS, FITS, PEAK_ALLOCATED, PEAK_RESERVED, SETTING, SIMULATED_TORCH,
                                         setting_name, times)
from alloctune.sim.target import simulated_torch
from alloctune.sim.trace import ALLOC, FREE, Trace, save_trace

MiB = 2**20
SHARED = (SETTING, BASIS, FITS, PEAK_RESERVED, PEAK_ALLOCATED, SIMULATED_TORCH)
CONFS = ("default", "expandable_segments:True", "max_split_size_mb:128")


def _trace(path) -> None:
    """Growing requests, each freed before a larger one comes: the default's cache keeps each size's segment.
    Recorded, as it says, under the torch installed here, so that every command follows the same one."""
    kinds, ids, sizes = [], [], []
    for i, size in enumerate([30 * MiB, 50 * MiB, 70 * MiB, 90 * MiB] * 3):
        kinds += [ALLOC, ALLOC, FREE]
        ids += [2 * i, 2 * i + 1, 2 * i]
        sizes += [size, MiB // 2, size]
    meta = {"torch_version": torch.__version__, "device_total_bytes": 2**30, "overhead_bytes": 0}
    save_trace(Trace(kinds, ids, sizes, [0] * len(kinds), 0, meta), path)


def _json(*args) -> dict:
    run = in_process(*args, "--json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def _by_setting(rows: list[dict]) -> dict[str, dict]:
    return {row[SETTING]: row for row in rows}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, dict]:
    path = tmp_path_factory.mktemp("vocabulary") / "job.xz"
    _trace(path)
    _trace(path.with_name("again.xz"))
    confs = [a for c in CONFS for a in ("--conf", c)]
    return {"replay": _json("replay", path, *confs), "search": _json("search", path, "--max-settings", "40"),
            "fleet": _json("fleet", path, path.with_name("again.xz"), *confs)}


def test_replay_and_search_give_a_setting_the_same_keys_and_figures(outputs):
    replayed = _by_setting(outputs["replay"]["results"])
    searched = _by_setting(outputs["search"]["candidates"])
    assert set(CONFS) <= set(replayed) and "default" in searched and "" not in searched
    for conf in set(replayed) & set(searched):
        assert {k: replayed[conf][k] for k in SHARED} == {k: searched[conf][k] for k in SHARED}
    assert {row[BASIS] for row in [*replayed.values(), *searched.values()]} == {"replayed"}
    assert outputs["replay"][SIMULATED_TORCH] == outputs["search"][SIMULATED_TORCH] == simulated_torch(
        torch.__version__)


def test_fleet_names_and_figures_are_replays(outputs):
    replayed = _by_setting(outputs["replay"]["results"])
    fleet = _by_setting(outputs["fleet"]["settings"])
    assert set(fleet) == set(CONFS) and outputs["fleet"]["best"] in fleet
    for conf, row in fleet.items():
        job = row["jobs"][0]
        assert (job[BASIS], job[FITS], job[PEAK_RESERVED]) == ("replayed", replayed[conf][FITS],
                                                              replayed[conf][PEAK_RESERVED])
        assert job["best"] in fleet
    assert {j[SIMULATED_TORCH] for j in outputs["fleet"]["jobs"]} == {outputs["replay"][SIMULATED_TORCH]}


def test_diagnose_names_settings_as_replay_does(tmp_path):
    """An OOM snapshot made here: diagnose's table and replay's results under the same names and keys."""
    big = 600 * MiB
    entries = [{"action": "segment_alloc", "addr": 0, "size": big, "stream": 0},
               {"action": "alloc", "addr": 0, "size": big, "stream": 0},
               {"action": "oom", "size": big, "device_free": 0, "stream": 0}]
    snapshot = {"device_traces": [entries], "alloctune": {"torch_version": torch.__version__,
                                                          "device_total_bytes": 2**30},
                "segments": [{"device": 0, "address": 0, "total_size": big, "stream": 0, "segment_type": "large",
                              "allocated_size": big, "active_size": big, "requested_size": big,
                              "blocks": [{"address": 0, "size": big, "requested_size": big,
                                          "state": "active_allocated"}]}]}
    path = tmp_path / "oom.pickle"
    path.write_bytes(pickle.dumps(snapshot))
    diagnosed = _by_setting(_json("diagnose", path)["replay"]["outcomes"])
    replayed = _by_setting(_json("replay", path, *(a for c in diagnosed for a in ("--conf", c)))["results"])
    assert "default" in diagnosed and diagnosed["default"][FITS] is False
    for conf in set(diagnosed) & set(replayed):
        assert {k: diagnosed[conf][k] for k in SHARED} == {k: replayed[conf][k] for k in SHARED}
    # the text states the torch the replay followed, as replay's header does
    followed = f"replayed with torch {simulated_torch(torch.__version__)}'s allocator"
    diagnosed = " ".join(in_process("diagnose", path).stdout.split())
    assert f"The trace {followed} (confidence" in diagnosed and "trace, replayed" not in diagnosed
    assert followed in " ".join(in_process("replay", path).stdout.split())


@pytest.mark.parametrize("ratio, digits, text", [(0.997, 2, "0.997x"), (1.003, 2, "1.003x"), (1.0, 2, "1.00x"),
                                                 (1.05, 2, "1.05x"), (0.9996, 3, "0.9996x"), (0.919, 3, "0.919x")])
def test_a_ratio_never_reads_one_unless_it_is(ratio, digits, text):
    assert times(ratio, digits) == text


def test_fit_names_settings_and_bases_as_every_command_does(tmp_path):
    """fit's --json: the default named "default", each answer replayed where replays decide it and predicted where a
    curve does (which part of the curve apart), the torch its replays followed as replay states it; fit.json keeps
    its stored names (the default "", the curve's basis), which its typed reader reads."""
    traces = write_traces(tmp_path, [8, 16, 32])
    said = _json("fit", "--param", "batch", *traces, "--conf", "default", "--conf", "expandable_segments:True",
                 "--budget", "0.035", "--jobs", "1", "--out", tmp_path / "fit")
    answers = [a for limit in said["limits"] for a in limit["answers"]]
    assert {s[SETTING] for s in said["settings"]} == {a[SETTING] for a in answers} == {"default",
                                                                                     "expandable_segments:True"}
    assert {a[BASIS] for a in answers} <= {"replayed", "predicted"}
    assert all((a["curve"] is None) == (a[BASIS] == "replayed") for a in answers if a["largest"] is not None)
    assert said[SIMULATED_TORCH] == _json("replay", tmp_path / "job-8.xz")[SIMULATED_TORCH] == "2.11"
    stored = FitFile.from_json(load_json(tmp_path / "fit" / FIT_FILE), FIT_FILE)
    assert [s.conf for s in stored.settings] == ["", "expandable_segments:True"]
    assert stored.shared_json(said[SIMULATED_TORCH]) == said


def test_a_sweeps_choices_name_settings_and_bases_as_replay_does(tmp_path):
    """sweep --json, and report --json, which prints the same choices: the default named "default" in the settings
    and the runners-up, each setting's figures replayed and equal to replay's of the same trace, the torch the
    replays followed (the job's, which the sweep's notices set beside the trace's); choice.json keeps the
    allocator's own value ("" for the default), which its typed reader reads."""
    swept = _json("sweep", ROOT / "workloads" / "transformer-varlen.yaml", "--preset", "h200", "--results", tmp_path)
    [choice] = swept["choices"]
    settings = _by_setting(choice["settings"])
    assert "default" in settings and "" not in settings
    assert {r[SETTING] for r in choice["runners_up"]} <= set(settings) - {choice[SETTING]}
    confs = [a for c in settings for a in ("--conf", c)]
    replayed = _by_setting(_json("replay", ROOT / "workloads" / "traces" / "transformer-varlen-h200.xz",
                                 *confs)["results"])
    assert {conf: (row[BASIS], row[PEAK_RESERVED], row[PEAK_ALLOCATED]) for conf, row in settings.items()} == \
        {conf: ("replayed", replayed[conf][PEAK_RESERVED], replayed[conf][PEAK_ALLOCATED]) for conf in settings}
    # the trace's torch, as replay's: a sweep that only replays is not told the job's
    assert choice[SIMULATED_TORCH] == _json("replay", ROOT / "workloads" / "traces" / "transformer-varlen-h200.xz",
                                            "--conf", "default")[SIMULATED_TORCH]
    assert choice["baseline"] == "default"   # schema 1's key for the default, named as everywhere
    folder = Path(swept["folder"])
    stored = json.loads((folder / "choice.json").read_text())["choices"][0]
    assert "" in {s["conf"] for s in stored["settings"]} and "baseline" not in stored
    assert _json("report", folder)[0]["choices"] == swept["choices"]
    # export carries the same words: replayed, and the torch the replays followed, not this machine's CPU build
    exported = json.loads(in_process("export", folder, "--format", "json").stdout)
    assert (exported[BASIS], exported[SIMULATED_TORCH], exported["torch_version"]) == \
        ("replayed", choice[SIMULATED_TORCH], choice["torch_version"])
    assert f"(NVIDIA H200); replayed with torch {choice[SIMULATED_TORCH]}'s allocator from a trace" in \
        exported["source"]
    assert f"torch {torch.__version__}" not in exported["source"]


def test_a_choices_predictions_are_named_and_marked_predicted_with_their_measured_error():
    """A committed hybrid sweep's choice (its replays priced by the GPU's calibration): in --json each prediction
    is under the setting's name, says it is predicted, and carries how far predictions were from measurements."""
    folder = ROOT / "results" / "h100-in-process-2026-12-06c" / "results" / "cmd-gpt_train-20261206-150733"
    records = ResultsFolder(folder).choices()
    assert {r.backend.value for r in records} == {"sim", "cuda"} and all(r.predictions for r in records)
    for record in records:
        data = named(record)
        assert "" in record.predictions and set(data["predictions"]) == {setting_name(c) for c in record.predictions}
        for p in data["predictions"].values():
            assert p[BASIS] == "predicted"
            assert (p["measured_error"]["low"], p["measured_error"]["high"]) == (PREDICTION_ERROR.low,
                                                                               PREDICTION_ERROR.high)
        assert {s[BASIS] for s in data["settings"]} == {"replayed" if record.simulated else "measured"}
