"""The import graph of the project: layers import only downward, and no module imports itself back.

Layers, bottom up: `utils/` (leaf modules), `envs/` and `agents/`, then the drivers' modules at the
repository root (`evaluation.py`, `log_utils.py`, `presets.py`, `run_utils.py`, `main*.py`) and
`scripts/`. Imports inside functions count too.
"""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("utils", "envs", "agents")
# What each layer may import from the project.
ALLOWED = {
    "utils": {"utils"},
    "envs": {"utils", "envs"},
    "agents": {"utils", "agents"},
}


def project_modules():
    """``{module name: path}`` for every project module outside tests/ and the venv."""
    modules = {}
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel = os.path.relpath(dirpath, ROOT)
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in ("tests", "exp", "data", "docs")]
        for name in filenames:
            if name.endswith(".py"):
                parts = [] if rel == "." else rel.split(os.sep)
                stem = name[:-3]
                module = ".".join(parts + ([] if stem == "__init__" else [stem]))
                modules[module] = os.path.join(dirpath, name)
    return modules


def imports_of(path, modules):
    """Project modules imported anywhere in the file at ``path``."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def test_layers_import_only_downward():
    modules = project_modules()
    assert {"utils.datasets", "envs.ogbench_utils", "agents.acfql", "run_utils"} <= set(modules)
    for module, path in modules.items():
        layer = module.split(".")[0]
        if layer not in ALLOWED:
            continue
        for imported in imports_of(path, modules):
            assert imported.split(".")[0] in ALLOWED[layer], f"{module} imports {imported} (upward)"


def test_no_import_cycles():
    modules = project_modules()
    graph = {m: imports_of(p, modules) - {m} for m, p in modules.items()}
    # A package's __init__ importing its own submodules is how packages work, not a cycle.
    for m in list(graph):
        if m in PACKAGES:
            graph[m] = {i for i in graph[m] if not i.startswith(m + ".")}
    state = {}

    def visit(m, stack):
        state[m] = "open"
        for n in graph.get(m, ()):
            if state.get(n) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(n) :] + [n]))
            if n not in state:
                visit(n, stack + [n])
        state[m] = "done"

    for m in graph:
        if m not in state:
            visit(m, [m])
