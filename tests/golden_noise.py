"""The golden tests' noise: `jax.random.normal` / `uniform` answered by one numpy RandomState (tests/data/README.md),
and the parameter helpers of tests/test_golden_baselines.py."""

import sys

import flax
import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util


class NumpyNoise:
    """Stand-ins for `jax.random.normal` / `uniform`: successive draws of one RandomState.

    Only calls made from the agent's module (`module_name`) are replaced. Flax evaluates each parameter's
    initialiser abstractly on every apply (to check the stored shape), and those calls (from jax's
    initializers) go to the real function, as in the golden run: counting them would shift the stream.
    """

    def __init__(self, normal, uniform, module_name: str):
        self.real = {"normal": normal, "uniform": uniform}
        self.module_name = module_name
        self.rs = None
        self.calls = 0

    def reset(self, seed):
        self.rs = np.random.RandomState(seed)

    def _draw(self, name, key, shape=(), *args, **kwargs):
        if sys._getframe(2).f_globals.get("__name__") != self.module_name:
            return self.real[name](key, shape, *args, **kwargs)
        # The agents ask for float32 standard normals and uniforms on [0, 1): nothing else to honour.
        assert not args and not kwargs, f"jax.random.{name} called with {args} {kwargs}"
        self.calls += 1
        shape = tuple(int(s) for s in shape)
        sample = self.rs.standard_normal if name == "normal" else self.rs.random_sample
        return jnp.asarray(sample(shape).astype(np.float32))

    def normal(self, *args, **kwargs):
        return self._draw("normal", *args, **kwargs)

    def uniform(self, *args, **kwargs):
        return self._draw("uniform", *args, **kwargs)


# ---- what the golden tests of the FQL release's baselines share (tests/test_golden_baselines.py) ----------------


def entries(golden, prefix):
    """`{rest: array}` for the golden keys `prefix/rest`."""
    prefix = prefix + "/"
    return {k[len(prefix) :]: v for k, v in golden.items() if k.startswith(prefix)}


def flat_params(agent):
    """The agent's parameters as `{'modules_x/.../kernel': array}` (the golden files' paths)."""
    return traverse_util.flatten_dict(flax.serialization.to_state_dict(agent.network.params), sep="/")


def with_golden_params(agent, theirs):
    """`agent` with its parameters replaced by `theirs` (`{path: array}`, the same tree and shapes, else
    AssertionError) and a fresh optimizer state."""
    ours = flat_params(agent)
    assert sorted(ours) == sorted(theirs), f"parameter trees differ: {sorted(set(ours) ^ set(theirs))}"
    for path, value in ours.items():
        assert value.shape == theirs[path].shape, f"{path}: ours {value.shape}, golden {theirs[path].shape}"
    loaded = {path: jnp.asarray(theirs[path], dtype=value.dtype) for path, value in ours.items()}
    params = flax.serialization.from_state_dict(agent.network.params, traverse_util.unflatten_dict(loaded, sep="/"))
    return agent.replace(network=agent.network.with_params(params))


def authors_grad_norm(grads):
    """`grad/norm` as the FQL and Q-chunking releases log it: the sum of the per-leaf L2 norms."""
    return float(sum(np.linalg.norm(np.asarray(g)) for g in jax.tree_util.tree_leaves(grads)))
