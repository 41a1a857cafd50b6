"""What the agents share: the registry's entry type, config checks, window plumbing.

The losses and the update of each agent stay in its own file; this module holds only small helpers
an agent calls (`agents/README.md` says how to add an agent).
"""

import dataclasses
import inspect
import math
import numbers
from typing import Callable, Dict, Mapping, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

Q_AGGS = ("mean", "min")  # ensemble aggregation over the (target) critics


# ------------------------------------------------------------------------------------------------ the registry


@dataclasses.dataclass(frozen=True)
class Method:
    """One paper method run by an agent (`--method=<its name>`).

    Attributes:
        label: the name the paper gives it, used in plots and tables (`'QC'`, `'DQC h=25 h_a=5'`).
        settings: what defines the method: `{setting: value}` with a setting a driver flag
            (`'horizon_length'`) or `'agent.KEY'`.
        per_domain: `{domain: {setting: value}}`, the paper's tuned values for each domain (a value of
            `None`: the paper gives none, so the user must pass it). Explicit flags win over these.
        source: where the values come from (paper section, file of the authors' release).
        borrowed: `{domain: paper domain}` for domains outside the paper that take a paper domain's values
            (for CPU-sized runs; `runner.methods.note` says so).
        cut_labels: `{n: label}`: the paper's name for this method evaluated executing only the first `n`
            actions of each chunk (`--action_chunk_eval_sizes`, e.g. DQC's "DQC-naive h=25 h_a=5").
    """

    label: str
    settings: Dict[str, object]
    per_domain: Dict[str, Dict[str, object]]
    source: str = ""
    borrowed: Dict[str, str] = dataclasses.field(default_factory=dict)
    cut_labels: Dict[int, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class AgentSpec:
    """An agent as every tool sees it (`agents.get(name)`); each agent file ends with its `SPEC`.

    Attributes:
        name: `config['agent_name']`.
        agent_class: the `flax.struct.PyTreeNode` with `create`, `update`, `batch_update`, `sample_actions`.
        get_config: the agent file's `get_config()`.
        check_config: `config -> checked plain dict`; `ValueError` naming `--agent.KEY` for a bad value.
        drivers: the drivers that run it (`'main'`, `'main_online'`), the default driver first.
        batch_keys: the batch keys its losses read (only these cross the jit boundary).
        methods: `{--method name: Method}`, the paper's methods this agent runs.
        method_of: `resolved config -> --method name` of the paper method the config is (without the
            per-domain values), or None; plots label runs by it.
        short_names: short forms of settings in plot labels (`{'agent.actor_num_samples': 'N'}`).
        goal_conditioned: the agent acts on `(observation, goal)` (`sample_actions(..., goals=)`) and is
            evaluated on the env's evaluation goals.
        windows: `(dataset, config) -> source` of its batches: `source.sample(B)` draws B windows with the
            dataset's generator, `source.on_device()` gives a device sampler (`sample(key, B)`, jittable) when
            `source.fits_on_device()`. Default: `utils.device_sampler.ChunkWindows` (h-step windows).
        window_length: `config -> rows` a window needs (the data must have trajectories that long).
        chunk_length: `config -> actions` one `sample_actions` call returns (the chunk the action queue runs);
            default `policy_steps` (`horizon_length`, 1 with `action_chunking=False`).
        online: it can learn online (main.py's online phase, main_online.py); False: offline only.
    """

    name: str
    agent_class: type
    get_config: Callable[[], object]
    check_config: Callable[[Mapping], Dict]
    drivers: Tuple[str, ...]
    batch_keys: Tuple[str, ...]
    methods: Dict[str, Method] = dataclasses.field(default_factory=dict)
    method_of: Callable[[Mapping], Optional[str]] = lambda config: None
    short_names: Dict[str, str] = dataclasses.field(default_factory=dict)
    goal_conditioned: bool = False
    windows: Optional[Callable[[object, Mapping], object]] = None
    window_length: Callable[[Mapping], int] = lambda config: config["horizon_length"]
    chunk_length: Callable[[Mapping], int] = lambda config: policy_steps(config)
    online: bool = True


# ------------------------------------------------------------------------------------------------ config checks


def is_int(value, low=None) -> bool:
    """An integer (not a bool: `True` is an int in Python), `>= low` when `low` is given."""
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    return ok and (low is None or value >= low)


def is_number(value, low=None, high=None, low_open=False, high_open=False) -> bool:
    """A finite real number (int or float, not a bool) inside the given bounds."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value):
        return False
    if low is not None and (value <= low if low_open else value < low):
        return False
    return high is None or (value < high if high_open else value <= high)


def is_dims(value) -> bool:
    """A non-empty tuple of ints >= 1 (hidden widths, observation shapes)."""
    return isinstance(value, (tuple, list)) and len(value) >= 1 and all(is_int(d, 1) for d in value)


def expect(config: Mapping, key: str, ok: bool, what: str):
    """`ValueError('--agent.KEY must be <what>, got <value>.')` unless `ok`."""
    if not ok:
        raise ValueError(f"--agent.{key} must be {what}, got {config[key]!r}.")


def plain_config(config: Mapping, defaults: Mapping, agent_name: str) -> Dict:
    """A plain-dict copy of `config` (lists as tuples, hashable for jit) with exactly the keys of `defaults`.

    Raises `ValueError` for a key `defaults` lacks (with the valid keys) or one `config` lacks.
    """
    config = dict(config.to_dict() if hasattr(config, "to_dict") else config)
    config = {k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}
    keys = set(defaults.keys())
    unknown = sorted(set(config) - keys)
    if unknown:
        raise ValueError(
            f"config key(s) {unknown} are not keys of the {agent_name} agent (is --agent.agent_name or the "
            f"--agent config file the right one?); its keys are {sorted(keys)}."
        )
    missing = [k for k in defaults.keys() if k not in config]
    if missing:
        raise ValueError(f"config of the {agent_name} agent lacks the key {missing[0]!r}.")
    return config


def check_types(config: Mapping, defaults: Mapping):
    """Every key whose default is a bool, int, float or str must hold a value of that kind.

    The fallback for keys an agent checks no further, so that a new config key costs one line:
    `ValueError('--agent.KEY must be ..., got ...')` for the first key of the wrong kind.
    """
    for key, default in defaults.items():
        value = config[key]
        if isinstance(default, bool):
            expect(config, key, isinstance(value, bool), "True or False")
        elif isinstance(default, int):
            expect(config, key, is_int(value), "an int")
        elif isinstance(default, float):
            expect(config, key, is_number(value), "a finite number")
        elif isinstance(default, str):
            expect(config, key, isinstance(value, str), "a string")


def check_shared(c: Mapping, agent_name: str):
    """The checks of the keys several agents have with the same meaning (only the keys `c` has)."""
    checks = {
        "agent_name": (lambda v: v == agent_name, f"one of ('{agent_name}',)"),
        "lr": (lambda v: is_number(v, 0, low_open=True), "a number > 0"),
        "batch_size": (lambda v: is_int(v, 1), "an int >= 1"),
        "actor_hidden_dims": (is_dims, "a non-empty tuple of ints >= 1, e.g. (512,512,512,512)"),
        "value_hidden_dims": (is_dims, "a non-empty tuple of ints >= 1, e.g. (512,512,512,512)"),
        "layer_norm": (lambda v: isinstance(v, bool), "True or False"),
        "actor_layer_norm": (lambda v: isinstance(v, bool), "True or False"),
        "discount": (lambda v: is_number(v, 0, 1, low_open=True), "a number in (0, 1]"),
        "tau": (lambda v: is_number(v, 0, 1, low_open=True), "a number in (0, 1]"),
        "num_qs": (lambda v: is_int(v, 1), "an int >= 1"),
        "q_agg": (lambda v: v in Q_AGGS, f"one of {Q_AGGS}"),
        "horizon_length": (lambda v: is_int(v, 1), "an int >= 1 (the driver sets it from --horizon_length)"),
        "action_chunking": (lambda v: isinstance(v, bool), "True or False"),
        "ob_dims": (lambda v: v is None or is_dims(v), "None or a tuple of ints >= 1"),
        "action_dim": (lambda v: v is None or is_int(v, 1), "None or an int >= 1"),
    }
    for key, (ok, what) in checks.items():
        if key in c:
            expect(c, key, ok(c[key]), what)


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


def init_key(seed):
    """`jax.random.PRNGKey(seed)` for an int seed; a JAX key (e.g. `utils.seeding.jax_key`) as it is."""
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return jax.random.PRNGKey(seed)
    return seed


# ------------------------------------------------------------------------------------------------ windows


def policy_steps(config: Mapping) -> int:
    """Actions per actor/critic input: `horizon_length` with `action_chunking` (or without the key), else 1."""
    return config["horizon_length"] if config.get("action_chunking", True) else 1


def policy_actions(actions, config: Mapping):
    """Dataset actions `(B, h, A)` as the actor and critic see them: the flattened chunk `(B, h * A)`
    with `action_chunking`, else the first action `(B, A)` (the n-step baselines).

    Raises `ValueError` when the windows do not have exactly `horizon_length` steps: the critic
    target reads the chunk reward sum at step `h - 1` and bootstraps with `gamma^h`, so a longer
    window would pair an `H`-step reward sum with `gamma^h` (works on tracers: only shapes are read).
    """
    if actions.ndim != 3 or actions.shape[1] != config["horizon_length"]:
        raise ValueError(
            f"Batch windows have shape {tuple(actions.shape)} (B, H, A) but config['horizon_length'] is "
            f"{config['horizon_length']}; sample them with sequence_length=horizon_length."
        )
    if config["action_chunking"]:
        return actions.reshape(actions.shape[0], -1)  # (B, h * A)
    return actions[:, 0]  # (B, A)


def ensemble_values(network, config: Mapping, name: str, inputs, actions, params=None):
    """Values `(K, *B)` of critic ensemble `name` (K = `num_qs`; an axis of 1 is kept when K = 1)."""
    qs = network.select(name)(inputs, actions, params=params)
    return qs if config["num_qs"] > 1 else qs[None]


def aggregate(qs, q_agg: str):
    """Ensemble aggregation `(K, *B) -> (*B)` by `q_agg` ('mean' or 'min')."""
    return qs.min(axis=0) if q_agg == "min" else qs.mean(axis=0)


def sample_actions_takes(agent_class, name: str) -> bool:
    """Whether `agent_class.sample_actions` takes the keyword `name`: the evaluation overrides only some agents
    have (`best_of_n`: DQC, IFQL; `temperature`: IQL, ReBRAC)."""
    return name in inspect.signature(agent_class.sample_actions).parameters


def euler_flow(velocity: Callable, noises, steps: int):
    """`steps` Euler steps of a flow `dx/dt = velocity(x, t)` from `x = noises` at t = 0 to t = 1, unclipped:
    `x <- x + velocity(x, t_i) / steps` with `t_i = i / steps` as a `(*x.shape[:-1], 1)` float32 array (flow
    matching's Euler sampler, as in the FQL paper and its release). `noises` `(..., A)` -> `(..., A)`.

    One fully unrolled `lax.scan`: XLA gets the same straight-line program as a Python loop, but the network is
    traced once rather than `steps` times (every start traces an update before it can find it in the compilation
    cache).
    """
    times = jnp.asarray([i / steps for i in range(steps)], jnp.float32)

    def step(x, t):
        return x + velocity(x, jnp.full((*x.shape[:-1], 1), t)) / steps, None

    return jax.lax.scan(step, noises, times, unroll=True)[0]
