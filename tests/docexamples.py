"""The command examples of README.md and docs/*.md that are marked for checking: found, run for real and compared
with what the page shows. One implementation for tests/test_docs_examples.py (which fails when a page drifts from
the CLI) and scripts/docs_examples.py (which rewrites the pages' output from a run: `--update`).

A checked example is a fenced block on the line after `<!-- example: check -->` (`<!-- example: check exit=2 -->`
for a command that must fail with that status). The block's first line is `$ alloctune ARGS`, continued onto the
next lines while a line ends in a backslash; the rest of the block is what the command printed: standard output
and standard error together in the order written, as `alloctune ARGS 2>&1 | cat` shows them (not a terminal), with
COLUMNS=100, no GPU visible (CUDA_VISIBLE_DEVICES empty) and trailing spaces dropped.

Each example runs in an empty scratch folder of its own holding copies of the paths its command names (a folder
as it is; a file with the whole folder it is in, so that a workload's trace or a snapshot's message beside it
come along), with the code of this checkout on PYTHONPATH. So a command that writes (sweep, report, compare)
leaves the checkout as it was, and a sweep never resumes a results folder that someone made in the checkout.

What must differ between runs is masked on both sides before comparing (VARYING), nothing else.
"""
from __future__ import annotations

import difflib
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from clirun import ROOT, cli

MARKER = re.compile(r"<!-- example: check(?: exit=(\d+))? -->")
ENV = {"COLUMNS": "100", "CUDA_VISIBLE_DEVICES": ""}
VARYING = [
    (re.compile(r"\b\d+:\d\d:\d\d\b"), "H:MM:SS"),                 # a progress bar's elapsed time and ETA
    (re.compile(r"\b20\d{6}-\d{6}\b"), "YYYYmmdd-HHMMSS"),         # the results folder a sweep names by its start
    (re.compile(r"\bin \d+(?:\.\d+)? s\b"), "in N s"),             # how long a search took
]


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Example:
    path: Path
    start: int              # index of the command's first line in the file's lines
    end: int                # index of the closing fence
    command: tuple[str, ...]
    output: tuple[str, ...]
    exit_code: int

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.start + 1}"

    @property
    def args(self) -> list[str]:
        """The arguments after `alloctune`."""
        words = shlex.split(" ".join(line.removesuffix("\\") for line in self.command).removeprefix("$ "))
        if words[:1] != ["alloctune"]:
            raise ValueError(f"{self.where}: a checked example starts with '$ alloctune', not {self.command[0]!r}")
        return words[1:]


def find_examples(path: Path) -> list[Example]:
    lines = path.read_text().split("\n")
    examples = []
    for i, line in enumerate(lines):
        if not (marker := MARKER.fullmatch(line.strip())):
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            raise ValueError(f"{path.relative_to(ROOT)}:{i + 1}: the example marker must stand right before a fence")
        start = i + 2
        end = next((j for j in range(start, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"{path.relative_to(ROOT)}:{i + 2}: the example's block is not closed")
        n = start
        while n < end and lines[n].endswith("\\"):
            n += 1
        examples.append(Example(path, start, end, tuple(lines[start:n + 1]), tuple(lines[n + 1:end]),
                                int(marker.group(1) or 0)))
    return examples


def _copy_named_paths(args: list[str], scratch: Path) -> None:
    for arg in args:
        source = ROOT / arg
        if arg.startswith(("-", "/")) or ".." in Path(arg).parts or not source.exists():
            continue
        if source.is_file() and source.parent != ROOT:
            source = source.parent
        target = scratch / source.relative_to(ROOT)
        if target.exists():
            continue
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def run(example: Example) -> tuple[int, list[str]]:
    """The command run for real in a scratch folder: its exit status and its output lines, trailing spaces dropped
    (and trailing empty lines)."""
    with tempfile.TemporaryDirectory(prefix="alloctune-doc-") as scratch:
        _copy_named_paths(example.args, Path(scratch))
        proc = cli(*example.args, cwd=scratch, timeout=600, env=ENV, merged=True)
    lines = [line.rstrip() for line in proc.stdout.rstrip().split("\n")]
    return proc.returncode, lines


def masked(lines) -> list[str]:
    out = []
    for line in lines:
        for pattern, mask in VARYING:
            line = pattern.sub(mask, line)
        out.append(line)
    return out


def drift(example: Example) -> str | None:
    """None when the command prints what the page shows (and exits as the page says), else what differs."""
    code, lines = run(example)
    if code != example.exit_code:
        return (f"{example.where}: `alloctune {shlex.join(example.args)}` exited {code}, the page says "
                f"{example.exit_code}:\n" + "\n".join(lines))
    if masked(lines) == masked(example.output):
        return None
    diff = difflib.unified_diff(list(example.output), lines, "the page", "the command", lineterm="")
    return f"{example.where}: the output differs (scripts/docs_examples.py --update rewrites it):\n" + "\n".join(diff)


def update(path: Path) -> list[str]:
    """Rewrite every checked example's output in `path` from a run of the command (exit status checked as in
    drift); return where the output changed."""
    text = path.read_text().split("\n")
    changed = []
    for example in reversed(find_examples(path)):   # from the end, so that earlier indices stay valid
        code, lines = run(example)
        if code != example.exit_code:
            raise RuntimeError(f"{example.where}: exited {code}, the page says {example.exit_code}:\n"
                               + "\n".join(lines))
        if masked(lines) != masked(example.output):
            text[example.start + len(example.command):example.end] = lines
            changed.append(example.where)
    path.write_text("\n".join(text))
    return changed[::-1]
