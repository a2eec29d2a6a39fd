#!/usr/bin/env python3
"""Regenerate the committed results folders (every results/**/choice.json, or those named) against this checkout:
each is copied to the same relative path under a scratch folder, `alloctune report` runs on the copy from there
(so that best.env names the folder as the checkout does), and the files a report writes are copied back (but a
choice.json of schema 1, which keeps its schema: written as schema 1 keeps the decision, the same bytes where
nothing changed). Prints each change report says it made to a folder's choice or best.env;
tests/results/test_committed_in_step.py holds the folders to it. A changed choice deserves a line in the folder's NOTE and in the commit message.

    python3 scripts/regenerate_results.py [results/FOLDER ...]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# this checkout's alloctune, not an installed one
from alloctune.results.folder import ResultsFolder  # noqa: E402
from alloctune.results.names import BEST_FILE, CHOICE_FILE, PLOT_FILE, SUMMARY_FILE  # noqa: E402
from alloctune.results.upgrade import schema1_text  # noqa: E402

WRITTEN = (CHOICE_FILE, SUMMARY_FILE, BEST_FILE, PLOT_FILE)   # what `alloctune report` writes (best.env: or removes)


def committed() -> list[Path]:
    return sorted(p.parent.relative_to(ROOT) for p in (ROOT / "results").rglob(CHOICE_FILE))


def regenerate(folder: Path, scratch: Path) -> list[str]:
    """Report `folder` (relative to the checkout) on a copy and copy back what the report wrote; the report's lines
    saying what changed."""
    copy = scratch / folder
    shutil.copytree(ROOT / folder, copy)
    done = subprocess.run([sys.executable, "-m", "alloctune", "report", str(folder)], cwd=scratch, text=True,
                          capture_output=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if done.returncode != 0:
        raise SystemExit(f"{folder}: alloctune report failed:\n{done.stderr}")
    for name in WRITTEN:
        if name == CHOICE_FILE and schema_of(ROOT / folder / name) == 1:
            # schema 1 keeps its schema (it reads through its upgrade, results/upgrade.py): the decision as schema 1
            # keeps it, byte for byte the file it was where the decision and its words are unchanged
            (ROOT / folder / name).write_text(schema1_text(ResultsFolder(copy).choices()), encoding="utf-8")
            continue
        if (copy / name).exists():
            shutil.copyfile(copy / name, ROOT / folder / name)
        else:
            (ROOT / folder / name).unlink(missing_ok=True)
    return done.stderr.splitlines()


def schema_of(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("schema")
    except (OSError, ValueError, AttributeError):
        return None


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="*", type=Path, help="results folders (default: every committed one)")
    names = p.parse_args(argv).folders
    missing = [n for n in names if not (n / "choice.json").is_file()]
    if missing:
        p.error(f"no choice.json in {', '.join(map(str, missing))}")
    folders = [n.resolve().relative_to(ROOT) for n in names] or committed()
    with tempfile.TemporaryDirectory() as scratch:
        for folder in folders:
            for line in regenerate(folder, Path(scratch)):
                print(f"{folder}: {line}")
    print(f"regenerated {len(folders)} folders")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
