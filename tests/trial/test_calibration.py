"""The calibration: its analysis (summarising repeats, fitting a line) on built samples; the store, with real files
(written, read back, damaged, one per host CPU); the get-or-measure a sweep calls; and on a GPU, the child's
measurements, whose driver-call counts it checks itself."""
from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from alloctune.errors import AlloctuneError, ResultsError
from alloctune.results.names import CALIBRATION_FILE
from alloctune.results.calibration import BusyFit, CostSample, MiB, read_calibration, write_calibration
from alloctune.trial.calibration import RUNS, calibration_for, measure, pooled, refitted, store, store_path
from alloctune.child.calibration import QUEUED_ROUNDS, SEGMENTS, SYNCS, Queued, _queued, busy_fit, fit, summarise
from alloctune.child.provenance import host_cpu
from alloctune.trial.probe import ProbeResult

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "tests" / "fixtures" / "calibration" / "h200-torch2.11.json"
# results/h100-speed-model-v-2026-12-06's: idle and busy device
H100_BUSY = ROOT / "tests" / "fixtures" / "calibration" / "h100-busy-torch2.11.json"
HOST = "Intel(R) Xeon(R) Platinum 8480+"   # the host's CPU, as calibration_for is told it (`this_host`)


@pytest.fixture
def this_host(monkeypatch):
    """calibration_for on a host whose CPU is HOST."""
    monkeypatch.setattr("alloctune.trial.calibration.host_cpu", lambda: HOST)


def point(mib: float, us: float) -> CostSample:
    return CostSample(bytes=int(mib * MiB), runs=8, median_us=us, low_us=us, high_us=us)


def test_repeats_are_summarised_as_their_median_and_quartiles():
    s = summarise(20 * MiB, [10.0, 11.0, 12.0, 13.0, 50.0])
    assert (s.bytes, s.runs, s.median_us, s.low_us, s.high_us) == (20 * MiB, 5, 12.0, 11.0, 13.0)
    one = summarise(0, [4.5])
    assert (one.runs, one.median_us, one.low_us, one.high_us) == (1, 4.5, 4.5, 4.5)


def test_points_on_a_line_give_back_its_fixed_cost_and_cost_per_mib():
    f = fit([point(mib, 40 + 0.25 * mib) for mib in (2, 20, 128, 1024)])
    assert f.fixed_us == pytest.approx(40) and f.per_mib_us == pytest.approx(0.25)
    assert [s.bytes for s in f.samples] == [2 * MiB, 20 * MiB, 128 * MiB, 1024 * MiB]
    assert f.seconds(2, 100 * MiB) == pytest.approx((2 * 40 + 100 * 0.25) * 1e-6)


def test_a_falling_line_is_a_flat_one_at_the_median_and_a_negative_intercept_starts_at_the_origin():
    falling = fit([point(2, 60), point(20, 55), point(1024, 50)])
    assert falling.per_mib_us == 0 and falling.fixed_us == pytest.approx(55)
    steep = fit([point(2, 1), point(20, 30), point(1024, 2000)])   # its line would cross zero at ~3 MiB
    assert steep.fixed_us == 0
    assert steep.per_mib_us == pytest.approx(statistics.median([(30 - 1) / 18, (2000 - 30) / 1004]))


def test_one_size_far_off_the_others_leaves_their_line():
    """The busy cudaMalloc of results/h100-speed-rebuilt-2026-12-06d: 2 MiB's rounds all ran through a hiccup of
    the host (341 us, the others on 48.7 + 0.045/MiB); least squares made every call cost 135 us."""
    f = fit([point(2, 341.0), point(20, 49.3), point(128, 54.4), point(1024, 94.4)])
    assert f.per_mib_us == pytest.approx(0.0447, abs=2e-4) and f.fixed_us == pytest.approx(48.6, abs=0.2)
    high = fit([point(2, 83.3), point(20, 85.2), point(140, 665.7), point(1040, 1981.8)])   # a map's, 140 MiB off
    assert high.per_mib_us == pytest.approx(1.83, abs=0.02) and high.fixed_us < 100


def test_the_sizes_take_turns_round_by_round_behind_the_queued_work():
    """A hiccup of the host lasting a few rounds costs each size a round, which its median drops."""
    order: list[str] = []

    class Device:
        @staticmethod
        def synchronize() -> None:
            pass

    def call(name: str) -> Queued:
        return Queued(1, lambda: None, lambda: order.append(name), None)

    measured = _queued(Device, lambda ms: order.append(f"{ms:g}"), [call("a"), call("b")])
    rounds = QUEUED_ROUNDS + 1
    assert order == (["6", "a", "6", "b"] * rounds + ["14", "a", "14", "b"] * rounds)
    assert [(n, [len(t) for t in times]) for n, times in measured] == [(1, [QUEUED_ROUNDS] * 2)] * 2


def test_processes_are_pooled_size_by_size_and_one_far_off_leaves_the_others_figure():
    """Three processes' busy cudaMalloc as results/h100-calibration-repeat-2026-12-06 drew them (one at about 120
    us, two at about 70): each size the median of the three, the repeats all of theirs, the line through those."""
    def run(fixed: float, waits: float) -> BusyFit:
        samples = [replace(point(mib, fixed + 0.05 * mib), low_us=fixed - 1, high_us=fixed + 2) for mib in (2, 20, 128)]
        return BusyFit(fixed_us=fixed, per_mib_us=0.05, samples=samples, waits=waits, queued_us=[6000.0, 14000.0])

    def idle(us: float, busy: BusyFit):
        return replace(fit([point(mib, us) for mib in (2, 20, 128)]), busy=busy)

    together = pooled([idle(42, run(120, 0.1)), idle(43, run(67, 0.0)), idle(45, run(69, 0.02))])
    assert together.fixed_us == pytest.approx(43) and together.per_mib_us == 0
    assert [s.runs for s in together.samples] == [24] * 3
    busy = together.busy
    assert busy is not None and busy.fixed_us == pytest.approx(69) and busy.per_mib_us == pytest.approx(0.05)
    assert [(s.low_us, s.high_us) for s in busy.samples] == [(68, 71)] * 3
    assert busy.waits == 0.02 and busy.queued_us == [6000.0, 14000.0]
    assert pooled([idle(42, run(120, 0.1)), idle(43, None)]).busy is None   # one child from before busy was timed


def test_one_size_is_a_fixed_cost():
    sync = fit([summarise(0, [4.0, 4.2, 3.9])])
    assert sync.fixed_us == pytest.approx(4.0) and sync.per_mib_us == 0


@pytest.mark.parametrize("waits, ran", [(1.0, 1.0), (1.0, 1.03), (0.0, 1.0)])
def test_a_busy_devices_cost_is_the_time_less_the_queued_work_waited_for(waits, ran):
    """Times built as `waits` x the queued work (which the GPU ran `ran` times as long as asked) + the call's own
    cost (10 µs + 3 µs/MiB, with a little noise): the fit gives back the own cost, whether the call waits or not,
    and the share waited for, clipped to [0, 1]."""
    def times(depth_us: float, own: float) -> list[float]:
        return [waits * ran * depth_us + own + noise for noise in (-1.0, 0.0, 1.0, 0.0, 0.5, -0.5, 0.0, 0.2)]

    measured = [(mib * MiB, [times(6000, 10 + 3 * mib), times(14000, 10 + 3 * mib)]) for mib in (2, 20, 140, 1040)]
    busy = busy_fit(measured, (6.0, 14.0))
    assert busy.waits == pytest.approx(min(1.0, waits * ran))
    assert busy.fixed_us == pytest.approx(10, abs=0.5) and busy.per_mib_us == pytest.approx(3, abs=1e-3)
    assert [s.median_us for s in busy.samples] == pytest.approx([10 + 3 * m for m in (2, 20, 140, 1040)], abs=0.5)


def test_the_hosts_cpu_is_the_first_model_name_of_cpuinfo_else_what_platform_knows(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n\n"
                       "processor\t: 1\nmodel name\t: Other\n")
    assert host_cpu(str(cpuinfo)) == "Intel(R) Xeon(R) Platinum 8480+"
    # An ARM host's (a Grace CPU's): no model name; its first core's implementer and part
    cpuinfo.write_text("processor\t: 0\nBogoMIPS\t: 2000.00\nCPU implementer\t: 0x41\nCPU architecture: 8\n"
                       "CPU part\t: 0xd4f\n\nprocessor\t: 1\nCPU implementer\t: 0x42\nCPU part\t: 0xd40\n")
    assert host_cpu(str(cpuinfo)) == "ARM implementer 0x41 part 0xd4f"
    cpuinfo.write_text("processor\t: 0\nBogoMIPS\t: 2000.00\nCPU implementer\t: 0x41\n")   # no part: nothing
    monkeypatch.setattr("platform.processor", lambda: "aarch64")
    assert host_cpu(str(cpuinfo)) == "aarch64"
    monkeypatch.setattr("platform.processor", lambda: "")
    assert host_cpu(str(tmp_path / "none")) is None   # not Linux, and platform knows nothing


def test_the_committed_h200_calibration_reads_back_and_holds_every_size():
    cal = read_calibration(H200)
    assert cal.gpu == "NVIDIA H200" and cal.torch.startswith("2.11")
    assert [s.bytes for s in cal.device_alloc.samples] == list(SEGMENTS)
    assert [s.runs for s in cal.sync.samples] == [SYNCS]
    for fit_ in (cal.device_alloc, cal.device_free, cal.map, cal.unmap):
        assert all(s.low_us <= s.median_us <= s.high_us for s in fit_.samples)


def test_the_store_writes_one_file_per_gpu_driver_torch_and_cpu_and_reads_it_back(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cal = replace(read_calibration(H200), host_cpu=HOST)
    path = store(cal)
    assert path == store_path(cal.gpu, cal.driver, cal.torch, HOST)
    assert path.parent == tmp_path / "cache" / "alloctune" / "calibration"
    assert path.name == "NVIDIA_H200-driver-580.159.04-torch-2.11.0+cu130-cpu-Intel_R_Xeon_R_Platinum_8480+.json"
    assert read_calibration(path) == cal
    other = store(replace(cal, torch="2.13.0"))
    assert other != path and read_calibration(other).torch == "2.13.0"
    unknown = store(replace(cal, host_cpu=None))
    assert unknown.name == "NVIDIA_H200-driver-580.159.04-torch-2.11.0+cu130-cpu-unknown.json"
    write_calibration(tmp_path / "sweep" / CALIBRATION_FILE, cal)   # a results folder's copy
    assert read_calibration(tmp_path / "sweep" / CALIBRATION_FILE) == cal


@pytest.mark.parametrize("damage, says", [
    (lambda text: text[: len(text) // 2], "not valid JSON"),
    (lambda text: text.replace('"fixed_us": ', '"fixed_us": -', 1),
     "field 'device_alloc.fixed_us': expected microseconds from 0 to 1e+09, got -"),
    (lambda text: text.replace('"per_mib_us": ', '"per_mib_us": 1e308, "_": ', 1),
     "field 'device_alloc.per_mib_us': expected microseconds from 0 to 1e+09, got 1e+308"),
    (lambda text: text.replace('"schema": 1', '"schema": 9'), "schema 9 is not one this alloctune reads"),
    (lambda text: text.replace('"gpu"', '"card"'), "field 'gpu': missing"),
])
def test_a_damaged_calibration_is_one_line_naming_the_file_and_the_field(tmp_path, damage, says):
    path = tmp_path / CALIBRATION_FILE
    path.write_text(damage(H200.read_text()))
    with pytest.raises(ResultsError) as caught:
        read_calibration(path)
    assert str(caught.value).startswith(f"{path}: ") and says in str(caught.value)
    assert "\n" not in str(caught.value)


def probed(cal, python: str = sys.executable) -> ProbeResult:
    """What the probe says of an interpreter that sees the calibrated GPU."""
    return ProbeResult(python=python, python_version="3.11", torch_version=cal.torch, torch_git=None,
                       cuda_version="13.0", cuda_available=True, device_count=1,
                       devices=[{"index": 0, "name": cal.gpu, "total_memory": 143 * 2**30}], driver=cal.driver,
                       host="h", env_id=f"torch-{cal.torch}")


@pytest.mark.usefixtures("this_host")
def test_a_sweep_gets_the_stored_calibration_of_its_gpu_without_measuring(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cal = replace(read_calibration(H100_BUSY), host_cpu=HOST)
    assert cal.busy_measured and not read_calibration(H200).busy_measured
    store(cal)
    # no GPU here: measuring would fail, so what comes back is the stored one, its lines today's
    assert calibration_for(probed(cal, python="/nonexistent/python")) == refitted(cal)


def test_a_stored_calibration_is_priced_by_todays_line_through_its_own_samples():
    """results/h100-speed-rebuilt-2026-12-06d's calibration, fitted by least squares when it was measured: its busy
    cudaMalloc of 2 MiB ran through a hiccup (341 us), which had priced every busy cudaMalloc at 135 us."""
    old = read_calibration(ROOT / "results" / "h100-speed-rebuilt-2026-12-06d" / "speed-rebuilt-two" /
                           "calibration.json")
    assert old.device_alloc.busy is not None and old.device_alloc.busy.fixed_us == pytest.approx(134.8, abs=0.1)
    new = refitted(old)
    busy = new.device_alloc.busy
    assert busy is not None and busy.fixed_us == pytest.approx(48.6, abs=0.1)
    assert busy.samples == old.device_alloc.busy.samples and busy.waits == old.device_alloc.busy.waits
    for kind in ("device_alloc", "device_free", "map", "unmap", "sync"):
        line, again = getattr(new, kind), fit(getattr(old, kind).samples)
        assert (line.fixed_us, line.per_mib_us) == (again.fixed_us, again.per_mib_us)
    assert (new.gpu, new.measured_at, new.host_cpu) == (old.gpu, old.measured_at, old.host_cpu)
    assert refitted(new) == new


@pytest.mark.usefixtures("this_host")
def test_a_shared_store_gives_each_host_the_calibration_of_its_own_cpu(tmp_path, monkeypatch):
    """Two hosts with one GPU model, driver and torch, their CPUs different (a home folder shared on a cluster):
    two files, and calibration_for on each host reads its own, whichever was stored last."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    ours = replace(read_calibration(H100_BUSY), host_cpu=HOST)
    twice = fit([replace(s, median_us=2 * s.median_us, low_us=2 * s.low_us, high_us=2 * s.high_us)
                 for s in ours.device_alloc.samples])   # every cudaMalloc timed twice as long on the other host
    slower = replace(ours, host_cpu="AMD EPYC 7763 64-Core Processor",
                     device_alloc=replace(twice, busy=ours.device_alloc.busy))
    paths = [store(ours), store(slower)]
    assert paths[0] != paths[1] and sorted(p.name for p in tmp_path.glob("alloctune/calibration/*")) == \
        sorted(p.name for p in paths)
    assert calibration_for(probed(ours, python="/nonexistent/python")) == refitted(ours)
    monkeypatch.setattr("alloctune.trial.calibration.host_cpu", lambda: slower.host_cpu)   # on the other host
    theirs = calibration_for(probed(ours, python="/nonexistent/python"))
    assert theirs == refitted(slower)
    assert theirs.device_alloc.fixed_us == pytest.approx(2 * refitted(ours).device_alloc.fixed_us)


@pytest.mark.usefixtures("this_host")
def test_a_stored_calibration_from_before_the_cpu_was_kept_still_reads_and_is_measured_again(tmp_path, monkeypatch):
    """A file written before `host_cpu` was a field, under the name the store gave it then: it reads (the field
    defaults to None, under the same schema), and a sweep does not find it under its new name, so measures."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    before = json.loads(H100_BUSY.read_text())
    assert "host_cpu" not in before
    old = tmp_path / "alloctune" / "calibration" / "NVIDIA_H100_80GB_HBM3-driver-580.159.04-torch-2.11.0+cu130.json"
    old.parent.mkdir(parents=True)
    old.write_text(json.dumps(before, indent=2))
    cal = read_calibration(old)
    assert cal.host_cpu is None and cal == read_calibration(H100_BUSY) and cal.busy_measured
    assert (cal.gpu, cal.driver, cal.torch) == ("NVIDIA H100 80GB HBM3", "580.159.04", "2.11.0+cu130")
    with pytest.raises(AlloctuneError, match="cannot run Python interpreter /nonexistent/python"):
        calibration_for(probed(cal, python="/nonexistent/python"))


@pytest.mark.usefixtures("this_host")
def test_a_stored_calibration_from_before_the_busy_device_was_timed_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cal = replace(read_calibration(H200), host_cpu=HOST)
    store(cal)
    with pytest.raises(AlloctuneError, match="cannot run Python interpreter /nonexistent/python"):
        calibration_for(probed(cal, python="/nonexistent/python"))


@pytest.mark.usefixtures("no_visible_gpu", "this_host")
@pytest.mark.parametrize("damaged, says", [
    ("{", "not valid JSON"),
    (H200.read_text().replace('"fixed_us": ', '"fixed_us": 1e308, "_": ', 1),   # every later sweep stopped at inf
     "field 'device_alloc.fixed_us': expected microseconds from 0 to 1e\\+09, got 1e\\+308"),
])
def test_a_damaged_stored_calibration_is_measured_again_and_without_a_gpu_that_is_one_line(tmp_path, monkeypatch,
                                                                                           damaged, says):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cal = read_calibration(H200)
    store_path(cal.gpu, cal.driver, cal.torch, HOST).parent.mkdir(parents=True)
    store_path(cal.gpu, cal.driver, cal.torch, HOST).write_text(damaged)
    with pytest.warns(UserWarning, match=f"{says}.*; measuring again"):
        with pytest.raises(AlloctuneError, match=f"^calibrating needs a CUDA GPU, and {sys.executable} sees none$"):
            calibration_for(probed(cal))


def test_an_interpreter_that_sees_no_gpu_is_refused_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    none = replace(probed(read_calibration(H200)), cuda_available=False, device_count=0, devices=[])
    with pytest.raises(AlloctuneError, match="calibrating needs CUDA GPU 0, and .* sees no such GPU"):
        calibration_for(none)
    assert not list(tmp_path.iterdir())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_every_size_is_measured_as_the_driver_call_it_should_be(tmp_path, monkeypatch):
    """The child stops (an error here) unless memory_stats counted exactly the cudaMalloc and cudaFree calls timed,
    the reserved bytes moved by the segments' sizes, and the memory history holds one segment_map and one
    segment_unmap per expandable round."""
    cal = measure(sys.executable, 0)
    assert cal.gpu == torch.cuda.get_device_name(0) and cal.torch == torch.__version__
    assert cal.host_cpu == host_cpu()
    assert [s.bytes for s in cal.device_alloc.samples] == [s.bytes for s in cal.device_free.samples]
    assert cal.device_alloc.samples[0].bytes == 2 * MiB and cal.device_alloc.samples[0].runs == 32 * RUNS
    small, large = cal.map.samples[0].bytes, [s.bytes for s in cal.map.samples[1:]]
    assert small == 2 * MiB and all(b % (20 * MiB) == 0 for b in large)   # whole pages of each pool
    assert cal.sync.fixed_us < statistics.median(s.median_us for s in cal.device_alloc.samples)
    # on a busy device, at every size the idle fit has: a cudaFree and an unmap wait for all the queued work
    busy = {kind: getattr(cal, kind).busy for kind in ("device_alloc", "device_free", "map", "unmap")}
    assert cal.sync.busy is None and all(b is not None and b.queued_us == [6000.0, 14000.0] for b in busy.values())
    assert all([s.bytes for s in b.samples] == [s.bytes for s in getattr(cal, k).samples] for k, b in busy.items())
    assert busy["device_free"].waits > 0.9 and busy["unmap"].waits > 0.9
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert json.loads(store(cal).read_text())["gpu"] == cal.gpu
