"""Device memory that other processes skewed, in a results folder an earlier version wrote (its trials carry no
device_memory_source and no overhead figure: total - free, every process on the GPU): reported again with
`alloctune report`, the choice comes out right and the summary says which figure was not used. No committed H200
folder shows contamination (device - reserved stayed within 1.58 GiB in every clean trial), so the folder is built:
the case of issue 17, one repeat reading 64 GiB for a setting whose other repeats read 29 GiB."""
from __future__ import annotations

import json
from pathlib import Path

from clirun import in_process
from folders import make_folder

from alloctune.decide.reasons import Code, Reason
from alloctune.results.choices import ReasonRecord
from alloctune.results.records import Measurement, TrialRecord, TrialState
from alloctune.units import GiB

ES, RP, ASYNC = "expandable_segments:True", "roundup_power2_divisions:4", "backend:cudaMallocAsync"
NEW_FIELDS = ("device_memory_source", "overhead_bytes", "throughput_source", "ended_by_window", "peak_rising")


def trial(conf: str, repeat: int, reserved: float, device: float, tput: float) -> TrialRecord:
    m = Measurement(peak_reserved_bytes=int(reserved * GiB), peak_allocated_bytes=int(27 * GiB),
                    device_peak_used_bytes=int(device * GiB), throughput=tput, unit="tokens")
    return TrialRecord("w", "h1", conf, repeat, "torch-2.11.0", "cuda", TrialState.OK, m,
                       env={"torch": "2.11.0+cu130", "gpu": "NVIDIA H200"})


def old_folder(path: Path):
    """Two repeats each. Default 40 GiB; ES 28 GiB reserved, its first repeat's device reading 64 GiB (a
    neighbour's job); RP 32.5 GiB (16% more than ES); cudaMallocAsync's device memory 33.9 GiB. By the median
    device figure, as earlier versions compared every setting once backends differed, ES read 46.4 GiB and RP,
    1.8% under cudaMallocAsync, was chosen."""
    rows = {"": (40.0, (41.0, 41.0)), ES: (28.0, (64.0, 28.8)), RP: (32.5, (33.3, 33.3)),
            ASYNC: (33.0, (33.9, 33.9))}
    tputs = (100.0, 100.4)
    records = [trial(conf, i, reserved, devices[i], tputs[i]) for i in range(2)
               for conf, (reserved, devices) in rows.items()]
    folder = make_folder(path, records)
    trials = folder.path / "trials.jsonl"
    lines = []
    for line in trials.read_text().splitlines():   # as an earlier version wrote them
        data = json.loads(line)
        for key in NEW_FIELDS:
            (data.get("measurement") or {}).pop(key, None)
        data.pop("features", None)
        lines.append(json.dumps(data))
    trials.write_text("\n".join(lines) + "\n")
    return folder


def test_an_old_folder_reported_again_leaves_the_contaminated_reading_out(tmp_path):
    folder = old_folder(tmp_path / "old")
    done = in_process("report", folder.path, "--json")
    assert done.returncode == 0, done.stderr
    [decided] = json.loads(done.stdout)
    [choice] = decided["choices"]
    assert choice["conf"] == ES and choice["memory_measure"] == "peak device memory"
    reasons = [Reason.from_record(ReasonRecord(**r)) for r in choice["reasons_data"]]
    codes = [r.code for r in reasons]
    assert codes[:2] == [Code.SAVES_MEMORY, Code.THROUGHPUT_SAME] and Code.DEVICE_CONTAMINATED in codes
    saved = reasons[0].figures   # ES against the default: one backend, peak reserved
    assert (saved.measure.value, saved.peak_bytes, saved.default_bytes) == ("peak reserved", 28 * GiB, 40 * GiB)
    [bad] = next(r for r in reasons if r.code is Code.DEVICE_CONTAMINATED).figures.settings
    assert bad.conf == ES and bad.used_bytes == int(28.8 * GiB)
    assert [(c.repeat, c.device_bytes, c.context_bytes, c.context_measured) for c in bad.repeats] == [
        (0, 64 * GiB, 2 * GiB, False)]
    runners = {r["conf"]: Reason.from_record(ReasonRecord(**r["why_data"])) for r in choice["runners_up"]}
    assert runners[RP].code is Code.COSTS_MORE and runners[RP].figures.measure.value == "peak reserved"
    assert runners[ASYNC].code is Code.COSTS_MORE and runners[ASYNC].figures.measure.value == "peak device memory"
    summary = (folder.path / "summary.md").read_text()
    assert "device memory contaminated in 1 repeat, not used" in summary
