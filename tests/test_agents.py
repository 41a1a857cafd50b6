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


# ---------------------------------------------------------------- labels


def _acfql(**overrides):
    spec = agents.get("acfql")
    return spec.check_config({**spec.get_config().to_dict(), "horizon_length": 5, **overrides})


@pytest.mark.parametrize(
    "overrides, paper, label",
    [
        ({}, {"agent.actor_num_samples": 32}, "QC"),
        (dict(horizon_length=3, actor_num_samples=16), {"agent.actor_num_samples": 32}, "QC h=3 N=16"),
        (dict(actor_type="distill-ddpg", alpha=300.0), {"agent.alpha": 300.0}, "QC-FQL"),
        (dict(actor_type="distill-ddpg", alpha=100.0), {"agent.alpha": 300.0}, "QC-FQL alpha=100"),
        (dict(horizon_length=1, actor_num_samples=4), {"agent.actor_num_samples": None}, "BFN N=4"),  # none given
        (dict(action_chunking=False, actor_type="distill-ddpg", alpha=100.0), {"agent.alpha": 100.0}, "FQL-n"),
        # A key outside the method's settings that differs from get_config(): shown, never pooled silently.
        (
            dict(lr=1e-3, actor_hidden_dims=(256, 256)),
            {"agent.actor_num_samples": 32},
            "QC actor_hidden_dims=256x2 lr=0.001",
        ),
    ],
)
def test_paper_methods_are_labelled_by_name_and_differences(overrides, paper, label):
    method, got = agents.describe(_acfql(**overrides), paper)
    assert got == label and label.startswith(method)


def test_unknown_keys_and_agents_are_never_labelled_as_a_paper_method():
    variant = dict(_acfql(), critic_target="max")  # an ACFQL variant with a new config key
    method, label = agents.describe(variant, {"agent.actor_num_samples": 32})
    assert method == "acfql" and "critic_target=max" in label and "QC" not in label
    toy = {"agent_name": "toy", "lr": 0.001, "toy_weight": 0.5, "horizon_length": 5}
    defaults = {"agent_name": "toy", "lr": 0.001, "toy_weight": 1.0, "horizon_length": None}
    assert agents.describe(toy, None, defaults) == ("toy", "toy horizon_length=5 toy_weight=0.5")
    assert agents.describe(toy) == ("toy", "toy horizon_length=5 lr=0.001 toy_weight=0.5")  # no defaults known


def test_a_combination_of_no_method_gets_the_agent_label():
    spec = agents.get("acrlpd")
    config = spec.check_config(dict(spec.get_config().to_dict(), horizon_length=5, action_chunking=False))
    method, label = agents.describe(config)
    assert method == "acrlpd" and "action_chunking=False" in label


def test_format_of_values_in_labels():
    assert agents._format((512, 512, 512)) == "512x3" and agents._format((256, 512)) == "(256,512)"
    assert agents._format(3e-4) == "0.0003" and agents._format(np.float64(2.0).item()) == "2"
