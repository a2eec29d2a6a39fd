"""What the parent makes of the start-up hook's files (alloctune/trial/job.py): a command's processes combined into
one measurement, as exact as its least exact process; the per-process files read through the typed reader, by rank
then pid, where damage is one line and the trial that met it crashed."""
import json
import sys
from pathlib import Path

import pytest

from alloctune.errors import ResultsError
from alloctune.results.records import DeviceMemorySource, Measurement, TrialState
from alloctune.runtime.peaks import DevicePeaks, report_path
from alloctune.settings.conf import AllocConf
from alloctune.trial.command import run_command_trial
from alloctune.trial.job import job_measurement, read_reports
from alloctune.trial.task import TrialTask
from alloctune.workload.command import check_command, command_workload

GiB = 2**30
MiB = 2**20


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
     "devices[0].peak_reserved_bytes: expected a byte count from 0 to 1.15292e+18, got -1"),
    ({"cuda": "yes"}, "cuda: expected true or false, got 'yes'"),
    ({"cuda": None}, "cuda: expected true or false, got None"),
    # the growth samples' one rule, the trial's measurement's too (results/records.GrowthSamples)
    ({"growth_samples": [[8, 300, 200], [4, 300, 200]]}, "growth_samples: expected rising steps, got step 4 after 8"),
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


def test_a_trials_device_figure_is_as_exact_as_its_least_exact_process():
    def peaks(source, used=GiB):
        return DevicePeaks(0, 1, 1, device_peak_used_bytes=used, overhead_bytes=used and used // 2,
                           device_memory_source=source)

    def source(*devices):
        return job_measurement(list(devices), None, None, None, None).device_memory_source

    nvml, baseline, device = DeviceMemorySource.NVML, DeviceMemorySource.BASELINE, DeviceMemorySource.DEVICE
    assert source(peaks(nvml), peaks(nvml)) is nvml
    assert source(peaks(nvml), peaks(baseline)) is baseline
    assert source(peaks(baseline), peaks(device)) is device
    assert source(peaks(nvml), peaks(None)) is device     # a figure of unknown source: the whole device's
    assert source(peaks(None)) is None and source(peaks(nvml, used=None)) is None
    assert job_measurement([peaks(nvml, 3 * GiB), peaks(nvml)], None, None, None, None).overhead_bytes == 3 * GiB // 2
