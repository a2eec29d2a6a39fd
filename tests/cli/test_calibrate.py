"""`alloctune calibrate` as a user runs it: refused in one line where no GPU is visible; and, through a stand-in
interpreter that answers the calibration child with the committed H200 measurements (as the real child would on
that GPU, and only under the allocator setting each mode needs, on a host whose CPU is CPU), what it prints, writes
and keeps."""
from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from clirun import ROOT, cli

from alloctune.child.calibration import fit
from alloctune.results.calibration import CostSample, read_calibration
from alloctune.trial.calibration import RUNS

H200 = ROOT / "tests" / "fixtures" / "calibration" / "h200-torch2.11.json"
MODES = {"native": ("device_alloc", "device_free", "sync"), "expandable": ("map", "unmap")}
CPU = "Intel(R) Xeon(R) Platinum 8480+"


@pytest.mark.usefixtures("no_visible_gpu")
def test_without_a_gpu_calibrate_is_one_line_and_exit_2(tmp_path):
    done = cli("calibrate", "--json", "-o", tmp_path / "c.json", env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"alloctune: error: calibrating needs a CUDA GPU, and {sys.executable} sees none\n"
    assert not list(tmp_path.iterdir())   # nothing written, nothing stored


@pytest.fixture
def standin(tmp_path) -> Path:
    script = tmp_path / "python"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(f"""
        import json, os, sys
        assert sys.argv[1:3] == ["-m", "alloctune.child.calibration"], sys.argv
        mode = sys.argv[3]
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
        if conf != ("expandable_segments:True" if mode == "expandable" else ""):
            sys.exit(f"{{mode}} run under {{conf!r}}")
        cal = json.load(open({str(H200)!r}))
        facts = {{**{{key: cal[key] for key in ("gpu", "driver", "cuda", "torch")}}, "host_cpu": {CPU!r}}}
        fits = {{kind: cal[kind] for kind in {MODES!r}[mode]}}
        print("torch says hello")
        print("ALLOCTUNE-CALIBRATION " + json.dumps({{"facts": facts, "fits": fits}}))
    """))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def pooled_h200() -> dict[str, dict]:
    """Each kind as `calibrate` keeps it from the stand-in's children, which all say the H200's figures: each size's
    figures theirs, its repeats all of theirs, the line through them; measured before the busy device's."""
    kinds = {}
    for kind, measured in json.loads(H200.read_text()).items():
        if kind in MODES["native"] + MODES["expandable"]:
            samples = [dict(sample, runs=RUNS * sample["runs"]) for sample in measured["samples"]]
            line = fit([CostSample(**sample) for sample in samples])
            kinds[kind] = dict(fixed_us=line.fixed_us, per_mib_us=line.per_mib_us, samples=samples, busy=None)
    return kinds


def test_calibrate_json_prints_writes_and_keeps_the_calibration(tmp_path, standin):
    cache = tmp_path / "cache"
    done = cli("calibrate", "--python", standin, "--json", "-o", tmp_path / "c.json",
               env={"XDG_CACHE_HOME": str(cache)})
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    expected = dict(json.loads(H200.read_text()), **pooled_h200(), host_cpu=CPU)
    assert {k: v for k, v in printed.items() if k != "measured_at"} == \
           {k: v for k, v in expected.items() if k != "measured_at"}
    assert read_calibration(tmp_path / "c.json").to_json() == printed
    [kept] = (cache / "alloctune" / "calibration").iterdir()
    assert read_calibration(kept).to_json() == printed


def test_calibrate_prints_each_calls_fit_and_where_it_is_kept(tmp_path, standin):
    done = cli("calibrate", "--python", standin, env={"XDG_CACHE_HOME": str(tmp_path), "COLUMNS": "120"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].strip() == f"NVIDIA H200, driver 580.159.04, CUDA 13.0, torch 2.11.0+cu130, host CPU {CPU}"
    malloc = pooled_h200()["device_alloc"]
    row = next(line for line in lines if line.strip().startswith("cudaMalloc"))
    assert row.split()[1:4] == [f"{malloc['fixed_us']:.1f}", "+", f"{malloc['per_mib_us']:.3f}/MiB"]
    assert row.split()[4] == "-"   # no busy device's fit in a calibration from before it was measured
    assert row.split()[5:] == ["2:", "49,", "20:", "46,", "128:", "64,", "1024:", "89"]   # MiB: median µs
    assert any(line.split()[0] == "synchronize" and "idle: 4.0" in line for line in lines if line.strip())
    assert lines[-2] == "Kept for sweeps on this GPU model, driver, torch and host CPU:"
    assert lines[-1] == (f"  {tmp_path}/alloctune/calibration/"
                         f"NVIDIA_H200-driver-580.159.04-torch-2.11.0+cu130-cpu-Intel_R_Xeon_R_Platinum_8480+.json")


def test_calibrate_o_onto_a_device_or_a_fifo_writes_into_it_never_replacing_it(tmp_path, standin):
    """-o naming /dev/null (through a link) or a FIFO a process reads: the calibration goes into the stream, and the
    link and the FIFO stay what they were (as root, replacing /dev/null would replace the system's)."""
    (tmp_path / "null").symlink_to(os.devnull)
    os.mkfifo(tmp_path / "fifo")
    heard: list[bytes] = []
    reader = threading.Thread(target=lambda: heard.append((tmp_path / "fifo").read_bytes()), daemon=True)
    reader.start()
    for name in ("null", "fifo"):
        done = cli("calibrate", "--python", standin, "-o", tmp_path / name, env={"XDG_CACHE_HOME": str(tmp_path)})
        assert done.returncode == 0, done.stderr
    reader.join(30)
    assert heard and json.loads(heard[0])["device_alloc"] == pooled_h200()["device_alloc"]
    assert (tmp_path / "null").is_symlink() and stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert stat.S_ISFIFO(os.stat(tmp_path / "fifo").st_mode)
