"""One device's memory stats as figures (alloctune/runtime/peaks.py), as the trial child and the start-up hook both
make them; a command's processes combined into one measurement; the hook's per-process file read through the
typed reader, where damage is one line and the trial that met it crashed."""
import json
import pickle
import sys
from pathlib import Path

import pytest

from alloctune.errors import ResultsError
from alloctune.results.records import Measurement, TrialState
from alloctune.settings.conf import AllocConf
from alloctune.trial.command import run_command_trial
from alloctune.runtime.peaks import DevicePeaks, device_peaks, job_measurement, read_reports, report_path
from alloctune.trial.task import TrialTask
from alloctune.workload.command import check_command, command_workload

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "oom" / "h200"
MiB = 2**20


def h200_stats() -> dict:
    """torch.cuda.memory_stats() of a real H200 process (torch 2.11), as dump_on_oom saved it."""
    with open(H200 / "frag" / "oom-rank0.pickle", "rb") as f:
        return pickle.load(f)["alloctune"]["oom"]["memory_stats"]


def test_a_devices_stats_become_its_figures():
    stats = h200_stats()
    peaks = device_peaks(stats, 0, used_peak=5 * 2**30, overhead=600 * MiB)
    assert peaks == DevicePeaks(
        device=0, peak_reserved_bytes=stats["reserved_bytes.all.peak"],
        peak_allocated_bytes=stats["allocated_bytes.all.peak"], peak_requested_bytes=stats["requested_bytes.all.peak"],
        num_alloc_retries=stats["num_alloc_retries"], num_ooms=stats["num_ooms"],
        num_device_alloc=stats["num_device_alloc"], num_device_free=stats["num_device_free"],
        device_peak_used_bytes=5 * 2**30, overhead_bytes=600 * MiB)
    assert (peaks.num_alloc_retries, peaks.num_ooms) == (1, 1)


def test_as_a_trials_measurement_the_figures_keep_their_names_and_gain_the_unit():
    peaks = device_peaks(h200_stats(), 3, used_peak=7, overhead=5)
    m = peaks.measurement("tokens")
    assert m == Measurement(peak_reserved_bytes=peaks.peak_reserved_bytes,
                            peak_allocated_bytes=peaks.peak_allocated_bytes,
                            peak_requested_bytes=peaks.peak_requested_bytes, num_alloc_retries=1, num_ooms=1,
                            num_device_alloc=peaks.num_device_alloc, num_device_free=peaks.num_device_free,
                            device_peak_used_bytes=7, overhead_bytes=5, unit="tokens")


def test_what_a_torch_does_not_count_is_zero_for_peaks_and_none_for_the_rest():
    assert device_peaks({}, 1) == DevicePeaks(device=1, peak_reserved_bytes=0, peak_allocated_bytes=0)


def test_a_commands_processes_combine_into_the_highest_peaks_and_summed_counts():
    devices = [DevicePeaks(0, 500 * MiB, 400 * MiB, None, 1, 0, device_peak_used_bytes=None),
               DevicePeaks(1, 300 * MiB, 450 * MiB, 420 * MiB, 2, 1, device_peak_used_bytes=900 * MiB)]
    m = job_measurement(devices, 12.5, "samples", 4.0, 20)
    assert m == Measurement(peak_reserved_bytes=500 * MiB, peak_allocated_bytes=450 * MiB,
                            peak_requested_bytes=420 * MiB, num_alloc_retries=3, num_ooms=1,
                            device_peak_used_bytes=900 * MiB, throughput=12.5, unit="samples",
                            measured_seconds=4.0, measured_steps=20)


def _report(pid: int, **changes) -> dict:
    data = {"pid": pid, "ppid": 1, "rank": None, "argv": ["x.py"], "cuda": False, "steps": [[1.0, 8.0]],
            "oom_message": None, "torch_version": None, "exit_time": 0.0}
    return {**data, **changes}


@pytest.mark.parametrize("changes, field", [
    ({"steps": [[1.0]]}, "steps[0]: expected [time, units], got 1 values"),
    ({"devices": [{"device": 0, "peak_reserved_bytes": -1, "peak_allocated_bytes": 0}]},
     "devices[0].peak_reserved_bytes: expected at least 0, got -1"),
    ({"cuda": "yes"}, "cuda: expected true or false, got 'yes'"),
    ({"cuda": None}, "cuda: expected true or false, got None"),
])
def test_a_damaged_report_is_one_line_naming_the_file_and_the_field(tmp_path, changes, field):
    Path(report_path(str(tmp_path), 7)).write_text(json.dumps(_report(7)))
    bad = report_path(str(tmp_path), 8)
    Path(bad).write_text(json.dumps(_report(8, **changes)))
    name, _, problem = field.partition(": ")
    with pytest.raises(ResultsError) as caught:
        read_reports(str(tmp_path))
    assert str(caught.value) == f"{bad}: field {name!r}: {problem}"


def test_reports_read_back_by_rank_then_pid(tmp_path):
    for pid, rank in ((30, None), (20, 1), (10, None), (40, 0)):
        Path(report_path(str(tmp_path), pid)).write_text(json.dumps(_report(pid, rank=rank)))
    assert [(r.rank, r.pid) for r in read_reports(str(tmp_path))] == [(0, 40), (1, 20), (None, 10), (None, 30)]


def test_a_trial_that_meets_a_damaged_report_crashed_and_says_which(tmp_path):
    """Figures from some processes only would be wrong figures: the trial is lost, with the line."""
    program = ("import json, os\nimport alloctune\nalloctune.step()\n"
               "open(os.path.join(os.environ['ALLOCTUNE_HOOK_OUT'], 'proc-1.json'), 'w').write('{\"pid\": \"one\"}')\n")
    spec = command_workload(check_command([sys.executable, "-c", program]))
    task = TrialTask(spec.to_dict(), spec.digest(), AllocConf.parse(""), 0, sys.executable, "torch-test",
                     timeout_s=60)
    record = run_command_trial(task)
    assert record.state is TrialState.CRASHED
    assert record.error.endswith("proc-1.json: field 'pid': expected an integer, got 'one'")
    assert "\n" not in record.error
