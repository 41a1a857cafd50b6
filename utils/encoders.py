"""IMPALA convolutional encoder for pixel observations (Espeholt et al., 2018, Fig. 3).

Input ``(B, height, width, channels)`` uint8 (or float in [0, 255]); any number of leading batch
axes works, so the best-of-N candidate axis ``(B, N, h, w, c)`` needs no reshape. Output
``(B, mlp_hidden_dims[-1])``.

Variants (``encoder_modules``): ``impala`` (default, stacks 16/32/32, two residual blocks each,
MLP 512), ``impala_small`` (one residual block per stack), ``impala_large`` (stacks 64/128/128,
MLP 1024), ``impala_debug`` (tiny, for tests).
"""

import functools
from typing import Optional, Sequence

import flax.linen as nn
import jax.numpy as jnp

from utils.networks import MLP


class ResnetStack(nn.Module):
    """Conv 3x3 -> max-pool 3x3 stride 2 -> ``num_blocks`` residual blocks (relu, conv, relu, conv)."""

    num_features: int
    num_blocks: int
    max_pooling: bool = True

    @nn.compact
    def __call__(self, x):
        init = nn.initializers.xavier_uniform()
        x = nn.Conv(self.num_features, (3, 3), strides=1, padding="SAME", kernel_init=init)(x)
        if self.max_pooling:
            x = nn.max_pool(x, window_shape=(3, 3), padding="SAME", strides=(2, 2))
        for _ in range(self.num_blocks):
            residual = x
            x = nn.relu(x)
            x = nn.Conv(self.num_features, (3, 3), strides=1, padding="SAME", kernel_init=init)(x)
            x = nn.relu(x)
            x = nn.Conv(self.num_features, (3, 3), strides=1, padding="SAME", kernel_init=init)(x)
            x = x + residual
        return x


class ImpalaEncoder(nn.Module):
    """IMPALA ResNet encoder followed by an MLP.

    Args:
        width: multiplier on the stack widths.
        stack_sizes: channels of each :class:`ResnetStack`.
        num_blocks: residual blocks per stack.
        dropout_rate: dropout after each stack (None: none; needs a 'dropout' rng when training).
        mlp_hidden_dims: the MLP after flattening (activate_final=True).
        layer_norm: layer norm after the conv trunk and inside the MLP.
    """

    width: int = 1
    stack_sizes: Sequence[int] = (16, 32, 32)
    num_blocks: int = 2
    dropout_rate: Optional[float] = None
    mlp_hidden_dims: Sequence[int] = (512,)
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = x.astype(jnp.float32) / 255.0  # (B, h, w, c) in [0, 1]
        for size in self.stack_sizes:
            x = ResnetStack(num_features=size * self.width, num_blocks=self.num_blocks)(x)
            if self.dropout_rate is not None:
                x = nn.Dropout(rate=self.dropout_rate)(x, deterministic=not train)
        x = nn.relu(x)
        if self.layer_norm:
            x = nn.LayerNorm()(x)
        x = x.reshape((*x.shape[:-3], -1))  # (B, h' * w' * c')
        return MLP(self.mlp_hidden_dims, activate_final=True, layer_norm=self.layer_norm)(x)


encoder_modules = {
    "impala": ImpalaEncoder,
    "impala_small": functools.partial(ImpalaEncoder, num_blocks=1),
    "impala_large": functools.partial(ImpalaEncoder, stack_sizes=(64, 128, 128), mlp_hidden_dims=(1024,)),
    "impala_debug": functools.partial(ImpalaEncoder, num_blocks=1, stack_sizes=(4, 4), mlp_hidden_dims=(16,)),
}
