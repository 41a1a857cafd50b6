"""The paper's methods by name: `--method=NAME` sets every flag and agent key that defines it.

One table, `METHOD_DEFINITIONS` plus `DOMAIN_SETTINGS`, is the only place in the code
that holds the paper's per-method and per-domain settings. Source: the hyperparameter and domain
tables in the appendix of Li, Zhou, Levine, "Reinforcement Learning with Action Chunking" (NeurIPS
2025, arXiv 2507.07969), as written out in docs/settings.md (sections 2-4) and docs/method.md
(sections 7, 8 and 10).

Setting names: a driver flag (`horizon_length`, `sparse`) or `agent.KEY` for a key of the
agent's `get_config()` (`agent.actor_type`). Values have the types the flags and configs have
(`alpha` and `bc_alpha` are floats, `actor_num_samples` an int).

Methods (`main.py`: ACFQL; `main_online.py`: ACRLPD), as `METHOD_DEFINITIONS` and
`PER_DOMAIN_KEYS` set them; every method also sets the domain's `sparse`:

    qc       h=5  actor_type=best-of-n     action_chunking=True   actor_num_samples=N(domain)
    qc-fql   h=5  actor_type=distill-ddpg  action_chunking=True   alpha(domain, QC-FQL column)
    bfn-n    h=5  actor_type=best-of-n     action_chunking=False  actor_num_samples=4
    bfn      h=1  actor_type=best-of-n     action_chunking=True   actor_num_samples=4
    fql-n    h=5  actor_type=distill-ddpg  action_chunking=False  alpha(domain, FQL-n column)
    fql      h=1  actor_type=distill-ddpg  action_chunking=True   alpha(domain, FQL column)
    rlpd     h=1                           action_chunking=True   bc_alpha=0
    rlpd-ac  h=5                           action_chunking=True   bc_alpha=0
    qc-rlpd  h=5                           action_chunking=True   bc_alpha=0.01

(`action_chunking` changes nothing at `h=1`; the h=1 methods set the config default, True.)

Domains (`domain_of`): the OGBench domains of the paper (`scene`, `puzzle-3x3`,
`cube-double`, `cube-triple`, `cube-quadruple`) and robomimic `lift`, `can`, `square`.

* `cube-single` is not in the paper. It gets `cube-double`'s values (same robot, same dense
  reward, one cube fewer), so that `--method` also works for the README's CPU job; `note`
  and `describe` say so.
* The paper ran the `play` datasets (OGBench) and the multi-human `mh` data (robomimic). A
  `noisy` or `ph` env name gets the same domain's values, which the paper did not tune for it
  (`note` says so).
* robomimic: docs/settings.md gives `alpha` (10000, all FQL variants) and `N` for QC (16),
  but no `N` for BFN and BFN-n (the `N = 4` of section 3 is for OGBench). `bfn` and
  `bfn-n` on robomimic are therefore an error unless `--agent.actor_num_samples` is given.
* Any other domain (`puzzle-4x4`, `transport`, `tool_hang`, pixel envs) is an error.

Command-line values and the method (`resolve`). Everything passed explicitly wins over the
preset, except a value that turns the run into another method, which is a `ValueError` that
names both and the method the combination is (if the paper has one). Method-defining:

* `agent.actor_type` (`main.py`): any value other than the method's;
* `horizon_length`: only whether `h == 1` (no chunk, plain one-step RL) or `h > 1`. A
  chunked or n-step method with another `h > 1` (`--method=qc --horizon_length=3`) is the
  paper's ablation over `h`, the same method; for this check `--agent.horizon_length` counts
  as `--horizon_length`;
* `agent.action_chunking` when the method has `h > 1` and the run keeps `h > 1`; at
  `h == 1` it changes nothing and any value is accepted;
* `agent.bc_alpha` (`main_online.py`): only zero versus nonzero (RLPD and RLPD-AC have no BC
  term, QC-RLPD has one; `--method=qc-rlpd --agent.bc_alpha=0.1` is QC-RLPD with another weight).

Tunable (explicit values simply win): `agent.alpha`, `agent.actor_num_samples`, `sparse`.
`--sparse=False` on scene or puzzle-3x3 is allowed; the drivers still warn about it.
"""

import re
from typing import Dict, NamedTuple, Optional, Tuple

DRIVERS = ("main", "main_online")
METHODS = {
    "main": ("qc", "qc-fql", "bfn", "bfn-n", "fql", "fql-n"),
    "main_online": ("rlpd", "rlpd-ac", "qc-rlpd"),
}
DRIVER_FILES = {"main": "main.py", "main_online": "main_online.py"}

# What defines each method (docs/method.md sections 7, 8, 10; docs/settings.md section 2). Key order
# is the order describe() prints. action_chunking at h=1 is irrelevant; it is set to the config
# default (True) so every method sets the same keys.
METHOD_DEFINITIONS: Dict[str, Dict[str, object]] = {
    "qc": {"horizon_length": 5, "agent.actor_type": "best-of-n", "agent.action_chunking": True},
    "qc-fql": {"horizon_length": 5, "agent.actor_type": "distill-ddpg", "agent.action_chunking": True},
    "bfn-n": {"horizon_length": 5, "agent.actor_type": "best-of-n", "agent.action_chunking": False},
    "bfn": {"horizon_length": 1, "agent.actor_type": "best-of-n", "agent.action_chunking": True},
    "fql-n": {"horizon_length": 5, "agent.actor_type": "distill-ddpg", "agent.action_chunking": False},
    "fql": {"horizon_length": 1, "agent.actor_type": "distill-ddpg", "agent.action_chunking": True},
    "rlpd": {"horizon_length": 1, "agent.action_chunking": True, "agent.bc_alpha": 0.0},
    "rlpd-ac": {"horizon_length": 5, "agent.action_chunking": True, "agent.bc_alpha": 0.0},
    "qc-rlpd": {"horizon_length": 5, "agent.action_chunking": True, "agent.bc_alpha": 0.01},
}


class DomainSettings(NamedTuple):
    """One row of the paper's per-domain table. `None`: the paper's tables give no value."""

    sparse: bool  # --sparse: r -> -(r != 0)
    alpha_fql: float  # --agent.alpha for FQL
    alpha_fql_n: float  # --agent.alpha for FQL-n
    alpha_qc_fql: float  # --agent.alpha for QC-FQL
    n_qc: int  # --agent.actor_num_samples for QC
    n_bfn: Optional[int]  # --agent.actor_num_samples for BFN and BFN-n


# Source: the appendix tables of arXiv 2507.07969 (docs/settings.md sections 3 and 4). alpha and N
# were tuned on task 2 of each OGBench domain and kept for tasks 1-5.
DOMAIN_SETTINGS: Dict[str, DomainSettings] = {
    # OGBench ('play' datasets).        sparse  FQL    FQL-n  QC-FQL  N QC  N BFN(-n)
    "scene": DomainSettings(True, 300.0, 100.0, 300.0, 32, 4),
    "puzzle-3x3": DomainSettings(True, 100.0, 100.0, 300.0, 64, 4),
    "cube-double": DomainSettings(False, 300.0, 100.0, 300.0, 32, 4),
    "cube-triple": DomainSettings(False, 300.0, 100.0, 100.0, 32, 4),
    "cube-quadruple": DomainSettings(False, 300.0, 100.0, 100.0, 32, 4),
    # robomimic (multi-human low-dim data): rewards are already -1 / 0, so no --sparse; alpha 10000
    # for every FQL variant; N = 16 for QC; no N for BFN and BFN-n in docs/settings.md.
    "lift": DomainSettings(False, 10000.0, 10000.0, 10000.0, 16, None),
    "can": DomainSettings(False, 10000.0, 10000.0, 10000.0, 16, None),
    "square": DomainSettings(False, 10000.0, 10000.0, 10000.0, 16, None),
}
# Not in the paper: cube-single borrows cube-double's row (see the module docstring).
BORROWED_DOMAINS = {"cube-single": "cube-double"}

# The per-domain agent key of each method: (setting name, DomainSettings field); every method also
# gets the domain's `sparse`.
PER_DOMAIN_KEYS: Dict[str, Tuple[Tuple[str, str], ...]] = {
    "qc": (("agent.actor_num_samples", "n_qc"),),
    "qc-fql": (("agent.alpha", "alpha_qc_fql"),),
    "bfn-n": (("agent.actor_num_samples", "n_bfn"),),
    "bfn": (("agent.actor_num_samples", "n_bfn"),),
    "fql-n": (("agent.alpha", "alpha_fql_n"),),
    "fql": (("agent.alpha", "alpha_fql"),),
    "rlpd": (),
    "rlpd-ac": (),
    "qc-rlpd": (),
}

_OGBENCH_DOMAINS = ("scene", "puzzle-3x3", "cube-single", "cube-double", "cube-triple", "cube-quadruple")
_ROBOMIMIC_DOMAINS = ("lift", "can", "square")
_OGBENCH_RE = re.compile(
    rf"^(?P<domain>{'|'.join(map(re.escape, _OGBENCH_DOMAINS))})-(?P<type>play|noisy)"
    r"(?:-singletask(?:-task\d+)?)?-v0$"
)
_ROBOMIMIC_RE = re.compile(rf"^(?P<domain>{'|'.join(_ROBOMIMIC_DOMAINS)})-(?P<type>mh|ph)-low_dim$")


# ------------------------------------------------------------------------------------------------ domains


def _parse(env_name: str) -> Tuple[str, str]:
    for pattern in (_OGBENCH_RE, _ROBOMIMIC_RE):
        m = pattern.match(env_name)
        if m:
            return m["domain"], m["type"]
    borrowed = [f"{domain} (with {row}'s values)" for domain, row in BORROWED_DOMAINS.items()]
    known = ", ".join((*DOMAIN_SETTINGS, *borrowed))
    raise ValueError(
        f"no paper settings for --env_name={env_name}: its domain is not one of the paper's tables ({known}; "
        "env names <domain>-{play,noisy}-singletask[-taskN]-v0 or {lift,can,square}-{mh,ph}-low_dim)."
    )


def domain_of(env_name: str) -> str:
    """The domain of a supported env name, e.g. `'cube-double'` or `'lift'`.

    `'cube-double-play-singletask-task2-v0'` -> `'cube-double'`, `'lift-mh-low_dim'` -> `'lift'`.

    Raises:
        ValueError: a domain without a row in the paper's tables (`puzzle-4x4`, `transport`, ...).
    """
    return _parse(env_name)[0]


def note(env_name: str) -> Optional[str]:
    """Where the settings for `env_name` are not the paper's own, why (else `None`)."""
    domain, dataset_type = _parse(env_name)
    notes = []
    if domain in BORROWED_DOMAINS:
        notes.append(f"{domain} is not in the paper: {BORROWED_DOMAINS[domain]}'s values")
    if dataset_type in ("noisy", "ph"):
        paper_type = "play" if dataset_type == "noisy" else "mh"
        notes.append(f"the paper tuned these values on the {paper_type} data, not {dataset_type}")
    return "; ".join(notes) or None


def _domain_row(env_name: str) -> DomainSettings:
    domain = domain_of(env_name)
    return DOMAIN_SETTINGS[BORROWED_DOMAINS.get(domain, domain)]


# ------------------------------------------------------------------------------------------------ presets


def _check_method(driver: str, method: str):
    if driver not in METHODS:
        raise ValueError(f"driver must be one of {sorted(METHODS)}, got {driver!r}.")
    if method in METHODS[driver]:
        return
    accepted = "|".join(METHODS[driver])
    message = f"--method={method} is not a method of {DRIVER_FILES[driver]}; accepted: --method={accepted}"
    for other, names in METHODS.items():
        if other != driver and method in names:
            message += f" ({method} runs with {DRIVER_FILES[other]})"
    raise ValueError(message + ".")


def _preset(driver: str, method: str, env_name: str) -> Dict[str, object]:
    """The preset with `None` for a value the paper's tables do not give."""
    _check_method(driver, method)
    try:
        row = _domain_row(env_name)
    except ValueError as e:
        raise ValueError(f"--method={method}: {e}") from None
    values = dict(METHOD_DEFINITIONS[method])
    for name, field in PER_DOMAIN_KEYS[method]:
        values[name] = getattr(row, field)
    values["sparse"] = row.sparse
    return values


def _missing_message(method: str, env_name: str, name: str) -> str:
    return (
        f"--method={method} on {domain_of(env_name)}: the paper's tables (docs/settings.md) give no --{name} "
        f"for {method} on this domain; pass --{name}=VALUE."
    )


def preset(driver: str, method: str, env_name: str) -> Dict[str, object]:
    """Every setting that `--method=method` fixes for `env_name`, as `{setting name: value}`.

    Raises:
        ValueError: a method of the other driver or an unknown one (naming `--method` and the
            accepted names), a domain without paper settings, or a value the paper's tables lack.
    """
    values = _preset(driver, method, env_name)
    for name, value in values.items():
        if value is None:
            raise ValueError(_missing_message(method, env_name, name))
    return values


# ------------------------------------------------------------------------------------------------ resolve


def _as_bool(name: str, value) -> bool:
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        raise ValueError(f"--{name}={value} is not a boolean.")
    return bool(value)


def _as_number(name: str, value, kind):
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"--{name}={value} is not a number.") from None


def _signature(driver: str, values: Dict[str, object]) -> tuple:
    """What makes a method the method: actor type, h > 1, chunking (when h > 1), BC term or not."""
    chunked = _as_number("horizon_length", values["horizon_length"], int) > 1
    chunking = _as_bool("agent.action_chunking", values["agent.action_chunking"]) if chunked else None
    if driver == "main":
        return (str(values["agent.actor_type"]), chunked, chunking)
    return (chunked, chunking, _as_number("agent.bc_alpha", values["agent.bc_alpha"], float) != 0.0)


def _normalize(explicit: Dict[str, object]) -> Dict[str, object]:
    return {name.lstrip("-"): value for name, value in explicit.items()}


def _flag(name: str, value) -> str:
    if isinstance(value, float):
        value = format(value, "g")
    return f"--{name}={value}"


def _definition_flags(method: str) -> str:
    """The flags that define `method` (without `action_chunking` where h=1 makes it irrelevant)."""
    definition = METHOD_DEFINITIONS[method]
    unchunked = definition["horizon_length"] == 1
    return " ".join(
        _flag(name, value) for name, value in definition.items() if not (unchunked and name == "agent.action_chunking")
    )


def _check_contradictions(driver: str, method: str, explicit: Dict[str, object]):
    definition = METHOD_DEFINITIONS[method]
    given = {k: v for k, v in explicit.items() if k in definition}
    if "horizon_length" not in given and "agent.horizon_length" in explicit:  # same setting, other spelling
        given["horizon_length"] = explicit["agent.horizon_length"]
    wanted, got = _signature(driver, definition), _signature(driver, {**definition, **given})
    if wanted == got:
        return
    culprits = []
    if driver == "main" and wanted[0] != got[0]:
        culprits.append("agent.actor_type")
    h_index = 1 if driver == "main" else 0
    if wanted[h_index] != got[h_index]:
        culprits.append("horizon_length" if "horizon_length" in explicit else "agent.horizon_length")
    elif wanted[h_index + 1] != got[h_index + 1]:
        culprits.append("agent.action_chunking")
    if driver == "main_online" and wanted[2] != got[2]:
        culprits.append("agent.bc_alpha")
    named = " and ".join(_flag(name, explicit[name]) for name in culprits)
    verb = "contradicts" if len(culprits) == 1 else "contradict"
    same = [m for m in METHODS[driver] if _signature(driver, METHOD_DEFINITIONS[m]) == got]
    if same:
        advice = f"that combination is the paper's {same[0]}: use --method={same[0]}"
    else:
        advice = "no method of the paper has that combination: run without --method and set every flag yourself"
    drop = "it" if len(culprits) == 1 else "them"
    raise ValueError(
        f"{named} {verb} --method={method} ({_definition_flags(method)}); {advice}, or drop {drop} to run "
        f"{method}. (Another h > 1 for a chunked method, --agent.alpha, --agent.actor_num_samples and --sparse "
        "are tunable and keep the method.)"
    )


def resolve(
    driver: str, method: str, env_name: str, explicit: Dict[str, object]
) -> Tuple[Dict[str, object], Dict[str, str]]:
    """Combine `--method`'s preset with what the user passed on the command line.

    Args:
        driver: `'main'` or `'main_online'`.
        method: the `--method` value.
        env_name: the `--env_name` value (its domain picks the per-domain values).
        explicit: `{setting name: value}` for every setting the user passed on the command line
            (other flags may be present and are ignored); booleans and numbers may also be given as
            their command-line strings (`'False'`, `'5'`).

    Returns:
        `(values, sources)`: `values` holds the preset value of every preset setting the user did
        not pass (apply these); `sources` maps every preset setting to `'preset'` or
        `'command line'`.

    Raises:
        ValueError: an unknown method or one of the other driver (naming `--method` and the
            accepted names), an explicit value that changes the method (naming both, see the module
            docstring), a domain without paper settings, or a value the paper's tables lack and the
            command line does not give.
    """
    _check_method(driver, method)
    explicit = _normalize(explicit)
    _check_contradictions(driver, method, explicit)
    full = _preset(driver, method, env_name)
    values, sources = {}, {}
    for name, value in full.items():
        if name in explicit:
            sources[name] = "command line"
            continue
        if value is None:
            raise ValueError(_missing_message(method, env_name, name))
        values[name], sources[name] = value, "preset"
    return values, sources


def describe(driver: str, method: str, env_name: str) -> str:
    """One line: the method, the domain and the flags the preset sets, e.g.

    `qc on cube-double: --horizon_length=5 --agent.actor_type=best-of-n --agent.action_chunking=True
    --agent.actor_num_samples=32 --sparse=False`; a note in parentheses where the values are not the
    paper's own (`note`). Raises like `preset`.
    """
    values = preset(driver, method, env_name)
    line = f"{method} on {domain_of(env_name)}: " + " ".join(_flag(name, value) for name, value in values.items())
    extra = note(env_name)
    return f"{line} ({extra})" if extra else line
