"""Figures at the ends of the float range and values no job reports (issue 29): the formatting functions print
any finite float in a few characters and flag a non-finite one; folders of such trials are reported and
compared; a torch version of 5000 digits, an environment name with '=' and a NUL in a command are refused with one
line where they are read; dump_on_oom where torch sees no CUDA device is a no-op that says so."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from decimal import Decimal

import pytest
from clirun import ROOT, in_process
from folders import make_folder, repeats, trial

from alloctune.errors import AlloctuneError, WorkloadError
from alloctune.report.words import format_rate
from alloctune.results.records import MAX_RATE
from alloctune.units import NOT_FINITE, figure, format_bytes, format_number
from alloctune.workload.loader import load_workload

EXTREMES = [0.0, -0.0, 5e-324, 1e-300, 1e-5, 0.5, 1.0, 99.9, 100.0, 123456.789, 1e15, 1e16, 1e100, 1e306, 1e308,
            sys.float_info.max]
EXTREMES += [-v for v in EXTREMES if v]
SPECS = [".3f", ".2f", ",.0f", ".3g", "+.1%", ".1%", ".0%"]


def read_back(text: str) -> Decimal:
    """The number a printed figure says ('+1.00e+310%' -> 1e308), exactly (1.8e+308 is past the largest float)."""
    value = Decimal(text.rstrip("%").replace(",", ""))
    return value / 100 if text.endswith("%") else value


@pytest.mark.parametrize("spec", SPECS)
def test_every_finite_float_is_a_short_figure_that_says_its_value(spec):
    for value in EXTREMES:
        text = figure(value, spec)
        assert len(text) <= 16, (value, spec, text)
        # within the spec's rounding, or three significant digits where the exponent form was taken
        rounding = Decimal("0.51") * Decimal(10) ** -int(spec.strip("+,.%fg")) / (100 if spec.endswith("%") else 1)
        error = abs(read_back(text) - Decimal(value))
        assert error <= max(rounding, abs(Decimal(value)) / 100), (value, spec, text)


def test_the_other_formatters_take_any_finite_float_and_flag_the_rest():
    for value in EXTREMES:
        for text in (format_bytes(value), format_number(value), format_rate(value, "tokens")):
            assert len(text) <= 30 and "inf" not in text and "nan" not in text, (value, text)
    for value in (math.inf, -math.inf, math.nan):
        assert figure(value, ".3f") == format_bytes(value) == format_number(value) == NOT_FINITE
        assert format_rate(value, "tokens") == f"{NOT_FINITE} tokens/s"


def one_line(run) -> str:
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith("alloctune: error: ") and len(run.stderr) < 400, run.stderr
    return run.stderr


def test_folders_of_extreme_throughput_are_reported_and_compared(tmp_path):
    """Throughputs at the ends of a Rate's range (results/records.py; past it a file is refused: a 1e308)."""
    far_apart = make_folder(tmp_path / "far", repeats("", tputs=(MAX_RATE,) * 3)
                            + repeats("expandable_segments:True", tputs=(5e-324, 1e-320, 5e-324), reserved=10.0))
    reversed_ = make_folder(tmp_path / "reversed", repeats("", tputs=(5e-324,) * 3)
                            + repeats("expandable_segments:True", tputs=(MAX_RATE, 0.9 * MAX_RATE, MAX_RATE),
                                      reserved=10.0))
    zero = make_folder(tmp_path / "zero", repeats("", tputs=(0.0,) * 3)
                       + repeats("expandable_segments:True", tputs=(0.0,) * 3, reserved=10.0))
    for folder in (far_apart, reversed_, zero):
        run = in_process("report", folder.path, env={"COLUMNS": "100"})
        assert run.returncode == 0, run.stderr
        assert (folder.path / "plot.png").stat().st_size > 0 and (folder.path / "choice.json").exists()
        assert max(map(len, run.stdout.splitlines())) <= 120, run.stdout
    for a, b in ((far_apart, reversed_), (zero, zero), (far_apart, zero)):
        run = in_process("compare", a.path, b.path, "-o", tmp_path / "compared", env={"COLUMNS": "100"})
        assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
        assert "inf" not in run.stdout and "nan" not in run.stdout, run.stdout


def test_a_torch_version_of_5000_digits_is_refused_in_one_line(tmp_path):
    version = "2." + "1" * 5000
    folder = make_folder(tmp_path / "long", [trial(c, i, torch=version) for c in ("", "expandable_segments:True")
                                             for i in range(3)])
    for args in (["report", folder.path], ["compare", folder.path, folder.path, "-o", tmp_path / "c"]):
        assert "expected a torch version such as '2.11.0+cu130', got '2.1111" in one_line(in_process(*args))


@pytest.mark.parametrize("extra, why", [
    ('env: {"A=B": x}', "'A=B' cannot be set"),
    ('env: {"": x}', "'' cannot be set"),
    ('env: {A: "x\\0y"}', "'A' cannot be set"),
    (None, "a command's argument cannot hold a NUL character, got 'a\\x00b'"),
])
def test_what_no_environment_or_program_can_hold_is_refused_where_the_workload_is_read(tmp_path, extra, why):
    argv = '[python3, -c, pass]' if extra else '[python3, -c, "a\\0b"]'
    path = tmp_path / "w.yaml"
    path.write_text(f"name: w\ncommand: {argv}\n" + (extra + "\n" if extra else ""))
    with pytest.raises(WorkloadError, match="cannot"):
        load_workload(path)
    assert why in one_line(in_process("sweep", path, "--backend", "cuda", "--results", tmp_path / "r"))
    assert not (tmp_path / "r").exists()


def test_dump_on_oom_without_cuda_says_so_and_does_nothing(tmp_path):
    code = ("import sys, alloctune\n"
            f"print(alloctune.dump_on_oom({str(tmp_path / 'oom')!r}))\n"
            "for bad in ((), {'max_entries': 0}, {'max_entries': 2.5}):\n"
            "    try:\n"
            "        alloctune.dump_on_oom(*(bad if isinstance(bad, tuple) else ('oom',)),\n"
            "                              **(bad if isinstance(bad, dict) else {}))\n"
            "    except alloctune.errors.AlloctuneError as exc:\n"
            "        print(exc)\n"
            "    except TypeError as exc:\n"
            "        print('TypeError')\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == 0, run.stderr
    assert run.stderr == ("alloctune: dump_on_oom: torch sees no CUDA device here: no out-of-memory snapshot will be "
                          "written\n")
    assert run.stdout.splitlines() == ["None", "TypeError",
                                       "dump_on_oom: max_entries must be an integer of at least 1, got 0",
                                       "dump_on_oom: max_entries must be an integer of at least 1, got 2.5"]
    assert not (tmp_path / "oom").exists()
    with pytest.raises(AlloctuneError, match="folder must be a path, got 5"):
        from alloctune.runtime.oomdump import dump_on_oom
        dump_on_oom(5)
