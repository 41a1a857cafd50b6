"""The command line: one `error:` line and exit status 2 for every bad input found before training.

`parse_flags` is the drivers' absl `flags_parser` (a bad flag, an unknown `--agent.KEY`, a stray word);
`InputError` is any other bad input found before training (flags, agent config, data files, rendering),
printed by `run_cli`. Anything raised once training has started keeps its traceback.
"""

import contextlib
import errno
import importlib.util
import os
import re
import sys
from typing import List

from absl import flags

import agents
from utils.flax_utils import CheckpointError
from utils.startup import exit_with_error

FLAGS = flags.FLAGS


class InputError(Exception):
    """A bad input found before training: a flag, the agent config, a data file, rendering.

    `run_cli` prints it as one `error: <message>` line and exits with status 2.
    """


@contextlib.contextmanager
def input_errors():
    """Turn the input errors raised inside the block into `InputError`.

    `ValueError` (bad value, config or data file), `FileNotFoundError` (missing dataset),
    `ImportError` (missing optional extra) and `CheckpointError` become one-line errors.
    Use it only around setup: errors raised during training must keep their traceback.
    """
    try:
        yield
    except InputError:
        raise
    except (ValueError, FileNotFoundError, ImportError, CheckpointError) as e:
        raise InputError(str(e)) from e


# Flags only one driver defines (the other driver's code reads `runner.config.ABSENT_FLAGS`' values).
DRIVER_ONLY_FLAGS = {
    "main": ("offline_steps", "updates_per_dispatch", "offline_sampler"),
    "main_online": ("offline_ratio",),
}


def _argv_agent(argv: List[str], driver: str):
    """`(how it was named, spec)` of the agent `argv` asks for (`--method` or `--agent=FILE`), or None."""
    methods = [m.group(1) for a in argv[1:] if (m := re.match(r"^--?method=(.*)$", a))]
    owner = agents.method_owner(methods[-1]) if methods else None
    if owner is not None:
        return f"--method={methods[-1]}", owner
    files = [m.group(1) for a in argv[1:] if (m := re.match(r"^--?agent=(.*)$", a))]
    if not files:
        return None
    try:
        spec = agents.load_file(files[-1])
        if spec is None:
            spec = agents.REGISTRY.get(_load_get_config(os.path.abspath(files[-1])).get("agent_name"))
    except Exception:  # noqa: BLE001 - a broken file is reported by its own error
        return None
    return (f"the {spec.name} agent (--agent={files[-1]})", spec) if spec is not None else None


def _other_driver_flag_message(name: str, argv: List[str], driver: str):
    """`--NAME` that only the other driver has: which driver has it and, when `--method` or `--agent` asks for
    an agent of that driver, that the whole command belongs there (one message, not two in turn); else None."""
    owner = next((d for d, names in DRIVER_ONLY_FLAGS.items() if d != driver and name in names), None)
    if owner is None:
        return None
    message = f"--{name} is a flag of {owner}.py, not {driver}.py"
    asked = _argv_agent(expanded_argv(argv), driver)
    if asked is not None and driver not in asked[1].drivers and owner in asked[1].drivers:
        return f"{message}; {asked[0]} runs with {owner}.py too: run python {owner}.py with these flags."
    return f"{message}; drop it, or run python {owner}.py."


def _load_get_config(path: str):
    spec = importlib.util.spec_from_file_location(f"_qc_agent_config_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def _agent_file(argv: List[str], driver: str) -> str:
    for arg in argv[1:]:
        m = re.match(r"^--?agent=(.*)$", arg)
        if m:
            return m.group(1)
    return default_agent_file(driver, argv)


def default_agent_file(driver: str, argv: List[str]) -> str:
    """The agent config file a driver loads without `--agent`: the agent of `--method` when one is given
    (`--method=dqc` loads agents/dqc.py), else the driver's default agent."""
    methods = [m.group(1) for a in argv[1:] if (m := re.match(r"^--?method=(.*)$", a))]
    owner = agents.method_owner(methods[-1]) if methods else None
    if owner is not None and driver in owner.drivers:
        return agents.CONFIG_FILES[owner.name]
    return agents.CONFIG_FILES[agents.default_agent(driver).name]


def expanded_argv(argv: List[str]) -> List[str]:
    """`argv` with `--flagfile=FILE` contents spliced in (as absl reads them); `argv` when that fails."""
    try:
        return flags.FLAGS.read_flags_from_files(list(argv), force_gnu=False)
    except Exception:  # noqa: BLE001 - an unreadable flagfile is reported by the caller's own error
        return list(argv)


def config_flag_message(error: Exception, argv: List[str], driver: str) -> str:
    """One line for a failure while ml_collections builds `--agent` (its file and `--agent.*` overrides): absl's
    own message for a value of the wrong type, else what ml_collections' bare one (`'alhpa'`) leaves unsaid."""
    if isinstance(error, UnicodeDecodeError):  # absl reads a --flagfile as UTF-8 text
        files = [a.split("=", 1)[1] for a in argv[1:] if a.startswith("--flagfile=")]
        return f"--flagfile={','.join(files) or '?'}: not UTF-8 text ({error.reason} at byte {error.start})."
    if isinstance(error, flags.UnrecognizedFlagError):
        other = _other_driver_flag_message(error.flagname, argv, driver)
        if other:
            return other
    if isinstance(error, flags.Error) and not str(error).startswith("flag --agent="):
        return str(error)
    argv = expanded_argv(argv)
    path = _agent_file(argv, driver)
    problem = agents.file_problem(path)  # the agent file itself: one line naming it and the part that is wrong
    if problem:
        return problem
    if isinstance(error, flags.Error):
        return str(error).strip().splitlines()[0]
    own = _load_get_config(path)
    keys = [m.group(1) for a in argv[1:] if (m := re.match(r"^--?(?:no)?agent\.([A-Za-z0-9_]+)", a))]
    unknown = [k for k in keys if hasattr(own, "get") and k not in own]
    if unknown and isinstance(error, (AttributeError, KeyError)):
        return _unknown_key_message(unknown[0], own, path, str(error))
    overrides = [a for a in argv[1:] if re.match(r"^--?(?:no)?agent\.", a)]
    return f"bad --agent override among {overrides} ({type(error).__name__}: {error}); the form is --agent.KEY=VALUE."


def _unknown_key_message(key: str, own, path: str, error: str) -> str:
    """`--agent.KEY` that the config of `path` lacks: ml_collections' suggestion, and which agent has the key."""
    own_name = own.get("agent_name", "this")
    registered = agents.CONFIG_FILES.get(own_name)
    if registered and os.path.realpath(registered) != os.path.realpath(path) and key in _load_get_config(registered):
        # A short config file of a registered agent: the file lacks the key, the agent has it.
        return (
            f"--agent.{key}: {path}'s get_config() has no key {key!r}, which the {own_name} agent has (start "
            f"the file from {registered}'s get_config(), or add the key)."
        )
    message = f"--agent.{key}: the {own_name} agent has no config key {key!r}"
    for spec in [s for s in agents.REGISTRY.values() if s.name != own_name and key in s.get_config()]:
        runs = " and ".join(f"{d}.py" for d in spec.drivers)
        message += f" (it is a key of the {spec.name} agent, which {runs} runs)"
    hint = re.search(r"Did you mean [^?]*\?", error)  # ml_collections' own suggestion of the closest key
    return message + (f"; {hint.group(0)}" if hint else ".")


def _leftover_message(argv: List[str], leftovers: List[str], flag_values) -> str:
    """Name the stray words absl left over; after a boolean flag written without '=', its accepted forms."""

    def boolean_name(token):
        name = token.lstrip("-")
        if not token.startswith("-") or "=" in token:
            return None
        for candidate in (name, name[2:] if name.startswith("no") else None):
            if candidate and candidate in flag_values and flag_values[candidate].boolean:
                return candidate
        return None

    hints, taken = [], set()
    for word in leftovers:  # the first place, not yet named, where the word follows a boolean flag
        places = [i for i in range(2, len(argv)) if argv[i] == word and i not in taken and boolean_name(argv[i - 1])]
        if places:
            i, base = places[0], boolean_name(argv[places[0] - 1])
            value = word.lower() if word.lower() in ("true", "false", "1", "0") else "false"
            taken.add(i)
            forms = f"--{base}={value} (or --{base} / --no{base})"
            hints.append(f"{argv[i - 1]} {word}: a boolean takes its value after '=': {forms}")
    words = " ".join(repr(w) for w in leftovers)
    rule = "Every flag takes its value after '=' (--name=value; booleans also --name / --noname)"
    return f"unexpected word(s) on the command line: {words}. {'; '.join(hints) or rule}."


def parse_flags(argv: List[str], driver: str, flag_values=FLAGS) -> List[str]:
    """Parse `argv` into `flag_values` or end with one `error:` line and exit status 2.

    Drivers pass `functools.partial(parse_flags, driver=...)` to `app.run` as `flags_parser`.

    Ends the run for: an unknown flag or a value of the wrong type (absl's message); an unknown
    `--agent.KEY` (naming the key, the agent that has it and ml_collections' closest key); any word
    left over after parsing, e.g. `--sparse False` (absl reads `--sparse` as true and leaves
    `False` over), with the accepted forms `--sparse=false` / `--nosparse`.
    """
    # `--agent=~/file.py` keeps its '~' past the shell (as every path flag; `RunConfig` expands the others).
    argv = [re.sub(r"^(--?agent=)(~.*)$", lambda m: m[1] + os.path.expanduser(m[2]), a) for a in argv]
    try:
        rest = flag_values(argv)
    except Exception as e:  # noqa: BLE001 - absl's flags.Error, ml_collections' errors, unreadable flagfiles
        if os.environ.get("QC_DEBUG"):
            raise
        exit_with_error(config_flag_message(e, argv, driver))
    try:  # ml_collections defers a config file that failed to load to its first use: use it now
        config = flag_values.agent
        if not hasattr(config, "to_dict"):
            path = _agent_file(argv, driver)
            exit_with_error(
                agents.file_problem(path)
                or f"--agent={path}: get_config() returned {type(config).__name__}, not an ml_collections.ConfigDict."
            )
        config.to_dict()
    except Exception as e:  # noqa: BLE001
        if os.environ.get("QC_DEBUG"):
            raise
        exit_with_error(config_flag_message(e, argv, driver))
    expanded = expanded_argv(argv)
    if len(rest) > 1:
        exit_with_error(_leftover_message(expanded, rest[1:], flag_values))
    # ml_collections joins repeated tuple overrides ((16,16) then 512 -> (16,16,512)) and keeps the last
    # of repeated scalars: both silently differ from what the user meant.
    keys = [m.group(1) for a in expanded[1:] if (m := re.match(r"^--?(?:no)?agent\.([^=]+)", a))]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        exit_with_error(f"--agent.{repeated[0]} is given {keys.count(repeated[0])} times; give each --agent key once.")
    return rest


def run_cli(main_fn):
    """Wrap a driver's `main`: an `InputError` prints `error: <message>` and exits with 2.

    Only input errors found before training get this form; every other exception keeps its
    traceback. `QC_DEBUG=1` re-raises input errors too (with the traceback).
    """

    def wrapped(argv):
        from runner.resume import RunFinished

        try:
            return main_fn(argv)
        except RunFinished as e:
            print(f"{e} has finished (DONE.json); nothing to resume.", file=sys.stderr)
            return 0
        except InputError as e:
            if os.environ.get("QC_DEBUG"):
                raise
            exit_with_error(str(e))
        except OSError as e:  # a full disk or quota at any write: the last complete state is intact
            if e.errno not in (errno.ENOSPC, errno.EDQUOT) or os.environ.get("QC_DEBUG"):
                raise
            where = f" writing {e.filename}" if e.filename else ""
            print(f"error: no space left{where} ({e.strerror}); the run keeps its last complete state: free space, "
                  "then continue it with --resume (the same flags).", file=sys.stderr)  # fmt: skip
            sys.exit(1)

    return wrapped
