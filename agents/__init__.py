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
import traceback
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


AGENT_MEMBERS = ("create", "update", "batch_update", "sample_actions")  # what every driver calls on agent_class
_SPEC_FORM = (
    "SPEC = common.AgentSpec(name, agent_class, get_config, check_config, drivers, batch_keys): agents/README.md"
)


def _where(error: BaseException, path: str) -> str:
    """`'line N: '` of the deepest frame of `error` inside the file at `path` (a SyntaxError's own line)."""
    if isinstance(error, SyntaxError) and error.lineno and os.path.abspath(error.filename or "") == path:
        return f"line {error.lineno}: "
    lines = [f.lineno for f in traceback.extract_tb(error.__traceback__) if os.path.abspath(f.filename) == path]
    return f"line {lines[-1]}: " if lines else ""


def _raised(error: BaseException, path: str) -> str:
    message = error.msg if isinstance(error, SyntaxError) else str(error)
    return f"{_where(error, path)}{type(error).__name__}: {message}"


def check_spec(spec) -> None:
    """`ValueError('SPEC.<field> ...')` for the first field of `spec` that no tool could use."""
    if not isinstance(spec, AgentSpec):
        raise ValueError(f"SPEC is a {type(spec).__name__}, not an agents.common.AgentSpec ({_SPEC_FORM})")
    cls = spec.agent_class
    checks = [
        ("name", isinstance(spec.name, str) and spec.name.isidentifier(), "a name such as 'acfql'"),
        ("agent_class", isinstance(cls, type), "a class (the agent's flax.struct.PyTreeNode)"),
        ("get_config", callable(spec.get_config), "a function (the file's get_config)"),
        ("check_config", callable(spec.check_config), "a function (config -> checked plain dict)"),
        (
            "drivers",
            isinstance(spec.drivers, (tuple, list))
            and len(spec.drivers) > 0
            and all(d in ("main", "main_online") for d in spec.drivers),
            "a tuple of 'main' and/or 'main_online'",
        ),
        (
            "batch_keys",
            isinstance(spec.batch_keys, (tuple, list))
            and len(spec.batch_keys) > 0
            and all(isinstance(k, str) for k in spec.batch_keys),
            "a tuple of batch key names, e.g. ('observations',)",
        ),
        (
            "methods",
            isinstance(spec.methods, dict) and all(isinstance(m, Method) for m in spec.methods.values()),
            "a dict {name: common.Method} ({} for a new agent)",
        ),
        ("short_names", isinstance(spec.short_names, dict), "a dict"),
        ("goal_conditioned", isinstance(spec.goal_conditioned, bool), "True or False"),
        ("online", isinstance(spec.online, bool), "True or False"),
        ("windows", spec.windows is None or callable(spec.windows), "None or a function (dataset, config) -> source"),
    ]
    checks += [(f, callable(getattr(spec, f)), "a function of the config") for f in ("method_of", "window_length",
                                                                                  "chunk_length")]  # fmt: skip
    for field, ok, what in checks:
        if not ok:
            raise ValueError(f"SPEC.{field} must be {what}, got {getattr(spec, field)!r}")
    missing = [m for m in AGENT_MEMBERS if not callable(getattr(cls, m, None))]
    if missing:
        raise ValueError(
            f"SPEC.agent_class {cls.__name__} lacks {', '.join(missing)} (every agent class has "
            f"{', '.join(AGENT_MEMBERS)}: agents/README.md)"
        )


def _config_of(get_config, path: str, what: str):
    """`get_config()`'s config; `ValueError` for an exception, another type, a config without `agent_name`."""
    try:
        config = get_config()
    except Exception as e:  # noqa: BLE001 - whatever the file raises is reported, naming the file
        raise ValueError(f"{what} failed ({_raised(e, path)})") from None
    if not hasattr(config, "to_dict"):
        raise ValueError(f"{what} returned {type(config).__name__}, not an ml_collections.ConfigDict")
    if "agent_name" not in config:
        raise ValueError(f"{what}'s config has no agent_name (the agent's name, SPEC.name)")
    return config


def _import(path: str):
    """The module of the agent file at `path` (absolute), imported; `ValueError` naming the line that failed."""
    try:
        if os.path.dirname(path) == _DIR:
            return importlib.import_module(f"agents.{os.path.splitext(os.path.basename(path))[0]}")
        name = f"_qc_agent_{abs(hash(path))}"
        spec_ = importlib.util.spec_from_file_location(name, path)
        if spec_ is None:
            raise ValueError("not a Python file (an agent file is path/to/name.py)")
        module = importlib.util.module_from_spec(spec_)
        sys.modules[name] = module  # as an import would: inspect and the agent's source record find it
        spec_.loader.exec_module(module)
        return module
    except FileNotFoundError:
        raise ValueError("no such file") from None
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever the file raises is reported, naming the file
        hint = f" ({_SPEC_FORM})" if isinstance(e, TypeError) and "AgentSpec" in str(e) else ""
        raise ValueError(f"cannot be imported ({_raised(e, path)}){hint}") from None


def _check_module(module, path: str) -> Optional[AgentSpec]:
    """The module's checked `SPEC` (None without one); `ValueError` for the first part that is wrong."""
    if not callable(getattr(module, "get_config", None)):
        raise ValueError(
            "has no get_config() (an agent file defines get_config(), returning its ml_collections.ConfigDict: "
            "agents/README.md)"
        )
    config = _config_of(module.get_config, path, "get_config()")
    if not hasattr(module, "SPEC"):
        if config["agent_name"] not in REGISTRY:
            raise ValueError(
                f"has no SPEC, and its get_config()'s agent_name {config['agent_name']!r} is not a known agent "
                f"({names()}); a new agent's file ends with {_SPEC_FORM}"
            )
        return None
    spec = module.SPEC
    check_spec(spec)
    if spec.get_config is not module.get_config:
        config = _config_of(spec.get_config, path, "SPEC.get_config()")
    if config["agent_name"] != spec.name:
        raise ValueError(
            f"SPEC.name is {spec.name!r} but get_config()'s agent_name is {config['agent_name']!r}; give both the "
            "agent's one name"
        )
    return spec


def _discover():
    for info in sorted(pkgutil.iter_modules([_DIR]), key=lambda m: m.name):
        if info.name.startswith("_") or info.name in _NOT_AGENTS:
            continue
        path = os.path.join(_DIR, f"{info.name}.py")
        try:  # a half-edited copy must not stop every run: it is named when asked for (`get`) and warned of
            module = _import(path)
            if hasattr(module, "SPEC"):  # a file without one is a helper module, not an agent
                register(_check_module(module, path), path)
        except Exception as e:  # noqa: BLE001 - whatever the file raises is reported, naming the file
            PROBLEMS[path] = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"


def checked_config(spec: AgentSpec, config) -> Dict:
    """`spec.check_config(config)`, which must return a dict or raise `ValueError` (naming `--agent.KEY`); any
    other outcome is the agent file's mistake: `ValueError('--agent=FILE: SPEC.check_config ...')`."""
    where = f"--agent={CONFIG_FILES.get(spec.name, spec.name)}: SPEC.check_config"
    try:
        checked = spec.check_config(config)
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - a bug of the agent's check, reported naming its file
        path = os.path.abspath(CONFIG_FILES.get(spec.name, ""))
        raise ValueError(
            f"{where} failed ({_raised(e, path)}); it must raise ValueError naming --agent.KEY for a bad value "
            "(the common.is_* tests: agents/README.md)."
        ) from None
    if not isinstance(checked, dict):
        raise ValueError(f"{where} returned {type(checked).__name__}, not a dict (the checked copy of the config).")
    return checked


def file_problem(path: str) -> Optional[str]:
    """What is wrong with the agent file at `path`, as one line naming it (`--agent=PATH: ...`); None when
    `load_file` would load it."""
    try:
        load_file(path)
    except ValueError as e:
        return str(e)
    return None


def load_file(path: str) -> Optional[AgentSpec]:
    """Import the agent file at `path` (an `--agent` config file) and register its `SPEC`, if it has one.

    A file inside `agents/` is imported as its package module (so it is the one the registry holds).
    Returns the spec, or None for a config file without one (a `get_config()` file of a known agent).
    Raises `ValueError('--agent=PATH: ...')`, one line naming the part that is wrong, for a file that
    cannot be imported (its line), without `get_config()`, with a `get_config()` that fails or returns no
    ConfigDict, with a `SPEC` that is partial or has a field of the wrong kind (an `agent_class` without
    `create`, `update`, `batch_update`, `sample_actions`), or without `SPEC` for an unknown agent name.
    """
    if not path.strip():
        raise ValueError(
            "--agent= names no file; pass --agent=path/to/agent.py (or leave it out: the driver's default)."
        )
    path = os.path.abspath(os.path.expanduser(path))
    try:
        if path in PROBLEMS:
            raise ValueError(PROBLEMS[path])
        if os.path.isdir(path):
            raise ValueError("is a folder; pass the agent's .py file")
        spec = _check_module(_import(path), path)
    except ValueError as e:
        raise ValueError(f"--agent={path}: {e}.") from None
    return register(spec, path) if spec is not None else None


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


def window_source(dataset, agent_config):
    """The source of the agent's offline batches over `dataset` (a `utils.datasets.Dataset`): its spec's
    `windows`, by default `utils.device_sampler.ChunkWindows` (h-step windows, docs/batch_contract.md, with only
    the keys the update reads)."""
    from utils.device_sampler import ChunkWindows

    spec = get(agent_config["agent_name"])
    if spec.windows is not None:
        return spec.windows(dataset, agent_config)
    return ChunkWindows(dataset, agent_config, batch_keys=spec.batch_keys)


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
