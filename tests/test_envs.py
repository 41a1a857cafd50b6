"""Env names, the EpisodeMonitor wrapper, warnings, metadata and shard listing (no dataset generation)."""

import importlib.metadata
import importlib.util
import logging

import gymnasium
import numpy as np
import pytest

from envs import env_utils, ogbench_utils
from envs.ogbench_utils import OGBenchName, parse_ogbench_name
from envs.wrappers import OGBENCH_INFO_FILTERS, EpisodeMonitor


@pytest.mark.parametrize('name, expected, dataset, env_id', [
    ('cube-double-play-singletask-task2-v0', OGBenchName('cube-double', 'play', 2), 'cube-double-play-v0',
     'cube-double-singletask-task2-v0'),
    ('scene-play-singletask-v0', OGBenchName('scene', 'play', None), 'scene-play-v0', 'scene-singletask-v0'),
    ('puzzle-3x3-noisy-singletask-task5-v0', OGBenchName('puzzle-3x3', 'noisy', 5), 'puzzle-3x3-noisy-v0',
     'puzzle-3x3-singletask-task5-v0'),
    ('cube-quadruple-play-v0', OGBenchName('cube-quadruple', 'play'), 'cube-quadruple-play-v0',
     'cube-quadruple-singletask-v0'),
])
def test_parse_names(name, expected, dataset, env_id):
    parsed = parse_ogbench_name(name)
    assert parsed == expected and parsed.dataset_name == dataset and parsed.env_id == env_id
    assert gymnasium.spec(parsed.env_id) is not None  # registered by ogbench
    assert gymnasium.spec(parsed.collection_env_id) is not None


def test_which_names_are_training_envs():
    for task in range(1, 6):
        for domain in ogbench_utils.DOMAINS:
            assert ogbench_utils.is_ogbench_env(f'{domain}-play-singletask-task{task}-v0')
    assert ogbench_utils.is_ogbench_env('cube-triple-noisy-singletask-v0')
    for name in ['cube-double-play-v0', 'cube-double-v0', 'antmaze-large-navigate-singletask-v0',
                 'cube-double-stitch-singletask-task1-v0', 'lift-mh-low_dim',
                 'puzzle-4x4-play-singletask-v0']:
        assert not ogbench_utils.is_ogbench_env(name), name
    assert parse_ogbench_name('visual-cube-double-play-v0') is None
    with pytest.raises(ValueError, match='task id must be in 1..5'):
        parse_ogbench_name('cube-double-play-singletask-task6-v0')


def test_default_task_env_and_timing():
    env = ogbench_utils.make_ogbench_env('cube-double-play-singletask-v0')
    env.reset(seed=0)
    assert env.unwrapped._reward_task_id == 2  # ogbench's default task
    assert env.unwrapped._success_timing == 'pre'
    assert env.spec.max_episode_steps == 500
    env.close()
    meta = ogbench_utils.ogbench_metadata()
    assert meta == {'ogbench_version': importlib.metadata.version('ogbench'), 'reward_timing': 'pre-step'}
    assert env_utils.run_metadata('scene-play-singletask-task1-v0') == meta
    assert env_utils.run_metadata('unknown-env') == {}


class _ProbeEnv(gymnasium.Env):
    """3-step episodes with rewards -1, -1, 0 and a noisy info dict."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {'privileged/block_0_pos': 1, 'goal': 2}

    def step(self, action):
        self.t += 1
        info = {'success': float(self.t == 3), 'proprio/joint_pos': 0, 'privileged/x': 1, 'qpos': 3}
        return np.zeros(1, np.float32), (0.0 if self.t == 3 else -1.0), self.t == 3, False, info


def test_episode_monitor_statistics_and_filters():
    env = EpisodeMonitor(_ProbeEnv(), filter_regexes=OGBENCH_INFO_FILTERS)
    for _ in range(2):  # statistics restart at every reset
        _, info = env.reset()
        assert info == {'goal': 2}
        for _ in range(2):
            _, _, terminated, truncated, info = env.step(np.zeros(1))
            assert 'episode' not in info and not terminated
        _, _, terminated, _, info = env.step(np.zeros(1))
        assert terminated and info['success'] == 1.0
        assert set(info) == {'success', 'qpos', 'episode'}
        assert info['episode']['return'] == -2.0 and info['episode']['length'] == 3
        assert info['episode']['duration'] >= 0.0
    assert env.total_timesteps == 6
    unfiltered = EpisodeMonitor(_ProbeEnv())
    unfiltered.reset()
    assert 'proprio/joint_pos' in unfiltered.step(np.zeros(1))[-1]


def test_episode_monitor_on_ogbench_truncation():
    env = EpisodeMonitor(
        ogbench_utils.make_ogbench_env('cube-single-play-singletask-task1-v0', max_episode_steps=4),
        filter_regexes=OGBENCH_INFO_FILTERS,
    )
    env.reset(seed=0)
    rewards = []
    for _ in range(4):
        _, r, terminated, truncated, info = env.step(np.zeros(5))
        rewards.append(r)
    assert truncated and info['episode']['length'] == 4 and info['episode']['return'] == sum(rewards)
    assert 'success' in info and not any(k.startswith(('privileged', 'proprio')) for k in info)
    env.close()


def test_dense_reward_warning(caplog):
    with caplog.at_level(logging.WARNING, logger='envs.env_utils'):
        assert env_utils.warn_if_dense_on_sparse_domain('scene-play-singletask-task2-v0', sparse=False)
        assert env_utils.warn_if_dense_on_sparse_domain('puzzle-3x3-play-singletask-task4-v0', sparse=False)
    assert len(caplog.records) == 2 and 'sparse' in caplog.records[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger='envs.env_utils'):
        assert not env_utils.warn_if_dense_on_sparse_domain('scene-play-singletask-task2-v0', sparse=True)
        assert not env_utils.warn_if_dense_on_sparse_domain('cube-double-play-singletask-task2-v0', False)
    assert not caplog.records


def test_list_dataset_shards(tmp_path):
    names = ['cube-quadruple-play-v0-001.npz', 'cube-quadruple-play-v0-000.npz',
             'cube-quadruple-play-v0-000-val.npz', 'cube-quadruple-play-100m-v0-002.npz',
             'cube-double-play-v0.npz', 'notes.txt']
    for n in names:
        (tmp_path / n).write_bytes(b'')
    shards = ogbench_utils.list_dataset_shards(str(tmp_path), 'cube-quadruple-play-v0')
    assert [p.split('/')[-1] for p in shards] == [
        'cube-quadruple-play-100m-v0-002.npz',
        'cube-quadruple-play-v0-000.npz',
        'cube-quadruple-play-v0-001.npz',
    ]
    assert len(ogbench_utils.list_dataset_shards(str(tmp_path))) == 4
    with pytest.raises(FileNotFoundError, match='No dataset shards scene-play'):
        ogbench_utils.list_dataset_shards(str(tmp_path), 'scene-play-v0')
    with pytest.raises(FileNotFoundError, match='directory not found'):
        ogbench_utils.list_dataset_shards(str(tmp_path / 'nope'))


def test_val_path_and_default_path(monkeypatch, tmp_path):
    assert ogbench_utils.val_path_for('/a/b/cube-single-play-v0.npz') == '/a/b/cube-single-play-v0-val.npz'
    monkeypatch.setenv('HOME', str(tmp_path))
    expected = f'{tmp_path}/.ogbench/data/scene-play-v0.npz'
    assert ogbench_utils.default_dataset_path('scene-play-v0') == expected
    assert ogbench_utils.default_dataset_path('scene-play-v0', '/x') == '/x/scene-play-v0.npz'


@pytest.mark.skipif(importlib.util.find_spec('envs.robomimic_utils') is not None,
                    reason='robomimic backend present; its own tests cover the hook')
def test_robomimic_hook_without_backend():
    assert not env_utils.is_robomimic_env('lift-mh-low_dim')
    with pytest.raises(ValueError, match="Unknown environment 'lift-mh-low_dim'"):
        env_utils.make_env_and_datasets('lift-mh-low_dim')


def test_result_unpacks_as_four_tuple():
    out = env_utils.EnvAndDatasets(env='e', eval_env='v', train_dataset={'a': 1}, val_dataset=None)
    env, eval_env, train, val = out
    assert (env, eval_env, train, val) == ('e', 'v', {'a': 1}, None)
    assert out.next_shard is None and out.reward_fn(-2.0) == -2.0
