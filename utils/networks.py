"""The one network stack the agents build on: `MLP`, `ensemblize`, the critic `Value`, the flow field
`ActorVectorField`, the `TanhNormalActor` and the
`GaussianActor` (IQL, ReBRAC). `B`: any leading batch axes (the best-of-N axis included),
`D`: observation features, `A`: the (possibly chunked, `h * action_dim`) action size.
"""

from typing import Any, Callable, Sequence

import flax.linen as nn
import jax.numpy as jnp


def default_init(scale: float = 1.0):
    """Variance-scaling init (fan_avg, uniform), as in FQL/QC and most JAX RL code."""
    return nn.initializers.variance_scaling(scale, "fan_avg", "uniform")


class MLP(nn.Module):
    """`(B, D_in) -> (B, hidden_dims[-1])`: layer `i` is `Dense(hidden_dims[i])` (`default_init` kernels, zero
    biases); every layer but the last (all with `activate_final`) is followed by `activations` (GELU) and then,
    with `layer_norm`, `LayerNorm` (activation first, then layer norm: the FQL/QC reference's order)."""

    hidden_dims: Sequence[int]
    activations: Callable[[Any], Any] = nn.gelu
    activate_final: bool = False
    kernel_init: Callable = default_init()
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x):
        for i, size in enumerate(self.hidden_dims):
            x = nn.Dense(size, kernel_init=self.kernel_init)(x)
            if i + 1 < len(self.hidden_dims) or self.activate_final:
                x = self.activations(x)
                if self.layer_norm:
                    x = nn.LayerNorm()(x)
        return x


def ensemblize(cls, num_qs: int, in_axes=None, out_axes: int = 0, **kwargs):
    """`num_qs` copies of module class `cls` with separate parameters (`nn.vmap` over `params`): the same
    inputs (`in_axes=None`), outputs stacked on `out_axes`, so `(B,)` becomes `(num_qs, B)`."""
    return nn.vmap(
        cls,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        in_axes=in_axes,
        out_axes=out_axes,
        axis_size=num_qs,
        **kwargs,
    )


class FourierFeatures(nn.Module):
    """Sinusoidal features `(B, 1) -> (B, output_size)` of the flow time `t` (fixed log-spaced frequencies)."""

    output_size: int = 64

    @nn.compact
    def __call__(self, t):
        half = self.output_size // 2
        freqs = jnp.exp(-jnp.log(10000.0) * jnp.arange(half) / max(half - 1, 1))  # (half,)
        angles = t * freqs  # (B, 1) * (half,) -> (B, half)
        return jnp.concatenate([jnp.cos(angles), jnp.sin(angles)], axis=-1)


class Value(nn.Module):
    """Critic ensemble `Q_k(s, a)`, k = 1..K = `num_ensembles` (paper Sec. 4), each an `MLP` `hidden_dims + (1,)`
    on `concat(s, a)`: `(observations (B, *ob), actions (B, A) or None) -> (K, B)` (`(B,)` when K = 1)."""

    hidden_dims: Sequence[int]
    layer_norm: bool = True
    num_ensembles: int = 2

    def setup(self):
        mlp_class = MLP
        if self.num_ensembles > 1:
            mlp_class = ensemblize(mlp_class, self.num_ensembles)
        self.value_net = mlp_class((*self.hidden_dims, 1), activate_final=False, layer_norm=self.layer_norm)

    def __call__(self, observations, actions=None):
        inputs = observations
        if actions is not None:
            inputs = jnp.concatenate([inputs, actions], axis=-1)  # (B, D + A)
        return self.value_net(inputs).squeeze(-1)  # (K, B) or (B,)


class ActorVectorField(nn.Module):
    """Flow-matching velocity field `v(s, x_t, t)` over (chunked) actions (paper Sec. 4): an `MLP`
    `hidden_dims + (action_dim,)` on `concat(s, x_t, t or its FourierFeatures)`, `(B, D), (B, A), (B, 1) ->
    (B, A)`; without `times`, the one-step map `mu(s, z)` (the QC-FQL / FQL actor)."""

    hidden_dims: Sequence[int]
    action_dim: int
    layer_norm: bool = False
    use_fourier_features: bool = False
    fourier_feature_dim: int = 64

    def setup(self):
        self.mlp = MLP((*self.hidden_dims, self.action_dim), activate_final=False, layer_norm=self.layer_norm)
        if self.use_fourier_features:
            self.time_features = FourierFeatures(self.fourier_feature_dim)

    def __call__(self, observations, actions, times=None):
        parts = [observations, actions]
        if times is not None:
            parts.append(self.time_features(times) if self.use_fourier_features else times)
        return self.mlp(jnp.concatenate(parts, axis=-1))


class TanhNormalActor(nn.Module):
    """SAC / RLPD policy `pi(a | s)`: `a = tanh(u)`, `u ~ N(mean(s), diag(std(s)^2))`, `log_std` clipped to
    `[log_std_min, log_std_max]`; log-probabilities include the tanh change of variables. `(B, D) ->` a distrax
    distribution of event shape `(A,)` (`jnp.tanh(dist.distribution.mode())`: the deterministic action)."""

    hidden_dims: Sequence[int]
    action_dim: int
    layer_norm: bool = False
    log_std_min: float = -20.0
    log_std_max: float = 2.0

    @nn.compact
    def __call__(self, observations):
        features = MLP(self.hidden_dims, activate_final=True, layer_norm=self.layer_norm)(observations)
        means = nn.Dense(self.action_dim, kernel_init=default_init())(features)
        log_stds = nn.Dense(self.action_dim, kernel_init=default_init())(features)
        log_stds = jnp.clip(log_stds, self.log_std_min, self.log_std_max)
        import distrax  # here, not at the top: a slow import (tensorflow_probability) most agents never need

        base = distrax.MultivariateNormalDiag(loc=means, scale_diag=jnp.exp(log_stds))
        return distrax.Transformed(base, distrax.Block(distrax.Tanh(), ndims=1))


class GaussianActor(nn.Module):
    """The FQL release's Gaussian policy (`utils/networks.py: Actor`, state-independent std), for IQL and ReBRAC:
    `observations (B, D) -> distrax.MultivariateNormalDiag` of event shape `(A,)`, mean `mean_net(MLP(s))`
    (`final_fc_init_scale` on the last layer), std `exp(clip(log_stds)) * temperature` with `log_stds` a learned
    vector, or 0 with `const_std`. No tanh here: an agent that squashes applies `tanh` to the mean itself."""

    hidden_dims: Sequence[int]
    action_dim: int
    layer_norm: bool = False
    log_std_min: float = -5.0
    log_std_max: float = 2.0
    const_std: bool = True
    final_fc_init_scale: float = 1e-2

    def setup(self):
        self.actor_net = MLP(self.hidden_dims, activate_final=True, layer_norm=self.layer_norm)
        self.mean_net = nn.Dense(self.action_dim, kernel_init=default_init(self.final_fc_init_scale))
        if not self.const_std:
            self.log_stds = self.param("log_stds", nn.initializers.zeros, (self.action_dim,))

    def __call__(self, observations, temperature=1.0):
        means = self.mean_net(self.actor_net(observations))  # (B, A)
        log_stds = jnp.zeros_like(means) if self.const_std else self.log_stds
        log_stds = jnp.clip(log_stds, self.log_std_min, self.log_std_max)
        import distrax  # see TanhNormalActor

        return distrax.MultivariateNormalDiag(loc=means, scale_diag=jnp.exp(log_stds) * temperature)
