"""The one list of benchmark families: every file `envs/<family>.py` that defines a module-level `FAMILY`
(`envs.common.Family`) is one. Nothing outside `envs/` parses an env name or names a family module: setup,
`--method`, the sweep and the plots ask `parse` (or read the `env` block a run wrote into `flags.json`) and
`family`. Adding a benchmark: envs/README.md.
"""

from __future__ import annotations

import importlib
import os
import pkgutil

from envs.common import DataOptions, EnvAndDatasets, EnvName, Family

_DIR = os.path.dirname(os.path.abspath(__file__))
# Modules of envs/ that are not families: the shared pieces, the provenance records and the two data tools.
_NOT_FAMILIES = ("common", "provenance", "generate_dataset", "download_datasets")
FAMILIES: dict[str, Family] = {}
# Files of envs/ that could not be imported, {path: why}: a half-edited family file does not stop the others' runs,
# and the unknown-name error names it.
PROBLEMS: dict[str, str] = {}

for _info in sorted(pkgutil.iter_modules([_DIR]), key=lambda m: m.name):
    if _info.name.startswith("_") or _info.name in _NOT_FAMILIES:
        continue
    try:
        _family = getattr(importlib.import_module(f"envs.{_info.name}"), "FAMILY", None)
    except Exception as e:  # noqa: BLE001 - whatever the file raises is reported when a name is not found
        PROBLEMS[f"envs/{_info.name}.py"] = f"{type(e).__name__}: {e}"
        continue
    if isinstance(_family, Family):
        if _family.name in FAMILIES:
            raise ValueError(f"two files of envs/ define the family {_family.name!r}; give the new one its own name.")
        FAMILIES[_family.name] = _family


def patterns() -> list[str]:
    """Every family's env-name patterns, `'<family>: <pattern>'` (for errors and --help)."""
    return [f"{f.name}: {p}" for f in FAMILIES.values() for p in f.patterns]


def parse(env_name: str) -> EnvName:
    """`env_name` parsed by the family it belongs to. `ValueError`: one line listing every family's patterns
    (and any family file that could not be imported, `PROBLEMS`) for a name no family knows; the family's own
    message for one of its names with a bad part (task 9)."""
    for family_ in FAMILIES.values():
        parsed = family_.parse(env_name)
        if parsed is not None:
            return parsed
    broken = "".join(f"; {path} could not be imported ({why})" for path, why in PROBLEMS.items())
    raise ValueError(f"Unknown environment {env_name!r}. Supported: " + "; ".join(patterns()) + broken)


def family(name: EnvName | str) -> Family:
    """The family of a parsed name (or of an env name, parsed here)."""
    return FAMILIES[(parse(name) if isinstance(name, str) else name).family]


def make_env_and_datasets(env_name: str, **options) -> EnvAndDatasets:
    """`family.load(parse(env_name), DataOptions(**options))`: the envs and offline data of `env_name` (the
    options: `envs.common.DataOptions`). Raises what `parse` and the family's `load` raise."""
    name = parse(env_name)
    return FAMILIES[name.family].load(name, DataOptions(**options))


def record_of(flags_record: dict) -> dict:
    """The `env` block of a run's `flags.json` record: the one it wrote, or (a run recorded before runs wrote
    it) `parse` of its `flags.env_name`. `ValueError` for a record with neither, or an unknown name."""
    if isinstance(flags_record.get("env"), dict):
        return flags_record["env"]
    env_name = (flags_record.get("flags") or {}).get("env_name")
    if not isinstance(env_name, str):
        raise ValueError(f"the record has no env block and no flags.env_name (got {env_name!r})")
    return parse(env_name).record()
