"""ACSAC-style agent: a causal Transformer critic that values every prefix of a chunk, and the loop executes
the prefix with the highest value (Chen et al., arXiv 2605.11009; no code released).

What the paper's abstract gives, and is the method here: the critic reads the tokens `(s, a_1, ..., a_H)` under
a causal mask, so its output at the token of `a_h` is `Q(s, a_{1:h})` for every `h` in one pass; each prefix
length is trained against its own target; at each chunk boundary the agent executes the prefix length whose
value is highest. Everything else is one reading of the abstract, each choice a config key
(docs/differences.md, "ACSAC"):

* actor: QC's flow behaviour-cloning policy over `H`-step chunks (`flow_steps` Euler steps), no Q term;
* acting: `N = actor_num_samples` candidate chunks; the joint argmax over (candidate, prefix length) of the min
  over the `num_qs = 2` critics picks the chunk and its length `h*`, a shorter prefix only when it beats the best
  whole chunk by more than `commit_margin` (0: the plain argmax; `choose`) (`adaptive_length=False`: the
  candidate with the best whole-chunk value, executed whole: the fixed-length control, `--method=acsac-fixed`);
* target of length `h` (`prefix_targets`): `R_{t:t+h} + gamma^h * m_h * V(s_{t+h})`, `V(s)` from the prefixes of
  `N` candidates drawn at `s` (`bootstrap_values`): `target_choice='max'` the max over the `N x H` prefixes of
  `min_k Q_k`, `'double'` the prefix chosen by critic 1 and scored by the min of the others; whole chunks only
  with `adaptive_length=False`; computed at every intermediate next state of the window, from the online critic
  under stop-gradient (`target_critic=True`: a Polyak target, `tau`);
* loss: squared error averaged over critics, windows and the `H` lengths, each length weighted by `valid`;
* critic: `num_layers = 2` pre-LayerNorm blocks, `num_heads = 8` heads of `head_dim = 16`, learned positions.

Networks (one `ModuleDict`): `critic`, `target_critic` (`PrefixCritic` ensembles) and `actor_bc_flow`.
"""

import functools
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

from agents import common
from utils.flax_utils import ModuleDict, TrainState, nonpytree_field, scan_updates, select_keys, target_update
from utils.networks import ActorVectorField, ensemblize

BATCH_KEYS = ("observations", "actions", "next_observations", "rewards", "masks", "valid")


def causal_attention(query, key, value, mask=None, **_):
    """Scaled dot-product attention as `flax.linen.dot_product_attention` computes it, for short sequences.

    `query`, `key`, `value` `(*B, T, heads, head_dim)`, `mask` broadcastable to `(*B, heads, T, T)` (True: attend);
    returns `(*B, T, heads, head_dim)`, equal to flax's to float tolerance (`tests/test_acsac.py`). With `T = H + 1`
    tokens the scores and the weighted sum are products summed over one axis, which XLA fuses, where flax's
    batched matmuls of `T x head_dim` tiles are slow on CPU (docs/benchmarks.md, section 4). Other keyword
    arguments of flax's (dropout, precision) are ignored: the critic uses none.
    """
    query = query / jnp.sqrt(query.shape[-1]).astype(query.dtype)
    scores = jnp.sum(query[..., :, None, :, :] * key[..., None, :, :, :], axis=-1)  # (*B, Tq, Tk, heads)
    scores = jnp.moveaxis(scores, -1, -3)  # (*B, heads, Tq, Tk), the mask's layout
    if mask is not None:
        scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
    weights = jnp.moveaxis(jax.nn.softmax(scores, axis=-1), -3, -1)  # (*B, Tq, Tk, heads)
    return jnp.sum(weights[..., None] * value[..., None, :, :, :], axis=-3)  # (*B, Tq, heads, head_dim)


class PrefixCritic(nn.Module):
    """`Q(s, a_{1:h})` for `h = 1..H` in one pass: `(s (*B, D), chunk (*B, H * A)) -> (*B, H)`.

    Tokens: a linear embedding of `s`, then one of each action `a_h`, plus learned position embeddings (zero at
    the start); `num_layers` blocks of pre-LayerNorm causal self-attention (`num_heads` heads of `head_dim`) and
    a 4x-wide gelu MLP, each added back; a final LayerNorm and a linear head on the action tokens. The causal
    mask keeps `Q(s, a_{1:h})` independent of `a_{h+1:H}`. Source: the critic of arXiv 2605.11009's abstract;
    sizes and layout are our reading (docs/differences.md, "ACSAC").
    """

    horizon: int
    action_dim: int
    num_layers: int = 2
    num_heads: int = 8
    head_dim: int = 16
    attention_fn: Any = causal_attention  # flax's `dot_product_attention` gives the same values, slower on CPU

    @nn.compact
    def __call__(self, observations, actions):
        width = self.num_heads * self.head_dim
        batch_shape = actions.shape[:-1]
        steps = actions.reshape(*batch_shape, self.horizon, self.action_dim)
        tokens = jnp.concatenate([nn.Dense(width)(observations)[..., None, :], nn.Dense(width)(steps)], axis=-2)
        # Learned positions, from zero (a random normal start is not bitwise the same compiled and eager).
        positions = self.param("positions", nn.initializers.zeros, (self.horizon + 1, width))
        tokens = tokens + positions  # (*B, H + 1, W)
        mask = nn.make_causal_mask(jnp.ones(tokens.shape[:-1]))  # (*B, 1, H + 1, H + 1)
        for _ in range(self.num_layers):
            x = nn.LayerNorm()(tokens)
            attention = nn.MultiHeadDotProductAttention(
                num_heads=self.num_heads, qkv_features=width, attention_fn=self.attention_fn
            )
            tokens = tokens + attention(x, x, mask=mask)
            x = nn.Dense(width)(nn.gelu(nn.Dense(4 * width)(nn.LayerNorm()(tokens))))
            tokens = tokens + x
        return nn.Dense(1)(nn.LayerNorm()(tokens))[..., 1:, 0]  # (*B, H): the action tokens


def prefix_targets(rewards, masks, next_values, discount: float):
    """The TD target of every prefix length: `y_h = rewards[:, h-1] + discount^h * masks[:, h-1] *
    next_values[:, h-1]`, `(B, H)` each (`rewards`: the window's partial discounted sums, `masks`: its running
    masks, docs/batch_contract.md; `next_values`: `V(s_{t+h})`)."""
    horizon = rewards.shape[-1]
    powers = discount ** jnp.arange(1, horizon + 1, dtype=rewards.dtype)  # (H,)
    return rewards + powers * masks * next_values


TARGET_CHOICES = ("max", "double")


def bootstrap_values(next_qs, adaptive: bool = True, target_choice: str = "max"):
    """`V(s')` for the target, from every critic's values of the prefixes of the candidates drawn at `s'`.

    `next_qs` `(K, *B, N, H)`: critic `k`'s value `Q_k(s', a^n_{1:h})`. The prefixes `V` may take: every
    `(n, h)` with `adaptive`, the whole chunks `(n, H)` without (the fixed-length control bootstraps from what it
    executes). `target_choice`:

    * `'max'`: `V = max_{n, h} min_k Q_k(s', a^n_{1:h})`;
    * `'double'` (needs `K >= 2`): `(n*, h*) = argmax_{n, h} Q_1(s', a^n_{1:h})` (ties: the lower candidate, then
      the shorter prefix), `V = min_{k >= 2} Q_k(s', a^{n*}_{1:h*})`: chosen by the first critic, scored by the
      others. The max of noisy estimates is biased upwards, and a one-action prefix bootstraps from that max at
      every step, a whole chunk once per `H` steps, so under `'max'` the short prefixes gather the most
      optimism; scoring the choice with estimates whose noise did not make it removes that bias.

    Returns `(values (*B,), lengths (*B,) int32 in 1..H)`: `V(s')` and the prefix length it is taken at.
    """
    horizon = next_qs.shape[-1]
    allowed = next_qs if adaptive else next_qs[..., -1:]  # (K, *B, N, H or 1)
    if target_choice == "max":
        chooser = scorer = allowed.min(axis=0)
    else:
        chooser, scorer = allowed[0], allowed[1:].min(axis=0)
    width = chooser.shape[-1]
    flat = jnp.argmax(chooser.reshape(*chooser.shape[:-2], -1), axis=-1)  # (*B,)
    values = jnp.take_along_axis(scorer.reshape(*scorer.shape[:-2], -1), flat[..., None], axis=-1)[..., 0]
    lengths = flat % width + 1 if adaptive else jnp.full(flat.shape, horizon)
    return values, lengths.astype(jnp.int32)


def choose(values, candidates, adaptive: bool = True, margin: float = 0.0):
    """The chunk to act with and how many of its actions to execute.

    `values` `(*B, N, H)`: a value for each candidate and prefix length; `candidates` `(*B, N, H * A)`.
    Adaptive: the best whole chunk `(n_w, H)` (value `W`: the lower candidate on ties) unless the best shorter
    prefix `(n_p, h_p)` (value `P`: the lower candidate, then the shorter length on ties) beats it by more than
    `margin`: `P > W + margin`, or `P == W + margin` with `n_p <= n_w` (the prefix comes first in the order
    (candidate, length)). With `margin = 0` this is the joint argmax over (candidate, length), ties to the lower
    candidate, then the shorter length; a large margin executes whole chunks. Returns `(chunk (*B, H * A),
    length (*B,) int32 in 1..H)`. Not adaptive: the candidate with the best value at `h = H` (ties to the lower
    one) and `H`.
    """
    horizon = values.shape[-1]
    best = jnp.argmax(values[..., -1], axis=-1)  # (*B,): the best whole chunk
    length = jnp.full(best.shape, horizon)
    if adaptive and horizon > 1:
        shorter = values[..., :-1]  # (*B, N, H - 1)
        flat = jnp.argmax(shorter.reshape(*shorter.shape[:-2], -1), axis=-1)  # (*B,)
        prefix, prefix_length = flat // (horizon - 1), flat % (horizon - 1) + 1
        p = jnp.take_along_axis(shorter.reshape(*shorter.shape[:-2], -1), flat[..., None], axis=-1)[..., 0]
        w = jnp.take_along_axis(values[..., -1], best[..., None], axis=-1)[..., 0] + margin
        cut = (p > w) | ((p == w) & (prefix <= best))
        best, length = jnp.where(cut, prefix, best), jnp.where(cut, prefix_length, length)
    chunk = jnp.take_along_axis(candidates, best[..., None, None], axis=-2)[..., 0, :]
    return chunk, length.astype(jnp.int32)


class ACSACAgent(flax.struct.PyTreeNode):
    """Causal-Transformer prefix critic, flow BC actor, executed length chosen per state (module docstring)."""

    rng: Any
    network: Any
    config: Any = nonpytree_field()

    def _candidates(self, observations, rng, n):
        """`n` flow-BC chunks per observation: `(repeated observations (*B, N, D), chunks (*B, N, H * A))`."""
        cfg = self.config
        batch_axes = observations.ndim - len(cfg["ob_dims"])
        noises = jax.random.normal(
            rng, (*observations.shape[:batch_axes], n, cfg["horizon_length"] * cfg["action_dim"])
        )
        repeated = jnp.repeat(jnp.expand_dims(observations, batch_axes), n, axis=batch_axes)
        velocity = functools.partial(self.network.select("actor_bc_flow"), repeated)
        return repeated, jnp.clip(common.euler_flow(velocity, noises, cfg["flow_steps"]), -1, 1)

    def _prefix_values(self, name, observations, chunks, params=None):
        """`(K, *B, H)`: every critic's value of every prefix of `chunks`."""
        return self.network.select(name)(observations, chunks, params=params)

    def critic_loss(self, batch, grad_params, rng):
        """Per-length TD loss (`prefix_targets`)::

        V(s')  = bootstrap_values(Q_{1..K}(s', a^n_{1:h'})),  a^n ~ flow(s'), at s' = s_{t+1} .. s_{t+H}
               ('max': max_{n, h'} min_k Q_k; h' = H only with adaptive_length=False)
        y_h    = rewards[:, h-1] + gamma^h * masks[:, h-1] * V(s_{t+h})
        loss   = mean_{k, b, h} valid[b, h-1] * (Q_k(s_t, a_{t:t+h}) - y_h)^2
        """
        cfg = self.config
        next_observations = batch["next_observations"]  # (B, H, D)
        repeated, candidates = self._candidates(next_observations, rng, cfg["actor_num_samples"])  # (B, H, N, .)
        source = "target_critic" if cfg["target_critic"] else "critic"
        next_qs = jax.lax.stop_gradient(self._prefix_values(source, repeated, candidates))  # (K, B, H, N, H')
        next_values, next_length = bootstrap_values(next_qs, cfg["adaptive_length"], cfg["target_choice"])  # (B, H)
        target = prefix_targets(batch["rewards"], batch["masks"], next_values, cfg["discount"])  # (B, H)

        chunks = batch["actions"].reshape(*batch["actions"].shape[:-2], -1)  # (B, H * A)
        qs = self._prefix_values("critic", batch["observations"], chunks, grad_params)  # (K, B, H)
        loss = jnp.mean(batch["valid"] * jnp.square(qs - target))
        q = qs.min(axis=0)  # (B, H)
        return loss, {
            "critic/critic_loss": loss,
            "critic/q_mean": qs.mean(),
            "critic/q_max": qs.max(),
            "critic/q_min": qs.min(),
            "critic/target_q_mean": target.mean(),
            "critic/prefix_spread": (q.max(axis=-1) - q.min(axis=-1)).mean(),
            "critic/next_length_mean": next_length.mean(),  # the length V is taken at
        }

    def actor_loss(self, batch, grad_params, rng):
        """Flow-matching BC on whole chunks (QC's, without a Q term)::

        x_t = (1 - t) x_0 + t x_1,  x_0 ~ N(0, I),  x_1 = data chunk,  t ~ U[0, 1] per row
        loss = mean_{b,k,j} valid[b, k] * (v(s, x_t, t) - (x_1 - x_0))[b, k, j]^2
        """
        cfg = self.config
        x_1 = batch["actions"].reshape(*batch["actions"].shape[:-2], -1)  # (B, H * A)
        x_rng, t_rng = jax.random.split(rng)
        x_0 = jax.random.normal(x_rng, x_1.shape)
        t = jax.random.uniform(t_rng, (x_1.shape[0], 1))
        x_t = (1 - t) * x_0 + t * x_1
        pred = self.network.select("actor_bc_flow")(batch["observations"], x_t, t, params=grad_params)
        error = jnp.square(pred - (x_1 - x_0)).reshape(x_1.shape[0], cfg["horizon_length"], cfg["action_dim"])
        loss = jnp.mean(error * batch["valid"][..., None])
        return loss, {"actor/actor_loss": loss, "actor/bc_flow_loss": loss}

    def total_loss(self, batch, grad_params, rng):
        """`critic_loss + actor_loss` with independent randomness; info of both."""
        critic_rng, actor_rng = jax.random.split(rng)
        critic_loss, critic_info = self.critic_loss(batch, grad_params, critic_rng)
        actor_loss, actor_info = self.actor_loss(batch, grad_params, actor_rng)
        return critic_loss + actor_loss, {**critic_info, **actor_info}

    @staticmethod
    @jax.jit
    def _update(agent, batch):
        """One gradient step on `total_loss` and one Polyak step of the target critic: `(agent, info)`."""
        new_rng, rng = jax.random.split(agent.rng)

        def loss_fn(grad_params):
            return agent.total_loss(batch, grad_params, rng)

        network, info = agent.network.apply_loss_fn(loss_fn)
        network = target_update(network, agent.network, "critic", agent.config["tau"])
        return agent.replace(network=network, rng=new_rng), info

    def update(self, batch):
        """One update on `batch` (B windows of `H` steps): `(agent, info)`. Only `BATCH_KEYS` cross the jit."""
        return self._update(self, select_keys(batch, BATCH_KEYS))

    def batch_update(self, stacked_batches):
        """`update` on each batch along the leading (UTD) axis `(U, B, ...)` in one `lax.scan`; info averaged."""
        return scan_updates(ACSACAgent._update, self, select_keys(stacked_batches, BATCH_KEYS))

    @functools.partial(jax.jit, static_argnames=("best_of_n",))
    def sample_actions(self, observations, rng, best_of_n=None):
        """A chunk in [-1, 1] for `observations` `(*B, *ob)` (`*B` may be empty), chosen by `choose` among
        `N = best_of_n or actor_num_samples` flow samples on `min_k Q_k` of every prefix, with `commit_margin`.

        Returns `(chunk (*B, H * A), length (*B,) int32 in 1..H)`: the action queue executes `length` actions
        (evaluation.ActionQueue); with `adaptive_length=False`, the chunk `(*B, H * A)` alone, executed whole.
        """
        cfg = self.config
        n = cfg["actor_num_samples"] if best_of_n is None else best_of_n
        repeated, candidates = self._candidates(observations, rng, n)  # (*B, N, .)
        values = self._prefix_values("critic", repeated, candidates).min(axis=0)  # (*B, N, H)
        chunk, length = choose(values, candidates, cfg["adaptive_length"], cfg["commit_margin"])
        return (chunk, length) if cfg["adaptive_length"] else chunk

    @classmethod
    def create(cls, seed, ex_observations, ex_actions, config):
        """New agent; `config` (`get_config()` with `horizon_length` set) is not modified.

        `ex_actions`: one action `(A,)` with one observation `(*ob)`, or `(B, A)` with `(B, *ob)`.
        Raises `ValueError` naming the key for a bad configuration.
        """
        config = common.fill_shapes(check_config(config), ex_observations, ex_actions)
        horizon, action_dim = config["horizon_length"], config["action_dim"]
        ex_obs = jnp.asarray(ex_observations).reshape((-1, *config["ob_dims"]))[:1]  # (1, *ob)
        ex_chunk = jnp.zeros((1, horizon * action_dim))
        critic = functools.partial(
            ensemblize(PrefixCritic, config["num_qs"]),
            horizon=horizon,
            action_dim=action_dim,
            num_layers=config["num_layers"],
            num_heads=config["num_heads"],
            head_dim=config["head_dim"],
        )
        modules = {
            "critic": critic(),
            "target_critic": critic(),
            "actor_bc_flow": ActorVectorField(
                hidden_dims=config["actor_hidden_dims"],
                action_dim=horizon * action_dim,
                layer_norm=config["actor_layer_norm"],
            ),
        }
        args = {
            "critic": (ex_obs, ex_chunk),
            "target_critic": (ex_obs, ex_chunk),
            "actor_bc_flow": (ex_obs, ex_chunk, jnp.zeros((1, 1))),
        }
        init_rng, rng = jax.random.split(common.init_key(seed))
        network_def = ModuleDict(modules)
        params = dict(network_def.init(init_rng, **args)["params"])
        params["modules_target_critic"] = params["modules_critic"]  # the target starts as the critic
        network = TrainState.create(network_def, params, tx=optax.adam(learning_rate=config["lr"]))
        return cls(rng=rng, network=network, config=flax.core.FrozenDict(config))


def get_config():
    """ACSAC hyperparameters: one reading of arXiv 2605.11009's abstract (docs/differences.md, "ACSAC")."""
    placeholder = ml_collections.config_dict.placeholder
    return ml_collections.ConfigDict(
        dict(
            agent_name="acsac",  # Agent name (the drivers look the class up by it).
            lr=3e-4,  # Adam learning rate.
            batch_size=256,  # Windows per gradient step.
            actor_hidden_dims=(512, 512, 512, 512),  # Hidden widths of the flow BC actor.
            actor_layer_norm=False,  # Layer norm in the actor.
            num_layers=2,  # Transformer blocks of each critic.
            num_heads=8,  # Attention heads per block.
            head_dim=16,  # Width of each head (the critic's width: num_heads * head_dim).
            discount=0.99,  # gamma; the window's reward sums use the same number.
            tau=0.005,  # Polyak rate of the target critic (used for the bootstrap with target_critic=True).
            num_qs=2,  # Critic ensemble size K; values are the min over the K.
            flow_steps=10,  # Euler steps of the BC flow.
            actor_num_samples=4,  # N: candidate chunks per decision and per bootstrap state.
            horizon_length=placeholder(int),  # Chunk length H; set by the driver from --horizon_length.
            adaptive_length=True,  # Execute the best prefix (False: the whole chunk, the fixed-length control).
            target_critic=False,  # Bootstrap from the Polyak target critic (False: the online one, stop-gradient).
            target_choice="max",  # V(s'): 'max' over prefixes of min_k Q_k; 'double': critic 1 chooses, the rest score.
            commit_margin=0.0,  # Acting: a shorter prefix only if it beats the best whole chunk by more than this.
            ob_dims=placeholder(tuple),  # Observation shape; filled in by create().
            action_dim=placeholder(int),  # Single-step action size; filled in by create().
        )
    )


def check_config(config):
    """A plain-dict copy of `config` with every key checked; `ValueError` naming `--agent.KEY` for a bad one."""
    c = common.plain_config(config, get_config(), "acsac")
    common.check_shared(c, "acsac")
    for key in ("num_layers", "num_heads", "head_dim", "flow_steps", "actor_num_samples"):
        common.expect(c, key, common.is_int(c[key], 1), "an int >= 1")
    for key in ("adaptive_length", "target_critic"):
        common.expect(c, key, isinstance(c[key], bool), "True or False")
    common.expect(c, "target_choice", c["target_choice"] in TARGET_CHOICES, f"one of {TARGET_CHOICES}")
    common.expect(c, "commit_margin", common.is_number(c["commit_margin"], 0), "a finite number >= 0")
    if c["target_choice"] == "double" and c["num_qs"] < 2:
        raise ValueError(
            f"--agent.target_choice='double' needs --agent.num_qs >= 2 (critic 1 chooses, the others score), "
            f"got num_qs={c['num_qs']}."
        )
    common.check_types(c, get_config())
    return c


# ---- methods: ACSAC and its fixed-length control (no paper values exist; N as the reading gives it) ---------

_DOMAINS = {  # domain: (sparse rewards, N)
    "scene": (True, 4),
    "puzzle-3x3": (True, 4),
    "cube-double": (False, 4),
    "cube-triple": (False, 4),
    "cube-quadruple": (False, 8),
}
_PER_DOMAIN = {d: {"sparse": sparse, "agent.actor_num_samples": n} for d, (sparse, n) in _DOMAINS.items()}
_SOURCE = "arXiv 2605.11009 (a reading of its abstract: docs/differences.md)"
METHODS = {
    "acsac": common.Method("ACSAC", {"horizon_length": 5, "agent.adaptive_length": True}, _PER_DOMAIN, _SOURCE),
    "acsac-fixed": common.Method(
        "ACSAC-fixed", {"horizon_length": 5, "agent.adaptive_length": False}, _PER_DOMAIN, _SOURCE
    ),
}


def method_of(config):
    """`acsac` or `acsac-fixed` by `adaptive_length`."""
    return "acsac" if config.get("adaptive_length", True) else "acsac-fixed"


SPEC = common.AgentSpec(
    name="acsac",
    agent_class=ACSACAgent,
    get_config=get_config,
    check_config=check_config,
    drivers=("main",),
    batch_keys=BATCH_KEYS,
    methods=METHODS,
    method_of=method_of,
    short_names={"horizon_length": "h", "agent.actor_num_samples": "N"},
)
