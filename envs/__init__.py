"""The one list of benchmark families: every file `envs/<family>.py` that defines a module-level `FAMILY`
(`envs.common.Family`) is one. Nothing outside `envs/` parses an env name or names a family module: setup,
`--method`, the sweep and the plots ask `parse` (or read the `env` block a run wrote into `flags.json`) and
`family`. Adding a benchmark: envs/README.md.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import numbers
import os
import pkgutil
import sys

import numpy as np

from envs.common import TRANSITION_KEYS, DataOptions, EnvAndDatasets, EnvName, Family, check_data

logger = logging.getLogger(__name__)

_DIR = os.path.dirname(os.path.abspath(__file__))
# Modules of envs/ that are not families: the shared pieces, the provenance records and the two data tools.
_NOT_FAMILIES = ("common", "provenance", "generate_dataset", "download_datasets")
FAMILIES: dict[str, Family] = {}
# Family files that are left out, {path: why}: one that cannot be imported (whatever it raises, SystemExit too),
# whose FAMILY is no usable `Family` (`check_family`), or two that claim one family name (a copy that kept its
# name: which one ran would depend on the order of files). They stop no other family's runs; the unknown-name
# error names them (envs/README.md, "How the registry asks the families").
PROBLEMS: dict[str, str] = {}
_FILES: dict[str, str] = {}  # family name -> the file that defines it


class UnknownEnvName(ValueError):
    """A name no family parses (`parse`)."""


def _shown(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_family(family) -> None:
    """`ValueError('FAMILY.<field> must be ..., got ...')` for the first field of a family file's `FAMILY` that
    the registry or the drivers could not use (envs/README.md lists what each must be); nothing for a good one."""
    if not isinstance(family, Family):
        tuple_of_one = isinstance(family, tuple) and any(isinstance(f, Family) for f in family)
        hint = ": the comma after Family(...) makes it a tuple" if tuple_of_one else ""
        raise ValueError(f"FAMILY is a {type(family).__name__}, not an envs.common.Family{hint}")
    patterns = family.patterns
    size = family.env_bytes
    checks = [
        ("name", isinstance(family.name, str) and family.name != "", "a non-empty string, e.g. 'pendulum'"),
        (
            "patterns",
            isinstance(patterns, tuple) and len(patterns) > 0 and all(isinstance(p, str) and p for p in patterns),
            "a tuple of env-name patterns (strings), e.g. ('pendulum-random-v1',)",
        ),
        *[(f, callable(getattr(family, f)), "a function") for f in ("parse", "load", "envs_for_seed")],
        ("renders", isinstance(family.renders, bool), "True or False"),
        ("env_bytes", isinstance(size, numbers.Integral) and not isinstance(size, bool) and size >= 0, "an int >= 0"),
        *[(f, callable(getattr(family, f)), "a function") for f in ("sparse_default", "with_task")],
    ]
    for field, ok, what in checks:
        if not ok:
            raise ValueError(f"FAMILY.{field} must be {what}, got {_shown(getattr(family, field))}")


class _HeldStderr:
    """`sys.stderr` while a family file is imported: what is written is held (`release` returns it), and passed
    straight through after `release`, so that a stream captured during the import (a logging handler) still
    reaches the real stderr."""

    def __init__(self, target):
        self._target, self._held = target, []

    def write(self, text):
        if self._held is None:
            return self._target.write(text)
        self._held.append(text)
        return len(text)

    def flush(self):
        if self._held is None:
            self._target.flush()

    def release(self) -> str:
        text, self._held = "".join(self._held or ()), None
        return text

    def __getattr__(self, name):
        return getattr(self._target, name)


def _import(module: str):
    """`(envs.<module>, None)`, or `(None, why)` for a file that raises anything at import but KeyboardInterrupt
    (the user's Ctrl-C, raised). What it writes to stderr while importing is held back: written out when the
    import succeeds or is interrupted, dropped when it fails (its last line is then in `why`)."""
    real = sys.stderr
    sys.stderr = held = _HeldStderr(real)
    try:
        imported = importlib.import_module(f"envs.{module}")
    except KeyboardInterrupt:
        sys.stderr = real
        real.write(held.release())
        raise
    except BaseException as e:  # noqa: BLE001 - SystemExit too (argparse at import): named, the others still run
        sys.stderr = real
        said = held.release().strip().splitlines()
        exception = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        return None, f"could not be imported ({exception}" + (f"; it printed {said[-1]!r})" if said else ")")
    sys.stderr = real
    real.write(held.release())
    return imported, None


def _discover() -> None:
    for info in sorted(pkgutil.iter_modules([_DIR]), key=lambda m: m.name):
        if info.name.startswith("_") or info.name in _NOT_FAMILIES:
            continue
        path = f"envs/{info.name}.py"
        module, why = _import(info.name)
        if why is not None:
            PROBLEMS[path] = why
            continue
        if not hasattr(module, "FAMILY"):  # a helper module, not a family
            continue
        family_ = module.FAMILY
        try:
            check_family(family_)
        except ValueError as e:
            PROBLEMS[path] = f"is left out: {e}"
            continue
        if family_.name in _FILES:
            first = _FILES[family_.name]
            PROBLEMS[path] = f"defines the family {family_.name!r} as {first} does: give the new one its own name"
            PROBLEMS.setdefault(first, f"defines the family {family_.name!r} as {path} does")
            FAMILIES.pop(family_.name, None)
            continue
        _FILES[family_.name] = path
        FAMILIES[family_.name] = family_


_discover()


def patterns() -> list[str]:
    """Every family's env-name patterns, `'<family>: <pattern>'` (for errors and --help)."""
    return [f"{f.name}: {p}" for f in FAMILIES.values() for p in f.patterns]


def _block_fault(block, env_name: str) -> str | None:
    """What keeps `block` from being the env block (`EnvName.record()`) of `env_name`: not a dict, a missing field,
    another `name`, a field of the wrong kind; None when it is whole."""
    if not isinstance(block, dict):
        return f"a {type(block).__name__}"
    missing = [f.name for f in dataclasses.fields(EnvName) if f.name not in block]
    if missing:
        return f"no {', '.join(missing)}"
    if block["name"] != env_name:
        return f"name {block['name']!r}"
    for key in ("family", "domain", "paper_domain", "paper_task", "short"):
        if not isinstance(block[key], str):
            return f"{key} {_shown(block[key])}, not a string"
    if block["dataset_type"] is not None and not isinstance(block["dataset_type"], str):
        return f"dataset_type {_shown(block['dataset_type'])}, not a string or None"
    task = block["task"]
    if not (task is None or (isinstance(task, int) and not isinstance(task, bool) and task >= 1)):
        return f"task {_shown(task)}, not None or a number >= 1"
    if not isinstance(block["goal_conditioned"], bool):
        return f"goal_conditioned {_shown(block['goal_conditioned'])}, not True or False"
    return None


def _returned_fault(parsed, family_name: str, env_name: str) -> str | None:
    """What is wrong with a non-None value a family's parse returned for `env_name`; None for its own `EnvName`."""
    if not isinstance(parsed, EnvName):
        return f"a {type(parsed).__name__} ({_shown(parsed)})"
    if parsed.family != family_name:
        return f"an EnvName of the family {parsed.family!r} (its FAMILY is {family_name!r})"
    fault = _block_fault(parsed.record(), env_name)
    return None if fault is None else f"an EnvName with {fault}"


def parse(env_name: str) -> EnvName:
    """`env_name` parsed by the one family it belongs to. Every family's `parse` is asked (the rule:
    envs/README.md, "How the registry asks the families").

    Raises:
        ValueError: two or more families parse the name (one line naming their files); no family parses it and
            one raises `ValueError` (its message, naming its file: a bad part of one of its names, task 9), or
            several do (one line naming each).
        UnknownEnvName (a `ValueError`): a name no family parses or refuses, one line listing every family's
            patterns, the family files left out (`PROBLEMS`) and those whose `parse` failed on the name (another
            exception than `ValueError`) or returned something else than None or an `EnvName` of its family.
    A family whose `parse` fails on a name another family parses is logged as a warning, naming its file.
    """
    claims, refusals, faults = [], [], []
    for family_ in FAMILIES.values():
        path = _FILES[family_.name]
        try:
            parsed = family_.parse(env_name)
        except ValueError as e:
            refusals.append((path, str(e)))
            continue
        except Exception as e:  # noqa: BLE001 - a bug in one family's parse must not stop the others' names
            faults.append(f"{path}'s parse failed on it ({type(e).__name__}: {e})")
            continue
        if parsed is None:
            continue
        fault = _returned_fault(parsed, family_.name, env_name)
        if fault is None:
            claims.append((path, parsed))
        else:
            faults.append(f"{path}'s parse returned {fault} for it, not None or an EnvName of its own family")
    if len(claims) > 1:
        files = " and ".join(path for path, _ in claims)
        raise ValueError(
            f"{env_name!r} is parsed by {files}: an env name belongs to one family, so the parse of each family "
            "it is not for must return None for it (envs/README.md)."
        )
    if claims:
        path, parsed = claims[0]
        wrong = [f"{p}'s parse raised ValueError for it ({message})" for p, message in refusals] + faults
        if wrong:
            logger.warning("%s: %s; parsed by %s instead.", env_name, "; ".join(wrong), path)
        return parsed
    if faults and refusals:
        logger.warning("%s: %s.", env_name, "; ".join(faults))
    if len(refusals) == 1:
        path, message = refusals[0]
        raise ValueError(f"{message} ({path}'s parse)")
    if refusals:
        said = "; ".join(f"{path}'s parse says {message!r}" for path, message in refusals)
        raise ValueError(
            f"{env_name!r} is refused by {len(refusals)} families, but a parse raises ValueError only for a bad "
            f"part of its own names (others: None), so all but one are wrong: {said}."
        )
    notes = [f"{path} {why}" for path, why in PROBLEMS.items()] + faults
    raise UnknownEnvName(f"Unknown environment {env_name!r}. Supported: " + "; ".join(patterns() + notes))


def family(name: EnvName | str) -> Family:
    """The `Family` of a parsed name, or of an env name (parsed here; `parse`'s errors). Not a family's name:
    `FAMILIES[family_name]` is that."""
    return FAMILIES[(parse(name) if isinstance(name, str) else name).family]


def make_env_and_datasets(env_name: str, **options) -> EnvAndDatasets:
    """`load(parse(env_name), DataOptions(**options))`: the envs and offline data of `env_name` (the options:
    `envs.common.DataOptions`). Raises what `parse` and `load` raise."""
    return load(parse(env_name), DataOptions(**options))


def source_file(family_name: str) -> str:
    """The file that defines the family `family_name`, as errors name it (`envs/ogbench.py`)."""
    return _FILES[family_name]


# What a family's `metadata['datasets']` records hold for each file (envs/README.md).
DATASET_RECORD_KEYS = ("path", "role", "source", "size_bytes", "sha256")


def load(name: EnvName, options: DataOptions) -> EnvAndDatasets:
    """The family's `load(name, options)`, what it hands over checked as a data file is: the way every run (and
    `make_env_and_datasets`) loads. Float arrays of another width than float32 are cast to float32.

    Raises:
        ValueError naming the family's file (`source_file`), e.g. `envs/pendulum.py: ...`: its `load` raised
            another exception than the input errors below (the message gives its type and text; the user's
            Ctrl-C, `KeyboardInterrupt`, goes through as it is), returned no `EnvAndDatasets`, a `metadata`
            without the `env` block (`name.record()`) or the `datasets` records (`DATASET_RECORD_KEYS`), or a
            `train_dataset` (`val_dataset`) that `common.check_data` refuses or that lacks a field it needs.
        ValueError, FileNotFoundError, ImportError: the family's own input errors (a bad or missing data file, a
            missing extra), as it raised them: their messages are the family's.
    """
    file = source_file(name.family)
    try:
        out = FAMILIES[name.family].load(name, options)
    except (ValueError, FileNotFoundError, ImportError):
        raise
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a family's bug, reported with its file
        raise ValueError(f"{file}: load({name.name!r}) raised {type(e).__name__}: {e}") from e
    if not isinstance(out, EnvAndDatasets):
        raise ValueError(f"{file}: load returned a {type(out).__name__}, not an envs.common.EnvAndDatasets.")
    _check_metadata(out.metadata, name, file)
    for field in ("train_dataset", "val_dataset"):
        data = getattr(out, field)
        if data is None and field == "val_dataset":
            continue
        setattr(out, field, _checked_data(data, f"{file} (load's {field})"))
    return out


def _check_metadata(metadata, name: EnvName, file: str) -> None:
    """`ValueError` naming `file` unless `metadata` is a dict with `env` equal to `name.record()` and `datasets` a
    list of records with `DATASET_RECORD_KEYS` (what flags.json, the `Data:` line and `--resume` read)."""
    if not isinstance(metadata, dict):
        raise ValueError(f"{file}: load's metadata is a {type(metadata).__name__}, not a dict.")
    if metadata.get("env") != name.record():
        raise ValueError(
            f"{file}: load's metadata['env'] is {metadata.get('env')!r}; it must be the parsed name's record "
            "(metadata={'env': name.record(), 'datasets': [...]}; envs/README.md)."
        )
    records = metadata.get("datasets")
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ValueError(
            f"{file}: load's metadata['datasets'] is {records!r}; it must be a list with one record per data file "
            f"(a dict of {', '.join(DATASET_RECORD_KEYS)}; envs/README.md)."
        )
    for i, record in enumerate(records):
        missing = [k for k in DATASET_RECORD_KEYS if k not in record]
        if missing:
            raise ValueError(f"{file}: load's metadata['datasets'][{i}] lacks {missing} (envs/README.md).")


def _checked_data(data, where: str) -> dict:
    """`data` checked (`common.check_data`, every field of a transition present), floats cast to float32."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: a {type(data).__name__}, not a dict of arrays.")
    missing = [k for k in TRANSITION_KEYS if k not in data]
    if missing:
        raise ValueError(f"{where}: lacks {missing} (it has {sorted(data)}).")
    check_data(data, where)
    return {k: v.astype(np.float32) if v.dtype.kind == "f" and v.dtype != np.float32 else v for k, v in data.items()}


def record_of(flags_record: dict) -> dict:
    """The `env` block of a run's `flags.json` record: the one it wrote, when it has every `EnvName` field with
    `name` equal to its `flags.env_name`, else `parse(flags.env_name).record()` (a run recorded before runs wrote
    the block, or a damaged block). `ValueError` for a record without `flags.env_name` (`UnknownEnvName` for a
    name no family here knows)."""
    env_name = (flags_record.get("flags") or {}).get("env_name")
    if not isinstance(env_name, str):
        raise ValueError(f"the record has no flags.env_name (got {env_name!r})")
    block = flags_record.get("env")
    if _block_fault(block, env_name) is None:
        return block
    if block is not None:
        logger.warning("flags.json's env block %r is not one of %s: using envs.parse's instead.", block, env_name)
    return parse(env_name).record()
