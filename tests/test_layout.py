"""The import graph of the project: layers import only downward, and no module imports itself back.

Layers, bottom up: `utils/` (leaf modules); `envs/` and `agents/`; `log_utils.py` and
`evaluation.py`; the drivers' kit `runner/`; the drivers `main.py`, `main_online.py` and `scripts/`.
Imports inside functions count too. The repository root holds only the card's modules.
"""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("utils", "envs", "agents", "runner")
# What each layer may import from the project.
ALLOWED = {
    "utils": {"utils"},
    "envs": {"utils", "envs"},
    "agents": {"utils", "agents"},
    "log_utils": {"utils"},
    "evaluation": {"utils"},
    "runner": {"utils", "envs", "agents", "log_utils", "evaluation", "runner"},
}
# The repository root: the modules of the design card, the packages and the project's folders.
ROOT_ENTRIES = {
    "agents", "utils", "envs", "runner", "scripts", "tests", "docs", "data",
    "main.py", "main_online.py", "evaluation.py", "log_utils.py",
    "README.md", "requirements.txt", "requirements-robomimic.txt", "pyproject.toml",
}  # fmt: skip
# No module grows past this many lines (scripts included).
MAX_LINES = 800


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
    assert {"utils.datasets", "envs.ogbench", "agents.acfql", "runner.setup", "evaluation"} <= set(modules)
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


def test_root_holds_only_the_cards_modules():
    visible = {e for e in os.listdir(ROOT) if not e.startswith(".") and e not in ("exp", "wandb", "venv")}
    visible = {e for e in visible if not e.endswith(".egg-info") and e != "__pycache__"}
    assert visible <= ROOT_ENTRIES, sorted(visible - ROOT_ENTRIES)


def test_no_module_is_longer_than_the_limit():
    long = {m: n for m, p in project_modules().items() if (n := sum(1 for _ in open(p))) > MAX_LINES}
    assert not long, long
