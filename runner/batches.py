"""Batches of windows drawn on the host: `h`-step windows (docs/batch_contract.md) from the offline
data, the replay buffer, or both mixed (main_online.py)."""

from typing import Dict

import jax
import numpy as np


def sample_windows(source, agent_config, batch_size: int) -> Dict:
    """`batch_size` windows of `horizon_length` rows, discounted with the agent's `discount`.

    The one place the drivers draw batches: the chunk contract (`h`, `gamma`) is read from the
    agent config, so the sampler and the critic's `gamma^h` can never disagree.
    """
    return source.sample_sequence(
        batch_size, sequence_length=agent_config["horizon_length"], discount=agent_config["discount"]
    )


def stack_for_utd(batch: Dict, utd_ratio: int) -> Dict:
    """Reshape a batch of `utd_ratio * B` rows to `(utd_ratio, B, ...)` for `batch_update`."""
    return jax.tree_util.tree_map(lambda x: x.reshape((utd_ratio, -1) + x.shape[1:]), batch)


def mixed_batch_sizes(batch_size: int, offline_ratio: float):
    """`(n_offline, n_online)` with `n_offline = floor(offline_ratio * batch_size)`.

    The two always add up to `batch_size` (odd sizes too: 255 at ratio 0.5 -> 127 + 128).
    Raises `ValueError` when `offline_ratio` is outside [0, 1].
    """
    if not 0.0 <= offline_ratio <= 1.0:
        raise ValueError(f"--offline_ratio={offline_ratio} must be in [0, 1].")
    # Difference from the reference: it drew batch_size // 2 rows from each source, one row short
    # for odd batch sizes.
    n_offline = int(np.floor(offline_ratio * batch_size + 1e-9))
    return n_offline, batch_size - n_offline


def sample_mixed_batch(offline_dataset, replay_buffer, agent_config, utd_ratio: int, offline_ratio: float) -> Dict:
    """`(utd_ratio, batch_size, ...)` windows; in every UTD slice the first `n_offline` rows come
    from `offline_dataset` and the other `n_online` from `replay_buffer` (RLPD's symmetric
    sampling at `offline_ratio=0.5`; see `mixed_batch_sizes`). `batch_size`,
    `horizon_length` and `discount` are read from `agent_config`.
    """
    n_offline, n_online = mixed_batch_sizes(agent_config["batch_size"], offline_ratio)
    parts = []
    for source, n in ((offline_dataset, n_offline), (replay_buffer, n_online)):
        if n > 0:
            parts.append(stack_for_utd(sample_windows(source, agent_config, n * utd_ratio), utd_ratio))  # (U, n, ..)
    if len(parts) == 1:
        return parts[0]
    return jax.tree_util.tree_map(lambda a, b: np.concatenate([a, b], axis=1), *parts)  # (U, B, ...)
