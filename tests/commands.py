"""One real invocation of every command, on inputs of this checkout and folders made in a test's own folder."""
from __future__ import annotations

import sys
from pathlib import Path

from clirun import ROOT
from folders import choice, make_folder, repeats

SNAPSHOT = ROOT / "tests" / "fixtures" / "oom" / "h200" / "frag" / "oom-rank0.pickle"
TRACE = ROOT / "workloads" / "traces" / "transformer-packed-h200.xz"
PACKED = ROOT / "workloads" / "transformer-packed.yaml"
NAMES = ("sweep", "record", "replay", "search", "export", "compare", "report", "diagnose")


def every_command(tmp: Path) -> dict[str, tuple[list, int]]:
    """Each command's arguments, with the status it exits with when all is well (`record` needs a GPU: 2 here)."""
    a, b = (make_folder(tmp / name, repeats("") + repeats("expandable_segments:True", reserved=10.0),
                        [choice("expandable_segments:True")]).path for name in ("w-1", "w-2"))
    return {
        "sweep": (["sweep", PACKED, "--preset", "h200", "--backend", "sim", "--conf", "expandable_segments:True",
                   "--results", tmp / "swept"], 0),
        "record": (["record", "-o", tmp / "t.pickle", "--", sys.executable, "-c", "pass"], 2),   # no GPU here
        "replay": (["replay", TRACE, "--conf", "expandable_segments:True"], 0),
        "search": (["search", TRACE, "--max-settings", "4"], 0),
        "export": (["export", a], 0),
        "compare": (["compare", a, b, "-o", tmp / "compared"], 0),
        "report": (["report", a], 0),
        "diagnose": (["diagnose", SNAPSHOT], 0),
    }
