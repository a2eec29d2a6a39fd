"""DESIGN.md's tree and each package's docstring name every module of the package (CONTRIBUTING: the layout).

A package's docstring names a module as `name`, `name.py` or `name/` (a sub-package) in backquotes, or as a table
row that starts with `name.py` or `name/` (api/, sweeper/). The tree (docs/DESIGN.md's fenced block under
`alloctune/`) gives each top-level module and package a line at indent 2, its text from column 28 on and continued
on lines indented 28 spaces; a package's entry names each module of it, and of its sub-packages, as one item of
its text: the pieces between parentheses, commas, semicolons, colons and " and " ("the grid (grid)", "features and
observation (...)", "launch: the trial child", "executors/: base; local, sim, ray", "hook/: sitecustomize.py"). A module
merely mentioned in a phrase ("the order of settings") is not named.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from clirun import ROOT

PACKAGE = ROOT / "alloctune"
DESIGN = ROOT / "docs" / "DESIGN.md"
COLUMN = 28      # where the tree's text starts, and its continuation lines' indent

PACKAGES = sorted(p.parent for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE)


def members(package: Path) -> list[str]:
    """The package's modules (no __init__) and sub-packages, by name."""
    return sorted([p.stem for p in package.glob("*.py") if p.name != "__init__.py"]
                  + [p.name for p in package.iterdir() if (p / "__init__.py").is_file()])


def docstring_names(package: Path) -> set[str]:
    return quoted_names(ast.get_docstring(ast.parse((package / "__init__.py").read_text()), clean=False) or "")


def quoted_names(text: str) -> set[str]:
    quoted = re.findall(r"`([^`\s]+)`", text)
    rows = re.findall(r"^\s+(\w+(?:\.py|/))\s", text, re.MULTILINE)
    return {re.sub(r"(\.py|/)$", "", name) for name in quoted + rows}


def tree_entries() -> dict[str, str]:
    """The tree's entries: a top-level name ('settings/', 'errors.py', '__init__.py, __main__.py') -> its text."""
    block = re.search(r"^```\nalloctune/\n(.*?)^```$", DESIGN.read_text(), re.MULTILINE | re.DOTALL)
    assert block, "docs/DESIGN.md has no fenced block starting 'alloctune/'"
    entries: dict[str, str] = {}
    head = ""
    for line in block.group(1).splitlines():
        assert len(line) <= 120, f"DESIGN.md's tree: over 120 columns: {line!r}"
        lead, text = line[:COLUMN], line[COLUMN:]
        assert re.fullmatch(r"(  \S.*\S)? +", lead) and not text.startswith(" "), \
            f"DESIGN.md's tree: the text not at column {COLUMN}: {line!r}"
        if lead.strip():
            head = lead.strip()
            entries[head] = text
        else:
            assert head, f"DESIGN.md's tree: a continuation line before any entry: {line!r}"
            entries[head] += " " + text
    return entries


def items(text: str) -> set[str]:
    return {piece.strip() for piece in re.split(r"[(),;:]| and ", text)}


def named(name: str, under: str, pieces: set[str]) -> bool:
    """Whether the module `name` of the sub-package path `under` ('' for the entry's own package) is an item."""
    path = f"{under}/{name}" if under else name
    return bool({name, f"{name}.py", f"{name}/", f"{path}.py", f"{path}/"} & pieces)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_docstring_names_every_module(package):
    missing = sorted(set(members(package)) - docstring_names(package))
    assert not missing, f"{package.relative_to(ROOT)}/__init__.py's docstring does not name: {', '.join(missing)}"


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_design_tree_names_every_module(package):
    relative = package.relative_to(PACKAGE).parts
    entry = tree_entries().get(f"{relative[0]}/")
    assert entry is not None, f"DESIGN.md's tree has no entry {relative[0]}/"
    pieces = items(entry)
    under = "/".join(relative[1:])
    missing = [name for name in members(package) if not named(name, under, pieces)]
    assert not missing, f"DESIGN.md's tree, entry {relative[0]}/, does not name {under or 'its'} modules: " \
                        f"{', '.join(missing)}"


def test_design_tree_has_a_line_for_each_top_level_module_and_only_those():
    heads = sorted(name.strip() for head in tree_entries() for name in head.split(","))
    assert heads == sorted([f"{m}/" if (PACKAGE / m).is_dir() else f"{m}.py" for m in members(PACKAGE)]
                           + ["__init__.py"])


def test_the_checks_fail_on_a_module_missing():
    """Strict: a name in a phrase is not an item, nor is a dotted reference, a longer name or another path."""
    pieces = items("the order of settings by memory, decide.stats (stats_extra), the grid (grid)")
    assert named("grid", "", pieces)
    assert not named("order", "", pieces) and not named("decide", "", pieces) and not named("stats", "", pieces)
    assert named("sitecustomize", "hook", items("the start-up hook (hook/sitecustomize.py)"))
    assert not named("sitecustomize", "other", items("(hook/sitecustomize.py)"))
    text = "the order (`order.py`), `facts.OomFacts`, the grid\n\n    plan.py   what will run\n    execute   trials"
    assert quoted_names(text) == {"order", "facts.OomFacts", "plan"}
