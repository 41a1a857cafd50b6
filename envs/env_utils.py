"""One entry point for environments and offline datasets, and the reward transforms both drivers use.

`make_env_and_datasets` dispatches on the env name:

    OGBench  {scene,puzzle-3x3,cube-single,cube-double,cube-triple,cube-quadruple}-{play,noisy}
             -singletask[-task{1..5}]-v0                       -> envs/ogbench_utils.py
    robomimic {lift,can,square,transport,tool_hang}-{mh,ph}-low_dim -> envs/robomimic_utils.py (its
             simulator is an optional extra, requirements-robomimic.txt)

and applies the parts common to every domain: `dataset_proportion`, the sparse reward transform, the
`EpisodeMonitor` wrapper and the env seeds. The same `reward_fn` that transformed the offline
rewards is handed to the driver for every online reward (STYLE.md: one transform, in envs/).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import logging
from collections.abc import Callable, Iterator

import numpy as np

from envs import ogbench_utils
from envs.wrappers import OGBENCH_INFO_FILTERS, EpisodeMonitor

logger = logging.getLogger(__name__)

# Domains whose paper runs use --sparse (DESIGN.md section 1 table).
SPARSE_DOMAINS = ('scene', 'puzzle')


def sparse_reward_transform(rewards):
    """`r -> -(r != 0)` as float32: -1 for any nonzero reward (task not solved), 0 for reward 0 (solved).

    Args:
        rewards: scalar or array of OGBench rewards (<= 0: minus the number of unsatisfied conditions).

    Returns:
        np.float32 for a scalar, else a float32 array of the same shape (zeros are +0.0, not -0.0).
    """
    out = np.where(np.asarray(rewards) != 0, np.float32(-1.0), np.float32(0.0)).astype(np.float32)
    return out[()] if out.ndim == 0 else out


def dense_reward(rewards):
    """Identity online reward transform (runs without --sparse)."""
    return rewards


def warn_if_dense_on_sparse_domain(env_name: str, sparse: bool) -> bool:
    """Log a warning when a scene or puzzle run does not use sparse rewards, as the paper does.

    Returns:
        True if it warned.
    """
    domain = env_name.split('-', 1)[0]
    if domain in SPARSE_DOMAINS and not sparse:
        logger.warning(
            '%s: the paper trains %s tasks with sparse rewards (--sparse=True, r -> -(r != 0)); this run '
            'uses the dense rewards, so its numbers are not comparable to the paper\'s.',
            env_name,
            domain,
        )
        return True
    return False


# ---- robomimic hook -----------------------------------------------------------------------------
# envs/robomimic_utils.py imports its simulator (robosuite, an optional extra: requirements-robomimic.txt)
# only when a robomimic env is made. Contract for that module:
#   is_robomimic_env(env_name) -> bool          cheap, no robomimic/robosuite import
#   make_env_and_datasets(env_name, dataset_path, dataset_dir, seed, action_clip_eps)
#                                            -> (env, eval_env, train, val); rewards already shifted by -1;
#                                               envs unwrapped (EpisodeMonitor is added here)
#   SUPPORTED_PATTERN                           the names it claims, for errors and --help
#   online_reward_fn(reward) -> reward          the same -1 shift for online rewards
#   run_metadata(env_name) -> dict              optional
# Its import errors are not swallowed: only a missing module means "no robomimic support".


def _robomimic_module():
    if importlib.util.find_spec('envs.robomimic_utils') is None:
        return None
    return importlib.import_module('envs.robomimic_utils')


def is_robomimic_env(env_name: str) -> bool:
    """True if the optional robomimic backend exists and claims `env_name`."""
    module = _robomimic_module()
    return module is not None and bool(module.is_robomimic_env(env_name))


def supported_env_patterns() -> list[str]:
    """Human-readable patterns of every supported env name (for errors and --help)."""
    patterns = list(ogbench_utils.SUPPORTED_PATTERNS)
    module = _robomimic_module()
    if module is not None:
        patterns.append('robomimic: ' + module.SUPPORTED_PATTERN)
    return patterns


@dataclasses.dataclass
class EnvAndDatasets:
    """What `make_env_and_datasets` returns; unpacks as `env, eval_env, train_dataset, val_dataset`.

    Attributes:
        env, eval_env: `EpisodeMonitor`-wrapped gymnasium envs (training and evaluation).
        train_dataset, val_dataset: dicts of float32 arrays (`observations, actions, rewards,
            terminals, masks, next_observations`); `val_dataset` is None when no val file exists.
        reward_fn: the online reward transform (sparse or identity; robomimic adds its -1 shift).
        train_paths: the training file(s); several for a sharded dataset.
        next_shard: None unless the data is sharded; else `() -> dict` loading the next shard
            (cycling) with the same processing as the first.
        metadata: `run_metadata(env_name)`.
    """

    env: object
    eval_env: object
    train_dataset: dict
    val_dataset: dict | None
    reward_fn: Callable = dense_reward
    train_paths: list = dataclasses.field(default_factory=list)
    next_shard: Callable[[], dict] | None = None
    metadata: dict = dataclasses.field(default_factory=dict)

    def __iter__(self) -> Iterator:
        return iter((self.env, self.eval_env, self.train_dataset, self.val_dataset))


class ShardCycler:
    """`() -> dict`: loads the next training shard (wrapping around) like the first one was loaded.

    The reference moves to the next shard every `dataset_replace_interval` offline steps; the driver
    calls this at those steps. `index` is the shard currently in use (0 after creation).
    """

    def __init__(self, paths: list[str], env_name: str, sparse: bool, action_clip_eps: float | None):
        self.paths, self.index = list(paths), 0
        self._env_name, self._sparse, self._eps = env_name, sparse, action_clip_eps

    def __call__(self) -> dict:
        self.index = (self.index + 1) % len(self.paths)
        logger.info('Using dataset shard %d/%d: %s', self.index + 1, len(self.paths), self.paths[self.index])
        return load_dataset_shard(self.paths[self.index], self._env_name, self._sparse, self._eps)


def load_dataset_shard(path: str, env_name: str, sparse: bool = False, action_clip_eps: float | None = 1e-5):
    """Load one OGBench file (e.g. a shard) with exactly the processing `make_env_and_datasets` applies.

    Raises:
        FileNotFoundError, ValueError: as `ogbench_utils.load_ogbench_dataset`.
    """
    return _apply_common(ogbench_utils.load_ogbench_dataset(path, env_name, action_clip_eps), 1.0, sparse)


def _apply_common(dataset: dict, dataset_proportion: float, sparse: bool) -> dict:
    if dataset_proportion < 1.0:
        n = int(len(dataset['rewards']) * dataset_proportion)
        if n < 1:
            raise ValueError(
                f'dataset_proportion={dataset_proportion} keeps no row of {len(dataset["rewards"])}.'
            )
        dataset = {k: v[:n] for k, v in dataset.items()}
        # Deviation from the reference (which leaves it 0): the cut row ends a trajectory, so no
        # sampled window treats the rows after the cut (clipped to the last row) as a continuation.
        dataset['terminals'] = dataset['terminals'].copy()
        dataset['terminals'][-1] = 1.0
    if sparse:
        dataset = {**dataset, 'rewards': sparse_reward_transform(dataset['rewards'])}
    return dataset


def run_metadata(env_name: str) -> dict:
    """Facts to store with a run: for OGBench `{'ogbench_version', 'reward_timing'}` (see ogbench_utils)."""
    if ogbench_utils.is_ogbench_env(env_name):
        return ogbench_utils.ogbench_metadata(env_name)
    module = _robomimic_module()
    if module is not None and module.is_robomimic_env(env_name) and hasattr(module, 'run_metadata'):
        return module.run_metadata(env_name)
    return {}


def make_env_and_datasets(
    env_name: str,
    dataset_path: str | None = None,
    dataset_dir: str | None = None,
    dataset_proportion: float = 1.0,
    sparse: bool = False,
    action_clip_eps: float | None = 1e-5,
    seed: int = 0,
) -> EnvAndDatasets:
    """Make the training and evaluation envs and load the offline datasets for `env_name`.

    Args:
        env_name: see the module docstring (e.g. 'cube-double-play-singletask-task2-v0').
        dataset_path: one explicit npz file (OGBench; its val file is `<stem>-val.npz` if present) or
            robomimic hdf5 file.
        dataset_dir: directory holding `<dataset>.npz` + `-val.npz`, or npz shards (cycled through
            `next_shard`). Default: `~/.ogbench/data`. For robomimic: the root in place of `~/.robomimic`
            (`<dir>/<task>/<type>/low_dim_v15.hdf5`).
        dataset_proportion: keep the first this fraction of the training rows (reference behaviour;
            the last kept row is marked terminal). In (0, 1]; must be 1 for sharded data.
        sparse: apply `sparse_reward_transform` to the offline rewards; `reward_fn` applies it online.
        action_clip_eps: clip dataset actions to [-1 + eps, 1 - eps] (None: no clipping).
        seed: env and eval env are reset once with seeds drawn from SeedSequence(seed), so their
            streams are fixed even if a driver never seeds them.

    Returns:
        `EnvAndDatasets`, which also unpacks as `(env, eval_env, train_dataset, val_dataset)`.

    Raises:
        ValueError: unknown env name (lists the supported patterns), `dataset_proportion` outside
            (0, 1] or < 1 with shards, and every data problem `ogbench_utils.load_ogbench_dataset` reports.
        FileNotFoundError: a dataset file is missing (the message gives the generator command, or for
            robomimic where to download the file and where it goes).
        ImportError: a robomimic env without its simulator extra (the message gives the install commands).
    """
    if not 0.0 < dataset_proportion <= 1.0:
        raise ValueError(f'dataset_proportion must be in (0, 1], got {dataset_proportion}.')
    reward_fn = sparse_reward_transform if sparse else dense_reward

    if is_robomimic_env(env_name):
        robomimic = _robomimic_module()
        env, eval_env, train, val = robomimic.make_env_and_datasets(
            env_name, dataset_path=dataset_path, dataset_dir=dataset_dir, seed=seed, action_clip_eps=action_clip_eps
        )
        online_fn = robomimic.online_reward_fn
        reward_fn = (lambda r: sparse_reward_transform(online_fn(r))) if sparse else online_fn
        train_paths, next_shard, info_filters = [], None, ()
    elif ogbench_utils.is_ogbench_env(env_name):
        train_paths, val_path = ogbench_utils.resolve_dataset_paths(env_name, dataset_path, dataset_dir)
        next_shard = None
        if len(train_paths) > 1:
            if dataset_proportion < 1.0:
                raise ValueError('dataset_proportion < 1 is not supported with a sharded dataset.')
            next_shard = ShardCycler(train_paths, env_name, sparse, action_clip_eps)
        load = ogbench_utils.load_ogbench_dataset
        train = load(train_paths[0], env_name, action_clip_eps)
        val = None if val_path is None else load(val_path, env_name, action_clip_eps)
        env, eval_env = ogbench_utils.make_ogbench_env(env_name), ogbench_utils.make_ogbench_env(env_name)
        info_filters = OGBENCH_INFO_FILTERS
    else:
        raise ValueError(
            f'Unknown environment {env_name!r}. Supported: ' + '; '.join(supported_env_patterns())
        )

    train = _apply_common(train, dataset_proportion, sparse)
    val = None if val is None else _apply_common(val, 1.0, sparse)
    env = EpisodeMonitor(env, filter_regexes=info_filters)
    eval_env = EpisodeMonitor(eval_env, filter_regexes=info_filters)
    env_seed, eval_seed = (int(s.generate_state(1)[0]) for s in np.random.SeedSequence(seed).spawn(2))
    env.reset(seed=env_seed)
    eval_env.reset(seed=eval_seed)
    return EnvAndDatasets(
        env=env,
        eval_env=eval_env,
        train_dataset=train,
        val_dataset=val,
        reward_fn=reward_fn,
        train_paths=train_paths,
        next_shard=next_shard,
        metadata=run_metadata(env_name),
    )
