"""`runner.setup` creates a single-task OGBench run's agent from its file's first row while a thread builds the env
and loads the data (`ogbench_utils.first_transition`), and keeps that agent only when the row is the loaded
dataset's row 0: the agent is the one `agent_initializer` makes from the loaded example, either way. Meanwhile it
also traces main.py's first offline update (`warm_first_update`), which the first step then reuses."""

import logging
import re

import jax
import numpy as np
import pytest

import agents
from envs import ogbench_utils
from runner import resume, setup
from runner.seed_group import SeedGroup
from tests.driver_runs import tiny_dataset
from tests.test_cli import parse
from utils import seeding

TINY = ["--env_name=cube-single-play-singletask-task1-v0", "--agent.actor_hidden_dims=(8,8)",
        "--agent.value_hidden_dims=(8,8)", "--agent.batch_size=4", "--horizon_length=3",
        "--progress=False"]  # fmt: skip


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    return tiny_dataset(tmp_path_factory.mktemp("data"))


def test_first_transition_is_the_loaded_row_0(dataset_path, tmp_path):
    loaded = ogbench_utils.load_ogbench_dataset(dataset_path, "cube-single-play-singletask-task1-v0")
    head = ogbench_utils.first_transition(dataset_path)
    assert sorted(head) == ["actions", "observations"]
    for key, row in head.items():
        assert row.dtype == loaded[key].dtype == np.float32 and row.shape == loaded[key][:1].shape
        np.testing.assert_array_equal(row, loaded[key][:1])
    np.savez(tmp_path / "bounds.npz", observations=np.ones((3, 2)), actions=np.array([[1.0, -1.0, 0.25]] * 3))
    head = ogbench_utils.first_transition(str(tmp_path / "bounds.npz"))  # cast to float32, clipped as the loader does
    assert head["observations"].dtype == head["actions"].dtype == np.float32
    np.testing.assert_array_equal(head["actions"], np.float32([[1 - 1e-5, -1 + 1e-5, 0.25]]))
    assert ogbench_utils.first_transition(str(tmp_path / "bounds.npz"), None)["actions"].tolist() == [[1, -1, 0.25]]
    (tmp_path / "text.npz").write_text("not an archive")
    np.savez(tmp_path / "no_actions.npz", observations=np.zeros((3, 2), np.float32))
    for bad in ("text.npz", "no_actions.npz", "missing.npz"):
        with pytest.raises(ValueError, match="no first row to read"):
            ogbench_utils.first_transition(str(tmp_path / bad))


@pytest.mark.parametrize("shift", [0.0, 0.5], ids=["row 0", "another row"])
def test_the_agent_made_while_the_data_loads_is_kept_only_when_its_row_is_row_0(
    monkeypatch, tmp_path, dataset_path, shift
):
    calls, read = [], ogbench_utils.first_transition
    real_initializer = setup.agent_initializer

    def counted(spec, config, example, key):
        calls.append(np.asarray(example["observations"]).copy())
        return real_initializer(spec, config, example, key)

    monkeypatch.setattr(ogbench_utils, "first_transition", lambda path: {k: v + shift for k, v in read(path).items()})
    monkeypatch.setattr(setup, "agent_initializer", counted)
    cfg = parse(monkeypatch, "main", f"--save_dir={tmp_path}", f"--dataset_path={dataset_path}", *TINY)
    (run,) = setup.setup_runs(cfg)
    try:
        # The early agent from the file's head, then, only when that row was not row 0, one from the loaded example.
        assert len(calls) == (1 if shift == 0 else 2)
        np.testing.assert_array_equal(calls[0], run.example["observations"] + shift)
        spec = agents.get(cfg.agent["agent_name"])
        key = seeding.jax_key(cfg.seed, "agent")
        expected = real_initializer(spec, cfg.agent, run.example, key)[0](key)
        for got, want in zip(jax.tree_util.tree_leaves(run.agent), jax.tree_util.tree_leaves(expected), strict=True):
            np.testing.assert_array_equal(got, want)
    finally:
        run.logger.close()
        resume.release_run_dirs()


class _Traces(logging.Handler):
    """The functions JAX traces, by name, from its own log line ('Finished tracing + transforming NAME for pjit')."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.names = []

    def emit(self, record):
        match = re.match(r"Finished tracing \+ transforming (\S+) for pjit", record.getMessage())
        if match:
            self.names.append(match.group(1))


@pytest.mark.parametrize("warm", [True, False], ids=["warmed", "warm-up off"])
def test_the_first_offline_update_is_traced_while_the_env_builds(monkeypatch, tmp_path, dataset_path, warm):
    # Shapes no other test uses (this process may have traced others): each case its own batch size.
    shapes = ["--agent.actor_hidden_dims=(7,7)", "--agent.value_hidden_dims=(7,7)", f"--agent.batch_size={5 + warm}"]
    made = []
    real = setup.warm_first_update
    monkeypatch.setattr(setup, "warm_first_update", lambda *a: made.append(real(*a) if warm else False))
    flags = [f for f in TINY if f.split("=")[0] not in {s.split("=")[0] for s in shapes}] + shapes
    cfg = parse(monkeypatch, "main", f"--save_dir={tmp_path}", f"--dataset_path={dataset_path}", *flags)
    (run,) = setup.setup_runs(cfg)
    traces, logger = _Traces(), logging.getLogger("jax._src.dispatch")
    level = logger.level
    try:
        group = SeedGroup([run])
        update = group.update_fn()
        batch = run.windows.sample(cfg.agent["batch_size"])
        logger.addHandler(traces)
        logger.setLevel(logging.DEBUG)
        agent, info = update(group.agent, batch)
        jax.block_until_ready(info)
        # Setup traced (and lowered) the loop's jitted call, `call` around the agent's `_update`: the step traces
        # neither; without the warm-up, both.
        assert made == [warm], made
        assert ("call" in traces.names) != warm and ("_update" in traces.names) != warm, traces.names
    finally:
        logger.removeHandler(traces)
        logger.setLevel(level)
        run.logger.close()
        resume.release_run_dirs()


DQC = ["--agent=agents/dqc.py", "--env_name=cube-single-play-oraclerep-v0", "--agent.actor_hidden_dims=(5,5)",
       "--agent.value_hidden_dims=(5,5)", "--agent.batch_size=3", "--agent.backup_horizon=4",
       "--agent.policy_chunk_size=2", "--agent.best_of_n=2", "--agent.flow_steps=2", "--offline_steps=1",
       "--progress=False"]  # fmt: skip


def _setup_and_first_step(monkeypatch, flags):
    """`setup_runs` of `flags`, the rows `agent_initializer` was given, the functions the first step traced, what
    `warm_first_update` returned (one entry per call), and whether the agent equals the one made from the loaded
    example."""
    made, real = [], setup.agent_initializer
    monkeypatch.setattr(setup, "agent_initializer", lambda *a: made.append(dict(a[2])) or real(*a))
    warmed, real_warm = [], setup.warm_first_update
    monkeypatch.setattr(setup, "warm_first_update", lambda *a: warmed.append(real_warm(*a)) or warmed[-1])
    cfg = parse(monkeypatch, "main", *flags)
    (run,) = setup.setup_runs(cfg)
    traces, logger = _Traces(), logging.getLogger("jax._src.dispatch")
    level = logger.level
    try:
        spec, key = agents.get(cfg.agent["agent_name"]), seeding.jax_key(cfg.seed, "agent")
        expected = real(spec, cfg.agent, run.example, key)[0](key)
        same = all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(run.agent),
                                                         jax.tree_util.tree_leaves(expected), strict=True))  # fmt: skip
        group = SeedGroup([run])
        logger.addHandler(traces)
        logger.setLevel(logging.DEBUG)
        jax.block_until_ready(group.update_fn()(group.agent, run.windows.sample(cfg.agent["batch_size"]))[1])
        return run.example, made, traces.names, warmed, same
    finally:
        logger.removeHandler(traces)
        logger.setLevel(level)
        run.logger.close()
        resume.release_run_dirs()


def test_a_goal_conditioned_run_starts_from_the_row_its_last_start_recorded(monkeypatch, tmp_path, dataset_path):
    # Its row 0 needs the env's oracle representation, so a first start (an empty cache folder) creates the agent
    # after the load and records the row; the next start of the same data creates the agent and traces the first
    # update from that record while the env builds. A record that is not row 0 any more, or not a record at all,
    # costs only the early agent: the agent is always the one made from the loaded example.
    cache = tmp_path / "cache"
    flags = [*DQC, f"--dataset_path={dataset_path}", f"--compilation_cache_dir={cache}"]
    example, made, traced, warmed, same = _setup_and_first_step(monkeypatch, [*flags, f"--save_dir={tmp_path / 'a'}"])
    assert len(made) == 1 and same and not warmed and "_update" in traced, traced
    (record,) = (cache / "qc_first_rows").iterdir()
    with np.load(record) as f:
        assert sorted(f.files) == ["actions", "observations", "oracle_reps"]
        for k in f.files:
            np.testing.assert_array_equal(f[k], example[k])
            assert f[k].dtype == example[k].dtype == np.float32 and f[k].shape == example[k].shape

    example, made, traced, warmed, same = _setup_and_first_step(monkeypatch, [*flags, f"--save_dir={tmp_path / 'b'}"])
    # (The first start traced the same update in this process: only `warmed` tells that setup made it.)
    assert len(made) == 1 and same and warmed == [True] and "_update" not in traced, traced

    with np.load(record) as f:
        stale = {k: f[k] + (k == "oracle_reps") for k in f.files}  # another goal representation
    np.savez(record, **stale)
    example, made, traced, warmed, same = _setup_and_first_step(monkeypatch, [*flags, f"--save_dir={tmp_path / 'c'}"])
    assert len(made) == 2 and same, len(made)
    np.testing.assert_array_equal(made[0]["oracle_reps"], stale["oracle_reps"])
    with np.load(record) as f:  # recorded anew
        np.testing.assert_array_equal(f["oracle_reps"], example["oracle_reps"])

    record.write_text("not an archive")
    example, made, traced, warmed, same = _setup_and_first_step(monkeypatch, [*flags, f"--save_dir={tmp_path / 'd'}"])
    assert len(made) == 1 and same
    with np.load(record) as f:
        np.testing.assert_array_equal(f["observations"], example["observations"])

    # No cache, no record: nothing is written, the agent is made after the load.
    example, made, traced, warmed, same = _setup_and_first_step(
        monkeypatch,
        [
            *DQC,
            f"--dataset_path={dataset_path}",
            "--compilation_cache_dir=none",
            f"--save_dir={tmp_path / 'e'}",
        ],  # fmt: skip
    )
    assert len(made) == 1 and same
