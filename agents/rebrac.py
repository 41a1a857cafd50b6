"""ReBRAC: revisited behaviour-regularised actor-critic (Tarasov et al., NeurIPS 2023), a Q-chunking baseline.

As the FQL release has it (seohongpark/fql at 719d044, `agents/rebrac.py`; the paper's ReBRAC runs use that
code): TD3+BC with layer norm, a deterministic `tanh` actor, a BC term in the actor loss (`alpha_actor`) and
another in the critic target (`alpha_critic`), clipped Gaussian noise on the target action, and the actor (with
both target networks) trained only on every `actor_freq`-th update. The paper's setting: `alpha_actor = 0.1`
on every OGBench domain.

Windows: the batch holds `h = horizon_length` steps (docs/batch_contract.md); the agent reads the first action
`a_t`, and for the TD target the h-step reward sum, `gamma^h`, `s_{t+h}` and the dataset action there
(`next_actions[:, -1]`). With `h = 1` (the paper's ReBRAC) this is the release's update value for value
(tests/test_golden_baselines.py); `h > 1` is an n-step ReBRAC the paper does not run (docs/differences.md, 24).

Networks (one `ModuleDict`, one Adam optimizer; `params['modules_<name>']`): `critic`, `target_critic`
(`Value`, two members), `actor`, `target_actor` (`GaussianActor` with unit std; the action is `tanh(mean)`).

Gradient routing (utils/flax_utils.py): the target networks, and the critic inside the actor loss, are called
without `params=` (zero gradient); on a critic-only update the actor term is left out of the loss, so the actor's
gradient is exactly zero (Adam still steps it with that zero gradient, as the release's optimizer does).
"""

from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import optax

from agents import common
from agents.iql import first_actions
from utils.flax_utils import ModuleDict, TrainState, nonpytree_field, scan_updates, select_keys, target_update
from utils.networks import GaussianActor, Value

# The batch keys the losses read (docs/batch_contract.md); only these cross the jit boundary.
BATCH_KEYS = ("observations", "actions", "next_observations", "next_actions", "rewards", "masks", "valid")


def is_full_update(step, config):
    """Whether the update made at TrainState step `step` (1 before the first update) also trains the actor and
    moves the targets: `step % actor_freq == 0`, the release's `full_update=(i % actor_freq == 0)` for its
    update `i = 1, 2, ...` (so with `actor_freq = 2`: updates 2, 4, ...)."""
    return step % config["actor_freq"] == 0


class ReBRACAgent(flax.struct.PyTreeNode):
    """ReBRAC: TD3+BC with layer norm and separate actor and critic BC terms (the FQL release's baseline)."""

    rng: Any
    network: Any
    config: Any = nonpytree_field()

    def policy_actions(self, observations, name="actor", params=None):
        """The deterministic action `tanh(mean(s))` (`mean(s)` without `tanh_squash`): `(*B, *ob) -> (*B, A)`."""
        means = self.network.select(name)(observations, params=params).mode()
        return jnp.tanh(means) if self.config["tanh_squash"] else means

    def critic_loss(self, batch, grad_params, rng):
        """TD3-style target with the critic BC term (release `critic_loss`), `s' = next_observations[:, -1]`::

            a'     = clip(mu_target(s') + clip(actor_noise * n, -actor_noise_clip, actor_noise_clip), -1, 1)
            next_q = min_k Qbar_k(s', a') - alpha_critic * sum_j (a' - next_actions[:, -1])_j^2
            target = rewards[:, -1] + gamma^h * masks[:, -1] * next_q
            critic_loss = mean_{k,b} valid[b, -1] * (Q_k(s_t, a_t) - target)^2

        `n ~ N(0, I)` from `rng` (`(B, A)`); `critic/q_*` describe `Q_k(s_t, a_t)`, as the release logs them.
        """
        cfg = self.config
        next_observations = batch["next_observations"][:, -1]  # (B, *ob)
        next_actions = self.policy_actions(next_observations, "target_actor")  # (B, A)
        noise = jax.random.normal(rng, next_actions.shape) * cfg["actor_noise"]
        noise = jnp.clip(noise, -cfg["actor_noise_clip"], cfg["actor_noise_clip"])
        next_actions = jnp.clip(next_actions + noise, -1, 1)
        next_q = self.network.select("target_critic")(next_observations, next_actions).min(axis=0)  # (B,)
        bc = jnp.square(next_actions - batch["next_actions"][:, -1]).sum(axis=-1)  # (B,)
        next_q = next_q - cfg["alpha_critic"] * bc
        bootstrap = cfg["discount"] ** cfg["horizon_length"] * batch["masks"][:, -1]  # (B,)
        target = batch["rewards"][:, -1] + bootstrap * next_q  # (B,)

        actions = first_actions(batch["actions"], cfg)  # (B, A)
        q = self.network.select("critic")(batch["observations"], actions, params=grad_params)  # (2, B)
        critic_loss = jnp.mean(batch["valid"][:, -1] * jnp.square(q - target))
        return critic_loss, {
            "critic/critic_loss": critic_loss,
            "critic/q_mean": q.mean(),
            "critic/q_max": q.max(),
            "critic/q_min": q.min(),
        }

    def actor_loss(self, batch, grad_params):
        """Deterministic policy gradient with the actor BC term (release `actor_loss`), `mu = policy_actions(s)`::

        actor_loss = -mean_b min_k Q_k(s, mu) / stop_gradient(mean_b |min_k Q_k(s, mu)|)
        bc_loss    = alpha_actor * mean_b sum_j (mu - a_t)_j^2
        total_loss = actor_loss + bc_loss
        """
        cfg = self.config
        observations = batch["observations"]
        dist = self.network.select("actor")(observations, params=grad_params)
        mu = jnp.tanh(dist.mode()) if cfg["tanh_squash"] else dist.mode()  # (B, A)
        q = self.network.select("critic")(observations, mu).min(axis=0)  # (B,)
        bc = jnp.square(mu - first_actions(batch["actions"], cfg)).sum(axis=-1)  # (B,)
        scale = jax.lax.stop_gradient(1 / jnp.abs(q).mean())
        actor_loss = -(scale * q).mean()
        bc_loss = (cfg["alpha_actor"] * bc).mean()
        total_loss = actor_loss + bc_loss
        return total_loss, {
            "actor/total_loss": total_loss,
            "actor/actor_loss": actor_loss,
            "actor/bc_loss": bc_loss,
            "actor/std": dist.scale_diag.mean(),  # the fixed unit std, as the release logs it
            "actor/mse": bc.mean(),
        }

    def total_loss(self, batch, grad_params, rng, full_update):
        """`critic_loss`, plus `actor_loss` where `full_update` (a traced bool); info of both.

        A critic-only update does not compute the actor's loss at all (`lax.cond`: the release's critic-only
        update, whose work is half the full one's), so its `actor/...` entries are NaN, "not computed" (the
        release logs them on full updates only); `actor/full_update` says which updates trained the actor.
        Under `vmap` (a seed group) both branches run and the right one is selected, values unchanged.
        """
        _, _, critic_rng = jax.random.split(rng, 3)  # the release's split: (rng, actor_rng, critic_rng)
        critic_loss, critic_info = self.critic_loss(batch, grad_params, critic_rng)

        def skip_actor(batch, grad_params):
            shapes = jax.eval_shape(self.actor_loss, batch, grad_params)[1]
            return jnp.zeros((), jnp.float32), jax.tree_util.tree_map(
                lambda x: jnp.full(x.shape, jnp.nan, x.dtype), shapes
            )

        actor_loss, actor_info = jax.lax.cond(full_update, self.actor_loss, skip_actor, batch, grad_params)
        loss = critic_loss + actor_loss
        return loss, {**critic_info, **actor_info, "actor/full_update": jnp.asarray(full_update, jnp.float32)}

    @staticmethod
    @jax.jit
    def _update(agent, batch):
        """One gradient step (critic, and actor on full updates) and, on full updates, one Polyak step of both
        targets from the parameters before the step: `(agent, info)`."""
        new_rng, rng = jax.random.split(agent.rng)
        full_update = is_full_update(agent.network.step, agent.config)

        def loss_fn(grad_params):
            return agent.total_loss(batch, grad_params, rng, full_update)

        network, info = agent.network.apply_loss_fn(loss_fn)
        tau = agent.config["tau"]
        moved = target_update(target_update(network, agent.network, "critic", tau), agent.network, "actor", tau)
        params = jax.tree_util.tree_map(lambda m, n: jnp.where(full_update, m, n), moved.params, network.params)
        return agent.replace(network=network.replace(params=params), rng=new_rng), info

    def update(self, batch):
        """One update on `batch` (B windows of `h` steps): `(agent, info)`. Only `BATCH_KEYS` cross the jit.
        Whether it trains the actor follows the update count (`is_full_update`)."""
        return self._update(self, select_keys(batch, BATCH_KEYS))

    def batch_update(self, stacked_batches):
        """`update` on each batch along the leading (UTD) axis `(U, B, ...)` in one `lax.scan`; info averaged."""
        return scan_updates(ReBRACAgent._update, self, select_keys(stacked_batches, BATCH_KEYS))

    @jax.jit
    def sample_actions(self, observations, rng, temperature=1.0):
        """`clip(mu(s) + clip(temperature * actor_noise * n, -actor_noise_clip, actor_noise_clip), -1, 1)`,
        `n ~ N(0, I)`: `(*B, *ob) -> (*B, A)` (release `sample_actions`). Temperature 1 (the default) collects
        online data; evaluation passes `--eval_temperature` (0, the release's evaluation: no noise)."""
        cfg = self.config
        actions = self.policy_actions(observations)
        noise = jax.random.normal(rng, actions.shape) * cfg["actor_noise"] * temperature
        noise = jnp.clip(noise, -cfg["actor_noise_clip"], cfg["actor_noise_clip"])
        return jnp.clip(actions + noise, -1, 1)

    @classmethod
    def create(cls, seed, ex_observations, ex_actions, config):
        """New agent; `config` (`get_config()` with `horizon_length` set) is not modified.

        `ex_actions`: one action `(A,)` with one observation `(*ob)`, or `(B, A)` with `(B, *ob)`.
        Raises `ValueError` naming the key for a bad configuration.
        """
        config = common.fill_shapes(check_config(config), ex_observations, ex_actions)
        ex_obs = jnp.asarray(ex_observations).reshape((-1, *config["ob_dims"]))[:1]  # (1, *ob)
        ex_act = jnp.zeros((1, config["action_dim"]))
        rng, init_rng = jax.random.split(common.init_key(seed))  # the release's order: same initial parameters
        modules, args = {}, {}
        for name in ("critic", "target_critic"):
            modules[name] = Value(hidden_dims=config["value_hidden_dims"], layer_norm=config["layer_norm"])
            args[name] = (ex_obs, ex_act)
        for name in ("actor", "target_actor"):
            modules[name] = GaussianActor(
                hidden_dims=config["actor_hidden_dims"],
                action_dim=config["action_dim"],
                layer_norm=config["actor_layer_norm"],
                const_std=True,
                final_fc_init_scale=config["actor_fc_scale"],
            )
            args[name] = (ex_obs,)
        network_def = ModuleDict(modules)
        params = dict(network_def.init(init_rng, **args)["params"])
        for name in ("critic", "actor"):
            params[f"modules_target_{name}"] = params[f"modules_{name}"]
        network = TrainState.create(network_def, params, tx=optax.adam(learning_rate=config["lr"]))
        return cls(rng=rng, network=network, config=flax.core.FrozenDict(config))


def get_config():
    """ReBRAC hyperparameters: the FQL release's keys and defaults, plus the window and shape keys of this repository.

    The paper's setting (Li, Zhou, Levine 2025, appendix): `alpha_actor = 0.1` on every OGBench domain;
    h = 1 (the default here; `--horizon_length` overrides it).
    """
    placeholder = ml_collections.config_dict.placeholder
    return ml_collections.ConfigDict(
        dict(
            agent_name="rebrac",  # Agent name (the drivers look the class up by it).
            lr=3e-4,  # Adam learning rate.
            batch_size=256,  # Windows per gradient step.
            actor_hidden_dims=(512, 512, 512, 512),  # Hidden widths of the actor.
            value_hidden_dims=(512, 512, 512, 512),  # Hidden widths of each critic.
            layer_norm=True,  # Layer norm in the critic.
            actor_layer_norm=False,  # Layer norm in the actor.
            discount=0.99,  # gamma (also the dataset's reward sums).
            tau=0.005,  # Polyak rate of both targets (moved on full updates only).
            tanh_squash=True,  # Squash the actor's mean with tanh.
            actor_fc_scale=0.01,  # Init scale of the actor's last layer.
            alpha_actor=0.0,  # Actor BC coefficient (the paper: 0.1).
            alpha_critic=0.0,  # Critic BC coefficient (in the target).
            actor_freq=2,  # Train the actor (and move the targets) on every actor_freq-th update.
            actor_noise=0.2,  # Std of the target-action and acting noise.
            actor_noise_clip=0.5,  # Clip of that noise.
            encoder=placeholder(str),  # Visual encoder of the release; none is implemented here: must stay None.
            horizon_length=1,  # Window length h (the paper's ReBRAC: 1); --horizon_length overrides it.
            ob_dims=placeholder(tuple),  # Observation shape; filled in by create().
            action_dim=placeholder(int),  # Action size; filled in by create().
        )
    )


def check_config(config):
    """A plain-dict copy of `config` (hashable for jit) with every key checked.

    Raises `ValueError` naming `--agent.KEY` for an unknown or missing key or a bad value.
    """
    c = common.plain_config(config, get_config(), "rebrac")
    common.check_shared(c, "rebrac")
    for key in ("alpha_actor", "alpha_critic", "actor_noise", "actor_noise_clip"):
        common.expect(c, key, common.is_number(c[key], 0), "a number >= 0")
    common.expect(c, "actor_fc_scale", common.is_number(c["actor_fc_scale"], 0, low_open=True), "a number > 0")
    common.expect(c, "actor_freq", common.is_int(c["actor_freq"], 1), "an int >= 1")
    common.expect(c, "encoder", c["encoder"] is None, "None (no visual encoder is implemented here)")
    common.check_types(c, get_config())
    return c


# ---- the paper's method (Li, Zhou, Levine 2025, appendix D.3, Table 4; docs/settings.md) ----------------------

# Per OGBench domain (the paper runs ReBRAC on OGBench only): --sparse and alpha_actor, the actor's BC weight
# (swept over {0.01, 0.03, 0.1, 0.3, 1}, 0.1 chosen everywhere). alpha_critic keeps the release's default 0.
PAPER_DOMAINS = {
    "scene": (True, 0.1),
    "puzzle-3x3": (True, 0.1),
    "cube-double": (False, 0.1),
    "cube-triple": (False, 0.1),
    "cube-quadruple": (False, 0.1),
}

METHODS = {
    "rebrac": common.Method(
        "ReBRAC",
        {"horizon_length": 1},
        {d: {"agent.alpha_actor": alpha, "sparse": sparse} for d, (sparse, alpha) in PAPER_DOMAINS.items()},
        source="arXiv 2507.07969, appendix D.3 and Table 4",
    )
}


def method_of(config):
    """`'rebrac'` for the paper's ReBRAC (h = 1); None for an n-step ReBRAC."""
    return "rebrac" if int(config["horizon_length"]) == 1 else None


SPEC = common.AgentSpec(
    name="rebrac",
    agent_class=ReBRACAgent,
    get_config=get_config,
    check_config=check_config,
    drivers=("main",),
    batch_keys=BATCH_KEYS,
    methods=METHODS,
    method_of=method_of,
    short_names={"horizon_length": "h"},
    chunk_length=lambda config: 1,
)
