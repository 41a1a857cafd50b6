"""Every way an `--agent=FILE` can be malformed ends in one `error:` line naming the file and the part that is
wrong (issue 29 item 7): no or a partial `SPEC`, a field of the wrong kind, `get_config` or `check_config`
missing, failing or returning the wrong thing, an import or syntax error, an agent class without the members
the drivers call. In-process, through the drivers' flag parsing and `RunConfig.from_flags`; no training.
"""

import sys

import pytest
from absl import flags

import agents
from runner import cli
from runner.config import RunConfig
from runner.flags import define_flags

GOOD = """\
import ml_collections
from agents import common


class Agent:
    @classmethod
    def create(cls, seed, ex_observations, ex_actions, config):
        return cls()

    def update(self, batch):
        return self, {}

    def batch_update(self, batch):
        return self, {}

    def sample_actions(self, observations, rng):
        return observations


def get_config():
    return ml_collections.ConfigDict(dict(agent_name="myagent", horizon_length=1))


def check_config(config):
    return dict(config)


SPEC = common.AgentSpec("myagent", Agent, get_config, check_config, ("main",), ("observations",))
"""
SPEC_LINE = 'SPEC = common.AgentSpec("myagent", Agent, get_config, check_config, ("main",), ("observations",))'
FORM = "SPEC = common.AgentSpec(name, agent_class, get_config, check_config, drivers, batch_keys): agents/README.md"
MEMBERS = "create, update, batch_update, sample_actions"

# (kind, [(old, new) edits of GOOD], the message after "error: --agent=<file>: ")
CASES = [
    ("partial SPEC", [(SPEC_LINE, 'SPEC = common.AgentSpec("myagent")')],
     "cannot be imported (line 28: TypeError: AgentSpec.__init__() missing 5 required positional arguments: "
     f"'agent_class', 'get_config', 'check_config', 'drivers', and 'batch_keys') ({FORM})."),
    ("no SPEC, unknown name", [(SPEC_LINE, "")],
     "has no SPEC, and its get_config()'s agent_name 'myagent' is not a known agent "
     f"({agents.names()}); a new agent's file ends with {FORM}."),
    ("SPEC not an AgentSpec", [(SPEC_LINE, "SPEC = {'name': 'myagent'}")],
     f"SPEC is a dict, not an agents.common.AgentSpec ({FORM})."),
    ("drivers a string", [('("main",)', '"main"')],
     "SPEC.drivers must be a tuple of 'main' and/or 'main_online', got 'main'."),
    ("unknown driver", [('("main",)', '("train",)')],
     "SPEC.drivers must be a tuple of 'main' and/or 'main_online', got ('train',)."),
    ("batch_keys a string", [('("observations",)', '"observations"')],
     "SPEC.batch_keys must be a tuple of batch key names, e.g. ('observations',), got 'observations'."),
    ("goal_conditioned not a bool", [('("observations",))', '("observations",), goal_conditioned="yes")')],
     "SPEC.goal_conditioned must be True or False, got 'yes'."),
    ("agent_class an instance", [("(\"myagent\", Agent,", "(\"myagent\", Agent(),")],
     "SPEC.agent_class must be a class (the agent's flax.struct.PyTreeNode), got <"),
    ("agent_class lacks members", [("    def update(", "    def step("), ("    def sample_actions(", "    def act(")],
     f"SPEC.agent_class Agent lacks update, sample_actions (every agent class has {MEMBERS}: agents/README.md)."),
    ("check_config not a function", [("get_config, check_config, (", "get_config, None, (")],
     "SPEC.check_config must be a function (config -> checked plain dict), got None."),
    ("no get_config", [("def get_config", "def make_config"), ("Agent, get_config,", "Agent, make_config,")],
     "has no get_config() (an agent file defines get_config(), returning its ml_collections.ConfigDict: "
     "agents/README.md)."),
    ("get_config returns None", [('ConfigDict(dict(agent_name="myagent", horizon_length=1))', "ConfigDict and None")],
     "get_config() returned NoneType, not an ml_collections.ConfigDict."),
    ("get_config returns a dict", [("ml_collections.ConfigDict(dict(", "(dict(")],
     "get_config() returned dict, not an ml_collections.ConfigDict."),
    ("get_config raises", [("    return ml_collections.ConfigDict(", "    raise RuntimeError('no config')\n    (")],
     "get_config() failed (line 21: RuntimeError: no config)."),
    ("config without agent_name", [('agent_name="myagent", ', "")],
     "get_config()'s config has no agent_name (the agent's name, SPEC.name)."),
    ("names disagree", [('SPEC = common.AgentSpec("myagent"', 'SPEC = common.AgentSpec("other"')],
     "SPEC.name is 'other' but get_config()'s agent_name is 'myagent'; give both the agent's one name."),
    ("import error", [("from agents import common", "from agents import common\nimport no_such_module")],
     "cannot be imported (line 3: ModuleNotFoundError: No module named 'no_such_module')."),
    ("syntax error", [("def check_config(config):", "def check_config(config:")],
     "cannot be imported (line 24: SyntaxError: '(' was never closed)."),
    ("check_config returns None", [("    return dict(config)", "    dict(config)")],
     "SPEC.check_config returned NoneType, not a dict (the checked copy of the config)."),
    ("check_config raises KeyError", [("    return dict(config)", "    return dict(config)['beta']")],
     "SPEC.check_config failed (line 25: KeyError: 'beta'); it must raise ValueError naming --agent.KEY for a "
     "bad value (the common.is_* tests: agents/README.md)."),
]  # fmt: skip


@pytest.fixture
def registry(monkeypatch):
    """The registry as it was after the test: a file that loads registers its agent."""
    for name in ("REGISTRY", "CONFIG_FILES", "CLASHES"):
        monkeypatch.setattr(agents, name, dict(getattr(agents, name)))


def error_line(monkeypatch, capsys, *args) -> str:
    argv = ["main.py", *args]
    monkeypatch.setattr(sys, "argv", argv)  # ml_collections reads --agent.* from sys.argv
    flag_values = flags.FlagValues()
    define_flags("main", flag_values)
    try:
        cli.parse_flags(argv, "main", flag_values)
        RunConfig.from_flags(flag_values, "main")
    except SystemExit as e:
        assert e.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
    except cli.InputError as e:
        err = f"error: {e}"
    else:
        pytest.fail(f"{args} was accepted")
    assert "Traceback" not in capsys.readouterr().err
    return err


def test_the_good_file_loads(tmp_path, registry):
    path = tmp_path / "good.py"
    path.write_text(GOOD)
    assert agents.file_problem(str(path)) is None and agents.get("myagent").agent_class.__name__ == "Agent"


@pytest.mark.parametrize("edits, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_malformed_agent_file_is_one_line_naming_it(monkeypatch, capsys, tmp_path, registry, edits, message):
    source = GOOD
    for old, new in edits:
        assert old in source, old
        source = source.replace(old, new)
    path = tmp_path / "bad_agent.py"
    path.write_text(source)
    err = error_line(monkeypatch, capsys, f"--agent={path}", "--offline_steps=1", "--online_steps=0")
    assert err.startswith(f"error: --agent={path}: {message}"), err
    if not message.endswith("<"):
        assert err == f"error: --agent={path}: {message}"


@pytest.mark.parametrize(
    "name, message",
    [("missing.py", "no such file."), ("", "is a folder; pass the agent's .py file."),
     ("data.npz", "not a Python file (an agent file is path/to/name.py).")],
)  # fmt: skip
def test_an_agent_path_that_is_no_agent_file(monkeypatch, capsys, tmp_path, registry, name, message):
    (tmp_path / "data.npz").write_bytes(b"\0")
    path = tmp_path / name if name else tmp_path
    assert error_line(monkeypatch, capsys, f"--agent={path}") == f"error: --agent={path}: {message}"
