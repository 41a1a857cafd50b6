"""The one network stack both agents build on.

* `MLP`: the multilayer perceptron every other module uses.
* `ensemblize`: an ensemble of any module via `nn.vmap` (separate parameters per member).
* `Value`: the critic ensemble `Q(s, a)` (ACFQL, ACRLPD).
* `ActorVectorField`: the flow-matching velocity field `v(s, x_t, t)` (ACFQL; also used as
  the one-step policy `mu(s, z)` when called without `times`).
* `TanhNormalActor`: the tanh-squashed Gaussian policy head of ACRLPD (distrax).

Shapes use `B` for any number of leading batch axes (the best-of-N candidate axis included),
`D` for the observation feature size and `A` for the (possibly chunked, `h * action_dim`) action
size.
"""

from typing import Any, Callable, Sequence

import distrax
import flax.linen as nn
import jax.numpy as jnp


def default_init(scale: float = 1.0):
    """Variance-scaling init (fan_avg, uniform), as in FQL/QC and most JAX RL code."""
    return nn.initializers.variance_scaling(scale, "fan_avg", "uniform")


class MLP(nn.Module):
    """Multilayer perceptron.

    Layer `i` is `Dense(hidden_dims[i])`; every layer but the last (all of them when
    `activate_final`) is followed by `activations` and then, when `layer_norm`, by
    `LayerNorm` (activation first, then layer norm: the order of the FQL/QC reference).
    Kernels use `default_init` (variance scaling, fan_avg, uniform); biases start at zero.

    Args:
        hidden_dims: output width of each Dense layer; the last entry is the output size.
        activations: nonlinearity (default GELU, as in the reference).
        activate_final: also apply the activation (and layer norm) after the last layer.
        kernel_init: kernel initializer.
        layer_norm: apply layer normalisation after each activation.

    Input `(B, D_in)` -> output `(B, hidden_dims[-1])`.
    """

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
    """Ensemble of `num_qs` copies of module class `cls` with separate parameters.

    Built on `nn.vmap` over the `params` collection: every member sees the same inputs
    (`in_axes=None`) and the outputs are stacked on axis `out_axes` (default 0), so a
    member's output `(B,)` becomes `(num_qs, B)`.
    """
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
    """Sinusoidal features of a scalar time `t` in [0, 1] for the flow field.

    Fixed log-spaced frequencies (transformer-style). Input `(B, 1)` -> `(B, output_size)`.
    """

    output_size: int = 64

    @nn.compact
    def __call__(self, t):
        half = self.output_size // 2
        freqs = jnp.exp(-jnp.log(10000.0) * jnp.arange(half) / max(half - 1, 1))  # (half,)
        angles = t * freqs  # (B, 1) * (half,) -> (B, half)
        return jnp.concatenate([jnp.cos(angles), jnp.sin(angles)], axis=-1)


class Value(nn.Module):
    """Critic ensemble `Q_k(s, a)`, k = 1..num_ensembles (paper Sec. 4: chunked critic).

    Each member is an `MLP` `hidden_dims + (1,)` on `concat(s, a)`.

    Args:
        hidden_dims: hidden layer widths (paper: 4 x 512).
        layer_norm: layer norm in the hidden layers (paper: on for the critic).
        num_ensembles: ensemble size K (ACFQL 2, ACRLPD 10); 1 gives no ensemble axis.

    Call `(observations (B, *ob), actions (B, A) or None)` -> `(K, B)` (`(B,)` when K = 1).
    """

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
    """Flow-matching velocity field `v(s, x_t, t)` over (chunked) actions (paper Sec. 4, QC).

    An `MLP` `hidden_dims + (action_dim,)` on `concat(s, x_t, t_features)`.
    Called without `times` it is a one-step map `mu(s, z)` (the QC-FQL / FQL actor).

    Args:
        hidden_dims: hidden layer widths (paper: 4 x 512).
        action_dim: output size `A` (`h * action_dim` when chunking).
        layer_norm: layer norm in the hidden layers (paper: off for the actor).
        use_fourier_features: embed `t` with `FourierFeatures` instead of using it raw.
        fourier_feature_dim: size of that embedding.

    Call `(observations (B, D), actions (B, A), times (B, 1) or None)` -> velocities `(B, A)`.
    """

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
    """Tanh-squashed diagonal Gaussian policy `pi(a | s)` (SAC / RLPD actor head).

    `a = tanh(u)`, `u ~ N(mean(s), diag(std(s)^2))`; log-probabilities include the tanh
    change-of-variables term (distrax `Block(Tanh(), ndims=1)`). `log_std` is clipped to
    `[log_std_min, log_std_max]`.

    Args:
        hidden_dims: hidden layer widths of the trunk (activate_final=True).
        action_dim: output size `A` (`h * action_dim` when chunking).
        layer_norm: layer norm in the trunk.
        log_std_min, log_std_max: bounds of the log standard deviation (RLPD's -20 and 2).

    Call `(observations (B, D))` -> a distrax distribution with event shape `(A,)` and batch
    shape `(B,)` (`jnp.tanh(dist.distribution.mode())` is the deterministic action).
    """

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
        base = distrax.MultivariateNormalDiag(loc=means, scale_diag=jnp.exp(log_stds))
        return distrax.Transformed(base, distrax.Block(distrax.Tanh(), ndims=1))
