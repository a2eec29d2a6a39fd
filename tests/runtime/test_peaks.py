"""One device's memory stats as figures (alloctune/runtime/peaks.py), as the trial child and the start-up hook both
make them. What the parent makes of the hook's files is tests/trial/test_job.py's."""
import pickle
from pathlib import Path

from alloctune.results.records import Measurement
from alloctune.runtime.peaks import DevicePeaks, device_peaks

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
