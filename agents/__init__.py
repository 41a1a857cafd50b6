"""The one list of agents: `config['agent_name']` -> `AgentSpec` (class, drivers, batch keys, paper methods).

Every file `agents/<name>.py` that defines a module-level `SPEC` (`agents.common.AgentSpec`) is an
agent; a file elsewhere joins the list when a driver loads it with `--agent=path/to/file.py`
(`load_file`). Nothing outside `agents/` names an agent: drivers, `--method`, the sweep, the plots and
the command-line checks ask this registry. Adding an agent: agents/README.md.
"""

import importlib
import importlib.util
import os
import pkgutil
import sys
from typing import Dict, List, Optional

from agents.common import AgentSpec, Method  # noqa: F401 - the registry's types, re-exported

_DIR = os.path.dirname(os.path.abspath(__file__))
_NOT_AGENTS = ("common",)
REGISTRY: Dict[str, AgentSpec] = {}
# Where each agent's get_config() lives: the default of the drivers' --agent flag.
CONFIG_FILES: Dict[str, str] = {}
# Files of agents/ that could not be registered, {path: why} (a syntax error, a name another file has),
# and names two files claim (no run may use them until one is renamed).
PROBLEMS: Dict[str, str] = {}
CLASHES: Dict[str, List[str]] = {}


def _clash_message(name: str) -> str:
    first, second = CLASHES[name]
    return (
        f"two files define agent {name!r}: {first} and {second}; give the new one its own name (SPEC name= and "
        "get_config()'s agent_name): agents/README.md."
    )


def register(spec: AgentSpec, config_file: Optional[str] = None) -> AgentSpec:
    """Add `spec` under `spec.name`; returns it. Registering the same file again (or without a file, as a
    test does) replaces the entry.

    Raises `ValueError` when another file already defines an agent of that name (a copied agent file
    that kept its name: which one ran would depend on the order of loading), or when one of its methods
    is another agent's (a copied agent file that kept them).
    """
    path = os.path.abspath(config_file) if config_file is not None else None
    known = CONFIG_FILES.get(spec.name)
    if path is not None and known is not None and path != known:
        if os.path.realpath(known) == os.path.realpath(path):
            return REGISTRY[spec.name]  # a link to the registered file: the file as first registered stays its path
        CLASHES[spec.name] = [known, path]
        raise ValueError(_clash_message(spec.name))
    for other in REGISTRY.values():
        shared = sorted(set(other.methods) & set(spec.methods))
        if other.name != spec.name and shared:
            raise ValueError(
                f"agent {spec.name!r} ({config_file}) declares the method(s) {shared} of agent {other.name!r}; "
                "drop methods= (and method_of=) from its SPEC: agents/README.md."
            )
    REGISTRY[spec.name] = spec
    if config_file is not None:
        CONFIG_FILES[spec.name] = os.path.abspath(config_file)
    return spec


def _discover():
    for info in sorted(pkgutil.iter_modules([_DIR]), key=lambda m: m.name):
        if info.name.startswith("_") or info.name in _NOT_AGENTS:
            continue
        path = os.path.join(_DIR, f"{info.name}.py")
        try:  # a half-edited copy must not stop every run: it is named when asked for (`get`) and warned of
            module = importlib.import_module(f"agents.{info.name}")
            spec = getattr(module, "SPEC", None)
            if isinstance(spec, AgentSpec):
                register(spec, module.__file__)
        except Exception as e:  # noqa: BLE001 - whatever the file raises is reported, naming the file
            PROBLEMS[path] = f"{type(e).__name__}: {e}"


def load_file(path: str) -> Optional[AgentSpec]:
    """Import the agent file at `path` (an `--agent` config file) and register its `SPEC`, if it has one.

    A file inside `agents/` is imported as its package module (so it is the one the registry holds).
    Returns the spec, or None for a config file without one (a plain `get_config()` file).
    """
    path = os.path.abspath(os.path.expanduser(path))
    if path in PROBLEMS:
        raise ValueError(f"--agent={path} cannot be loaded ({PROBLEMS[path]}).")
    try:
        if os.path.dirname(path) == _DIR:
            module = importlib.import_module(f"agents.{os.path.splitext(os.path.basename(path))[0]}")
        else:
            name = f"_qc_agent_{abs(hash(path))}"
            spec_ = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec_)
            sys.modules[name] = module  # as an import would: inspect and the agent's source record find it
            spec_.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - whatever the file raises is reported, naming the file
        raise ValueError(f"--agent={path} cannot be loaded ({type(e).__name__}: {e}).") from None
    spec = getattr(module, "SPEC", None)
    return register(spec, path) if isinstance(spec, AgentSpec) else None


def names() -> List[str]:
    return sorted(REGISTRY)


def get(name: str) -> AgentSpec:
    """The spec of agent `name`; `ValueError` naming the known agents for another name (and the files of
    agents/ that could not be loaded), or both files when two define `name`."""
    if name in CLASHES:
        raise ValueError(_clash_message(name))
    if name not in REGISTRY:
        broken = "".join(f"; {path} could not be loaded ({why})" for path, why in sorted(PROBLEMS.items()))
        raise ValueError(
            f"--agent.agent_name={name!r} is not one of {names()} (an agent outside agents/ is loaded with "
            f"--agent=path/to/its_file.py){broken}."
        )
    return REGISTRY[name]


def for_driver(driver: str) -> List[AgentSpec]:
    """The agents `driver` runs, its default agent (the one naming it first) first."""
    specs = [s for s in REGISTRY.values() if driver in s.drivers]
    return sorted(specs, key=lambda s: (s.drivers.index(driver), s.name))


def default_agent(driver: str) -> AgentSpec:
    return for_driver(driver)[0]


def method_owner(method: str) -> Optional[AgentSpec]:
    """The agent that runs paper method `method` (a `--method` name), or None."""
    return next((s for s in REGISTRY.values() if method in s.methods), None)


_discover()
