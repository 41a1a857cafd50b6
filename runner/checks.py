"""The checks `runner.setup` makes before any run folder exists: the data's windows and shapes, the machine's
memory, rendering; and the agent's program (`agent_initializer`), whose shapes the memory check needs. Each
raises `ValueError` naming the flag or file to change (`runner.cli.InputError` once setup wraps it)."""

import os
from typing import Dict, Optional

import numpy as np
from absl import logging

import agents
import envs
from utils import seeding
from utils.datasets import Dataset


def trajectory_lengths(terminals: np.ndarray) -> np.ndarray:
    """Rows per trajectory from a 0/1 `terminals` column (the last trajectory may be unterminated)."""
    ends = np.flatnonzero(np.asarray(terminals) > 0)
    bounds = np.concatenate([[-1], ends, [len(terminals) - 1] if len(terminals) and not terminals[-1] else []])
    return np.diff(bounds).astype(int)


def check_dataset_windows(
    dataset: Dataset, horizon_length: int, what: str = "the offline dataset", flag: str = "--horizon_length"
) -> bool:
    """`ValueError` when `dataset` cannot yield one window of `horizon_length` rows (`flag` names the setting).

    Logs a warning (and returns False) when every trajectory is shorter than `horizon_length`:
    then every window crosses a trajectory end and every critic target has `valid = 0`.
    """
    if dataset.size < horizon_length:
        raise ValueError(f"{what} has {dataset.size} rows, fewer than {flag}={horizon_length}: no window can be drawn.")
    lengths = trajectory_lengths(dataset["terminals"])
    if len(lengths) and lengths.max() < horizon_length:
        logging.warning(
            "Every trajectory of %s is shorter than %s=%d (longest: %d rows): every critic "
            "target has valid = 0, so the critic never learns.",
            what,
            flag,
            horizon_length,
            lengths.max(),
        )
        return False
    return True


def check_dataset_fits_env(dataset: Dataset, env, env_name: str, what: str = "the offline dataset"):
    """`ValueError` when the dataset's observation or action rows do not have the env's shapes."""
    for field, space in (("observations", env.observation_space), ("actions", env.action_space)):
        got, want = tuple(dataset[field].shape[1:]), tuple(space.shape)
        if got != want:
            raise ValueError(
                f"{what}: its {field} have shape {got} per row, but {env_name} has {want}; the dataset "
                "belongs to another env."
            )


def _is_number(value) -> bool:
    """A bool, int, float or numpy scalar of those (what evaluation averages as success)."""
    if isinstance(value, np.ndarray):
        return value.ndim == 0 and value.dtype.kind in "biuf"
    return isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating))


def _probe(env, what: str, file: str, row_shape: tuple, seed: int) -> None:
    """One `reset(seed=seed)` and one step (zero action) of `env`, checked (`probe_envs`)."""
    space = getattr(getattr(env, "observation_space", None), "shape", None)
    for call in ("reset", "step"):
        try:
            if call == "reset":
                ob, info = env.reset(seed=seed)
            else:
                ob, _, _, _, info = env.step(np.zeros(env.action_space.shape, np.float32))
        except Exception as e:  # noqa: BLE001 - whatever the family's env raises, named with its file
            raise ValueError(f"{file}: the {what}'s {call} raised {type(e).__name__}: {e}") from e
        ob = np.asarray(ob)
        if ob.dtype.kind != "f":
            raise ValueError(f"{file}: the {what}'s {call} returned an observation of dtype {ob.dtype}, not floats.")
        if ob.shape != tuple(row_shape) or ob.shape != space:
            raise ValueError(
                f"{file}: the {what}'s {call} returned an observation of shape {ob.shape}, but its observation_space "
                f"has {space} and the data's rows {tuple(row_shape)}."
            )
    if not isinstance(info, dict) or "success" not in info:
        keys = sorted(info) if isinstance(info, dict) else type(info).__name__
        raise ValueError(
            f"{file}: the {what}'s step returned no info['success'] (info: {keys}); evaluation reads it at every "
            "episode's end: add a number (1 for success, else 0) to every step's info."
        )
    if not _is_number(info["success"]):
        raise ValueError(
            f"{file}: the {what}'s step returned info['success'] = {info['success']!r} "
            f"({type(info['success']).__name__}); it must be a number (bool, int or float)."
        )


def probe_envs(name, env_data, seed: int, observation_shape: tuple) -> None:
    """One reset and one step (zero action) of the training env and of the evaluation env of `name` (an
    `envs.EnvName`), before any run folder exists: `ValueError` naming the family's file (`envs.source_file`) when
    an observation is no float array of the shape of the env's `observation_space` and of the data's rows
    (`observation_shape`), when the step's `info['success']` is missing or no number (bool, int, float, a numpy
    scalar), or when either call raises.

    What the run does afterwards does not change, and no env is built for it (the evaluation env is built now
    instead of at the first evaluation): each env is reset again with the seed it was reset with (the training
    env's `utils.seeding.env_seed(seed, 'env')`, as envs/README.md asks of a family; `eval_env_seed`), and its
    generator is put back as it was (a family that reset with another seed). A run's first step resets the
    training env from that generator, and evaluation resets with each episode's own seed.
    """
    file = envs.source_file(name.family)
    for what, env, reset_seed in (
        ("training env", env_data.env, seeding.env_seed(seed, "env")),
        ("evaluation env", env_data.eval_env, env_data.eval_env_seed),
    ):
        generator = seeding.generator_state(env.unwrapped.np_random)
        _probe(env, what, file, observation_shape, reset_seed)
        env.reset(seed=reset_seed)
        seeding.set_generator_state(env.unwrapped.np_random, generator)


def machine_memory() -> Optional[int]:
    """Bytes of physical memory, or None where the OS cannot tell."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _raise_if_too_big(what: Dict[str, int], flag_hint: str):
    memory = machine_memory()
    need = sum(what.values())
    if memory is not None and need > memory:
        parts = ", ".join(f"{name} {size / 2**30:.1f} GiB" for name, size in what.items() if size)
        raise ValueError(
            f"{flag_hint}: this run needs about {need / 2**30:.1f} GiB ({parts}), more than this machine's "
            f"{memory / 2**30:.1f} GiB of memory."
        )


def check_sizes(cfg, family):
    """Before anything is built: `ValueError` when the envs alone of `--num_seeds` and `--eval_envs` cannot fit
    (`family`: the env's `envs.common.Family`, whose `env_bytes` is one env's memory)."""
    eval_envs = min(cfg.eval_envs, cfg.eval_episodes) if cfg.eval_envs > 1 else 0
    env_bytes = family.env_bytes
    what = {f"{2 * cfg.num_seeds} training and evaluation envs": 2 * cfg.num_seeds * env_bytes}
    what[f"{eval_envs} batched evaluation envs"] = eval_envs * env_bytes
    _raise_if_too_big(what, f"--num_seeds={cfg.num_seeds} --eval_envs={cfg.eval_envs}")


def agent_initializer(spec, agent_config, example: Dict, key):
    """`(init, shapes)`: `init(key) -> agent` is `spec.agent_class.create(key, example observations, example
    actions, agent_config)` as one compiled program, and `shapes` the agent's `jax.ShapeDtypeStruct`s, from one
    trace that every seed's agent reuses. With a warm compilation cache a start loads that program instead of
    compiling each of the initializers' small ops one by one; the values are those of calling `create`."""
    import jax

    goals = {"ex_goals": example["oracle_reps"]} if spec.goal_conditioned and "oracle_reps" in example else {}

    def create(key):
        return spec.agent_class.create(key, example["observations"], example["actions"], agent_config, **goals)

    lowered = jax.jit(create).lower(key)
    return lowered.compile(), lowered.out_info


def check_memory(cfg, family, dataset: Dataset, example: Dict, shapes=None):
    """`ValueError` when the run would not fit in this machine's memory, before its agents and buffers exist:
    per seed the agent (parameters, optimizer state and a gradient; `shapes` from `agent_initializer`, which
    builds them when None), the replay buffer, a batch of `--utd_ratio` x `batch_size` windows and two envs
    (`family.env_bytes` each), plus the evaluation envs."""
    import jax

    if shapes is None:
        spec = agents.get(cfg.agent["agent_name"])
        shapes = agent_initializer(spec, cfg.agent, example, seeding.jax_key(cfg.seed, "agent"))[1]
    agent_bytes = sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree_util.tree_leaves(shapes))
    params = jax.tree_util.tree_leaves(shapes.network.params)
    agent_bytes += sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in params)  # the gradient
    row_bytes = sum(int(np.asarray(dataset[k][0]).nbytes) for k in dataset)
    rows = 0
    if cfg.online_steps > 0:
        rows = max(cfg.buffer_size, dataset.size + 1) if cfg.driver == "main" else cfg.buffer_size
    window = cfg.window_length  # rows per window (SPEC.window_length)
    batch = cfg.agent.get("batch_size", 1) * max(cfg.utd_ratio, 1) * window * row_bytes
    s, env_bytes = cfg.num_seeds, family.env_bytes
    eval_envs = min(cfg.eval_envs, cfg.eval_episodes) if cfg.eval_envs > 1 else 0
    # Each part with the flags that set its size: the error names those of the largest part.
    parts = [
        (f"{s} agent(s)", s * agent_bytes, "the agent's config"),
        (f"{s} replay buffer(s) of {rows} rows", s * rows * row_bytes, f"--buffer_size={cfg.buffer_size}"),
        (
            f"{s} batch(es)",
            s * batch,
            f"--agent.batch_size={cfg.agent.get('batch_size')} --utd_ratio={cfg.utd_ratio} "
            + (f"--horizon_length={window}" if cfg.horizon_length is not None else f"(window of {window} rows)"),
        ),
        (f"{2 * s} envs", 2 * s * env_bytes, ""),
        (f"{eval_envs} evaluation envs", eval_envs * env_bytes, f"--eval_envs={cfg.eval_envs}"),
    ]
    largest = max(parts, key=lambda part: part[1])[2]
    hint = " ".join(([f"--num_seeds={s}"] if s > 1 else []) + ([largest] if largest else []))
    _raise_if_too_big({name: size for name, size, _ in parts}, hint or f"--num_seeds={s}")


def check_rendering(family, env_name: str, env) -> None:
    """`ValueError` unless `env` can render a frame (needed for `--video_episodes`): its `family`'s envs render
    (`Family.renders`; robomimic's are built without a renderer) and MuJoCo has a headless OpenGL backend."""
    if not family.renders:
        raise ValueError(
            f"--video_episodes: {family.name} envs ({env_name}) are built without a renderer; pass --video_episodes=0."
        )
    try:
        frame = env.render()
    except Exception as e:  # noqa: BLE001 - mujoco.FatalError, GLFW and PyOpenGL errors alike
        raise ValueError(
            f"--video_episodes: rendering failed ({type(e).__name__}: {e}). Set MUJOCO_GL=egl (GPU) or "
            "MUJOCO_GL=osmesa (CPU, needs libosmesa) before starting, or pass --video_episodes=0."
        ) from e
    if frame is None:
        raise ValueError(
            "--video_episodes: the environment returned no frame (no render mode); pass --video_episodes=0."
        )
