"""Run the checked command examples of README.md and docs/*.md (see tests/docexamples.py for the convention) and
say which no longer print what their page shows; with --update, rewrite their output in place from the run.

    python3 scripts/docs_examples.py [--update] [FILE.md ...]     (default: README.md and docs/*.md)

Exit status 1 when an example drifted (without --update) or failed to run as its page says.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))   # the implementation the test uses

import docexamples  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="markdown files (default: README.md and docs/*.md)")
    parser.add_argument("--update", action="store_true", help="rewrite the examples' output from a run")
    args = parser.parse_args()
    files = [f.resolve() for f in args.files] or docexamples.doc_files()
    failed = False
    for path in files:
        if args.update:
            try:
                for where in docexamples.update(path):
                    print(f"updated {where}")
            except RuntimeError as exc:
                print(exc, file=sys.stderr)
                failed = True
            continue
        for example in docexamples.find_examples(path):
            if problem := docexamples.drift(example):
                print(problem, file=sys.stderr)
                failed = True
            else:
                print(f"ok {example.where}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
