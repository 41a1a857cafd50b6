"""Generate OGBench manipulation datasets locally with the scripted oracles shipped in `ogbench`.

The official files live on a host this machine cannot reach, so we rebuild them with OGBench's
published procedure ('play' datasets; see docs/datasets.md, and OGBench's
`data_gen_scripts/generate_manipspace.py` / `commands.sh`):

- env: the goal-conditioned `<domain>-v0` made with `terminate_at_goal=False,
  mode='data_collection', max_episode_steps=1001`; every episode is therefore 1001 rows, and
  loading keeps 1000 transitions of it (the last state has no action with a next state).
- play: plan oracles (`ogbench.manipspace.oracles.plan`) with action noise 0.1 and noise smoothing
  0.5. noisy: Markov oracles (`...oracles.markov`, min_norm 0.4) with per-episode Gaussian action
  noise xi ~ U(0, 0.1), scaled (1, 1, 1, 3, 10) per action dimension, and random actions with
  probability 0.1 (cube, scene) or 0.2 (puzzle).
- whenever the oracle finishes its subtask, `env.unwrapped.set_new_target(p_stack=...)` draws the
  next one; p_stack per episode: 0 (single), U(0, 0.25) (double), U(0.05, 0.35) (triple),
  U(0.1, 0.5) (quadruple), 0.5 (scene; puzzle ignores it).
- scene episodes whose cube leaves the table area (y >= 0.29, or y <= -0.3 outside the drawer's
  height band 0.06..0.08) are discarded and redrawn.
- each row stores the observation s_t, the action a_t, `terminals` (True on the episode's last
  row) and the simulator state of s_t: `qpos`, `qvel` (float32) and, for scene and puzzle,
  `button_states` (int64) -- what `ogbench.relabel_utils.relabel_dataset` needs. No reward, success
  or task is stored: loading relabels each transition for the run's task and success timing
  (`envs.ogbench_utils`), so one file serves every task and both timings.
- `<save_path>` gets `num_episodes` episodes, `<save_path stem>-val.npz` a further 10% (at least 1;
  training does not need it).

Provenance: each file also holds the key `generator_metadata`, a JSON string (0-d unicode array, readable
with `allow_pickle=False`) with the settings that made it: `generator_version` (`GENERATOR_VERSION`), `seed`,
`num_episodes` (of this file), `num_train_episodes`, `num_val_episodes`, `split`, `dataset_name`,
`dataset_type`, `domain`, `max_episode_steps`, the noise settings, and the `ogbench`, `mujoco` and `numpy`
versions. Loaders ignore it; `envs.provenance` reads it into a run's `flags.json`.

Determinism: one `--seed` fixes everything. It is split (SeedSequence) into the env's seed (first
reset), our `np.random.Generator` (p_stack, noise level, random actions, action noise), and a seed
for numpy's *global* legacy RNG, which ogbench's oracles draw from internally; that global state is
saved before and restored after generation. Files are written with fixed zip timestamps, so the same
seed on the same software gives byte-identical files.

Command line (run from the repository root):

    python -m envs.generate_dataset --env_name=cube-single-play-v0 --num_episodes=100 --seed=0 \\
        --save_path=~/.ogbench/data/cube-single-play-v0.npz [--dataset_type=play|noisy] \\
        [--max_episode_steps=1001]

Cost, measured here (ogbench 1.2.2, mujoco 4.0.0, one process): about 250-310 env steps per second
of one CPU core, i.e. ~3.5 s per 1001-step episode. `--num_episodes=100` (110 episodes with val):
438 s of CPU time, 6-7.5 min on an idle core (13.6 min wall while the 2 cores were shared).
Published sizes (1000 episodes + 100 val) take ~1 h per dataset; cube-quadruple (5000) ~5 h.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import time
import zipfile

import gymnasium
import numpy as np
from tqdm import tqdm

from envs.ogbench_utils import (
    DATASET_TYPES,
    PUBLISHED_NUM_EPISODES,
    OGBenchName,
    default_dataset_path,
    resolve_dataset_name,
    val_path_for,
)
from envs.provenance import GENERATOR_METADATA_KEY, encode_generator_metadata

# Bump when a seed would no longer give the same draws (a change in the procedure or its defaults).
GENERATOR_VERSION = 1


def _p_stack(domain: str, rng: np.random.Generator) -> float:
    """Per-episode probability that a new cube target is on top of another cube (published values)."""
    if domain == "cube-single":
        return 0.0
    low_high = {"cube-double": (0.0, 0.25), "cube-triple": (0.05, 0.35), "cube-quadruple": (0.1, 0.5)}
    if domain in low_high:
        return float(rng.uniform(*low_high[domain]))
    return 0.5  # scene (puzzle ignores it)


def _make_oracles(env, name: OGBenchName, noise: float, noise_smoothing: float, min_norm: float) -> dict:
    """Oracles keyed by the env's `info['privileged/target_task']`."""
    if name.dataset_type == "play":
        from ogbench.manipspace.oracles.plan.button_plan import ButtonPlanOracle
        from ogbench.manipspace.oracles.plan.cube_plan import CubePlanOracle
        from ogbench.manipspace.oracles.plan.drawer_plan import DrawerPlanOracle
        from ogbench.manipspace.oracles.plan.window_plan import WindowPlanOracle

        kw = dict(env=env, noise=noise, noise_smoothing=noise_smoothing)
        if name.domain.startswith("cube"):
            return {"cube": CubePlanOracle(**kw)}
        if name.domain == "scene":
            return {
                "cube": CubePlanOracle(**kw),
                "button": ButtonPlanOracle(**kw),
                "drawer": DrawerPlanOracle(**kw),
                "window": WindowPlanOracle(**kw),
            }
        return {"button": ButtonPlanOracle(gripper_always_closed=True, **kw)}

    from ogbench.manipspace.oracles.markov.button_markov import ButtonMarkovOracle
    from ogbench.manipspace.oracles.markov.cube_markov import CubeMarkovOracle
    from ogbench.manipspace.oracles.markov.drawer_markov import DrawerMarkovOracle
    from ogbench.manipspace.oracles.markov.window_markov import WindowMarkovOracle

    kw = dict(env=env, min_norm=min_norm)
    if name.domain.startswith("cube"):
        return {"cube": CubeMarkovOracle(**kw)}
    if name.domain == "scene":
        return {
            "cube": CubeMarkovOracle(max_step=100, **kw),
            "button": ButtonMarkovOracle(**kw),
            "drawer": DrawerMarkovOracle(**kw),
            "window": WindowMarkovOracle(**kw),
        }
    return {"button": ButtonMarkovOracle(gripper_always_closed=True, **kw)}


def _scene_cube_stays_on_table(qpos: np.ndarray) -> bool:
    """False if the scene cube (qpos[14:17]) went too far right, or too far left outside the drawer."""
    y, z = qpos[:, 15], qpos[:, 16]
    too_far_right = y >= 0.29
    left_outside_drawer = (y <= -0.3) & ((z < 0.06) | (z > 0.08))
    return not np.any(too_far_right | left_outside_drawer)


@contextlib.contextmanager
def _seeded_global_numpy(seed: int):
    """Seed numpy's global RNG (used inside ogbench's oracles) and restore the caller's state after."""
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)


def _collect_episode(env, oracles, name: OGBenchName, rng, p_random_action: float, noise: float) -> dict:
    """Roll out one episode of `max_episode_steps` rows; returns lists per stored key."""
    p_stack = _p_stack(name.domain, rng)
    xi = rng.uniform(0.0, noise) if name.dataset_type == "noisy" else 0.0
    noise_scale = xi * np.array([1.0, 1.0, 1.0, 3.0, 10.0])

    ob, info = env.reset()
    oracle = oracles[info["privileged/target_task"]]
    oracle.reset(ob, info)
    rows = {k: [] for k in ("observations", "actions", "terminals", "qpos", "qvel", "button_states")}
    done = False
    while not done:
        if p_random_action > 0 and rng.uniform() < p_random_action:
            action = rng.uniform(-1.0, 1.0, size=5)
        else:
            action = np.asarray(oracle.select_action(ob, info), dtype=np.float64)
            if xi > 0:
                action = action + rng.normal(size=5) * noise_scale
        action = np.clip(action, -1.0, 1.0)
        next_ob, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated

        if oracle.done:  # subtask finished: draw the next target and hand it to the matching oracle
            target_ob, target_info = env.unwrapped.set_new_target(p_stack=p_stack)
            oracle = oracles[target_info["privileged/target_task"]]
            oracle.reset(target_ob, target_info)

        rows["observations"].append(ob)
        rows["actions"].append(action)
        rows["terminals"].append(done)
        rows["qpos"].append(info["prev_qpos"])  # state of s_t = the state `ob` was computed from
        rows["qvel"].append(info["prev_qvel"])
        if name.has_button_states:
            rows["button_states"].append(info["prev_button_states"])
        ob = next_ob
    if not name.has_button_states:
        del rows["button_states"]
    return rows


_DTYPES = {"terminals": bool, "button_states": np.int64}  # everything else float32 (OGBench's dtypes)


def _stack(episodes: list[dict]) -> dict[str, np.ndarray]:
    return {
        k: np.asarray([row for ep in episodes for row in ep[k]], dtype=_DTYPES.get(k, np.float32)) for k in episodes[0]
    }


def generator_metadata(name: OGBenchName, split: str, num_episodes: int, **settings) -> dict:
    """The settings stored in a file under `GENERATOR_METADATA_KEY` (no path, no time: same seed, same bytes)."""
    versions = {f"{p}_version": importlib.metadata.version(p) for p in ("ogbench", "mujoco", "numpy")}
    return {
        "generator": "envs.generate_dataset",
        "generator_version": GENERATOR_VERSION,
        "dataset_name": name.dataset_name,
        "domain": name.domain,
        "dataset_type": name.dataset_type,
        "split": split,
        "num_episodes": int(num_episodes),
        **settings,
        **versions,
    }


def write_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Write an `np.load`-compatible compressed npz atomically, with fixed timestamps (reproducible bytes)."""
    tmp = f"{path}.tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
        for key in sorted(arrays):
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with zf.open(info, "w", force_zip64=True) as f:
                array = np.asarray(arrays[key])  # (np.ascontiguousarray would turn a 0-d array into 1-d)
                array = array if array.flags.c_contiguous else np.ascontiguousarray(array)
                np.lib.format.write_array(f, array, allow_pickle=False)
    os.replace(tmp, path)


def generate_dataset(
    env_name: str,
    num_episodes: int | None = None,
    seed: int = 0,
    save_path: str | None = None,
    dataset_type: str | None = None,
    max_episode_steps: int = 1001,
    num_val_episodes: int | None = None,
    noise: float = 0.1,
    noise_smoothing: float = 0.5,
    min_norm: float = 0.4,
    p_random_action: float | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> dict:
    """Generate `<save_path>` and `<save_path stem>-val.npz` with OGBench's oracles (module docstring).

    Args:
        env_name: dataset name ('cube-single-play-v0'), training env name
            ('cube-single-play-singletask-task1-v0') or `<domain>-v0` with `dataset_type`.
        num_episodes: training episodes; default the published count (1000/3000/5000).
        seed: the only source of randomness (see module docstring).
        save_path: training file (must end in .npz); default `~/.ogbench/data/<dataset>.npz`.
        dataset_type: 'play' or 'noisy'; default from the name, else 'play'.
        max_episode_steps: rows per episode (1001 published; tests use ~50).
        num_val_episodes: default max(1, num_episodes // 10).
        noise, noise_smoothing: plan-oracle action noise and its smoothing (play); `noise` is also the
            upper bound of the per-episode Gaussian noise level (noisy).
        min_norm: Markov-oracle minimum action norm (noisy).
        p_random_action: probability of a uniform random action; default 0 (play), 0.1 (noisy cube,
            scene), 0.2 (noisy puzzle).
        overwrite: replace existing files.
        progress: show a tqdm bar over episodes.

    Returns:
        {'train_path', 'val_path', 'num_train_episodes', 'num_val_episodes', 'num_train_rows',
         'num_val_rows', 'num_redrawn', 'seconds'}.

    Raises:
        ValueError: unknown name/type, bad counts or a save path not ending in .npz.
        FileExistsError: a target file exists and `overwrite` is False.
        RuntimeError: a scene episode failed the table check 100 times in a row.
    """
    name = resolve_dataset_name(env_name, dataset_type)
    num_episodes = PUBLISHED_NUM_EPISODES[name.domain] if num_episodes is None else num_episodes
    num_val_episodes = max(1, num_episodes // 10) if num_val_episodes is None else num_val_episodes
    if num_episodes < 1 or num_val_episodes < 1 or max_episode_steps < 2:
        raise ValueError(
            f"Need num_episodes >= 1, num_val_episodes >= 1, max_episode_steps >= 2; got "
            f"{num_episodes}, {num_val_episodes}, {max_episode_steps}."
        )
    if p_random_action is None:
        noisy_p = 0.2 if name.domain.startswith("puzzle") else 0.1
        p_random_action = 0.0 if name.dataset_type == "play" else noisy_p
    train_path = os.path.expanduser(save_path or default_dataset_path(name.dataset_name))
    if not train_path.endswith(".npz"):
        raise ValueError(f"save_path must end in .npz, got {train_path!r}.")
    val_path = val_path_for(train_path)
    for p in (train_path, val_path):
        if os.path.exists(p) and not overwrite:
            raise FileExistsError(f"{p} exists; pass overwrite=True (--overwrite) to replace it.")

    env_seed, oracle_seed, rng_seed = np.random.SeedSequence(seed).spawn(3)
    rng = np.random.default_rng(rng_seed)
    env = gymnasium.make(
        name.collection_env_id,
        terminate_at_goal=False,
        mode="data_collection",
        max_episode_steps=max_episode_steps,
    )
    oracles = _make_oracles(env, name, noise, noise_smoothing, min_norm)

    start = time.perf_counter()
    episodes, num_redrawn = [], 0
    with _seeded_global_numpy(int(oracle_seed.generate_state(1)[0])):
        env.reset(seed=int(env_seed.generate_state(1)[0]))  # seeds env.np_random; later resets continue it
        for _ in tqdm(range(num_episodes + num_val_episodes), desc=name.dataset_name, disable=not progress):
            for _attempt in range(100):
                rows = _collect_episode(env, oracles, name, rng, p_random_action, noise)
                if name.domain != "scene" or _scene_cube_stays_on_table(np.asarray(rows["qpos"])):
                    break
                num_redrawn += 1
            else:
                raise RuntimeError("100 scene episodes in a row moved the cube off the table; giving up.")
            episodes.append(rows)
    env.close()

    os.makedirs(os.path.dirname(os.path.abspath(train_path)), exist_ok=True)
    train, val = _stack(episodes[:num_episodes]), _stack(episodes[num_episodes:])
    settings = dict(
        seed=int(seed),
        num_train_episodes=int(num_episodes),
        num_val_episodes=int(num_val_episodes),
        max_episode_steps=int(max_episode_steps),
        noise=float(noise),
        noise_smoothing=float(noise_smoothing),
        min_norm=float(min_norm),
        p_random_action=float(p_random_action),
    )
    for arrays, split, count in ((train, "train", num_episodes), (val, "val", num_val_episodes)):
        arrays[GENERATOR_METADATA_KEY] = encode_generator_metadata(generator_metadata(name, split, count, **settings))
    write_npz(val_path, val)
    write_npz(train_path, train)
    return {
        "train_path": train_path,
        "val_path": val_path,
        "num_train_episodes": num_episodes,
        "num_val_episodes": num_val_episodes,
        "num_train_rows": len(train["terminals"]),
        "num_val_rows": len(val["terminals"]),
        "num_redrawn": num_redrawn,
        "seconds": time.perf_counter() - start,
    }


def main(_):
    from absl import flags

    f = flags.FLAGS
    summary = generate_dataset(
        f.env_name,
        num_episodes=f.num_episodes,
        seed=f.seed,
        save_path=f.save_path,
        dataset_type=f.dataset_type,
        max_episode_steps=f.max_episode_steps,
        num_val_episodes=f.num_val_episodes,
        noise=f.noise,
        noise_smoothing=f.noise_smoothing,
        min_norm=f.min_norm,
        p_random_action=f.p_random_action,
        overwrite=f.overwrite,
    )
    s = summary
    print(
        f"Wrote {s['train_path']} ({s['num_train_episodes']} episodes, {s['num_train_rows']} rows) and "
        f"{s['val_path']} ({s['num_val_episodes']} episodes, {s['num_val_rows']} rows) in "
        f"{s['seconds']:.1f} s; {s['num_redrawn']} scene episode(s) redrawn."
    )


def _define_flags():
    from absl import flags

    flags.DEFINE_string("env_name", None, "Dataset name, e.g. cube-single-play-v0 (or a training env name).")
    flags.DEFINE_integer("num_episodes", None, "Training episodes; default: the published count.")
    flags.DEFINE_integer("num_val_episodes", None, "Validation episodes; default max(1, num_episodes // 10).")
    flags.DEFINE_integer("seed", 0, "Seed of everything random in the generation.")
    flags.DEFINE_string("save_path", None, "Training .npz file; default ~/.ogbench/data/<dataset>.npz.")
    flags.DEFINE_enum("dataset_type", None, list(DATASET_TYPES), "play: plan oracles; noisy: Markov oracles.")
    flags.DEFINE_integer("max_episode_steps", 1001, "Rows per episode (published: 1001 = 1000 transitions).")
    flags.DEFINE_float("noise", 0.1, "Plan-oracle action noise (play); max per-episode noise level (noisy).")
    flags.DEFINE_float("noise_smoothing", 0.5, "Gaussian smoothing (in steps) of the plan-oracle noise.")
    flags.DEFINE_float("min_norm", 0.4, "Markov-oracle minimum action norm (noisy).")
    flags.DEFINE_float("p_random_action", None, "Random-action probability; default 0 play, 0.1/0.2 noisy.")
    flags.DEFINE_bool("overwrite", False, "Replace existing output files.")
    flags.mark_flag_as_required("env_name")


if __name__ == "__main__":
    from absl import app

    _define_flags()
    app.run(main)
