"""The one list of benchmark families: every file `envs/<family>.py` that defines a module-level `FAMILY`
(`envs.common.Family`) is one. Nothing outside `envs/` parses an env name or names a family module: setup,
`--method`, the sweep and the plots ask `parse` (or read the `env` block a run wrote into `flags.json`) and
`family`. Adding a benchmark: envs/README.md.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import pkgutil

import numpy as np

from envs.common import TRANSITION_KEYS, DataOptions, EnvAndDatasets, EnvName, Family, check_data

logger = logging.getLogger(__name__)

_DIR = os.path.dirname(os.path.abspath(__file__))
# Modules of envs/ that are not families: the shared pieces, the provenance records and the two data tools.
_NOT_FAMILIES = ("common", "provenance", "generate_dataset", "download_datasets")
FAMILIES: dict[str, Family] = {}
# Family files that are left out, {path: why}: one that cannot be imported, or two that claim one family name (a
# copy that kept its name: which one ran would depend on the order of files). They stop no other family's runs;
# the unknown-name error names them.
PROBLEMS: dict[str, str] = {}
_FILES: dict[str, str] = {}  # family name -> the file that defines it


class UnknownEnvName(ValueError):
    """A name no family parses (`parse`)."""


for _info in sorted(pkgutil.iter_modules([_DIR]), key=lambda m: m.name):
    if _info.name.startswith("_") or _info.name in _NOT_FAMILIES:
        continue
    _path = f"envs/{_info.name}.py"
    try:
        _family = getattr(importlib.import_module(f"envs.{_info.name}"), "FAMILY", None)
    except Exception as e:  # noqa: BLE001 - whatever the file raises is reported when a name is not found
        PROBLEMS[_path] = f"could not be imported ({type(e).__name__}: {e})"
        continue
    if not isinstance(_family, Family):
        continue
    if _family.name in _FILES:
        first = _FILES[_family.name]
        PROBLEMS[_path] = f"defines the family {_family.name!r} as {first} does: give the new one its own name"
        PROBLEMS.setdefault(first, f"defines the family {_family.name!r} as {_path} does")
        FAMILIES.pop(_family.name, None)
        continue
    _FILES[_family.name] = _path
    FAMILIES[_family.name] = _family


def patterns() -> list[str]:
    """Every family's env-name patterns, `'<family>: <pattern>'` (for errors and --help)."""
    return [f"{f.name}: {p}" for f in FAMILIES.values() for p in f.patterns]


def parse(env_name: str) -> EnvName:
    """`env_name` parsed by the family it belongs to.

    Raises:
        UnknownEnvName (a `ValueError`): a name no family knows, one line listing every family's patterns and the
            family files left out (`PROBLEMS`) or whose `parse` failed on the name (another exception than
            `ValueError`: that family is skipped, the others still parse).
        ValueError: the family's own message for one of its names with a bad part (task 9).
    """
    failed = []
    for family_ in FAMILIES.values():
        try:
            parsed = family_.parse(env_name)
        except ValueError:
            raise
        except Exception as e:  # noqa: BLE001 - a bug in one family's parse must not stop the others' names
            failed.append(f"{_FILES[family_.name]}'s parse failed on it ({type(e).__name__}: {e})")
            continue
        if parsed is not None:
            if failed:
                logger.warning("%s; parsed by %s instead.", "; ".join(failed), _FILES[family_.name])
            return parsed
    notes = [f"{path} {why}" for path, why in PROBLEMS.items()] + failed
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
    fields = {f.name for f in dataclasses.fields(EnvName)}
    if isinstance(block, dict) and fields <= set(block) and block["name"] == env_name:
        texts = ("family", "name", "domain", "paper_domain", "paper_task", "short")
        task = block["task"]
        task_ok = task is None or (isinstance(task, int) and not isinstance(task, bool) and task >= 1)
        if all(isinstance(block[k], str) for k in texts) and task_ok:
            return block
    if block is not None:
        logger.warning("flags.json's env block %r is not one of %s: using envs.parse's instead.", block, env_name)
    return parse(env_name).record()
