"""The package's sizes, checked on its source: no Python module of alloctune/ over MAX_MODULE_LINES lines and no
function (or method, nested ones counted in the function around them) over MAX_FUNCTION_LINES lines, so that each
module holds one idea and each function can be read at once. A data table that has to outgrow a limit goes in
TABLES with why; none does today. The simulator's C++ core (sim/_core.cpp) is one extension that mirrors
sim/allocator.py line for line, and is not measured here."""
from __future__ import annotations

import ast

from clirun import ROOT

PACKAGE = ROOT / "alloctune"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
TABLES: dict[str, str] = {}   # 'path/module.py' or 'path/module.py:function' -> why it may be longer


def _modules():
    return sorted(PACKAGE.rglob("*.py"))


def _name(path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_module_is_over_the_limit():
    long = {_name(p): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    over = {module: n for module, n in long.items() if module not in TABLES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them where an idea stands on its own): {over}"


def test_no_function_is_over_the_limit():
    long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long[f"{_name(path)}:{node.name}"] = lines
    over = {function: n for function, n in long.items() if function not in TABLES}
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines (give their steps functions of their own): {over}"

