"""Every random stream of a run, derived from the one `--seed` by one documented split.

A run has one seed `s` in `[0, 2**32)` and these named streams (the number is the stream id):

    id  stream          kind              used by
    0   agent           JAX key           network initialisation and the agent's update randomness
    1   dataset         numpy Generator   offline window sampler (every shard of the dataset too)
    2   replay_buffer   numpy Generator   online replay-buffer window sampler
    3   collector       JAX key           the policy's noise while collecting online data
    4   env             numpy seed        resets of the training environment
    5   eval_env        numpy seed        the evaluation environment's first reset at start-up
    6   evaluation      JAX key + seeds   each evaluation: one reset seed and one policy key stream
                                          (`fold_in(key, episode)`) per episode
    7   device_sampler  JAX key           offline windows drawn on the device (`utils.device_sampler`):
                                          offline step `t` draws its start rows with `fold_in(key, t)`

JAX streams are `fold_in(PRNGKey(s), id)` (the evaluation and the device sampler at step `t` fold in `t` once
more), numpy streams `SeedSequence(s, spawn_key=(id,))` (`(6, t)` for the evaluation at `t`): no two (seed,
stream, step) share a generator, and none is seeded from `seed + k` arithmetic (docs/outputs.md, section 8).
"""

from typing import Dict, List, Tuple

import jax
import numpy as np

SEED_LIMIT = 2**32
STREAMS = ("agent", "dataset", "replay_buffer", "collector", "env", "eval_env", "evaluation", "device_sampler")


def check_seed(seed) -> int:
    """`seed` as an int; `ValueError` naming `--seed` unless it is an int in `[0, 2**32)`."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < SEED_LIMIT:
        raise ValueError(
            f"--seed={seed!r} must be an int in [0, 2**32) = [0, {SEED_LIMIT - 1}]: seeds that differ by a "
            "multiple of 2**32 would build the same networks and random streams."
        )
    return int(seed)


def _stream_id(stream: str) -> int:
    if stream not in STREAMS:
        raise ValueError(f"Unknown random stream {stream!r}; streams are {STREAMS}.")
    return STREAMS.index(stream)


def jax_key(seed: int, stream: str) -> jax.Array:
    """The JAX key of `stream`: `fold_in(PRNGKey(seed), stream id)`."""
    return jax.random.fold_in(jax.random.PRNGKey(check_seed(seed)), _stream_id(stream))


def seed_sequence(seed: int, stream: str, *extra: int) -> np.random.SeedSequence:
    """`SeedSequence(seed, spawn_key=(stream id, *extra))`."""
    return np.random.SeedSequence(check_seed(seed), spawn_key=(_stream_id(stream), *(int(e) for e in extra)))


def numpy_rng(seed: int, stream: str) -> np.random.Generator:
    """The numpy generator of `stream` (`dataset`, `replay_buffer`)."""
    return np.random.default_rng(seed_sequence(seed, stream))


def env_seed(seed: int, stream: str) -> int:
    """One 32-bit reset seed for an environment stream (`env`, `eval_env`)."""
    return int(seed_sequence(seed, stream).generate_state(1)[0])


def evaluation_streams(seed: int, step: int, num_episodes: int) -> Tuple[jax.Array, List[int]]:
    """The evaluation at `step`: its policy key and one env reset seed per episode.

    Returns:
        `(key, reset_seeds)`: `fold_in(fold_in(PRNGKey(seed), 6), step)` and `num_episodes`
        32-bit seeds from `SeedSequence(seed, spawn_key=(6, step))`.
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}.")
    key = jax.random.fold_in(jax_key(seed, "evaluation"), step)
    reset_seeds = seed_sequence(seed, "evaluation", step).generate_state(max(num_episodes, 1))[:num_episodes]
    return key, [int(s) for s in reset_seeds]


# ---- saving streams in run states (JSON, no pickle) ----


def generator_state(rng: np.random.Generator) -> Dict:
    """The JSON-able state of a numpy `Generator` (its bit generator's `state` dict)."""
    return rng.bit_generator.state


def set_generator_state(rng: np.random.Generator, state: Dict):
    rng.bit_generator.state = state


def key_to_list(key) -> List[int]:
    return np.asarray(jax.device_get(key)).tolist()


def key_from_list(values) -> jax.Array:
    return jax.numpy.asarray(np.asarray(values, dtype=np.uint32))
