"""The papers' methods by name: `--method=NAME` sets every flag and agent key that defines it.

The methods and their per-domain values live with their agents (`SPEC.methods`); this module resolves
them for a run: `domain_of` maps an env name to its paper domain (`cube-single` borrows `cube-double`'s
values, `note` says so), and `resolve` fills what the user did not pass. Paper values apply only to the
benchmark families the papers ran (`PAPER_FAMILIES`): a family added since has none, whatever its domains
are called. An explicit value wins unless it
turns the run into another method (the agent's `method_of`): that is a `ValueError` naming both.
"""

from typing import Dict, List, Optional, Tuple

import agents
import envs
from agents.common import AgentSpec, Method

DRIVER_FILES = {"main": "main.py", "main_online": "main_online.py"}
# The benchmark families (`EnvName.family`) the papers ran: OGBench, robomimic.
PAPER_FAMILIES = ("ogbench", "robomimic")
# What a run without paper values does instead.
NO_METHOD = "run without --method and set the flags yourself (docs/settings.md lists the paper's)"
# Not in the paper: cube-single borrows cube-double's values (same robot and reward, one cube fewer).
BORROWED_DOMAINS = {"cube-single": "cube-double"}
# Data types the papers ran (OGBench 'play'/'navigate', robomimic multi-human); others get a note.
PAPER_DATA = {"noisy": "play", "ph": "mh"}


def method_names(driver: str) -> List[str]:
    """The `--method` names of the agents `driver` runs, in the registry's order."""
    return [name for spec in agents.for_driver(driver) for name in spec.methods]


def check_method(driver: str, method: str) -> AgentSpec:
    """The agent that runs `method` with `driver`; `ValueError` naming the accepted names otherwise."""
    if driver not in DRIVER_FILES:
        raise ValueError(f"driver must be one of {sorted(DRIVER_FILES)}, got {driver!r}.")
    owner = agents.method_owner(method)
    if owner is not None and driver in owner.drivers:
        return owner
    accepted = "|".join(method_names(driver))
    message = f"--method={method} is not a method of {DRIVER_FILES[driver]}; accepted: --method={accepted}"
    if owner is not None:
        message += f" ({method} runs with {' or '.join(DRIVER_FILES[d] for d in owner.drivers)})"
    raise ValueError(message + ".")


def _borrowed(entry: Optional[Method] = None) -> Dict[str, str]:
    """Domains outside the papers and the paper domain whose values they take (for `entry`, or any method)."""
    if entry is not None:
        return {**BORROWED_DOMAINS, **entry.borrowed}
    every = {
        d: row for spec in agents.REGISTRY.values() for m in spec.methods.values() for d, row in m.borrowed.items()
    }
    return {**every, **BORROWED_DOMAINS}


def _all_domains() -> List[str]:
    domains = {d for spec in agents.REGISTRY.values() for m in spec.methods.values() for d in m.per_domain}
    return sorted(domains) + [f"{d} (with {row}'s values)" for d, row in BORROWED_DOMAINS.items()]


def _parse(env_name: str) -> Tuple[str, str]:
    """`(domain, dataset type)` of `env_name` (`envs.parse`) where a paper method has values for the domain and
    the env is of a family the papers ran (`PAPER_FAMILIES`)."""
    known = {d for spec in agents.REGISTRY.values() for m in spec.methods.values() for d in m.per_domain}
    try:
        name = envs.parse(env_name)
    except envs.UnknownEnvName:  # no family's name: no paper settings (below); a family's bad part is its own error
        name = None
    if name is not None and name.family not in PAPER_FAMILIES:
        raise ValueError(
            f"no paper settings for --env_name={env_name}: the papers did not run the {name.family} family (theirs: "
            f"{', '.join(PAPER_FAMILIES)}); {NO_METHOD}."
        )
    if name is not None and (name.domain in known or name.domain in _borrowed()):
        return name.domain, name.dataset_type
    raise ValueError(
        f"no paper settings for --env_name={env_name}: its domain is not one of the papers' tables "
        f"({', '.join(_all_domains())}); {NO_METHOD}."
    )


def domain_of(env_name: str) -> str:
    """The paper domain of `env_name`, e.g. `'cube-double'` or `'lift'`; `ValueError` for a domain no
    paper method has values for (`puzzle-4x4`, `transport`, ...) or an env of a family the papers did not run."""
    return _parse(env_name)[0]


def note(env_name: str, method: Optional[str] = None) -> Optional[str]:
    """Where the settings for `env_name` (with `method`'s values, if given) are not the paper's own, why."""
    domain, data_type = _parse(env_name)
    owner = agents.method_owner(method) if method else None
    borrowed = _borrowed(owner.methods[method] if owner else None)
    if owner is None:
        in_paper = any(domain in m.per_domain for spec in agents.REGISTRY.values() for m in spec.methods.values())
    else:
        in_paper = domain in owner.methods[method].per_domain
    notes = []
    if domain in borrowed and not in_paper:
        notes.append(f"{domain} is not in the paper: {borrowed[domain]}'s values")
    if data_type in PAPER_DATA:
        notes.append(f"the paper tuned these values on the {PAPER_DATA[data_type]} data, not {data_type}")
    return "; ".join(notes) or None


def _preset(driver: str, method: str, env_name: str) -> Dict[str, object]:
    """The preset with `None` for a value the paper's tables do not give."""
    entry = check_method(driver, method).methods[method]
    try:
        domain = domain_of(env_name)
    except ValueError as e:
        raise ValueError(f"--method={method}: {e}") from None
    row = entry.per_domain.get(domain) or entry.per_domain.get(_borrowed(entry).get(domain))
    if row is None:
        raise ValueError(
            f"--method={method}: the paper has no values for {domain} (its domains: {', '.join(entry.per_domain)}); "
            f"{NO_METHOD}."
        )
    return {**entry.settings, **row}


def _missing_message(method: str, env_name: str, name: str) -> str:
    return (
        f"--method={method} on {domain_of(env_name)}: the paper's tables (docs/settings.md) give no --{name} "
        f"for {method} on this domain; pass --{name}=VALUE."
    )


def preset(driver: str, method: str, env_name: str) -> Dict[str, object]:
    """Every setting that `--method=method` fixes for `env_name`, as `{setting name: value}`.

    Raises `ValueError` for a method of another driver or an unknown one (naming `--method` and the
    accepted names), a domain without paper settings, or a value the paper's tables lack.
    """
    values = _preset(driver, method, env_name)
    for name, value in values.items():
        if value is None:
            raise ValueError(_missing_message(method, env_name, name))
    return values


def paper_values(method: str, env_name: str) -> Dict[str, object]:
    """The preset of paper method `method` (any driver) for `env_name`; `{}` where the paper has none."""
    owner = agents.method_owner(method)
    if owner is None:
        return {}
    try:
        return _preset(owner.drivers[0], method, env_name)
    except ValueError:
        return {}


# ------------------------------------------------------------------------------------------------ resolve


def _typed(name: str, value, like):
    """`value` (possibly the command line's string) with the type of `like`; `ValueError` naming `--name`."""
    if isinstance(like, bool):
        if isinstance(value, str):
            lowered = value.strip().lower()
            if lowered not in ("true", "1", "false", "0"):
                raise ValueError(f"--{name}={value} is not a boolean.")
            return lowered in ("true", "1")
        return bool(value)
    if isinstance(like, (int, float)):
        try:
            return type(like)(value)
        except (TypeError, ValueError):
            raise ValueError(f"--{name}={value} is not a number.") from None
    return value


def _flag(name: str, value) -> str:
    if isinstance(value, float):
        value = format(value, "g")
    return f"--{name}={value}"


def _identity(spec: AgentSpec, settings: Dict[str, object]) -> Optional[str]:
    """The method `settings` (`{setting: value}` over the agent's defaults) make, by the agent's `method_of`."""
    config = spec.get_config().to_dict()
    for name, value in settings.items():
        key = name[len("agent.") :] if name.startswith("agent.") else name
        if key in config or key == "horizon_length":
            config[key] = value
    return spec.method_of(config)


def _check_contradictions(spec: AgentSpec, method: str, explicit: Dict[str, object]):
    entry: Method = spec.methods[method]
    given = {}
    for name, value in explicit.items():
        setting = "horizon_length" if name == "agent.horizon_length" else name
        if setting in entry.settings:
            given[name] = _typed(name, value, entry.settings[setting])
    as_setting = lambda name: "horizon_length" if name == "agent.horizon_length" else name  # noqa: E731
    combined = _identity(spec, {**entry.settings, **{as_setting(k): v for k, v in given.items()}})
    if combined == method:
        return
    culprits = [k for k, v in given.items() if _identity(spec, {**entry.settings, as_setting(k): v}) != method]
    culprits = culprits or list(given)
    named = " and ".join(_flag(name, explicit[name]) for name in culprits)
    verb = "contradicts" if len(culprits) == 1 else "contradict"
    if combined in spec.methods:
        advice = f"that combination is the paper's {combined}: use --method={combined}"
    else:
        advice = "no method of the paper has that combination: run without --method and set every flag yourself"
    drop = "it" if len(culprits) == 1 else "them"
    definition = " ".join(_flag(k, v) for k, v in entry.settings.items())
    tunable = sorted({k for row in entry.per_domain.values() for k in row})
    raise ValueError(
        f"{named} {verb} --method={method} ({definition}); {advice}, or drop {drop} to run {method}. "
        f"(The per-domain values {', '.join('--' + k for k in tunable)} are tunable and keep the method.)"
    )


def resolve(
    driver: str, method: str, env_name: str, explicit: Dict[str, object]
) -> Tuple[Dict[str, object], Dict[str, str]]:
    """`(values, sources)` of `--method`'s preset for `env_name`'s domain against `explicit`, the settings the
    user passed (`{name: value}`, command-line strings accepted): `values` the preset values to apply (those
    not passed), `sources` `'preset'` or `'command line'` for every preset setting. `ValueError` for an
    unknown method or one of the other driver, an explicit value that changes the method, a domain without
    paper settings, or a value the tables lack and the command line does not give."""
    spec = check_method(driver, method)
    explicit = {name.lstrip("-"): value for name, value in explicit.items()}
    _check_contradictions(spec, method, explicit)
    values, sources = {}, {}
    for name, value in _preset(driver, method, env_name).items():
        if name in explicit or (name == "horizon_length" and "agent.horizon_length" in explicit):
            sources[name] = "command line"
            continue
        if value is None:
            raise ValueError(_missing_message(method, env_name, name))
        values[name], sources[name] = value, "preset"
    return values, sources


def describe(driver: str, method: str, env_name: str) -> str:
    """One line: the method, the domain and the flags the preset sets, e.g. `qc on cube-double:
    --horizon_length=5 --agent.actor_type=best-of-n ...`; a note in parentheses where the values are not
    the paper's own (`note`). Raises like `preset`."""
    values = preset(driver, method, env_name)
    line = f"{method} on {domain_of(env_name)}: " + " ".join(_flag(name, value) for name, value in values.items())
    extra = note(env_name, method)
    return f"{line} ({extra})" if extra else line
