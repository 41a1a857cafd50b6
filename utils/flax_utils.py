"""Flax helpers shared by the agents: module dictionary, train state, target update, scan, checkpoints.

Gradient routing (read this before writing a loss): all of an agent's networks live in one `ModuleDict` with
one parameter tree and one optimizer. `network.select('critic')(obs, actions, params=grad_params)` uses the
parameters being differentiated and passes gradient to them; the same call without `params=` uses the stored
`network.params`, constants inside `jax.grad`: exactly zero gradient. So the TD target's `target_critic`, the
distillation target and the critic inside the actor's Q term are called without `params=`
(tests/test_flax_utils.py and the agent tests check the zeros).
"""

import functools
import os
from typing import Any, Callable, Dict, Optional

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import serialization

from utils.files import atomic_write

nonpytree_field = lambda: flax.struct.field(pytree_node=False)  # noqa: E731 - static config fields


class ModuleDict(nn.Module):
    """Named modules sharing one parameter tree (`params['modules_<name>']`): `init` calls each once with
    `{name: example args}`, `apply(..., name=NAME)` calls one."""

    modules: Dict[str, nn.Module]

    @nn.compact
    def __call__(self, *args, name=None, **kwargs):
        if name is None:
            if kwargs.keys() != self.modules.keys():
                raise ValueError(
                    f"ModuleDict init needs example inputs for exactly {sorted(self.modules)}, got {sorted(kwargs)}."
                )
            out = {}
            for key, value in kwargs.items():
                inputs = value if isinstance(value, (tuple, list)) else (value,)
                out[key] = self.modules[key](*inputs)
            return out
        return self.modules[name](*args, **kwargs)


TARGET_PREFIX = "modules_target_"


def split_targets(params):
    """`(trainable, targets)`: the top-level entries of `params` without and with `modules_target_`."""
    trainable = {k: v for k, v in params.items() if not k.startswith(TARGET_PREFIX)}
    targets = {k: v for k, v in params.items() if k.startswith(TARGET_PREFIX)}
    return trainable, targets


class TrainState(flax.struct.PyTreeNode):
    """Parameters, optimizer state and step count of a `ModuleDict` (immutable); `state(*args, params=None,
    name=NAME)` applies module `NAME` with `params` (gradient flows) or the stored ones (none). Target networks
    (`modules_target_<name>`) are outside the optimizer and move only by `polyak_update` (as RLPD's).
    """

    step: int
    apply_fn: Callable = nonpytree_field()
    model_def: Any = nonpytree_field()
    params: Any
    tx: Any = nonpytree_field()
    opt_state: Any

    @classmethod
    def create(cls, model_def, params, tx=None, **kwargs):
        opt_state = tx.init(split_targets(params)[0]) if tx is not None else None
        return cls(
            # An int32 device array, as a run state restores it: a Python int is weakly typed, so a fresh run's
            # programs would differ from a resumed run's, and the first update would copy it in implicitly.
            step=jnp.asarray(1, jnp.int32),
            apply_fn=model_def.apply,
            model_def=model_def,
            params=params,
            tx=tx,
            opt_state=opt_state,
            **kwargs,
        )

    def with_params(self, params):
        """This state with `params` and a fresh optimizer state (step count kept)."""
        return self.replace(params=params, opt_state=self.tx.init(split_targets(params)[0]))

    def __call__(self, *args, params=None, **kwargs):
        if params is None:
            params = self.params
        return self.apply_fn({"params": params}, *args, **kwargs)

    def select(self, name):
        """The call of module `name`: `state.select('critic')(obs, actions, params=...)`."""
        return lambda *args, **kwargs: self(*args, name=name, **kwargs)

    def apply_gradients(self, grads):
        """One optimizer step with `grads` over the trainable (non-target) parameters."""
        trainable, targets = split_targets(self.params)
        updates, new_opt_state = self.tx.update(grads, self.opt_state, trainable)
        new_params = {**optax.apply_updates(trainable, updates), **targets}
        return self.replace(step=self.step + 1, params=new_params, opt_state=new_opt_state)

    def apply_loss_fn(self, loss_fn):
        """One optimizer step on `loss_fn(params) -> (loss, info)` over the non-target parameters: `(state,
        info)`, info plus `grad/norm` (global L2), `grad/max`, `grad/min` over every parameter, the targets'
        zeros included (as the reference logs them)."""
        grads, info = jax.grad(loss_fn, has_aux=True)(self.params)
        # Per-leaf reductions, as the reference: a concatenated copy of the gradient costs more memory traffic.
        leaves = jax.tree_util.tree_leaves(grads)
        info = dict(info)
        info["grad/norm"] = jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in leaves))
        info["grad/max"] = jnp.max(jnp.stack([jnp.max(g) for g in leaves]))
        info["grad/min"] = jnp.min(jnp.stack([jnp.min(g) for g in leaves]))
        return self.apply_gradients(grads=split_targets(grads)[0]), info


def polyak_update(source_params, target_params, tau: float):
    """`tau * source + (1 - tau) * target`, leafwise (a new tree)."""
    return jax.tree_util.tree_map(lambda s, t: tau * s + (1.0 - tau) * t, source_params, target_params)


def target_update(network, before, name: str, tau: float):
    """`network` with `modules_target_<name>` moved toward `modules_<name>` as it was in `before`, the state
    before this step's gradient update (as FQL and the Q-chunking reference; RLPD uses the updated one)."""
    new = polyak_update(before.params[f"modules_{name}"], before.params[f"{TARGET_PREFIX}{name}"], tau)
    return network.replace(params={**network.params, f"{TARGET_PREFIX}{name}": new})


def select_keys(batch, keys):
    """`{k: batch[k] for k in keys}` (only what the losses read crosses the jit boundary); `KeyError` naming
    the missing ones."""
    missing = [k for k in keys if k not in batch]
    if missing:
        raise KeyError(f"batch lacks {missing}; the update reads {tuple(keys)}.")
    return {k: batch[k] for k in keys}


@functools.partial(jax.jit, static_argnums=0, static_argnames="reduce")
def scan_updates(update_fn, carry, xs, reduce: str = "mean"):
    """`update_fn(carry, x) -> (carry, info)` on each entry along the leading axis of `xs`, one jitted `lax.scan`.

    The scan over updates: `batch_update` (`(U, B, ...)` UTD batches, `update_fn` the agent's `_update`) and
    device windows (`utils.device_sampler.offline_updates`, whose carry holds the sampler and `xs` the step
    numbers); main.py's dispatches use `loop_updates` (any number of steps, one program).
    Returns `(carry, info)`, each info entry the mean over the steps (`reduce="mean"`, the reference's
    `batch_update`) or the last step's (`reduce="last"`: what a one-step loop logs at that step).
    """
    carry, infos = jax.lax.scan(update_fn, carry, xs)
    return carry, jax.tree_util.tree_map(jnp.mean if reduce == "mean" else (lambda x: x[-1]), infos)


def loop_updates(step_fn, carry, num_steps, max_steps: int):
    """`step_fn(carry, i) -> (carry, info)` for `i = 0 .. num_steps - 1` with `num_steps` traced (an int32 array in
    `1..max_steps`): one compiled program for any number of steps. Returns `(carry, info)`, the last step's info.

    One `lax.scan` of `max_steps` steps; a step at `i >= num_steps` is computed and discarded by a select (so a
    short dispatch costs a full one). Not a loop of `num_steps` iterations: with jax 0.6 on CPU, such a loop with
    random numbers in its body runs no iteration when its program is read back from the persistent compilation
    cache. Not a `lax.cond` per step either: with it, k = 100 steps of tiny networks ran at 0.7x a bare scan on
    CPU (docs/benchmarks.md section 11), and on a GPU each branch reads its predicate back to the host.
    """
    _, shapes = jax.eval_shape(step_fn, carry, jax.ShapeDtypeStruct((), jnp.int32))
    info = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    count = jnp.asarray(num_steps, jnp.int32)

    def body(state, i):
        new = step_fn(state[0], i)
        return jax.tree_util.tree_map(lambda n, o: jnp.where(i < count, n, o), new, state), None

    (carry, info), _ = jax.lax.scan(body, (carry, info), jnp.arange(max_steps, dtype=jnp.int32))
    return carry, info


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, corrupt or does not fit the agent."""


def save_agent(agent, path: str, metadata: Optional[dict] = None) -> str:
    """Write `agent` (any Flax pytree) and `metadata` (plain values) to `path` as flax msgpack (no pickle),
    atomically (`utils.files.atomic_write`); returns `path`."""
    path = os.path.abspath(os.path.expanduser(path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    payload = {"agent": serialization.to_state_dict(jax.device_get(agent)), "metadata": metadata or {}}
    atomic_write(path, serialization.msgpack_serialize(payload))
    return path


def load_checkpoint_metadata(path: str) -> dict:
    """The `metadata` dict stored by `save_agent`. Raises `CheckpointError`."""
    return _read_payload(path).get("metadata", {})


def restore_agent(agent, path: str):
    """`agent` (a template of the same structure, e.g. a fresh agent of the same config) with every leaf read
    from `path`; `CheckpointError` naming the file when it is missing, truncated, corrupt or of another
    structure or shapes."""
    payload = _read_payload(path)
    if "agent" not in payload:
        raise CheckpointError(f"Checkpoint {path} has no 'agent' entry; it was not written by save_agent.")
    try:
        restored = serialization.from_state_dict(agent, payload["agent"])
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"Checkpoint {path} does not match this agent's structure: {e}") from e
    # jnp.shape, not .shape: a leaf may be a Python or numpy scalar (a checkpoint written before TrainState's
    # step was an array holds an int); restoring it into a freshly created template must work.
    want = jax.tree_util.tree_map(jnp.shape, agent)
    got = jax.tree_util.tree_map(jnp.shape, restored)
    if want != got:
        raise CheckpointError(
            f"Checkpoint {path} has parameter shapes that differ from this agent's config "
            "(different network sizes, horizon_length or action dimension?)."
        )
    return jax.tree_util.tree_map(
        lambda t, r: jnp.asarray(r, dtype=t.dtype) if isinstance(t, jax.Array) else r, agent, restored
    )


def _read_payload(path: str) -> dict:
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        raise CheckpointError(f"Checkpoint file not found: {path}")
    with open(path, "rb") as f:
        data = f.read()
    try:
        payload = serialization.msgpack_restore(data)
    except Exception as e:  # msgpack raises several unrelated types for damaged input
        raise CheckpointError(
            f"Checkpoint {path} is truncated or corrupt ({type(e).__name__}: {e}); it is {len(data)} bytes long."
        ) from e
    if not isinstance(payload, dict):
        raise CheckpointError(f"Checkpoint {path} does not hold a qc checkpoint.")
    return payload
