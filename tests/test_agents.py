"""The registry (agents/__init__.py) and what every agent owes it: checked configs, batch keys, labels.

Every test here runs over every registered agent, so a new agent in agents/ is checked without a line
added to this file.
"""

import numpy as np
import pytest

import agents
from agents.common import AgentSpec


def _wrong_kind(default):
    """A value of the wrong kind for a key whose default is `default`."""
    if isinstance(default, bool):
        return 1
    if isinstance(default, int):
        return 1.5
    if isinstance(default, float):
        return "0.1"
    if isinstance(default, str):
        return 3
    return "x"  # tuples and placeholders (None)


KEY_CASES = [(spec.name, key) for spec in agents.REGISTRY.values() for key in spec.get_config().keys()]


@pytest.mark.parametrize("agent_name, key", KEY_CASES, ids=[f"{a}.{k}" for a, k in KEY_CASES])
def test_every_config_key_refuses_a_value_of_the_wrong_kind(agent_name, key):
    spec = agents.get(agent_name)
    config = spec.get_config().to_dict()
    config.update(horizon_length=2, ob_dims=None, action_dim=None)
    config = {k: v for k, v in config.items() if k in spec.get_config()}
    spec.check_config(config)  # the defaults pass
    config[key] = _wrong_kind(spec.get_config()[key])
    with pytest.raises(ValueError, match=rf"--agent\.{key}\b"):
        spec.check_config(config)


@pytest.mark.parametrize("agent_name", agents.names())
def test_unknown_and_missing_keys_are_errors(agent_name):
    spec = agents.get(agent_name)
    config = spec.get_config().to_dict()
    config.update({"horizon_length": 2} if "horizon_length" in config else {})
    with pytest.raises(ValueError, match="num_q"):
        spec.check_config({**config, "num_q": 2})
    config.pop("lr")
    with pytest.raises(ValueError, match="lacks the key 'lr'"):
        spec.check_config(config)


@pytest.mark.parametrize("agent_name", agents.names())
def test_spec_is_complete(agent_name):
    spec = agents.get(agent_name)
    assert isinstance(spec, AgentSpec) and spec.get_config().agent_name == agent_name
    assert spec.drivers and set(spec.drivers) <= {"main", "main_online"}
    for method, entry in spec.methods.items():
        assert method == method.lower() and entry.label and entry.per_domain
        assert agents.method_owner(method) is spec
    cls = spec.agent_class
    for name in ("create", "update", "batch_update", "sample_actions"):
        assert callable(getattr(cls, name)), name


def test_every_driver_has_its_default_agent_first():
    assert agents.default_agent("main").name == "acfql"
    assert agents.default_agent("main_online").name == "acrlpd"


def test_unknown_agent_name_names_the_known_ones():
    with pytest.raises(ValueError, match=r"'sac' is not one of \['acfql', 'acrlpd'"):
        agents.get("sac")


CHUNK_CASES = [(name, {}) for name in agents.names()] + [
    ("acfql", {"action_chunking": False}),
    ("dqc", {"backup_horizon": 4, "policy_chunk_size": 2}),
]


@pytest.mark.parametrize("agent_name, overrides", CHUNK_CASES, ids=[f"{a}{o or ''}" for a, o in CHUNK_CASES])
def test_chunk_length_is_what_sample_actions_returns(agent_name, overrides):
    """`SPEC.chunk_length` (what the drivers read instead of agent keys) counts the actions of one policy call."""
    import jax

    spec = agents.get(agent_name)
    config = spec.get_config().to_dict()
    config.update({"horizon_length": 3} if "horizon_length" in config else {}, **overrides)
    config.update({k: (8,) for k in ("actor_hidden_dims", "value_hidden_dims") if k in config})
    obs, action_dim = np.zeros(4, np.float32), 2
    goals = {"ex_goals": obs} if spec.goal_conditioned else {}
    agent = spec.agent_class.create(0, obs, np.zeros(action_dim, np.float32), config, **goals)
    kwargs = {"goals": obs} if spec.goal_conditioned else {}
    out = agent.sample_actions(obs, jax.random.PRNGKey(0), **kwargs)
    chunk = np.asarray(out[0] if isinstance(out, tuple) else out)  # (chunk, length): an agent that picks h
    assert chunk.shape == (spec.chunk_length(agent.config) * action_dim,)


@pytest.mark.parametrize("agent_name", agents.names())
def test_agent_initializer_is_create_value_for_value(agent_name):
    """The drivers create agents through `runner.checks.agent_initializer` (one compiled program, shapes from its
    trace): every leaf equals a direct `create` call's, bit for bit, and the shapes are the agent's."""
    import jax

    from runner.checks import agent_initializer

    spec = agents.get(agent_name)
    config = spec.get_config().to_dict()
    config.update({"horizon_length": 3} if "horizon_length" in config else {})
    config.update({k: (8, 8) for k in ("actor_hidden_dims", "value_hidden_dims") if k in config})
    obs = np.linspace(-1, 1, 4, dtype=np.float32)[None]
    example = {"observations": obs, "actions": np.zeros((1, 2), np.float32), "oracle_reps": obs}
    goals = {"ex_goals": obs} if spec.goal_conditioned else {}
    key = jax.random.PRNGKey(5)
    init, shapes = agent_initializer(spec, config, example, key)
    for k in (key, jax.random.PRNGKey(6)):
        direct = spec.agent_class.create(k, obs, example["actions"], config, **goals)
        compiled = init(k)
        leaves, expected = jax.tree_util.tree_leaves(compiled), jax.tree_util.tree_leaves(direct)
        for got, want, shape in zip(leaves, expected, jax.tree_util.tree_leaves(shapes), strict=True):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
            assert (got.shape, got.dtype) == (shape.shape, shape.dtype)
    assert compiled.config == direct.config
