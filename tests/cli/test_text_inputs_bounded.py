"""Workload and grid files are read within their limit too (issue 19): /dev/zero or /dev/urandom as either, from a
path or from standard input, is one line with exit 2 at once, not a MemoryError; a grid that is not UTF-8 is named."""
from __future__ import annotations

import pytest
from bounded import bounded_cli, one_line_error
from clirun import ROOT

PACKED = ROOT / "workloads" / "transformer-packed.yaml"


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_an_endless_workload_or_grid_is_refused_at_its_limit(device):
    runs = [bounded_cli("sweep", PACKED, "--preset", "h200", "--grid", device, timeout=60)]
    with open(device, "rb") as endless:
        runs.append(bounded_cli("sweep", "-", stdin=endless, timeout=60))
    with open(device, "rb") as endless:
        runs.append(bounded_cli("sweep", PACKED, "--preset", "h200", "--grid", "-", stdin=endless, timeout=60))
    for run, what in zip(runs, ("a grid file", "a workload file", "a grid file")):
        assert f"is larger than the 1.00 MiB alloctune reads as {what}" in one_line_error(run)


def test_a_grid_file_that_is_not_utf8_is_named(tmp_path):
    grid = tmp_path / "grid.txt"
    grid.write_bytes(b"expandable_segments:True\n\xff\xfe\n")
    error = one_line_error(bounded_cli("sweep", PACKED, "--preset", "h200", "--grid", grid))
    assert "grid.txt' is not UTF-8 text (byte 25)" in error
