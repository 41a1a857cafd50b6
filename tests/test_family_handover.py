"""What a benchmark family hands over is checked as a data file is (issue 59, items 1 and 2 and the load path of 3).

Each broken family is a copy of envs/README.md's worked example (Pendulum) with one thing changed, saved in a copy
of the repository beside the example itself (as tests/test_plugin_env.py adds a family). `envs.load`, the one way
runs and `envs.make_env_and_datasets` load, refuses its data or its load's result in one line naming the family
file and the field; `runner.checks.probe_envs`, at setup, refuses its envs. The example, OGBench's files and
robomimic's data still pass, and the probe leaves the envs a run uses as they were (the training env's generator
and first steps, the evaluation env's, equal to those of a load never probed).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import envs
from envs import robomimic as ru
from envs.generate_dataset import generate_dataset
from runner.checks import probe_envs
from tests.driver_runs import run_driver
from tests.test_plugin_env import TINY, example_family, repository_with_example
from tests.test_robomimic import DEMOS, FakeRobosuiteEnv, write_robomimic_file
from utils import seeding

WIDER = '''
class Wider(gymnasium.Wrapper):
    """Observations with one number more than the observation_space (and the data) has."""

    def reset(self, **kwargs):
        ob, info = self.env.reset(**kwargs)
        return np.append(ob, 0.0), info

    def step(self, action):
        ob, *rest = self.env.step(action)
        return (np.append(ob, 0.0), *rest)


def make_wide_env():
    return Wider(make_env())


def _envs('''

DATA = "    data = {k: np.asarray(v, np.float32) for k, v in rows.items()}\n"
SUCCESS = '{**info, "success": float(ob[0] > 0.9)}'
METADATA = 'metadata={"env": name.record(), "datasets": [record]}'
# {case: [(old, new), ...]}: the edits of the example that break one thing.
CASES = {
    "int_obs": [(DATA, DATA + '    data["observations"] = data["observations"].astype(np.int64)\n')],
    "int_actions": [(DATA, DATA + '    data["actions"] = data["actions"].astype(np.int64)\n')],
    "nan_masks": [('"masks": np.ones_like(data["rewards"])', '"masks": np.where(np.arange(1000) == 5, np.nan, 1.0)')],
    "no_end": [(DATA, DATA + '    data["terminals"][:] = 0.0\n')],
    "terminals_2": [(DATA, DATA + '    data["terminals"] *= 2.0\n')],
    "nan_terminals": [(DATA, DATA + '    data["terminals"][10] = np.nan\n')],
    "wide_actions": [(DATA, DATA + '    data["actions"] *= 3.0\n')],
    "float64": [("np.asarray(v, np.float32)", "np.asarray(v, np.float64)")],
    "other_seed": [('env.reset(seed=seeding.env_seed(seed, "env"))', "env.reset(seed=seed + 1)")],
    "no_metadata": [(METADATA, "metadata={}")],
    "no_datasets": [(METADATA, 'metadata={"env": name.record()}')],
    "raises": [("    data = make_dataset()\n", '    raise RuntimeError("no data today")\n')],
    "ctrl_c": [("    data = make_dataset()\n", "    raise KeyboardInterrupt\n")],
    "dict": [("    return EnvAndDatasets(\n", "    return dict(\n")],
    "wide_obs": [("\ndef _envs(", WIDER), ("env = make_env()\n    env.reset", "env = make_wide_env()\n    env.reset"),
                 ('"make_eval_env": make_env', '"make_eval_env": make_wide_env')],
    "wide_eval_obs": [("\ndef _envs(", WIDER), ('"make_eval_env": make_env', '"make_eval_env": make_wide_env')],
    "no_success": [(SUCCESS, "dict(info)")],
    "str_success": [(SUCCESS, '{**info, "success": "yes" if ob[0] > 0.9 else "no"}')],
}  # fmt: skip


def broken_family(case: str) -> str:
    """The example as the family `p_<case>` (env name `p-<case>-v1`) with `CASES[case]`'s edits."""
    text = example_family()
    edits = [
        ('NAME = "pendulum-random-v1"', f'NAME = "p-{case}-v1"'),
        ('EnvName("pendulum", NAME', f'EnvName("p_{case}", NAME'),
        ('name="pendulum"', f'name="p_{case}"'),
        *CASES[case],
    ]
    for old, new in edits:
        assert old in text, f"{case}: the example has no {old!r}"
        text = text.replace(old, new)
    return text


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A copy of the repository with the example (`envs/pendulum.py`) and one file `envs/p_<case>.py` per case."""
    copy = repository_with_example(tmp_path_factory.mktemp("repo"))
    for case in CASES:
        with open(os.path.join(copy, "envs", f"p_{case}.py"), "w") as f:
            f.write(broken_family(case))
    return copy


SCRIPT = """
import json, sys
import numpy as np
import envs
from runner.checks import probe_envs
from utils.seeding import generator_state

def first_steps(env):  # what a run's collector does first: an unseeded reset, then a step
    action = np.full(env.action_space.shape, 0.5, np.float32)
    return [generator_state(env.unwrapped.np_random), env.reset()[0].tolist(), env.step(action)[0].tolist()]

for env_name in sys.argv[1:]:
    try:
        out = envs.make_env_and_datasets(env_name, seed=3)
        name = envs.parse(env_name)
        probe_envs(name, out, 3, out.train_dataset["observations"].shape[1:])
        plain = envs.make_env_and_datasets(env_name, seed=3)  # never probed
        same = [first_steps(a) == first_steps(b) for a, b in ((out.env, plain.env), (out.eval_env, plain.eval_env))]
        print(json.dumps([env_name, "ok", sorted({str(v.dtype) for v in out.train_dataset.values()}), same]))
    except BaseException as e:
        print(json.dumps([env_name, type(e).__name__, str(e)]))
"""


@pytest.fixture(scope="module")
def outcomes(repo):
    """`{case: (exception type, its message)}`, or `('ok', the data's dtypes, [the training env, the evaluation env
    go on as those of a load never probed])`, of loading each family and probing its envs."""
    names = ["pendulum-random-v1"] + [f"p-{case}-v1" for case in CASES]
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, *names], cwd=repo, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("[")]
    return {name.removeprefix("p-").removesuffix("-v1"): tuple(rest) for name, *rest in lines}


def refused(outcomes, case) -> str:
    kind, message = outcomes[case]
    assert kind == "ValueError", (case, kind, message)
    assert message.startswith(f"envs/p_{case}.py") and "\n" not in message, message
    return message


DATA_ERRORS = {  # the message after the file's name
    "int_obs": " (load's train_dataset): 'observations' is int64; offline data must be floats (float32): ints are "
    "refused, not cast.",
    "int_actions": " (load's train_dataset): 'actions' is int64; offline data must be floats",
    "nan_masks": " (load's train_dataset): 'masks' has non-finite values (NaN/inf) in 1 row(s), first at row 5.",
    "no_end": " (load's train_dataset): 'terminals' is 0 on the last row: the last row is not a trajectory end",
    "terminals_2": " (load's train_dataset): 'terminals' must be 0 or 1, got [0.0, 2.0].",
    "nan_terminals": " (load's train_dataset): 'terminals' has non-finite values (NaN/inf) in 1 row(s), first at "
    "row 10.",
    "wide_actions": " (load's train_dataset): 'actions' has values outside [-1, 1] in ",
    "no_metadata": ": load's metadata['env'] is None; it must be the parsed name's record",
    "no_datasets": ": load's metadata['datasets'] is None; it must be a list with one record per data file",
    "raises": ": load('p-raises-v1') raised RuntimeError: no data today",
    "dict": ": load returned a dict, not an envs.common.EnvAndDatasets.",
}


@pytest.mark.parametrize("case", DATA_ERRORS)
def test_load_refuses_what_a_file_would_be_refused_for(outcomes, case):
    assert refused(outcomes, case).startswith(f"envs/p_{case}.py{DATA_ERRORS[case]}")


def test_the_example_passes_float64_is_cast_and_ctrl_c_goes_through(outcomes):
    assert outcomes["pendulum-random"] == ("ok", ["float32"], [True, True])  # probed, and the envs go on unchanged
    assert outcomes["float64"] == ("ok", ["float32"], [True, True])  # accepted, cast to float32 (the README's)
    assert outcomes["other_seed"] == ("ok", ["float32"], [True, True])  # a training env reset from another seed
    assert outcomes["ctrl_c"][0] == "KeyboardInterrupt"  # the user's own Ctrl-C is not turned into an error line


PROBE_ERRORS = {
    "wide_obs": "the training env's reset returned an observation of shape (4,), but its observation_space has "
    "(3,) and the data's rows (3,).",
    "wide_eval_obs": "the evaluation env's reset returned an observation of shape (4,), but its observation_space "
    "has (3,) and the data's rows (3,).",
    "no_success": "the training env's step returned no info['success'] (info: [",
    "str_success": "the training env's step returned info['success'] = 'no' (str); it must be a number",
}


@pytest.mark.parametrize("case", PROBE_ERRORS)
def test_the_probe_refuses_envs_that_do_not_match_their_space_and_data(outcomes, case):
    assert refused(outcomes, case).startswith(f"envs/p_{case}.py: {PROBE_ERRORS[case]}")


@pytest.mark.slow
def test_a_run_is_refused_in_one_line_before_any_run_folder(repo, tmp_path):
    for case, expected in (("nan_masks", DATA_ERRORS["nan_masks"]), ("str_success", PROBE_ERRORS["str_success"])):
        flags = [f if not f.startswith("--env_name=") else f"--env_name=p-{case}-v1" for f in TINY]
        _, result = run_driver("main.py", str(tmp_path), case, None, flags, expect=2, timeout=600, root=repo)
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert errors and errors[0].startswith(f"error: envs/p_{case}.py") and expected in errors[0], result.stderr
        assert "Traceback" not in result.stderr
        assert not os.path.exists(os.path.join(str(tmp_path), "g", case))  # no run folder left behind


# ---- the built-in families' data pass, and the probe changes nothing a run does --------------------------------


def _state(env) -> dict:
    return seeding.generator_state(env.unwrapped.np_random)


def _probe_changes_nothing(load):
    """`load()` twice; the first probed: its envs are in the state of the second's (same generator, same steps)."""
    probed, plain = load(), load()
    name = envs.parse(probed.metadata["env"]["name"])
    probe_envs(name, probed, 3, probed.train_dataset["observations"].shape[1:])
    assert _state(probed.env) == _state(plain.env)
    assert _state(probed.eval_env) == _state(plain.eval_env)
    for a, b in ((probed.env, plain.env), (probed.eval_env, plain.eval_env)):
        np.testing.assert_array_equal(a.reset()[0], b.reset()[0])  # the run's first (unseeded) reset
        action = np.full(a.action_space.shape, 0.5, np.float32)
        np.testing.assert_array_equal(a.step(action)[0], b.step(action)[0])


def test_ogbench_files_pass_and_the_probe_changes_nothing(tmp_path):
    path = str(tmp_path / "cube-single-play-v0.npz")
    generate_dataset(
        "cube-single-play-v0", num_episodes=1, seed=0, save_path=path, max_episode_steps=20, progress=False
    )
    env_name = "cube-single-play-singletask-task1-v0"
    with np.load(path) as f:
        stored = {k: f[k] for k in f.files}
    edge = str(tmp_path / "edge.npz")  # stored actions that reach -1 and 1, read without the loader's clipping
    np.savez(edge, **{**stored, "actions": np.clip(stored["actions"] * 2, -1, 1)})
    out = envs.make_env_and_datasets(env_name, dataset_path=edge, action_clip_eps=None, hash_datasets=False)
    assert out.train_dataset["actions"].min() == -1.0 and out.train_dataset["actions"].max() == 1.0
    _probe_changes_nothing(lambda: envs.make_env_and_datasets(env_name, dataset_path=path, seed=3, hash_datasets=False))

    wide = str(tmp_path / "wide.npz")  # the npz reader goes through the same check
    np.savez(wide, **{**stored, "actions": stored["actions"] * 3})
    with pytest.raises(ValueError, match=rf"^Dataset file {wide}: 'actions' has values outside \[-1, 1\] in "):
        envs.make_env_and_datasets(env_name, dataset_path=wide, hash_datasets=False)


def test_robomimic_data_pass_and_the_probe_changes_nothing(tmp_path, monkeypatch):
    monkeypatch.setitem(ru.OFFICIAL_NUM_DEMOS, ("lift", "mh"), len(DEMOS))
    monkeypatch.setattr(
        ru, "make_robomimic_env", lambda env_name, meta, seed=None: ru.RobomimicLowDimEnv(
            FakeRobosuiteEnv(success_at=2), ru.episode_cap(env_name), seed=seed)
    )  # fmt: skip
    path = write_robomimic_file(tmp_path / "low_dim_v15.hdf5")  # one stored action is 2.0: the loader clips it
    _probe_changes_nothing(lambda: envs.make_env_and_datasets("lift-mh-low_dim", dataset_path=path, seed=3))
    with pytest.raises(ValueError, match=r"^envs/robomimic.py \(load's train_dataset\): 'actions' has values outside"):
        envs.make_env_and_datasets("lift-mh-low_dim", dataset_path=path, action_clip_eps=None)
