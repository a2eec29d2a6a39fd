"""The package's contracts, checked on its source: which layer may import which, no import cycle between modules,
and the light rule for what runs under other interpreters than alloctune's.

An import is any of: an import statement (lazy ones inside functions too), a name of the root package's lazy API
(`from alloctune import sweep` imports api.sweep: the root maps it in `_API`), `importlib.import_module` of a
string, and a string that names one of our modules (`python -m alloctune.child.main` in a command line). The root's
constants (`__version__`) any module may use.

Layers, lowest first (docs/DESIGN.md draws them): errors, units, files, processes; settings; results and workload;
runtime (inside the job), then child (the trial child); sim and decide; trial (the parent's side of a trial);
diagnosis, then report (which renders a diagnosis; diagnosis never imports report); sweeper (on report, never
diagnosis); api (the use cases); cli; and the root package's API.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import ROOT

PACKAGE = ROOT / "alloctune"
ROOT_API = "alloctune"

# What each part may import besides itself (a part is a top-level module or subpackage of alloctune; "" the root).
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "units": {"errors"},
    "files": {"errors", "units"},
    "processes": set(),
    "settings": {"errors", "units", "files"},
    "results": {"errors", "units", "files", "settings"},
    "workload": {"errors", "units", "files", "settings"},
    "runtime": {"errors", "units", "files", "settings", "results", "dryrun"},
    "dryrun": {"errors", "units", "files", "settings", "results"},
    "child": {"errors", "units", "files", "settings", "results", "workload", "runtime"},
    "sim": {"errors", "units", "files", "settings", "results", "processes"},
    "decide": {"errors", "units", "settings", "results"},
    "trial": {"errors", "units", "files", "settings", "results", "workload", "processes", "runtime", "child", "sim",
              "dryrun"},
    "report": {"errors", "units", "files", "settings", "results", "decide", "sim", "workload", "diagnosis"},
    # runtime: its OOM rule's words (runtime/oom.py), which diagnose reads logs by
    "diagnosis": {"errors", "units", "files", "settings", "results", "sim", "runtime"},
    # not runtime: what the parent reads of the hook's files is trial's (trial/job.py)
    "sweeper": {"errors", "units", "files", "settings", "results", "workload", "processes", "sim", "decide", "trial",
                "report"},
    # the use cases: each joins the parts below it, for the command line and the Python API alike
    "api": {"errors", "units", "files", "settings", "results", "workload", "processes", "runtime", "sim", "decide",
            "trial", "report", "diagnosis", "sweeper", "dryrun"},
    "cli": {"errors", "units", "files", "settings", "results", "workload", "processes", "sim", "decide", "trial",
            "report", "diagnosis", "sweeper", "api"},
    "__main__": {"cli"},
    "": {"api", "workload", "sim", "runtime", "errors"},   # the API's names
}

# Light: what runs under another interpreter than alloctune's (the trial child, the probe's child, the start-up
# hook and what it runs inside the user's job, dump_on_oom), which gets our package through PYTHONPATH and may lack
# pyyaml, scipy, rich or numpy. A light module imports only the standard library, torch and light modules; the
# packages above it are loaded first, so they are held to the rule too. Adding a module here is a decision.
LIGHT_PACKAGES = {"alloctune.child", "alloctune.runtime", "alloctune.workload.builtin", "alloctune.dryrun"}
LIGHT_MODULES = {"alloctune.errors", "alloctune.units", "alloctune.files", "alloctune.settings.conf",
                 "alloctune.settings.keys", "alloctune.settings.readback", "alloctune.settings.known", "alloctune.settings.versions",
                 "alloctune.results.records", "alloctune.results.typed", "alloctune.results.calibration",
                 "alloctune.workload.spec",   # the workload in the trial child's task (child/exchange.py)
                 "alloctune.results.alternation",
                 "alloctune.results.provenance"}   # the dry run writes its own record (alloctune/dryrun/start.py)
# Besides the standard library, the only others' modules a light module may import.
THIRD_PARTY = {"torch", "pynvml",   # pynvml: optional (nvidia-ml-py), tried where it is there
               "sitecustomize"}   # the user's own, which the start-up hook chains to


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _string_dicts(tree: ast.Module) -> dict[str, list[str]]:
    """A module's top-level dicts of strings, by name (the root's `_API`)."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name):
            values = [v.value for v in node.value.values if isinstance(v, ast.Constant)]
            if all(isinstance(v, str) for v in values):
                out[node.targets[0].id] = values
    return out


def api() -> dict[str, str]:
    """The root package's lazy names and the module each loads."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    [table] = [n.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)
               and any(isinstance(t, ast.Name) and t.id == "_API" for t in n.targets)]
    return {k.value: f"{ROOT_API}.{v.value}" for k, v in zip(table.keys, table.values)}


class _Imports(ast.NodeVisitor):
    """What one module imports: ours (`ours`, module names) and everyone else's (`others`, top-level names)."""

    def __init__(self, name: str, is_package: bool, known: set[str], names: dict[str, str], tree: ast.Module):
        self.name, self.package = name, name if is_package else name.rpartition(".")[0]
        self.known, self.names, self.dicts = known, names, _string_dicts(tree)
        self.ours: set[str] = set()
        self.others: set[str] = set()
        self.visit(tree)

    def _add(self, module: str) -> None:
        if module == ROOT_API or module.startswith(ROOT_API + "."):
            self.ours.add(module)
        elif module != "__future__":
            self.others.add(module.partition(".")[0])

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name != ROOT_API:   # the root alone: what counts is the names used from it (visit_Attribute)
                self._add(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")
            base = base[:len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        for alias in node.names:
            sub = f"{target}.{alias.name}"
            if sub in self.known:
                self._add(sub)
            elif target == ROOT_API:
                if alias.name in self.names:
                    self._add(self.names[alias.name])
            else:
                self._add(target)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and node.value.id == ROOT_API and node.attr in self.names:
            self._add(self.names[node.attr])
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and node.value.startswith(ROOT_API + ".") and node.value in self.known:
            self._add(node.value)   # a module named in a string ('alloctune' alone is a key of our files)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if called == "import_module" and node.args and isinstance(node.args[0], ast.JoinedStr):
            self._formatted(node.args[0])
        self.generic_visit(node)

    def _formatted(self, text: ast.JoinedStr) -> None:
        """import_module(f"{__name__}.{X}"): the modules of the table X is read from, else any module below."""
        parts = text.values
        if not (len(parts) == 3 and isinstance(parts[0], ast.FormattedValue) and isinstance(parts[0].value, ast.Name)
                and parts[0].value.id in ("__name__", "__package__") and isinstance(parts[1], ast.Constant)
                and parts[1].value == "." and isinstance(parts[2], ast.FormattedValue)):
            raise AssertionError(f"{self.name}: an import_module string this test cannot read: {ast.unparse(text)}")
        prefix = self.name if parts[0].value.id == "__name__" else self.package
        key = parts[2].value
        if isinstance(key, ast.Subscript) and isinstance(key.value, ast.Name) and key.value.id in self.dicts:
            self.ours.update(f"{prefix}.{v}" for v in self.dicts[key.value.id])
        else:
            self.ours.update(m for m in self.known if m.startswith(prefix + "."))


def imports_of(name: str, source: str, known: set[str], is_package: bool = False) -> _Imports:
    return _Imports(name, is_package, known, api(), ast.parse(source))


def part(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports_of(name, path.read_text(), set(mods), path.name == "__init__.py").ours - {name}
            for name, path in mods.items()}


def against_layers(module: str, targets: set[str]) -> list[str]:
    here = part(module)
    return [f"{module} imports {t}" for t in sorted(targets)
            if part(t) != here and part(t) not in ALLOWED.get(here, set())]


def test_every_import_points_down_the_layers():
    bad = [line for module, targets in graph().items() for line in against_layers(module, targets)]
    assert not bad, "imports against the layers:\n" + "\n".join(sorted(bad))


def test_the_check_sees_the_root_api_module_strings_and_command_lines():
    """Each way to reach a higher layer that an import statement does not show, from a low layer's module."""
    known = set(modules())
    cases = {
        "from alloctune import sweep": {"alloctune.api.sweep"},
        "from .. import analyze": {api()["analyze"]},
        "import alloctune\nalloctune.diagnose('x')": {"alloctune.api.diagnose"},
        "import importlib\nimportlib.import_module('alloctune.report.words')": {"alloctune.report.words"},
        "import subprocess, sys\nsubprocess.run([sys.executable, '-m', 'alloctune.cli.main'])": {"alloctune.cli.main"},
    }
    for source, reached in cases.items():
        ours = imports_of("alloctune.runtime.x", source, known).ours
        assert ours == reached, source
        assert against_layers("alloctune.runtime.x", ours), source
    assert imports_of("alloctune.runtime.x", "from .. import __version__", known).ours == set()


def test_no_import_cycle_between_modules():
    # A package's __init__ importing its own submodules (a re-export, the built-in kinds loaded by name) runs once
    # the package is loaded, so a submodule may import a name of its package: that pair is not a cycle.
    edges = {m: {t for t in targets if not t.startswith(m + ".")} for m, targets in graph().items()}
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


def is_light(module: str) -> bool:
    """A light module, or a package above one (loaded before it)."""
    return module in LIGHT_MODULES or any(module == p or module.startswith(p + ".") for p in LIGHT_PACKAGES) or \
        any(m.startswith(module + ".") for m in LIGHT_MODULES | LIGHT_PACKAGES)


def test_light_modules_import_only_the_standard_library_torch_and_light_modules():
    """Statically, on every import of every light module (lazy ones too): so transitively, whatever a light
    process goes on to load. The root's lazy API is counted where a name of it is used."""
    mods = modules()
    assert LIGHT_MODULES | LIGHT_PACKAGES <= set(mods)
    bad = []
    for name, path in sorted(mods.items()):
        if not is_light(name):
            continue
        found = imports_of(name, path.read_text(), set(mods), path.name == "__init__.py")
        bad += [f"{name} imports {m}" for m in sorted(found.others - THIRD_PARTY - set(sys.stdlib_module_names))]
        if name != ROOT_API:
            bad += [f"{name} imports {m}" for m in sorted(found.ours) if not is_light(m)]
    assert not bad, "light modules importing more than they may:\n" + "\n".join(bad)


def _loaded(code: str, **env_vars: str) -> set[str]:
    """Every module a fresh interpreter holds after running `code` (with `env_vars` set)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env_vars}
    out = subprocess.run([sys.executable, "-c", code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


HEAVY = {"scipy", "matplotlib", "rich", "yaml"}   # the orchestrator's: a child's interpreter may lack them


def _ours(loaded: set[str]) -> set[str]:
    return {m for m in loaded if m == ROOT_API or m.startswith(ROOT_API + ".")}


@pytest.mark.parametrize("code", [
    # the trial child running a built-in workload (python -m alloctune.child.main)
    "import alloctune.child.main, alloctune.child.provenance\nfrom alloctune.workload.builtin import resolve_factory\n"
    "resolve_factory({'kind': 'transformer', 'entry': None})",
    "import alloctune.child.probe",   # the probe's child (python -m alloctune.child.probe)
    "import alloctune.child.calibration",   # the calibration's child (python -m alloctune.child.calibration)
    "import alloctune.runtime.oomdump",   # dump_on_oom in the user's script
])
def test_a_light_process_loads_only_light_modules(code):
    loaded = _loaded(code)
    assert {m for m in _ours(loaded) if not is_light(m)} == set()
    assert not HEAVY & loaded


def test_the_start_up_hook_loads_only_light_modules(tmp_path):
    """What the hook loads in a process of a command: at start-up, and once that process marked a step and wrote
    its report (CPU only here): no torch until the program imports it, and no numpy."""
    from alloctune.runtime.hook import HOOK_DIR

    env = {"PYTHONPATH": os.pathsep.join([HOOK_DIR, str(ROOT)]), "ALLOCTUNE_HOOK_OUT": str(tmp_path)}
    started = _loaded("", **env)
    assert "alloctune.runtime.imports" in started   # the hook ran
    reported = _loaded("import alloctune, sitecustomize\nalloctune.step()\nsitecustomize._write()", **env)
    for loaded in (started, reported):
        assert {m for m in _ours(loaded) if not is_light(m)} == set()
        assert not (HEAVY | {"torch", "numpy"}) & loaded
    [report] = tmp_path.iterdir()   # the process's report, written whole (no temporary file left)
    assert report.name.startswith("proc-") and report.suffix == ".json"
