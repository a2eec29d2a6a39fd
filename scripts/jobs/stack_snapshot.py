"""Run a Python script with torch's allocation history on, a Python stack kept for every entry (allocations and frees
alike), and dump the snapshot when it ends: which code made, freed or deferred each block, readable in
pytorch.org/memory_viz. No alloctune in the run (the history is torch's own).

    python3 scripts/jobs/stack_snapshot.py OUT.pickle SCRIPT.py [ARG ...]

Stacks make entries large: give the script few steps.
"""
from __future__ import annotations

import runpy
import sys

import torch


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__.strip().splitlines()[-3].strip(), file=sys.stderr)
        return 2
    out, script, *args = sys.argv[1:]
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=1_000_000)
    sys.argv = [script, *args]
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:   # the script's own exit: keep its code, dump all the same
        code = exc.code if isinstance(exc.code, int) else 0
    finally:
        torch.cuda.memory._dump_snapshot(out)
    return code


if __name__ == "__main__":
    sys.exit(main())
