"""What both agents (ACFQL, ACRLPD) share, written once: config checks and the window-length check.

The losses stay in each agent's file; this module holds only the plumbing that must not drift
between them.

* `check_config`: every key of an agent config against a table of rules (one rule per
  key, the same predicates for both agents), so a bad value is a `ValueError` that names the
  key and the flag that sets it, before any network is built.
* `check_window`: a batch's windows must have exactly `horizon_length` steps, because
  the critic target reads the chunk reward sum and the mask at step `h - 1`
  (`rewards[:, -1]`) and bootstraps with `gamma^h`; a longer window would combine an
  `H`-step reward sum with `gamma^h`.
* `policy_steps`: actions per actor/critic input (`h` with chunking, else 1); `policy_actions`:
  a batch's actions as the actor and critic see them.
* `update` / `batch_update`: the jitted gradient step (`lax.scan` over the UTD axis),
  fed only the batch keys the losses read (`UPDATE_KEYS`).
* `ensemble_values`: a critic ensemble's values with the ensemble axis kept for K = 1.
"""

import math
import numbers
from typing import Callable, Dict, Mapping, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from utils.flax_utils import gradient_and_target_step

Rule = Tuple[Callable[[object], bool], str]


# ---- predicates: bools are not numbers here (`True` is an int in Python) ----
def is_int(value, low=None) -> bool:
    """An integer (not a bool), `>= low` when `low` is given."""
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    return ok and (low is None or value >= low)


def is_number(value) -> bool:
    """A real number (int or float, not a bool), finite."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return False
    return math.isfinite(value)


def is_bool(value) -> bool:
    return isinstance(value, bool)


def int_at_least(low: int) -> Rule:
    return (lambda v: is_int(v, low)), f"an int >= {low}"


def number_in(low: float, high: float = None, low_open: bool = False, high_open: bool = False) -> Rule:
    """A finite number in the interval from `low` to `high` (`None`: unbounded above)."""

    def ok(v):
        if not is_number(v):
            return False
        above = v > low if low_open else v >= low
        below = high is None or (v < high if high_open else v <= high)
        return above and below

    if high is None:
        return ok, f"a number {'>' if low_open else '>='} {low}"
    return ok, f"a number in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"


BOOL: Rule = (is_bool, "True or False")
HIDDEN_DIMS: Rule = (
    lambda v: isinstance(v, (tuple, list)) and len(v) >= 1 and all(is_int(d, 1) for d in v),
    "a non-empty tuple of ints >= 1, e.g. (512,512,512,512)",
)
POSITIVE: Rule = number_in(0, low_open=True)
NON_NEGATIVE: Rule = number_in(0)


FINITE: Rule = (is_number, "a finite number")


def one_of(choices) -> Rule:
    return (lambda v: v in choices), f"one of {tuple(choices)}"


def unset_or(rule: Rule) -> Rule:
    check, what = rule
    return (lambda v: v is None or check(v)), f"None or {what}"


# Filled in by create() from the data; a value given must agree with the data (fill_shapes).
OB_DIMS: Rule = unset_or(
    ((lambda v: isinstance(v, (tuple, list)) and all(is_int(d, 1) for d in v)), "a tuple of ints >= 1")
)
ACTION_DIM: Rule = unset_or(int_at_least(1))


Q_AGGS = ("mean", "min")  # ensemble aggregation over the (target) critics


def shared_rules(agent_name: str) -> Dict[str, Rule]:
    """The rules of the config keys both agents have, with the same meaning; each agent adds its own."""
    return {
        "agent_name": one_of((agent_name,)),
        "lr": POSITIVE,
        "batch_size": int_at_least(1),
        "actor_hidden_dims": HIDDEN_DIMS,
        "value_hidden_dims": HIDDEN_DIMS,
        "layer_norm": BOOL,
        "actor_layer_norm": BOOL,
        "discount": number_in(0, 1, low_open=True),
        "tau": number_in(0, 1, low_open=True),
        "num_qs": int_at_least(1),
        "q_agg": one_of(Q_AGGS),
        "horizon_length": ((lambda v: is_int(v, 1)), "an int >= 1 (the driver sets it from --horizon_length)"),
        "action_chunking": BOOL,
        "ob_dims": OB_DIMS,
        "action_dim": ACTION_DIM,
    }


def check_config(config: Mapping, rules: Dict[str, Rule], agent_name: str) -> Dict:
    """A plain-dict copy of `config` (lists as tuples, hashable for jit), checked key by key.

    Args:
        config: an agent config (`ml_collections.ConfigDict` or dict).
        rules: `{key: (predicate, description)}` with exactly the keys of the agent's
            `get_config()`.
        agent_name: for the messages (`'acfql'`, `'acrlpd'`).

    Raises:
        ValueError: a key the agent does not know (`config key 'x' is not a key of ...`), or a
            value that breaks its rule (`--agent.KEY must be <rule>, got <value>`); the first
            such key in the rule table's order.
    """
    config = dict(config.to_dict() if hasattr(config, "to_dict") else config)
    config = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}
    unknown = sorted(set(config) - set(rules))
    if unknown:
        raise ValueError(
            f"config key(s) {unknown} are not keys of the {agent_name} agent (is --agent.agent_name or the "
            f"--agent config file the right one?); its keys are {sorted(rules)}."
        )
    for key, (check, what) in rules.items():
        if key not in config:
            raise ValueError(f"config of the {agent_name} agent lacks the key {key!r}.")
        if not check(config[key]):
            raise ValueError(f"--agent.{key} must be {what}, got {config[key]!r}.")
    return config


def policy_steps(config: Mapping) -> int:
    """Actions per actor/critic input: `horizon_length` with `action_chunking`, else 1."""
    return config["horizon_length"] if config["action_chunking"] else 1


def policy_actions(actions, config: Mapping):
    """Dataset actions `(B, h, A)` as the actor and critic see them: the flattened chunk `(B, h * A)`
    with `action_chunking`, else the first action `(B, A)` (the n-step baselines).

    Raises `ValueError` when the windows do not have exactly `horizon_length` steps (`check_window`).
    """
    check_window(actions, config)
    if config["action_chunking"]:
        return actions.reshape(actions.shape[0], -1)  # (B, h * A)
    return actions[:, 0]  # (B, A)


def check_window(actions, config: Mapping):
    """Raise `ValueError` unless the batch's windows have exactly `horizon_length` steps.

    Args:
        actions: the batch's `actions` `(B, H, A)` (only the shape is read; works on tracers).
        config: the agent config (`horizon_length`).
    """
    if actions.ndim != 3 or actions.shape[1] != config["horizon_length"]:
        raise ValueError(
            f"Batch windows have shape {tuple(actions.shape)} (B, H, A) but config['horizon_length'] is "
            f"{config['horizon_length']}; sample them with sequence_length=horizon_length."
        )


def init_key(seed):
    """`jax.random.PRNGKey(seed)` for an int seed; a JAX key (e.g. `utils.seeding.jax_key`) as it is."""
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return jax.random.PRNGKey(seed)
    return seed


def fill_shapes(config: Dict, ex_observations, ex_actions) -> Dict:
    """Set `ob_dims` and `action_dim` in `config` (a dict copy) from example inputs.

    `ex_actions`: one action `(A,)` with one observation `(*ob)`, or `(B, A)` with `(B, *ob)`.
    Raises `ValueError` when `config` already names different shapes (e.g. a config saved from
    another task).
    """
    ob_dims = tuple(int(d) for d in np.shape(ex_observations)[np.ndim(ex_actions) - 1 :])
    action_dim = int(np.shape(ex_actions)[-1])
    for key, value in (("ob_dims", ob_dims), ("action_dim", action_dim)):
        if config.get(key) is not None and tuple(np.atleast_1d(config[key])) != tuple(np.atleast_1d(value)):
            raise ValueError(f"--agent.{key}={config[key]!r} disagrees with the data ({value!r}); leave it unset.")
    config["ob_dims"], config["action_dim"] = ob_dims, action_dim
    return config


# ---- the update both agents share: one jitted gradient step, or a lax.scan of them ----

# The batch keys the losses read; the sampler's other keys (full_observations, next_actions,
# terminals) never cross the jit boundary.
UPDATE_KEYS = ("observations", "actions", "next_observations", "rewards", "masks", "valid")


def update_inputs(batch: Mapping) -> Dict:
    """The keys of `batch` that the update reads (`UPDATE_KEYS`); `KeyError` naming a missing one."""
    missing = [k for k in UPDATE_KEYS if k not in batch]
    if missing:
        raise KeyError(f"batch lacks {missing}; an update reads {UPDATE_KEYS}.")
    return {k: batch[k] for k in UPDATE_KEYS}


def _jit_update(agent, batch):
    return gradient_and_target_step(agent, batch)


def _jit_batch_update(agent, stacked_batches):
    agent, infos = jax.lax.scan(gradient_and_target_step, agent, stacked_batches)
    return agent, jax.tree_util.tree_map(jnp.mean, infos)


_jit_update = jax.jit(_jit_update)
_jit_batch_update = jax.jit(_jit_batch_update)


def update(agent, batch):
    """One gradient step and one Polyak step of the targets on `batch` `(B, ...)`: `(agent, info)`."""
    return _jit_update(agent, update_inputs(batch))


def batch_update(agent, stacked_batches):
    """`update` on each batch along the leading (UTD) axis `(U, B, ...)` in one `lax.scan`;
    info averaged over the U steps."""
    return _jit_batch_update(agent, update_inputs(stacked_batches))


def ensemble_values(network, config: Mapping, name: str, inputs, actions, params=None):
    """Values `(K, *B)` of critic ensemble `name` (K = `num_qs`; an axis of 1 is kept when K = 1)."""
    qs = network.select(name)(inputs, actions, params=params)
    return qs if config["num_qs"] > 1 else qs[None]
