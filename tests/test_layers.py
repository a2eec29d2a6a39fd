"""The package's contracts, checked on its source: which layer may import which (lazy imports inside functions
count too), no import cycle between modules, and the alloctune modules a trial child and the start-up hook load.

Layers, lowest first (docs/DESIGN.md draws them): errors, units, files, processes and runtime import nothing of
ours above them; settings; results; workload; sim and decide (never trial); trial (never sweeper, decide or report);
report and diagnosis; sweeper; cli. `alloctune` itself (the lazy API) may be imported for `__version__`.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from clirun import ROOT

PACKAGE = ROOT / "alloctune"

# What each part may import besides itself (a part is a top-level module or subpackage of alloctune).
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "units": {"errors"},
    "files": {"errors", "units"},
    "processes": set(),
    "runtime": {"errors"},
    "settings": {"errors", "units", "files"},
    "results": {"errors", "units", "files", "settings"},
    "workload": {"errors", "units", "files", "settings"},
    "sim": {"errors", "units", "files", "settings", "results", "processes"},
    "decide": {"errors", "units", "settings", "results"},
    "trial": {"errors", "units", "files", "settings", "results", "workload", "processes", "runtime", "sim"},
    "report": {"errors", "units", "files", "settings", "results", "decide", "sim", "workload"},
    "diagnosis": {"errors", "units", "files", "settings", "results", "sim", "report"},
    "sweeper": {"errors", "units", "files", "settings", "results", "workload", "processes", "sim", "decide", "trial",
                "report"},
    "cli": {"errors", "units", "files", "settings", "results", "workload", "processes", "sim", "decide", "trial",
            "report", "diagnosis", "sweeper"},
    "__main__": {"cli"},
}
ROOT_API = "alloctune"


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The alloctune modules `name` imports anywhere in its source (a `from X import y` of a submodule y counts
    as importing X.y)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m == ROOT_API or m.startswith(ROOT_API + ".")}


def part(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports_of(name, path, set(mods)) - {name} for name, path in mods.items()}


def test_every_import_points_down_the_layers():
    bad = []
    for module, targets in graph().items():
        here = part(module)
        for target in targets:
            there = part(target)
            if target == ROOT_API or there == here or (here == "" and module == ROOT_API):
                continue
            if there not in ALLOWED.get(here, set()):
                bad.append(f"{module} imports {target}")
    assert not bad, "imports against the layers:\n" + "\n".join(sorted(bad))


def test_no_import_cycle_between_modules():
    edges = graph()
    # A package's __init__ importing its own submodules is how packages re-export; the reverse edge (a submodule
    # importing its package for a shared name) would make a cycle only if both existed.
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_at_most_eight_modules_sit_directly_in_the_package():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 8, top


def _loaded(code: str, **env_vars: str) -> list[str]:
    """Every module a fresh interpreter holds after running `code` (with `env_vars` set)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env_vars}
    out = subprocess.run([sys.executable, "-c", code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _ours(modules: list[str]) -> list[str]:
    return [m for m in modules if m == ROOT_API or m.startswith(ROOT_API + ".")]


HEAVY = {"scipy", "matplotlib", "rich", "yaml"}   # the orchestrator's: a child's interpreter may lack them


# runtime.oom (the one OOM rule) and trial.peaks (memory stats -> figures, shared with the start-up hook) are the
# child's since they stopped being written out in it; both are standard library and records only. units holds the
# one rule for a budget as a share of the device (units.budget_share, shared with the hook): standard library too.
CHILD = ["alloctune", "alloctune.errors", "alloctune.results", "alloctune.results.records", "alloctune.results.typed",
         "alloctune.runtime", "alloctune.runtime.oom", "alloctune.settings", "alloctune.settings.conf",
         "alloctune.settings.readback", "alloctune.trial", "alloctune.trial.child", "alloctune.trial.peaks",
         "alloctune.trial.provenance", "alloctune.trial.timing", "alloctune.units", "alloctune.workload",
         "alloctune.workload.builtin", "alloctune.workload.builtin.common", "alloctune.workload.builtin.transformer"]


def test_a_trial_child_loads_only_light_modules():
    """What `python -m alloctune.trial.child` loads to run a built-in workload: no orchestrator, no scipy-backed
    statistics, no reports (the child also runs under interpreters that lack them)."""
    loaded = _loaded("import alloctune.trial.child as c, alloctune.trial.provenance\n"
                     "from alloctune.workload.builtin import resolve_factory\n"
                     "resolve_factory({'kind': 'transformer', 'entry': None})")
    assert _ours(loaded) == CHILD
    assert not HEAVY & set(loaded)


def test_the_probe_child_loads_no_orchestrator():
    loaded = _loaded("import alloctune.trial.probe")
    assert not [m for m in _ours(loaded) if part(m) in ("sweeper", "decide", "report", "cli", "sim")], loaded
    assert not HEAVY & set(loaded)


# The start-up hook runs in every Python process of the user's job, before the program: at start-up it loads the
# import and feature watches alone; what counting steps and writing the report add is standard library and records.
HOOK_START = ["alloctune", "alloctune.trial", "alloctune.trial.features", "alloctune.trial.imports"]
HOOK_REPORT = HOOK_START + [
    "alloctune.errors", "alloctune.results", "alloctune.results.records", "alloctune.results.typed",
    "alloctune.runtime", "alloctune.runtime.process", "alloctune.runtime.steps", "alloctune.settings",
    "alloctune.settings.conf", "alloctune.settings.known", "alloctune.settings.versions", "alloctune.trial.counting",
    "alloctune.trial.devices", "alloctune.trial.observation", "alloctune.trial.peaks", "alloctune.units"]


def test_the_start_up_hook_loads_only_light_modules(tmp_path):
    """What the hook loads in a process of a command: at start-up, and once that process marked a step and wrote
    its report (CPU only here; on CUDA initialisation it adds trial.devices' figures and, at exit, the settings
    read back, `trial.child.effective_settings`: the trial child's own light set)."""
    from alloctune.trial.hook import HOOK_DIR

    env = {"PYTHONPATH": os.pathsep.join([HOOK_DIR, str(ROOT)]), "ALLOCTUNE_HOOK_OUT": str(tmp_path)}
    assert _ours(_loaded("", **env)) == HOOK_START
    loaded = _loaded("import alloctune, sitecustomize\nalloctune.step()\nsitecustomize._write()", **env)
    assert _ours(loaded) == sorted(HOOK_REPORT)
    assert not (HEAVY | {"torch", "numpy"}) & set(loaded)
    [report] = tmp_path.iterdir()   # the process's report, written whole (no temporary file left)
    assert report.name.startswith("proc-") and report.suffix == ".json"
