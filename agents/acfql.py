"""ACFQL: flow Q-learning with action chunking (Q-chunking; Li, Zhou, Levine, NeurIPS 2025).

One agent for QC / BFN (`actor_type='best-of-n'`) and QC-FQL / FQL (`actor_type='distill-ddpg'`);
see docs/method.md. With `action_chunking` the actor and critic work on whole chunks
`A_t = a_{t:t+h}` (flattened to `h * action_dim`); without it they see only `a_t` while the
h-step reward sum and the `gamma^h` bootstrap stay (the n-step baseline).

Networks (one `ModuleDict`, one Adam optimizer; `params['modules_<name>']`):

* `critic`, `target_critic`: `Value` ensembles of `num_qs` members, `Q(s, A)`.
* `actor_bc_flow`: the flow-matching velocity field `v(s, x_t, t)` over chunks.
* `actor_onestep_flow` (distill-ddpg only): the one-step policy `mu(s, z)`.

Gradient routing (utils/flax_utils.py): a module receives gradient only when called with
`params=grad_params`. The TD target (target critic, and the current critic and flow that pick
the next chunk), the distillation target `flow(s, z)` and the critic inside the actor's Q term
are called without `params=` and get exactly zero gradient (tests/test_acfql.py checks this).
"""

import functools
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import optax

from agents import common
from agents.common import aggregate, ensemble_values, policy_actions, policy_steps
from utils.flax_utils import ModuleDict, TrainState, nonpytree_field, scan_updates, select_keys, target_update
from utils.networks import ActorVectorField, Value

ACTOR_TYPES = ("best-of-n", "distill-ddpg")
# The batch keys the losses read (docs/batch_contract.md); only these cross the jit boundary.
BATCH_KEYS = ("observations", "actions", "next_observations", "rewards", "masks", "valid")


def _euler(network, config, observations, noises):
    """`flow_steps` Euler steps of the BC flow from `noises` (t = 0) to t = 1, clipped to [-1, 1].

    `observations` `(*B, D)` broadcast against `noises` `(*B, A)`. Stored parameters: no gradient.
    """
    velocity = functools.partial(network.select("actor_bc_flow"), observations)  # (x, t) -> v(s, x, t)
    return jnp.clip(common.euler_flow(velocity, noises, config["flow_steps"]), -1, 1)


def _repeat_candidates(x, n, axis):
    """Insert the best-of-N axis at `axis` (right after the batch axes): (*B, ...) -> (*B, N, ...)."""
    return jnp.repeat(jnp.expand_dims(x, axis), n, axis=axis)


class ACFQLAgent(flax.struct.PyTreeNode):
    """Flow Q-learning with action chunking: QC (best-of-N) and QC-FQL (one-step distilled actor)."""

    rng: Any
    network: Any
    config: Any = nonpytree_field()

    def critic_loss(self, batch, grad_params, rng):
        """TD loss of the chunked critic ensemble on windows of `h` steps (`rng`: the next chunk)::

            chunk_reward = rewards[:, -1]                    # sum_{k<h} gamma^k r_{t+k}
            next_q       = agg_k Qbar_k(s_{t+h}, A')         # A' = sample_actions(s_{t+h}, rng)
            target_q     = chunk_reward + gamma^h * masks[:, -1] * next_q
            critic_loss  = mean_{k,b} valid[b, -1] * (Q_k(s_t, A_t) - target_q)^2

        `A'` is drawn by the acting procedure (best-of-N over the flow with the current critic
        choosing, or the one-step actor); agg is `q_agg` over the target ensemble.
        """
        cfg = self.config
        next_observations = batch["next_observations"][:, -1]  # (B, D): s_{t+h}
        next_actions = self.sample_actions(next_observations, rng)  # (B, A)
        next_qs = ensemble_values(self.network, cfg, "target_critic", next_observations, next_actions)  # (K, B)
        next_q = aggregate(next_qs, cfg["q_agg"])  # (B,)
        chunk_reward = batch["rewards"][..., -1]  # (B,)
        bootstrap = cfg["discount"] ** cfg["horizon_length"] * batch["masks"][..., -1]  # (B,)
        target_q = chunk_reward + bootstrap * next_q  # (B,)

        actions = policy_actions(batch["actions"], cfg)
        q = ensemble_values(self.network, cfg, "critic", batch["observations"], actions, grad_params)  # (K, B)
        # Mean over members and batch, as in FQL and the reference.
        critic_loss = jnp.mean(batch["valid"][..., -1] * jnp.square(q - target_q))
        return critic_loss, {
            "critic/critic_loss": critic_loss,
            "critic/q_mean": q.mean(),
            "critic/q_max": q.max(),
            "critic/q_min": q.min(),
            "critic/target_q_mean": target_q.mean(),
        }

    def actor_loss(self, batch, grad_params, rng):
        """Flow-matching BC on whole chunks (+ distillation and Q term for distill-ddpg)::

            x_t = (1 - t) x_0 + t x_1,  x_0 ~ N(0, I),  x_1 = data chunk,  t ~ U[0, 1] per row
            bc_flow_loss = mean_{b,k,j} valid[b, k] * (v(s, x_t, t) - (x_1 - x_0))[b, k, j]^2
            distill_loss = mean (mu(s, z) - flow(s, z))^2        # flow(s, z): Euler, no gradient
            q_loss       = -mean_b mean_k Q_k(s, clip(mu(s, z)))  # critic: no gradient
            actor_loss   = bc_flow_loss + alpha * distill_loss + q_loss

        With `normalize_q_loss` the Q term is divided by `stop_gradient(mean |Q|)`.
        """
        cfg = self.config
        x_1 = policy_actions(batch["actions"], cfg)  # (B, A)
        batch_size, action_dim = x_1.shape
        x_rng, t_rng, z_rng = jax.random.split(rng, 3)
        x_0 = jax.random.normal(x_rng, (batch_size, action_dim))
        t = jax.random.uniform(t_rng, (batch_size, 1))
        x_t = (1 - t) * x_0 + t * x_1
        observations = batch["observations"]  # (B, D)
        pred = self.network.select("actor_bc_flow")(observations, x_t, t, params=grad_params)  # (B, A)
        steps = policy_steps(cfg)
        error = jnp.square(pred - (x_1 - x_0)).reshape(batch_size, steps, cfg["action_dim"])  # (B, h, a)
        bc_flow_loss = jnp.mean(error * batch["valid"][:, :steps, None])

        zero = jnp.zeros(())
        info = {"actor/distill_loss": zero, "actor/q_loss": zero, "actor/q": zero, "actor/q_abs_mean": zero}
        actor_loss = bc_flow_loss
        if cfg["actor_type"] == "distill-ddpg":
            noises = jax.random.normal(z_rng, (batch_size, action_dim))
            target_actions = jax.lax.stop_gradient(self.compute_flow_actions(batch["observations"], noises))
            mu = self.network.select("actor_onestep_flow")(observations, noises, params=grad_params)  # (B, A)
            distill_loss = jnp.mean(jnp.square(mu - target_actions))

            qs = ensemble_values(self.network, cfg, "critic", observations, jnp.clip(mu, -1, 1))  # (K, B)
            q = qs.mean(axis=0)  # (B,)
            q_abs_mean = jnp.abs(q).mean()
            q_loss = -q.mean()
            if cfg["normalize_q_loss"]:
                q_loss = q_loss / jax.lax.stop_gradient(q_abs_mean)
            actor_loss = bc_flow_loss + cfg["alpha"] * distill_loss + q_loss
            info = {
                "actor/distill_loss": distill_loss,
                "actor/q_loss": q_loss,
                "actor/q": q.mean(),
                "actor/q_abs_mean": q_abs_mean,
            }
        return actor_loss, {"actor/actor_loss": actor_loss, "actor/bc_flow_loss": bc_flow_loss, **info}

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
        """One update on `batch` (B windows of `h` steps): `(agent, info)`. Only `BATCH_KEYS` cross the jit."""
        return self._update(self, select_keys(batch, BATCH_KEYS))

    def batch_update(self, stacked_batches):
        """`update` on each batch along the leading (UTD) axis `(U, B, ...)` in one `lax.scan`; info averaged."""
        return scan_updates(ACFQLAgent._update, self, select_keys(stacked_batches, BATCH_KEYS))

    @jax.jit
    def sample_actions(self, observations, rng):
        """Actions in [-1, 1] for `observations` `(*B, *ob)` (`*B` may be empty).

        Returns `(*B, h * action_dim)` with `action_chunking`, else `(*B, action_dim)`.
        best-of-n: N = `actor_num_samples` flow samples per observation; the one with the highest
        `q_agg` value of the current critic is returned. distill-ddpg: `clip(mu(s, z))`.
        """
        cfg = self.config
        batch_axes = observations.ndim - len(cfg["ob_dims"])
        batch_shape = observations.shape[:batch_axes]
        action_dim = cfg["action_dim"] * policy_steps(cfg)
        if cfg["actor_type"] == "distill-ddpg":
            noises = jax.random.normal(rng, (*batch_shape, action_dim))  # (*B, A)
            return jnp.clip(self.network.select("actor_onestep_flow")(observations, noises), -1, 1)

        n = cfg["actor_num_samples"]
        noises = jax.random.normal(rng, (*batch_shape, n, action_dim))  # (*B, N, A)
        repeated = _repeat_candidates(observations, n, batch_axes)  # (*B, N, D)
        actions = _euler(self.network, cfg, repeated, noises)  # (*B, N, A)
        qs = ensemble_values(self.network, cfg, "critic", repeated, actions)  # (K, *B, N)
        q = aggregate(qs, cfg["q_agg"])  # (*B, N)
        best = jnp.argmax(q, axis=-1)  # (*B,)
        return jnp.take_along_axis(actions, best[..., None, None], axis=-2)[..., 0, :]  # (*B, A)

    @jax.jit
    def compute_flow_actions(self, observations, noises):
        """BC flow samples `(*B, A)` in [-1, 1] from `noises` `(*B, A)` (`flow_steps` Euler steps)."""
        return _euler(self.network, self.config, observations, noises)

    @classmethod
    def create(cls, seed, ex_observations, ex_actions, config):
        """New agent; `config` (`get_config()` with `horizon_length` set) is not modified.

        `ex_actions`: one action `(action_dim,)` with one observation `(*ob)`, or a batch
        `(B, action_dim)` with `(B, *ob)`. `action_dim` and `ob_dims` are filled in on a copy.
        Raises `ValueError` naming the key for a bad configuration.
        """
        config = common.fill_shapes(check_config(config), ex_observations, ex_actions)
        ex_observations = jnp.asarray(ex_observations)
        ob_dims = config["ob_dims"]
        steps = policy_steps(config)
        full_action_dim = config["action_dim"] * steps
        ex_obs = ex_observations.reshape((-1, *ob_dims))[:1]  # (1, *ob)
        ex_chunk = jnp.zeros((1, full_action_dim))
        ex_times = jnp.zeros((1, 1))

        init_rng, rng = jax.random.split(common.init_key(seed))
        names = ["critic", "target_critic", "actor_bc_flow"]
        if config["actor_type"] == "distill-ddpg":  # best-of-n builds no one-step actor
            names.append("actor_onestep_flow")
        modules, args = {}, {}
        for name in ("critic", "target_critic"):
            modules[name] = Value(
                hidden_dims=config["value_hidden_dims"],
                layer_norm=config["layer_norm"],
                num_ensembles=config["num_qs"],
            )
            args[name] = (ex_obs, ex_chunk)
        for name in names[2:]:
            modules[name] = ActorVectorField(
                hidden_dims=config["actor_hidden_dims"],
                action_dim=full_action_dim,
                layer_norm=config["actor_layer_norm"],
                use_fourier_features=config["use_fourier_features"],
                fourier_feature_dim=config["fourier_feature_dim"],
            )
            is_flow = name == "actor_bc_flow"
            args[name] = (ex_obs, ex_chunk, ex_times) if is_flow else (ex_obs, ex_chunk)

        network_def = ModuleDict(modules)
        params = dict(network_def.init(init_rng, **args)["params"])
        for name in [k for k in params if k.startswith("modules_target_")]:
            params[name] = params[name.replace("modules_target_", "modules_")]  # target starts as the critic
        if config["weight_decay"] > 0:
            # Difference from the reference: its adamw also decayed the target critic (whose Polyak update
            # then overwrote the decayed values). Targets are outside the optimizer here (TrainState).
            tx = optax.adamw(learning_rate=config["lr"], weight_decay=config["weight_decay"])
        else:
            tx = optax.adam(learning_rate=config["lr"])
        network = TrainState.create(network_def, params, tx=tx)
        return cls(rng=rng, network=network, config=flax.core.FrozenDict(config))


def get_config():
    """ACFQL hyperparameters: the paper defaults for QC (docs/settings.md).

    `agent_name` and `batch_size` are read by the drivers, every other key by this file.
    """
    placeholder = ml_collections.config_dict.placeholder
    return ml_collections.ConfigDict(
        dict(
            agent_name="acfql",  # Agent name (the drivers look the class up by it).
            lr=3e-4,  # Adam learning rate.
            batch_size=256,  # Windows per gradient step (the drivers sample batches of this size).
            actor_hidden_dims=(512, 512, 512, 512),  # Hidden widths of the flow and one-step actors.
            value_hidden_dims=(512, 512, 512, 512),  # Hidden widths of each critic member.
            layer_norm=True,  # Layer norm in the critic.
            actor_layer_norm=False,  # Layer norm in the actors.
            discount=0.99,  # gamma; the chunk reward sum uses the same number (set it in the dataset too).
            tau=0.005,  # Polyak rate of the target critic.
            q_agg="mean",  # Ensemble aggregation ('mean' or 'min') for the target and for best-of-N.
            alpha=100.0,  # distill-ddpg: distillation weight (tune per domain, docs/settings.md).
            num_qs=2,  # Critic ensemble size K.
            flow_steps=10,  # Euler steps of the BC flow.
            normalize_q_loss=False,  # distill-ddpg: divide the Q term by stop_gradient(mean |Q|).
            horizon_length=placeholder(int),  # Chunk length h; set by the driver from --horizon_length.
            action_chunking=True,  # False: actor and critic see the first action only (n-step baseline).
            # 'best-of-n' (QC, BFN) or 'distill-ddpg' (QC-FQL, FQL). The paper's QC is the default here;
            # the reference code's default was 'distill-ddpg'.
            actor_type="best-of-n",
            actor_num_samples=32,  # best-of-n: candidates N per decision.
            use_fourier_features=False,  # Fourier features of the flow time t.
            fourier_feature_dim=64,  # Size of those features.
            weight_decay=0.0,  # > 0: AdamW with this decay (not applied to the target critic).
            ob_dims=placeholder(tuple),  # Observation shape; filled in by create().
            action_dim=placeholder(int),  # Single-step action size; filled in by create().
        )
    )


def check_config(config):
    """A plain-dict copy of `config` (hashable for jit) with every key checked.

    Raises `ValueError` naming `--agent.KEY` for an unknown or missing key or a bad value.
    """
    c = common.plain_config(config, get_config(), "acfql")
    common.check_shared(c, "acfql")
    common.expect(c, "alpha", common.is_number(c["alpha"], 0), "a number >= 0")
    common.expect(c, "flow_steps", common.is_int(c["flow_steps"], 1), "an int >= 1")
    common.expect(c, "actor_type", c["actor_type"] in ACTOR_TYPES, f"one of {ACTOR_TYPES}")
    common.expect(c, "actor_num_samples", common.is_int(c["actor_num_samples"], 1), "an int >= 1")
    even = common.is_int(c["fourier_feature_dim"], 2) and c["fourier_feature_dim"] % 2 == 0
    common.expect(c, "fourier_feature_dim", even, "an even int >= 2")
    common.expect(c, "weight_decay", common.is_number(c["weight_decay"], 0), "a number >= 0")
    common.check_types(c, get_config())
    return c


# ---- the paper's methods (Li, Zhou, Levine 2025, appendix tables; docs/settings.md) ----------------------

# Per domain: --sparse, alpha of FQL / FQL-n / QC-FQL, N of QC and of BFN(-n). alpha and N were tuned on
# task 2 of each OGBench domain and kept for tasks 1-5; robomimic gives no N for BFN(-n) (None: pass it).
PAPER_DOMAINS = {
    "scene": (True, 300.0, 100.0, 300.0, 32, 4),
    "puzzle-3x3": (True, 100.0, 100.0, 300.0, 64, 4),
    "cube-double": (False, 300.0, 100.0, 300.0, 32, 4),
    "cube-triple": (False, 300.0, 100.0, 100.0, 32, 4),
    "cube-quadruple": (False, 300.0, 100.0, 100.0, 32, 4),
    "lift": (False, 10000.0, 10000.0, 10000.0, 16, None),
    "can": (False, 10000.0, 10000.0, 10000.0, 16, None),
    "square": (False, 10000.0, 10000.0, 10000.0, 16, None),
}
_COLUMN = {"fql": 1, "fql-n": 2, "qc-fql": 3, "qc": 4, "bfn": 5, "bfn-n": 5}


def _method(label, h, actor_type, chunking):
    name = label.lower()
    key = "agent.actor_num_samples" if actor_type == "best-of-n" else "agent.alpha"
    per_domain = {d: {key: row[_COLUMN[name]], "sparse": row[0]} for d, row in PAPER_DOMAINS.items()}
    settings = {"horizon_length": h, "agent.actor_type": actor_type, "agent.action_chunking": chunking}
    return name, common.Method(label, settings, per_domain, source="arXiv 2507.07969, appendix")


METHODS = dict(
    _method(*row)
    for row in (
        ("QC", 5, "best-of-n", True),
        ("QC-FQL", 5, "distill-ddpg", True),
        ("BFN", 1, "best-of-n", True),  # action_chunking changes nothing at h=1: the config default
        ("BFN-n", 5, "best-of-n", False),
        ("FQL", 1, "distill-ddpg", True),
        ("FQL-n", 5, "distill-ddpg", False),
    )
)


def method_of(config):
    """The paper method (`--method` name) a resolved config is: actor type, h > 1, chunking; None if none."""
    if config.get("actor_type") not in ACTOR_TYPES:
        return None
    best = config["actor_type"] == "best-of-n"
    if int(config["horizon_length"]) == 1:
        return "bfn" if best else "fql"
    if config.get("action_chunking", True):
        return "qc" if best else "qc-fql"
    return "bfn-n" if best else "fql-n"


SPEC = common.AgentSpec(
    name="acfql",
    agent_class=ACFQLAgent,
    get_config=get_config,
    check_config=check_config,
    drivers=("main",),
    batch_keys=BATCH_KEYS,
    methods=METHODS,
    method_of=method_of,
    short_names={"horizon_length": "h", "agent.actor_num_samples": "N"},
)
