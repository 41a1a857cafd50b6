"""The import graph of the project: layers import only downward, and no module imports itself back.

Layers, bottom up: `utils/` (leaf modules); `envs/` and `agents/`; `log_utils.py` and
`evaluation.py`; the drivers' kit `runner/`; the drivers `main.py`, `main_online.py` and `scripts/`.
Imports inside functions count too. The repository root holds only the card's modules.

`scripts/` holds only commands (what a user runs: `python scripts/X.py`, `bash scripts/X.sh`); a command's parts
live in a package beside it (`scripts/plotting/`, `scripts/sweeping/`), imported as `plotting.runs` because a
command has scripts/ as `sys.path[0]`. Only a command touches `sys.path`, with one line that puts the repository
root there; a part never imports a command.
"""

import ast
import os
import re
import shutil
import subprocess

import pytest

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
SCRIPTS = os.path.join(ROOT, "scripts")
# The one sys.path statement a command may hold, at module level after `ROOT = <the repository root>`.
ROOT_ON_PATH = "sys.path.insert(0, ROOT)"
LIST_CHANGES = ("insert", "append", "extend", "remove", "pop", "clear", "reverse", "sort", "__setitem__", "__iadd__")


def project_modules(root=ROOT):
    """``{module name: path}`` for every project module outside tests/ and the venv (of the repository at `root`)."""
    modules = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in ("tests", "exp", "data", "docs")]
        for name in filenames:
            if name.endswith(".py"):
                parts = [] if rel == "." else rel.split(os.sep)
                stem = name[:-3]
                module = ".".join(parts + ([] if stem == "__init__" else [stem]))
                modules[module] = os.path.join(dirpath, name)
    return modules


def imports_of(path, modules):
    """Project modules imported anywhere in the file at ``path``.

    A module under scripts/ runs with the repository root and then scripts/ on `sys.path`: its `import plotting.runs`
    is `scripts.plotting.runs` when the root has no `plotting`.
    """
    prefixes = ("", "scripts.") if os.path.commonpath([path, SCRIPTS]) == SCRIPTS else ("",)
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            for prefix in prefixes:  # in sys.path's order: the repository root first
                resolved = prefix + name
                while resolved and resolved not in modules:
                    resolved = resolved.rpartition(".")[0]
                if resolved:
                    found.add(resolved)
                    break
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


def _commands_and_parts():
    """``(commands, parts)``: module name -> path of the top-level scripts/*.py and of the modules in scripts/'s
    subfolders."""
    modules = {m: p for m, p in project_modules().items() if m.startswith("scripts.")}
    commands = {m: p for m, p in modules.items() if os.path.dirname(p) == SCRIPTS}
    return commands, {m: p for m, p in modules.items() if m not in commands}


def _has_main_block(path):
    return any(
        isinstance(node, ast.If) and ast.unparse(node.test) in ("__name__ == '__main__'", "'__main__' == __name__")
        for node in ast.parse(open(path).read()).body
    )


def _sys_path_statements(tree):
    """Every node of `tree` that changes `sys.path`: a call of one of its list methods that change a list, or an
    assignment to it or to a slice of it."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LIST_CHANGES:
            if ast.unparse(node.func.value) == "sys.path":
                found.append(node)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                base = target.value if isinstance(target, ast.Subscript) else target
                if ast.unparse(base) == "sys.path":
                    found.append(node)
    return found


def test_scripts_holds_only_commands_and_their_parts_packages():
    """Top level: commands (a `.py` with an `if __name__ == "__main__":` block, or a shell script); a folder is a
    package of a command's parts (`__init__.py`, no module of it is run as a program) or holds no Python at all
    (`slurm/`: shell tools)."""
    entries = {e for e in os.listdir(SCRIPTS) if not e.startswith(".") and e != "__pycache__"}
    assert {"sweep.py", "plot_curves.py", "plotting", "sweeping"} <= entries
    for entry in sorted(entries):
        path = os.path.join(SCRIPTS, entry)
        if os.path.isdir(path):
            python = sorted(n for n in os.listdir(path) if n.endswith(".py"))
            if not python:
                continue
            assert "__init__.py" in python, f"scripts/{entry}/ holds Python modules but is not a package"
            for name in python:
                assert not _has_main_block(os.path.join(path, name)), f"scripts/{entry}/{name} is run as a command"
        elif entry.endswith(".py"):
            assert _has_main_block(path), f"scripts/{entry} is no command (no __main__ block): move it to a package"
        else:
            assert entry.endswith(".sh"), f"scripts/{entry}: neither a command nor a package"


def test_only_commands_touch_sys_path_each_with_one_line():
    """A part of a command is imported as `package.module` and never edits `sys.path`; a command's only module-level
    `sys.path` statement puts the repository root first (`ROOT = os.path.dirname(...)` of scripts/). Inside its
    functions a command may (bench_reference.py's worker makes the authors' repository root the only one)."""
    commands, parts = _commands_and_parts()
    assert {"scripts.sweeping", "scripts.sweeping.run", "scripts.plotting.runs"} <= set(parts)
    assert {"scripts.sweep", "scripts.plot_curves"} <= set(commands)
    for module, path in parts.items():
        found = _sys_path_statements(ast.parse(open(path).read()))
        assert not found, f"{module} changes sys.path: {[ast.unparse(n) for n in found]}"
    for module, path in commands.items():
        tree = ast.parse(open(path).read())
        functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        top = [n for n in tree.body if not isinstance(n, functions) and _sys_path_statements(n)]
        assert [ast.unparse(n) for n in top] in ([], [ROOT_ON_PATH]), f"{module}: {[ast.unparse(n) for n in top]}"
        if top:
            roots = [n for n in tree.body[: tree.body.index(top[0])] if isinstance(n, ast.Assign)]
            assert any(
                ast.unparse(n) == "ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))" for n in roots
            ), f"{module}: ROOT is not the repository root before {ROOT_ON_PATH}"


def test_parts_never_import_a_command():
    """Commands sit above their parts: a part that imported a command would run the command's set-up."""
    commands, parts = _commands_and_parts()
    modules = project_modules()
    for module, path in parts.items():
        imported = imports_of(path, modules) & set(commands)
        assert not imported, f"{module} imports the command(s) {sorted(imported)}"
    # Resolved as the command sees it: plot_curves imports its parts, a part imports its siblings.
    assert "scripts.plotting.compare" in imports_of(commands["scripts.plot_curves"], modules)
    assert "scripts.sweeping.run" in imports_of(parts["scripts.sweeping.slurm"], modules)


def readme_layout(root=ROOT):
    """`{entry: text}` of the README's layout block: each top-level file or folder it names (`main.py`, `envs/`)
    with the text that describes it (its continuation lines included)."""
    with open(os.path.join(root, "README.md")) as f:
        readme = f.read()
    block = readme.split("## Reading the code and the layout", 1)[1].split("```", 2)[1]
    entries = {}
    for line in block.strip("\n").splitlines():
        if line[:1].strip():
            name, _, text = line.partition(" ")
            entries[name] = text
        else:
            entries[name] += " " + line.strip()
    return entries


# Plug-ins: a file of envs/ that defines a module-level FAMILY is a benchmark family, one of agents/ that defines
# SPEC an agent (envs/README.md, agents/README.md). One is added as that one file: the layout needs not name it.
PLUG_INS = {"envs": "FAMILY", "agents": "SPEC"}


def is_plug_in(module, path):
    """Whether `module` (at `path`) is a family file of envs/ or an agent file of agents/ (`PLUG_INS`)."""
    package, _, name = module.partition(".")
    if package not in PLUG_INS or not name or "." in name:
        return False
    for node in ast.parse(open(path).read()).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(target, ast.Name) and target.id == PLUG_INS[package] for target in targets):
            return True
    return False


def check_readme_layout(root=ROOT):
    """Every path the README's layout names exists, and every module outside tests/ is named in its folder's
    entry (a module of a package inside it with the package's folder, e.g. `sweeping/ (run.py ...)`; a package's
    `__init__.py` by its folder), but a family or agent file (`is_plug_in`). `AssertionError` naming the first
    that is not."""
    entries = readme_layout(root)
    for entry, text in entries.items():
        assert os.path.exists(os.path.join(root, entry)), f"README layout: {entry} does not exist"
        if not entry.endswith("/"):
            continue
        under = [os.path.relpath(os.path.join(d, f), os.path.join(root, entry))
                 for d, _, files in os.walk(os.path.join(root, entry)) for f in files]  # fmt: skip
        for named in re.findall(r"[\w/]+\.(?:py|sh|md)\b", text):
            assert any(p == named or p.endswith("/" + named) for p in under), f"README layout: {entry}{named}?"
    for module, path in project_modules(root).items():
        rel = os.path.relpath(path, root)
        top = rel.split(os.sep)[0] + ("/" if os.sep in rel else "")
        if top == "tests/":
            continue
        assert top in entries, f"README layout does not name {top}"
        if is_plug_in(module, path):
            continue
        parts = rel.split(os.sep)[1:]
        if parts and parts[-1] == "__init__.py":  # a package is named by its folder
            parts = parts[:-1]
        for part in [p + "/" for p in parts[:-1]] + parts[-1:]:
            assert part in entries[top], f"README layout: {top} does not name {part} ({module})"


def test_the_readmes_layout_is_true():
    check_readme_layout()


def test_a_family_or_agent_added_as_one_file_needs_no_line_in_the_layout(tmp_path):
    """envs/README.md's worked example saved as envs/pendulum.py, and an agent file copied under a new name, pass
    the layout checks unnamed; a module of envs/ that is no family still has to be named."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode()
    for path in filter(None, tracked.split("\0")):
        if os.path.isfile(os.path.join(ROOT, path)):
            os.makedirs(os.path.dirname(os.path.join(tmp_path, path)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, path), os.path.join(tmp_path, path))
    with open(os.path.join(ROOT, "envs", "README.md")) as f:
        example = re.findall(r"```python\n(.*?)```", f.read(), re.S)[0]
    (tmp_path / "envs" / "pendulum.py").write_text(example)
    shutil.copy2(os.path.join(ROOT, "agents", "iql.py"), tmp_path / "agents" / "my_iql.py")
    check_readme_layout(str(tmp_path))
    modules = project_modules(str(tmp_path))
    assert is_plug_in("envs.pendulum", modules["envs.pendulum"]) and is_plug_in(
        "agents.my_iql", modules["agents.my_iql"]
    )
    assert not is_plug_in("envs.common", modules["envs.common"])
    (tmp_path / "envs" / "helpers.py").write_text("X = 1\n")  # no FAMILY: a shared module, which the layout names
    with pytest.raises(AssertionError, match=r"envs/ does not name helpers.py"):
        check_readme_layout(str(tmp_path))


def test_no_file_names_a_path_outside_the_repository():
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode()
    outside = re.compile(r"/work/|\.\./shared|/root/|/home/[a-z]")
    for path in filter(None, tracked.split("\0")):
        if path == "tests/test_layout.py":  # the patterns above
            continue
        try:
            with open(os.path.join(ROOT, path), encoding="utf-8") as f:
                found = outside.search(f.read())
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        assert found is None, f"{path} names a path outside the repository: {found.group()}"
