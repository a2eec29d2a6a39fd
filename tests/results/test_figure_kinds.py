"""Figures read back are held to their kind's range (results/records.py: Bytes, Count, Rate, Seconds, PerStep;
results/calibration.py: Micros, Runs), so that no sum, product or ratio of them reaches infinity: a folder whose
calibration, driver work and step time sit at the ends of their ranges is decided and written, and one figure past
them (a calibration cost or a driver call count of 1e308, a time of 5e-324) is one line naming the file and the
field, for report and compare alike. A reason read back without a figure its words need is one line too."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from bounded import bounded_cli, one_line_error
from clirun import ROOT, in_process
from folders import make_folder, trial

from alloctune.results.calibration import MAX_MICROS, Micros, Runs
from alloctune.results.records import (LEAST_SECONDS, MAX_BYTES, MAX_COUNT, MAX_RATE, MAX_SECONDS, Budget, Bytes,
                                       Count, DriverWork, Measurement, PerStep, Rate, Seconds, TrialRecord,
                                       TrialState)
from alloctune.results.typed import problem

CALIBRATION = ROOT / "tests" / "fixtures" / "calibration" / "h200-torch2.11.json"
ES = "expandable_segments:True"
WORK = ("device_allocs", "device_alloc_bytes", "device_frees", "device_free_bytes", "maps", "map_bytes", "unmaps",
        "unmap_bytes", "syncs", "alloc_retries", "gc_passes")

# Each kind: (the kind, its least and largest figure, a figure below and one above them).
KINDS = [(Bytes, 0, MAX_BYTES, -1, MAX_BYTES + 1), (Count, 0, MAX_COUNT, -1, MAX_COUNT + 1),
         (Budget, 1, MAX_BYTES, 0, MAX_BYTES + 1), (Rate, 0.0, MAX_RATE, -1e-300, 1e308),
         (Seconds, LEAST_SECONDS, MAX_SECONDS, 5e-324, 1e308), (PerStep, 0.0, float(MAX_BYTES), -1.0, 1e308),
         (Micros, 0.0, MAX_MICROS, -1.0, 1e308), (Runs, 1, MAX_COUNT, 0, MAX_COUNT + 1)]


@pytest.mark.parametrize("kind, least, most, below, above", KINDS)
def test_each_kind_takes_its_range_and_refuses_what_lies_outside(kind, least, most, below, above):
    assert problem(kind, least) is None and problem(kind, most) is None
    for outside in (below, above):
        assert "expected " in problem(kind, outside), (kind, outside)


def hybrid(path, seconds: float = 1.0, steps: int = 50, work: float = 3.0, micros: float | None = None):
    """A measured default (`seconds` over `steps` steps a trial), the default and expandable_segments replayed with
    `work` driver calls and bytes of each kind a step, and the committed H200 calibration (every cost `micros`
    where given) in calibration.json: what a hybrid sweep's decision prices."""
    measured = [replace(t, measurement=replace(t.measurement, measured_seconds=seconds, measured_steps=steps))
                for t in (trial("", i) for i in range(3))]
    replayed = [TrialRecord(workload="w", workload_hash="h1", conf=conf, repeat=0, env_id="sim:torch-2.11.0",
                            backend="sim", state=TrialState.OK, env={"torch": "2.11.0+cu130", "gpu": "NVIDIA H200"},
                            measurement=Measurement(peak_reserved_bytes=gib * 2**30, peak_allocated_bytes=9 * 2**30,
                                                    driver_work=DriverWork(steps, **dict.fromkeys(WORK, work))))
                for conf, gib in (("", 15), (ES, 10))]
    folder = make_folder(path, measured + replayed)
    calibration = json.loads(CALIBRATION.read_text())
    if micros is not None:
        for kind in ("device_alloc", "device_free", "map", "unmap", "sync"):
            calibration[kind].update(fixed_us=micros, per_mib_us=micros)
    (folder.path / "calibration.json").write_text(json.dumps(calibration))
    return folder


@pytest.mark.parametrize("seconds, steps, work, micros", [
    (LEAST_SECONDS, MAX_COUNT, float(MAX_BYTES), MAX_MICROS),   # the most driver time against the shortest step
    (MAX_SECONDS, 1, 0.0, 0.0),
    (1.0, 50, 3.0, None),
])
def test_figures_at_the_ends_of_their_ranges_are_decided_and_written_finite(tmp_path, seconds, steps, work, micros):
    folder = hybrid(tmp_path / "r", seconds, steps, work, micros)
    run = in_process("report", folder.path)
    assert run.returncode == 0, run.stderr
    choice = json.loads((folder.path / "choice.json").read_text(), parse_constant=pytest.fail)
    assert choice["choices"] and "inf" not in (folder.path / "summary.md").read_text()
    figures = [v for c in choice["choices"] for r in c.get("reasons_data", []) for v in r["figures"].values()
               if isinstance(v, float)]
    assert all(math.isfinite(v) for v in figures)


def _damage_trial(folder, conf: str, change) -> int:
    """Apply `change` to the first trial line of `conf` in trials.jsonl; its line number."""
    lines = (folder.path / "trials.jsonl").read_text().splitlines()
    number = next(n for n, line in enumerate(lines, 1) if json.loads(line)["conf"] == conf
                  and json.loads(line)["backend"] == ("sim" if conf else "cuda"))
    record = json.loads(lines[number - 1])
    change(record)
    lines[number - 1] = json.dumps(record)
    (folder.path / "trials.jsonl").write_text("\n".join(lines) + "\n")
    return number


def test_a_figure_past_its_kind_is_one_line_naming_the_file_and_the_field(tmp_path):
    costly, busy, instant = (hybrid(tmp_path / name) for name in ("costly", "busy", "instant"))
    calibration = json.loads((costly.path / "calibration.json").read_text())
    calibration["device_alloc"]["fixed_us"] = 1e308
    (costly.path / "calibration.json").write_text(json.dumps(calibration))
    line = _damage_trial(busy, ES, lambda r: r["measurement"]["driver_work"].update(device_allocs=1e308))
    default = _damage_trial(instant, "", lambda r: r["measurement"].update(measured_seconds=5e-324))
    said = {costly: "calibration.json: field 'device_alloc.fixed_us': expected microseconds from 0 to 1e+09, "
                    "got 1e+308",
            busy: f"trials.jsonl:{line}: field 'measurement.driver_work.device_allocs': expected a figure per step "
                  f"from 0 to 1.15292e+18, got 1e+308",
            instant: f"trials.jsonl:{default}: field 'measurement.measured_seconds': expected 0 or a number of "
                     f"seconds from 1e-12 to 1e+09, got 5e-324"}
    for folder, says in said.items():
        before = {p.name: p.read_bytes() for p in folder.path.iterdir()}
        commands = [("report", folder.path)]
        if folder is not costly:   # compare reads the trials, not the calibration
            commands.append(("compare", folder.path, folder.path, "-o", tmp_path / "compared"))
        for args in commands:
            assert f"{folder.path}/{says}" in one_line_error(bounded_cli(*args)), args
        assert {p.name: p.read_bytes() for p in folder.path.iterdir()} == before


@pytest.mark.parametrize("code, figures, needed", [
    ("async_not_needed", {"winner": None, "winner_bytes": 5, "budget_bytes": None, "named": False}, "winner"),
    ("precision_reached", {"detectable": None, "rounds": 3, "goal": 0.02}, "detectable"),
    ("growing", {"repeats": 3, "checked": 3, "growing": 1}, "at_k"),
])
def test_a_reason_without_a_figure_its_words_need_is_one_line(tmp_path, code, figures, needed):
    folder = hybrid(tmp_path / "r")
    info = json.loads((folder.path / "sweep.json").read_text())
    info["skipped"] = [{"conf": "backend:cudaMallocAsync", "env_id": "torch-2.11.0", "reason": "",
                        "why": {"code": code, "figures": figures}}]
    (folder.path / "sweep.json").write_text(json.dumps(info))
    measured = make_folder(tmp_path / "m", [trial(c, i) for c in ("", "backend:cudaMallocAsync") for i in range(3)])
    for args in (("report", folder.path), ("compare", folder.path, measured.path, "-o", tmp_path / "compared")):
        error = one_line_error(bounded_cli(*args))
        assert f"field {needed!r}: the {code} reason needs it, got None" in error, args
