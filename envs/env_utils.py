"""One entry point for environments and offline datasets, and the reward transforms both drivers use.

`make_env_and_datasets` dispatches on the env name (docs/datasets.md): OGBench single-task names to
envs/ogbench_utils.py, OGBench `-oraclerep-` names (DQC) to envs/ogbench_goals.py, robomimic names to
envs/robomimic_utils.py (its simulator an optional extra, imported only when a robomimic env is made); and
applies what every domain shares: `dataset_proportion`, the sparse reward transform, the `EpisodeMonitor`
wrapper and the env seeds. The same `reward_fn` that transformed the offline rewards transforms every online
reward (one transform, here).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import logging
from collections.abc import Callable

import gymnasium
import numpy as np

from envs import ogbench_goals, ogbench_utils, provenance, robomimic_utils
from envs.wrappers import OGBENCH_INFO_FILTERS, EpisodeMonitor, GlobalNumpySeeding
from utils import seeding

logger = logging.getLogger(__name__)

# Domains whose paper runs use --sparse (docs/settings.md, per-domain table).
SPARSE_DOMAINS = ("scene", "puzzle")


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
    domain = env_name.split("-", 1)[0]
    if domain in SPARSE_DOMAINS and not sparse and not ogbench_utils.is_oraclerep_env(env_name):
        logger.warning(
            "%s: the paper trains %s tasks with sparse rewards (--sparse=True, r -> -(r != 0)); this run "
            "uses the dense rewards, so its numbers are not comparable to the paper's.",
            env_name,
            domain,
        )
        return True
    return False


def is_robomimic_env(env_name: str) -> bool:
    """True for a robomimic low-dim env name (imports no simulator)."""
    return robomimic_utils.is_robomimic_env(env_name)


def is_goal_conditioned_env(env_name: str) -> bool:
    """True for an OGBench goal-conditioned env name `<domain>-<type>-oraclerep-v0` (imports nothing new)."""
    return ogbench_utils.is_oraclerep_env(env_name)


def supported_env_patterns() -> list[str]:
    """Human-readable patterns of every supported env name (for errors and --help)."""
    return [*ogbench_utils.SUPPORTED_PATTERNS, "robomimic: " + robomimic_utils.SUPPORTED_PATTERN]


@dataclasses.dataclass
class EnvAndDatasets:
    """What `make_env_and_datasets` returns: `env`, `eval_env` (`EpisodeMonitor`-wrapped); `train_dataset`,
    `val_dataset` (None unless loaded): dicts of float32 `observations, actions, rewards, terminals, masks,
    next_observations` (goal-conditioned: plus `oracle_reps`); `reward_fn`, the online reward transform;
    `next_shard`, a `ShardCycler` for sharded data (else None); `metadata`, `run_metadata` plus one
    `envs.provenance` record per file; `make_eval_env`, a picklable `() -> env` built like `eval_env`, not
    reset (for `evaluation.make_eval_vector_env`); `goal_conditioned` and `task_names` (task id `i` at
    position `i - 1`; () for single-task envs).

    `eval_env` is built when first read, by `make_eval_env` then one `reset(seed=eval_env_seed)`, unless an
    env was passed as `built_eval_env`: a start pays for one MuJoCo model less before its first step (its
    first evaluation pays it), and the env is the same either way.
    """

    train_dataset: dict
    val_dataset: dict | None
    reward_fn: Callable = dense_reward
    next_shard: Callable[[], dict] | None = None
    metadata: dict = dataclasses.field(default_factory=dict)
    make_eval_env: Callable[[], gymnasium.Env] | None = None
    goal_conditioned: bool = False
    task_names: tuple[str, ...] = ()
    eval_env_seed: int | None = None
    built_eval_env: object = None
    env: object = None

    @property
    def eval_env(self):
        if self.built_eval_env is None:
            env = self.make_eval_env()
            env.reset(seed=self.eval_env_seed)
            self.built_eval_env = env
        return self.built_eval_env

    @property
    def num_tasks(self) -> int:
        """Evaluation tasks of a goal-conditioned env (`len(task_names)`); 0 for single-task envs."""
        return len(self.task_names)


def _monitor(env: gymnasium.Env, env_name: str) -> EpisodeMonitor:
    """The wrapper of every training and evaluation env: `EpisodeMonitor`, with OGBench's info filters.

    Goal-conditioned envs are wrapped in `GlobalNumpySeeding` first (their seeded resets must not depend on
    numpy's global RNG; envs/ogbench_goals.py).
    """
    if ogbench_utils.is_oraclerep_env(env_name):
        return EpisodeMonitor(GlobalNumpySeeding(env), filter_regexes=OGBENCH_INFO_FILTERS)
    filters = OGBENCH_INFO_FILTERS if ogbench_utils.is_ogbench_env(env_name) else ()
    return EpisodeMonitor(env, filter_regexes=filters)


def make_eval_env(
    env_name: str,
    success_timing: str = "post",
    robomimic_env_meta: dict | None = None,
    robomimic_seed: int | None = None,
    **env_kwargs,
) -> EpisodeMonitor:
    """One evaluation env of `env_name`, built and wrapped as `make_env_and_datasets` builds `eval_env`, not reset
    (use `EnvAndDatasets.make_eval_env`, the run's arguments bound). `success_timing` and `env_kwargs`: OGBench
    only; `robomimic_env_meta` (required) and `robomimic_seed`: robomimic only. `ValueError` for a bad name,
    timing or robomimic arguments; `ImportError` for robomimic without its simulator extra."""
    if robomimic_utils.is_robomimic_env(env_name):
        if robomimic_env_meta is None:
            raise ValueError(
                f"{env_name}: a robomimic eval env needs robomimic_env_meta (robomimic_utils.load_env_meta)."
            )
        if env_kwargs:
            raise ValueError(f"{env_name}: robomimic eval envs take no env_kwargs, got {sorted(env_kwargs)}.")
        env = robomimic_utils.make_robomimic_env(env_name, robomimic_env_meta, seed=robomimic_seed)
    elif ogbench_utils.is_ogbench_env(env_name):
        env = ogbench_utils.make_ogbench_env(env_name, success_timing, **env_kwargs)
    elif ogbench_utils.is_oraclerep_env(env_name):
        env = ogbench_goals.make_oraclerep_env(env_name, success_timing, **env_kwargs)
    else:
        raise ValueError(f"Unknown environment {env_name!r}. Supported: " + "; ".join(supported_env_patterns()))
    return _monitor(env, env_name)


class ShardCycler:
    """`() -> dict`: loads the next training shard (wrapping around) like the first one was loaded.

    The reference moves to the next shard every `dataset_replace_interval` offline steps; the driver
    calls this at those steps. `paths` are the shards in cycling order, `index` the one in use (0
    after creation). For a goal-conditioned env each shard comes with its own `oracle_reps`.
    """

    def __init__(
        self,
        paths: list[str],
        env_name: str,
        sparse: bool,
        action_clip_eps: float | None,
        success_timing: str = "pre",
    ):
        self.paths, self.index = list(paths), 0
        self._env_name, self._sparse, self._eps = env_name, sparse, action_clip_eps
        self._success_timing = ogbench_utils.check_success_timing(success_timing)

    def __call__(self) -> dict:
        self.index = (self.index + 1) % len(self.paths)
        logger.info("Using dataset shard %d/%d: %s", self.index + 1, len(self.paths), self.paths[self.index])
        return load_dataset_shard(
            self.paths[self.index], self._env_name, self._sparse, self._eps, success_timing=self._success_timing
        )


def load_dataset_shard(
    path: str,
    env_name: str,
    sparse: bool = False,
    action_clip_eps: float | None = 1e-5,
    success_timing: str = "pre",
) -> dict:
    """Load one OGBench file (e.g. a shard) with exactly the processing `make_env_and_datasets` applies.

    `success_timing` is the relabelling timing (`make_env_and_datasets`'s `dataset_success_timing`; unused for a
    goal-conditioned env, whose file gets `oracle_reps` instead of task rewards).

    Raises:
        FileNotFoundError, ValueError: as `ogbench_utils.load_ogbench_dataset` (`ogbench_goals.load_oraclerep_dataset`).
    """
    if ogbench_utils.is_oraclerep_env(env_name):
        return _apply_common(ogbench_goals.load_oraclerep_dataset(path, env_name, action_clip_eps), 1.0, sparse)
    dataset = ogbench_utils.load_ogbench_dataset(path, env_name, action_clip_eps, success_timing=success_timing)
    return _apply_common(dataset, 1.0, sparse)


def _apply_common(dataset: dict, dataset_proportion: float, sparse: bool) -> dict:
    if dataset_proportion < 1.0:
        n = int(len(dataset["rewards"]) * dataset_proportion)
        if n < 1:
            raise ValueError(f"dataset_proportion={dataset_proportion} keeps no row of {len(dataset['rewards'])}.")
        dataset = {k: v[:n] for k, v in dataset.items()}
        # Deviation from the reference (which leaves it 0): the cut row ends a trajectory, so no
        # sampled window treats the rows after the cut (clipped to the last row) as a continuation.
        dataset["terminals"] = dataset["terminals"].copy()
        dataset["terminals"][-1] = 1.0
    if sparse:
        dataset = {**dataset, "rewards": sparse_reward_transform(dataset["rewards"])}
    return dataset


def run_metadata(env_name: str, success_timing: str = "post", dataset_success_timing: str = "pre", env=None) -> dict:
    """Facts to store with a run; `env` as `ogbench_utils.load_ogbench_dataset`'s (OGBench: where a fact needs one).

    OGBench: `{'ogbench_version', 'success_timing', 'reward_timing', 'task_id'}` (`ogbench_utils.ogbench_metadata`)
    plus `dataset_success_timing`; goal-conditioned: `ogbench_goals.goal_metadata` (`task_id` None,
    `dataset_success_timing` None, `goal_conditioned`, `task_names`); robomimic: `robomimic_utils.run_metadata`
    (which has no timing setting);
    {} for any other name.

    Raises:
        ValueError: a timing is not 'post' or 'pre'.
    """
    ogbench_utils.check_success_timing(success_timing)
    ogbench_utils.check_success_timing(dataset_success_timing)
    if ogbench_utils.is_oraclerep_env(env_name):
        return ogbench_goals.goal_metadata(env_name, success_timing, env)
    if ogbench_utils.is_ogbench_env(env_name):
        return {
            **ogbench_utils.ogbench_metadata(env_name, success_timing, env),
            "dataset_success_timing": dataset_success_timing,
        }
    if robomimic_utils.is_robomimic_env(env_name):
        return robomimic_utils.run_metadata(env_name)
    return {}


def _ogbench_train_env(env_name: str, success_timing: str, seed: int | None) -> EpisodeMonitor:
    """The monitored OGBench (or oraclerep) training env of `env_name`, reset once from `seed`'s `env` stream
    (None: not reset)."""
    if ogbench_utils.is_oraclerep_env(env_name):
        env = ogbench_goals.make_oraclerep_env(env_name, success_timing)
    else:
        env = ogbench_utils.make_ogbench_env(env_name, success_timing)
    env = _monitor(env, env_name)
    if seed is not None:
        env.reset(seed=seeding.env_seed(seed, "env"))
    return env


def make_env_and_datasets(
    env_name: str,
    dataset_path: str | None = None,
    dataset_dir: str | None = None,
    dataset_proportion: float = 1.0,
    sparse: bool = False,
    action_clip_eps: float | None = 1e-5,
    seed: int = 0,
    success_timing: str = "post",
    dataset_success_timing: str = "pre",
    load_val: bool = False,
    hash_datasets: bool = True,
) -> EnvAndDatasets:
    """The training and evaluation envs and the offline datasets of `env_name` (docs/datasets.md).

    `dataset_path`: one npz (its val file `<stem>-val.npz`) or robomimic hdf5; `dataset_dir`: the directory of
    `<dataset>.npz` or of npz shards (cycled by `next_shard`), for robomimic the root in place of `~/.robomimic`.
    `dataset_proportion` in (0, 1] keeps the first rows (1 for shards); `sparse` applies
    `sparse_reward_transform` offline and online; `seed` resets both envs once from the `env` and `eval_env`
    streams. OGBench only: `success_timing` (env) and `dataset_success_timing` (offline relabelling), 'post'
    or 'pre' (docs/datasets.md, section 5). `load_val` loads the val file when it exists; `hash_datasets`
    records each file's sha256. `ValueError` for a bad name (listing the patterns), timing, proportion,
    `sparse` with goals, or data; `FileNotFoundError` with the command that makes the file; `ImportError`
    for robomimic without its extra.
    """
    if not 0.0 < dataset_proportion <= 1.0:
        raise ValueError(f"dataset_proportion must be in (0, 1], got {dataset_proportion}.")
    ogbench_utils.check_success_timing(success_timing)
    ogbench_utils.check_success_timing(dataset_success_timing)
    reward_fn = sparse_reward_transform if sparse else dense_reward
    goal_conditioned = ogbench_utils.is_oraclerep_env(env_name)
    task_names = ()
    env = None

    if robomimic_utils.is_robomimic_env(env_name):
        path = robomimic_utils.resolve_dataset_path(env_name, dataset_path, dataset_dir)
        env, eval_env, train, val = robomimic_utils.make_env_and_datasets(
            env_name, dataset_path=path, seed=seed, action_clip_eps=action_clip_eps
        )
        env = _monitor(env, env_name)
        env.reset(seed=seeding.env_seed(seed, "env"))
        datasets = [robomimic_utils.dataset_provenance(path, env_name, hash_datasets)]
        online_fn = robomimic_utils.online_reward_fn
        reward_fn = (lambda r: sparse_reward_transform(online_fn(r))) if sparse else online_fn
        next_shard = None
        metadata = run_metadata(env_name, success_timing, dataset_success_timing)
        eval_env_fn = functools.partial(
            make_eval_env,
            env_name,
            robomimic_env_meta=robomimic_utils.load_env_meta(path),
            robomimic_seed=seeding.env_seed(seed, "eval_env"),  # as robomimic_utils.make_env_and_datasets
        )
    elif ogbench_utils.is_ogbench_env(env_name) or goal_conditioned:
        if goal_conditioned and sparse:
            raise ValueError(
                f"--sparse does not apply to the goal-conditioned {env_name}: it has no task reward to transform "
                "(the goal windows make the rewards); leave --sparse=False."
            )
        train_paths = ogbench_utils.resolve_dataset_paths(env_name, dataset_path, dataset_dir)
        next_shard = None
        if len(train_paths) > 1:
            if dataset_proportion < 1.0:
                raise ValueError("dataset_proportion < 1 is not supported with a sharded dataset.")
            ogbench_utils.check_shards(train_paths)  # every shard, before the first loads and any run folder exists
            next_shard = ShardCycler(train_paths, env_name, sparse, action_clip_eps, dataset_success_timing)

        # The training env is built on a thread while the file is read (MuJoCo's compiler runs beside the main
        # thread), then lends its task to the loader (relabelling, oracle representations: static facts of the
        # task, whatever the episode) before its first seeded reset: a start builds one MuJoCo model less.
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="train-env")
        env_future = pool.submit(_ogbench_train_env, env_name, success_timing, None)
        pool.shutdown(wait=False)

        def task_env():
            return env_future.result().unwrapped

        def load(path):
            if goal_conditioned:
                return ogbench_goals.load_oraclerep_dataset(path, env_name, action_clip_eps, env=task_env)
            return ogbench_utils.load_ogbench_dataset(
                path, env_name, action_clip_eps, success_timing=dataset_success_timing, env=task_env
            )

        train = load(train_paths[0])
        val_path = ogbench_utils.existing_val_path(train_paths) if load_val else None
        val = None if val_path is None else load(val_path)
        if goal_conditioned:
            task_names = ogbench_goals.task_names(env_name, task_env())
        metadata = run_metadata(env_name, success_timing, dataset_success_timing, env=task_env)
        env = env_future.result()
        env.reset(seed=seeding.env_seed(seed, "env"))
        eval_env_fn = functools.partial(make_eval_env, env_name, success_timing)
        eval_env = None  # built when first used (EnvAndDatasets.eval_env)
        used = [(p, "train") for p in train_paths] + ([] if val is None else [(val_path, "val")])
        datasets = [provenance.npz_provenance(p, role, hash_datasets) for p, role in used]
    else:
        raise ValueError(f"Unknown environment {env_name!r}. Supported: " + "; ".join(supported_env_patterns()))

    train = _apply_common(train, dataset_proportion, sparse)
    val = None if val is None else _apply_common(val, 1.0, sparse)
    eval_env_seed = seeding.env_seed(seed, "eval_env")
    if eval_env is not None:  # robomimic: built by robomimic_utils like eval_env_fn builds it
        if not isinstance(eval_env, EpisodeMonitor):
            eval_env = _monitor(eval_env, env_name)
        eval_env.reset(seed=eval_env_seed)
    return EnvAndDatasets(
        env=env,
        built_eval_env=eval_env,
        eval_env_seed=eval_env_seed,
        train_dataset=train,
        val_dataset=val,
        reward_fn=reward_fn,
        next_shard=next_shard,
        metadata={**metadata, "datasets": datasets},
        make_eval_env=eval_env_fn,
        goal_conditioned=goal_conditioned,
        task_names=task_names,
    )


def envs_for_seed(env_data: EnvAndDatasets, env_name: str, seed: int, success_timing: str = "post") -> EnvAndDatasets:
    """`env_data` with a new training and evaluation env seeded for `seed` (datasets shared, not copied).

    Used by `--num_seeds`: every seed of a group gets its own environments, built and seeded exactly as
    `make_env_and_datasets(env_name, seed=seed)` would build them (`env` and `eval_env` streams of
    `seed`), while the offline data is loaded once. `make_eval_env` is rebound to `seed` too. Raises
    `ValueError` for an unknown env name.
    """
    if robomimic_utils.is_robomimic_env(env_name):
        path = env_data.metadata["datasets"][0]["path"]
        env_meta = robomimic_utils.load_env_meta(path)
        env = robomimic_utils.make_robomimic_env(env_name, env_meta, seed=seeding.env_seed(seed, "env"))
        env = _monitor(env, env_name)
        env.reset(seed=seeding.env_seed(seed, "env"))
        eval_env_fn = functools.partial(
            make_eval_env, env_name, robomimic_env_meta=env_meta, robomimic_seed=seeding.env_seed(seed, "eval_env")
        )
    elif ogbench_utils.is_ogbench_env(env_name) or ogbench_utils.is_oraclerep_env(env_name):
        env = _ogbench_train_env(env_name, success_timing, seed)
        eval_env_fn = functools.partial(make_eval_env, env_name, success_timing)
    else:
        raise ValueError(f"Unknown environment {env_name!r}. Supported: " + "; ".join(supported_env_patterns()))
    return dataclasses.replace(
        env_data,
        env=env,
        built_eval_env=None,  # built when first used, as in make_env_and_datasets
        eval_env_seed=seeding.env_seed(seed, "eval_env"),
        make_eval_env=eval_env_fn,
    )
