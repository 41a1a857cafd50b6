"""Everything a run builds before its loop: one `Run` per seed (`setup_runs`), its inputs checked (`runner.checks`).

`setup_runs`, in order: the compilation cache; `envs.parse` of the env name; the size and resume checks; the
family's `load` of the envs and offline data (once); the checks on the data, windows, goals, shapes, memory and
rendering; the agent's program made once and created per seed; the envs of each seed; with `--resume`, the run
states (`runner.resume`); only then each seed's run directory (`flags.json`) and logger. Every bad input raises
`runner.cli.InputError` before any folder is written.
"""

import dataclasses
import json
import os
import re
import shutil
from typing import Dict, List, Optional

import numpy as np
from absl import logging

import agents
import envs
from log_utils import Logger, get_exp_name, make_run_dir, provenance, setup_wandb, write_json
from runner import resume
from runner.checks import (
    agent_initializer,
    check_dataset_fits_env,
    check_dataset_windows,
    check_memory,
    check_rendering,
    check_sizes,
    probe_envs,
)
from runner.cli import input_errors
from runner.config import check_goal_conditioning
from utils import seeding
from utils.datasets import Dataset
from utils.startup import compilation_cache_dir, use_compilation_cache


@dataclasses.dataclass
class Run:
    """What `setup_runs` builds for one seed; the loop's work on it is `runner.seed_group.SeedGroup`'s.

    `agent` is fresh or resumed (`agent.config`: the resolved config); `env_data` the
    `envs.common.EnvAndDatasets`; `train_dataset` the offline `Dataset` (its generator: the `dataset`
    stream) and `windows` the agent's window source over it (`agents.window_source`, rebuilt at each shard);
    `chunk_length` the actions per policy call (`AgentSpec.chunk_length`); `example` one transition;
    `resume_meta` the state being continued (`--resume`), else None.
    """

    cfg: object
    agent: object
    env_data: object
    train_dataset: Dataset
    windows: object
    run_dir: str
    logger: Logger
    action_dim: int
    chunk_length: int
    example: Dict
    resume_meta: Optional[Dict] = None


def restore_offline(run: Run, meta: Dict):
    """`run`'s agent, offline dataset shard and generator as the resumed state left them."""
    run.agent = meta["agent"]
    shard_index = meta.get("shard_index")
    if shard_index and run.env_data.next_shard is not None:
        run.env_data.next_shard.index = shard_index - 1
        run.train_dataset = Dataset.create(
            **run.env_data.next_shard(),
            rng=run.train_dataset.rng,
            stop_reward_at_mask_zero=run.train_dataset.stop_reward_at_mask_zero,
        )
        run.windows = agents.window_source(run.train_dataset, run.agent.config)
    seeding.set_generator_state(run.train_dataset.rng, meta["dataset_rng"])


def _taken(run_name: str, run_dirs: List[str]) -> str:
    return (
        f"--run_name={run_name}: {', '.join(run_dirs)} exists already (another run's files are never overwritten); "
        "choose another --run_name or --run_group, or pass --resume to continue it."
    )


def _make_run_dir(cfg):
    """`(name, run_dir)`: the run's directory, created (a fresh run) and locked for this process's life."""
    parent = os.path.join(cfg.save_dir, cfg.run_group)
    if cfg.resume:  # checked and locked by resume.check_runs
        exp_name = cfg.run_name
        run_dir = os.path.join(parent, exp_name)
    elif cfg.run_name:
        exp_name = cfg.run_name
        resume.make_dirs(parent)
        try:
            run_dir = make_run_dir(parent, exp_name)
        except FileExistsError:
            raise ValueError(_taken(exp_name, [os.path.join(parent, exp_name)])) from None
    else:
        resume.make_dirs(parent)
        for _ in range(10):  # a name collision needs the same second and the same 32 random bits
            exp_name = get_exp_name(cfg.env_name, cfg.seed)
            try:
                run_dir = make_run_dir(parent, exp_name)
                break
            except FileExistsError:
                continue
        else:
            raise RuntimeError(f"could not create a new run directory in {parent}")
    if not cfg.resume:
        resume.created(run_dir)
        resume.lock_run_dir(run_dir)  # held for this process's life: a --resume of it now is refused
    return exp_name, run_dir


def setup_run(
    cfg,
    agent_config: Dict,
    metadata: Dict,
    resume_meta: Optional[Dict] = None,
    history=None,
    sources=None,
    source_histories=None,
):
    """Create (or, with `--resume`, reuse) the run directory, write `flags.json` and start the logger: `(run_dir,
    logger)`. `flags.json` holds `flags`, the resolved `agent` config, its `agent_defaults`, `agent_source` and
    `family_source` (path, sha256: `sources`, by default `resume.run_sources` of the run's agent and family),
    `metadata` (env facts, data records), the histories `--accept_changed_data` and `--accept_changed_<kind>` kept
    (`history`; `source_histories`: `{kind: records}`), `sweep` and `method` (docs/outputs.md)."""
    try:
        exp_name, run_dir = _make_run_dir(cfg)
    except OSError as e:  # a read-only or unwritable --save_dir
        where = os.path.join(cfg.save_dir, cfg.run_group)
        raise ValueError(f"cannot write the run directory in {where} ({e.strerror or e}); check --save_dir.") from None
    # The agent's defaults label a run of an agent the plotting process does not know (plotting.runs.describe).
    spec = agents.get(agent_config["agent_name"])
    record = {"driver": cfg.driver, "flags": cfg.flag_values, "agent": dict(agent_config)}
    record["agent_defaults"] = spec.get_config().to_dict()
    sources = sources or resume.run_sources(spec.agent_class, envs.family(cfg.env_name))
    record.update({f"{kind}_source": source for kind, source in sources.items()})
    record.update(metadata)
    if history:
        record["dataset_history"] = history
    for kind, earlier in (source_histories or {}).items():
        if earlier:
            record[f"{kind}_source_history"] = earlier
    if cfg.sweep_info is not None:
        record["sweep"] = json.loads(cfg.sweep_info)
        if "seed" in record["sweep"]:  # a seed group launched by a sweep: each run records its own seed
            record["sweep"]["seed"] = cfg.seed
    if cfg.method is not None:
        record["method"] = {"name": cfg.method, "sources": cfg.setting_sources}
    if cfg.resume and os.path.isfile(os.path.join(run_dir, "flags.json")):  # a run that moved says from where
        moves = resume.moves(resume.read_record(run_dir), cfg.flag_values)
        if moves:
            record["moves"] = moves
    record.update(provenance(run_dir))  # made_by; a resumed run keeps its earlier parts' speed (log_utils)
    write_json(os.path.join(run_dir, "flags.json"), record)
    run_id = (resume_meta or {}).get("wandb_run_id")
    if run_id and cfg.wandb_mode == "offline":
        logging.warning("wandb offline mode cannot continue run %s; this part of the run gets a new wandb run.", run_id)
        run_id = None
    try:
        wandb_run = setup_wandb(
            cfg.wandb_project, cfg.run_group, exp_name, record, cfg.wandb_mode, run_dir, run_id=run_id
        )
    except Exception as e:  # noqa: BLE001 - wandb raises its own kinds (no login, no network, bad project)
        if not cfg.resume:
            resume.release_run_dir(run_dir)
            shutil.rmtree(run_dir, ignore_errors=True)  # created above for this run only: its name stays free
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ValueError(
            f"--wandb_mode={cfg.wandb_mode}: wandb could not start ({type(e).__name__}: {first}); pass "
            "--wandb_mode=offline or --wandb_mode=disabled to run without it."
        ) from e
    logging.info("Run directory: %s", run_dir)
    return run_dir, Logger(run_dir, wandb_run, resume=resume_meta is not None)


def seed_configs(cfg) -> List:
    """One `RunConfig` per seed of `--num_seeds`: seed `cfg.seed + s`, run name `<run_name>_sd<seed>`.

    With `num_seeds == 1` this is `[cfg]` (the run name is kept as given).
    """
    if cfg.num_seeds == 1:
        return [cfg]
    if cfg.run_name and re.search(r"_sd\d+$", cfg.run_name):
        logging.warning(
            "--run_name=%s already ends in _sd<seed>; with --num_seeds=%d the runs are %s_sd<seed>. To resume one "
            "seed of a group, pass --num_seeds=1 --seed=<its seed> and its directory name.",
            cfg.run_name,
            cfg.num_seeds,
            cfg.run_name,
        )
    configs = []
    for s in range(cfg.num_seeds):
        seed = cfg.seed + s
        name = None if cfg.run_name is None else f"{cfg.run_name}_sd{seed}"
        configs.append(cfg.replace(seed=seed, run_name=name))
    return configs


def load_env_and_data(cfg, name: envs.EnvName):
    """`envs.load` of `name` with `cfg`'s data flags (the family's load, what it hands over checked), a MuJoCo
    failure of the env's creation reported with its fix."""
    try:
        return envs.load(
            name,
            envs.DataOptions(
                dataset_path=cfg.dataset_path,
                dataset_dir=cfg.dataset_dir,
                dataset_proportion=cfg.dataset_proportion,
                sparse=cfg.sparse,
                seed=cfg.seed,
                success_timing=cfg.success_timing,
                dataset_success_timing=cfg.dataset_success_timing,
            ),
        )
    except ValueError as e:  # envs.load reports a family's AttributeError/RuntimeError with its file
        cause = e.__cause__
        if "MUJOCO_GL" not in os.environ or not isinstance(cause, (AttributeError, RuntimeError)):
            raise
        raise ValueError(
            f"creating the environment failed with MUJOCO_GL={os.environ['MUJOCO_GL']} ({type(cause).__name__}: "
            f"{cause}); unset MUJOCO_GL, or install the library it needs (osmesa: libosmesa6, egl: libegl1)."
        ) from cause


def _log_data(env_data) -> str:
    """Log the training files (what a user compares across machines: the data, not only the arithmetic); returns
    how errors name the data."""
    records = [d for d in env_data.metadata.get("datasets", []) if d.get("role", "train") == "train"]
    for d in records[:3]:
        goal = d.get("goal")  # a single-task file's count of the task's goal (envs/common.py `goal_counts`)
        reached = "" if not isinstance(goal, dict) else (
            f"; task {goal.get('task') or 'default'}'s goal in {goal.get('goal_rows')} of {goal.get('rows')} rows, "
            f"{goal.get('goal_entries')} entries into it"
        )  # fmt: skip
        logging.info("Data: %s (%s, %s bytes, sha256 %s)%s", d.get("path"), d.get("source"), d.get("size_bytes"),
                     d.get("sha256"), reached)  # fmt: skip
    if len(records) > 3:
        logging.info("Data: %d more shard(s); every file is recorded in flags.json.", len(records) - 3)
    return f"dataset {records[0]['path']}" if records else "the offline dataset"


def _setup_runs(cfg):
    """`setup_runs` itself: `(runs, seed group record or None)`."""
    with input_errors():
        name = envs.parse(cfg.env_name)
        family = envs.family(name)
        check_sizes(cfg, family)
        configs = seed_configs(cfg)
        records = resume.check_runs(configs) if cfg.resume else [None] * len(configs)
        taken = [resume.run_dir_of(c) for c in configs if c.run_name and os.path.exists(resume.run_dir_of(c))]
        if not cfg.resume and taken:  # before any seed's directory is made: a group is created whole or not at all
            raise ValueError(_taken(cfg.run_name, taken))
        spec = agents.get(cfg.agent["agent_name"])

        env_data = load_env_and_data(cfg, name)
        what = _log_data(env_data)
        try:
            first_dataset = Dataset.create(
                **env_data.train_dataset,
                rng=seeding.numpy_rng(cfg.seed, "dataset"),
                stop_reward_at_mask_zero=cfg.stop_reward_at_mask_zero,
            )
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from e
        check_goal_conditioning(spec, env_data.goal_conditioned, cfg.env_name)
        flag = "--horizon_length" if cfg.horizon_length is not None else "the agent's window length"
        check_dataset_windows(first_dataset, cfg.window_length, what, flag)
        try:  # the agent's own batch source, built here: a window it cannot draw is found before any run starts
            first_windows = agents.window_source(first_dataset, cfg.agent)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
        example = first_dataset.sample(1, idxs=np.zeros(1, dtype=int))
        init_agent, agent_shapes = agent_initializer(spec, cfg.agent, example, seeding.jax_key(cfg.seed, "agent"))
        check_memory(cfg, family, first_dataset, example, agent_shapes)
        check_dataset_fits_env(first_dataset, env_data.env, cfg.env_name, what)
        probe_envs(name, env_data, cfg.seed, first_dataset["observations"].shape[1:])
        if cfg.video_episodes > 0:
            check_rendering(family, cfg.env_name, env_data.eval_env)

        # Per seed: its envs, its dataset generator over the shared rows, its agent.
        env_datas = [env_data] + [family.envs_for_seed(env_data, name, c.seed) for c in configs[1:]]
        datasets = [first_dataset] + [
            Dataset(dict(first_dataset), rng=seeding.numpy_rng(c.seed, "dataset"),
                    stop_reward_at_mask_zero=cfg.stop_reward_at_mask_zero)
            for c in configs[1:]
        ]  # fmt: skip
        agents_ = [init_agent(seeding.jax_key(c.seed, "agent")) for c in configs]
        histories = [
            resume.check_datasets(resume.run_dir_of(c), r, data.metadata.get("datasets", []), cfg.accept_changed_data)
            for c, r, data in zip(configs, records, env_datas, strict=True)
        ]
        sources = resume.run_sources(spec.agent_class, family)
        source_histories = [
            {
                kind: resume.check_source(kind, resume.run_dir_of(c), r, now, getattr(cfg, f"accept_changed_{kind}"))
                for kind, now in sources.items()
            }
            for c, r in zip(configs, records, strict=True)
        ]
        metas = [None] * len(configs)
        if cfg.resume and any(r is not None for r in records):
            metas = resume.group_resume_states(configs, agents_, datasets)

        # Every check passed: the run folders and loggers.
        group = None
        if len(configs) > 1:
            group = {"first_seed": cfg.seed, "num_seeds": cfg.num_seeds, "seeds": [c.seed for c in configs]}
        runs = []
        for c, data, dataset, agent, meta, history, source_history in zip(
            configs, env_datas, datasets, agents_, metas, histories, source_histories, strict=True
        ):
            metadata = dict(data.metadata, **({"seed_group": group} if group else {}))
            run_dir, logger = setup_run(c, agent.config, metadata, meta, history, sources, source_history)
            run = Run(
                cfg=c,
                agent=agent,
                env_data=data,
                train_dataset=dataset,
                windows=first_windows if dataset is first_dataset else agents.window_source(dataset, agent.config),
                run_dir=run_dir,
                logger=logger,
                action_dim=int(example["actions"].shape[-1]),
                chunk_length=spec.chunk_length(agent.config),
                example=example,
                resume_meta=meta,
            )
            if meta is not None:
                restore_offline(run, meta)
            runs.append(run)
    return runs, group


def setup_runs(cfg) -> List[Run]:
    """One `Run` per seed of `--num_seeds` (`seed_configs`): envs and data loaded once and checked, each seed's
    envs, dataset generator, window source and agent from its own seed, states restored with `--resume`, run
    directories written. Every input error is raised as `InputError` before training starts."""
    use_compilation_cache(compilation_cache_dir(cfg.compilation_cache_dir))  # before the first compilation
    try:
        runs, group = _setup_runs(cfg)
    except BaseException:
        # A run refused here (its data, its windows, memory, rendering, the agent) leaves no folder: the ones
        # this process made for it (--resume --start_if_missing makes them before loading) hold only `.lock`.
        resume.discard_unused_run_dirs()
        raise
    resume.forget_created_dirs()
    if group:
        names = [os.path.basename(r.run_dir) for r in runs]
        for run in runs:
            record_path = os.path.join(run.run_dir, "flags.json")
            with open(record_path) as f:
                record = json.load(f)
            record["seed_group"] = dict(group, run_names=names)
            write_json(record_path, record)
    return runs
