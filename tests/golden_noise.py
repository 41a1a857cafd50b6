"""The golden tests' noise: `jax.random.normal` / `uniform` answered by one numpy RandomState (tests/data/README.md)."""

import sys

import jax.numpy as jnp
import numpy as np


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
