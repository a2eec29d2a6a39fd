"""Bad numbers on the command line: one line naming what was expected, exit 2, never a traceback or a hang."""
from __future__ import annotations

from pathlib import Path

import pytest

from alloctune.cli.main import main
from alloctune.errors import SizeError
from alloctune.units import parse_budget, parse_size

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = str(ROOT / "workloads" / "hpsearch.yaml")
TRACE = str(ROOT / "workloads" / "traces" / "detection-h200.xz")


def run(argv, capsys) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals
        code = exc.code
    err = capsys.readouterr().err
    return code, err


@pytest.mark.parametrize("argv", [
    ["sweep", WORKLOAD, "--budget", "1e999"],
    ["sweep", WORKLOAD, "--budget", "inf"],
    ["sweep", WORKLOAD, "--budget", "nan"],
    ["sweep", WORKLOAD, "--budget", "1e30GiB"],
    ["sweep", WORKLOAD, "--timeout", "inf"],
    ["sweep", WORKLOAD, "--timeout", "nan"],
    ["sweep", WORKLOAD, "--timeout", "1e308"],
    ["sweep", WORKLOAD, "--max-slowdown", "nan"],
    ["replay", TRACE, "--device-memory", "1e999"],
    ["replay", TRACE, "--overhead", "1e999"],
    ["replay", TRACE, "--budget", "inf"],
    ["record", WORKLOAD, "-o", "x.xz", "--timeout", "inf"],
])
def test_non_finite_and_absurd_numbers_are_one_line_and_exit_2(argv, capsys):
    code, err = run(argv, capsys)
    assert code == 2
    assert "Traceback" not in err
    assert len([line for line in err.splitlines() if "error:" in line]) == 1


@pytest.mark.parametrize("text", ["1e999", "inf", "nan", "-1", "9e18GiB", float("inf"), float("nan"), 2.0**64])
def test_sizes_refuse_what_no_device_has(text):
    with pytest.raises(SizeError):
        parse_size(text)


@pytest.mark.parametrize("text", ["inf", "nan", "1e999", "-inf"])
def test_budgets_refuse_non_finite_numbers(text):
    with pytest.raises(SizeError):
        parse_budget(text)
