"""README.md and docs/*.md kept in step with the CLI: every checked example (tests/docexamples.py says how one is
marked) prints what its page shows, the synopsis in docs/cli.md lists exactly the options each subcommand has,
every relative link points at a file (and heading) that exists, and the README stays short."""
from __future__ import annotations

import dataclasses
import importlib.metadata
import re
from pathlib import Path

import pytest

import docexamples
from alloctune.cli.main import SUBCOMMANDS, build_parser
from clirun import ROOT

DOCS = docexamples.doc_files()
EXAMPLES = [e for path in DOCS for e in docexamples.find_examples(path)]
TORCH = importlib.metadata.version("torch")
SLOW = {"sweep", "search"}   # a whole sweep or search, end to end: seconds each on 2 cores
CHECKED = [pytest.param(e, id=e.where, marks=[pytest.mark.slow] if e.args[0] in SLOW else []) for e in EXAMPLES]


def test_every_page_has_its_examples_found():
    assert len(DOCS) > 10 and len(EXAMPLES) >= 8
    for example in EXAMPLES:
        assert example.args and example.output, example.where


@pytest.mark.skipif(not TORCH.startswith("2.13.0"),
                    reason=f"the examples show what torch 2.13.0 (the set-up's pin) accepts and simulates, not {TORCH}")
@pytest.mark.parametrize("example", CHECKED)
def test_the_example_prints_what_its_page_shows(example):
    if problem := docexamples.drift(example):
        pytest.fail(problem, pytrace=False)


def test_a_drifted_example_is_caught():
    """One changed figure in a page's output is reported, with the line that changed."""
    example = next(e for e in EXAMPLES if e.args[0] == "export")
    output = list(example.output)
    line = next(i for i, text in enumerate(output) if "expandable_segments:True" in text)
    output[line] = output[line].replace("expandable_segments:True", "expandable_segments:False")
    problem = docexamples.drift(dataclasses.replace(example, output=tuple(output)))
    assert problem and "-" + output[line] in problem.split("\n") and "+" + example.output[line] in problem


def test_only_what_varies_is_masked():
    assert docexamples.masked(["0:00:03 ETA 0:00:00", "results/w-h200-20261201-112502/", "in 6.6 s"]) == [
        "H:MM:SS ETA H:MM:SS", "results/w-h200-YYYYmmdd-HHMMSS/", "in N s"]
    assert docexamples.masked(["26.87 GiB in 2 rounds, 150 settings"]) == ["26.87 GiB in 2 rounds, 150 settings"]


def _synopsis_options() -> dict[str, set[str]]:
    """docs/cli.md's synopsis block (the fenced block after `<!-- synopsis -->`): the options of each subcommand."""
    text = (ROOT / "docs" / "cli.md").read_text()
    block = text.split("<!-- synopsis -->\n```", 1)[1].split("\n", 1)[1].split("```", 1)[0]
    options: dict[str, set[str]] = {}
    for part in re.split(r"^(?=alloctune )", block, flags=re.M):
        if part.strip():
            name = part.split()[1]
            options.setdefault(name, set()).update(re.findall(r"(?<![\w-])--?[a-z][a-z-]*", part.split("#")[0]))
    return options


def test_the_synopsis_lists_exactly_the_options_of_every_subcommand():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    synopsis = _synopsis_options()
    assert set(synopsis) == set(SUBCOMMANDS)
    for name in SUBCOMMANDS:
        real = {s for a in subparsers[name]._actions for s in a.option_strings if s not in ("-h", "--help")}
        shown = synopsis[name]
        # A long option may be shown by its short form alone (-o FILE).
        long_of = {s: next(o for o in a.option_strings if o.startswith("--"))
                   for a in subparsers[name]._actions for s in a.option_strings if not s.startswith("--")}
        shown = {long_of.get(s, s) for s in shown}
        real = {s for s in real if s.startswith("--")}
        assert shown == real, f"{name}: missing {sorted(real - shown)}, not an option {sorted(shown - real)}"


def test_the_readme_names_every_subcommand_and_stays_short():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.split("\n")) <= 200
    for name in SUBCOMMANDS:
        assert f"alloctune {name}" in readme, name


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("page", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_every_relative_link_points_at_what_exists(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)   # not in code blocks
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"
