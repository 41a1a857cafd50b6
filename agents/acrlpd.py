"""ACRLPD: SAC / RLPD with action chunking (RLPD, RLPD-AC, QC-RLPD; Li, Zhou, Levine, NeurIPS 2025).

RLPD (Ball et al. 2023) is SAC (Haarnoja et al. 2018) with a LayerNorm critic ensemble and 50/50
offline/online batches (the batches are the driver's business). With `action_chunking` the actor
and critic work on whole chunks `A_t = a_{t:t+h}` flattened to `h * action_dim`; without it they
see only `a_t` while the h-step reward sum and the `gamma^h` bootstrap stay (n-step baseline).

Networks (one `ModuleDict`, one Adam optimizer; `params['modules_<name>']`):

* `critic`, `target_critic`: `Value` ensembles of `num_qs` members with layer norm.
* `actor`: `TanhNormalActor`, `pi(A | s)` over the (chunked) action.
* `temperature`: `Temperature`, the SAC entropy temperature `alpha = exp(log_alpha)`.

Gradient routing (utils/flax_utils.py: a module gets gradient only when called with
`params=grad_params`): the critic loss reaches only `critic` (the next action, the target critic
and, with `backup_entropy`, the temperature use stored parameters); the actor loss reaches only
`actor` (the critic and the temperature inside it use stored parameters); the temperature loss
reaches only `temperature` (its entropy is stop-gradiented). `target_critic` only moves by Polyak
averaging. tests/test_acrlpd.py checks the zeros.
"""

from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

from agents import common
from agents.acfql import PAPER_DOMAINS
from agents.common import ensemble_values, policy_actions, policy_steps
from utils.flax_utils import ModuleDict, TrainState, nonpytree_field, scan_updates, select_keys, target_update
from utils.networks import TanhNormalActor, Value

# The batch keys the losses read (docs/batch_contract.md); only these cross the jit boundary.
BATCH_KEYS = ("observations", "actions", "next_observations", "rewards", "masks", "valid")
DATA_ACTION_CLIP = 1 - 1e-5  # Data actions are clipped into (-1+1e-5, 1-1e-5) before atanh (as the reference).


class Temperature(nn.Module):
    """The SAC temperature `alpha = exp(log_alpha)`: one scalar parameter, `alpha = init_value` at init.

    Call `()` -> scalar `alpha` (learned as a log so that it stays positive).
    """

    init_value: float = 1.0

    @nn.compact
    def __call__(self):
        # float32, not a weakly typed scalar: a weak type here would change after the first update and make
        # every jitted update compile twice.
        log_alpha = self.param("log_alpha", lambda _: jnp.full((), jnp.log(self.init_value), jnp.float32))
        return jnp.exp(log_alpha)


def _log_likelihood_per_dim(dist, actions):
    """Per-dimension `log pi(a_j | s)` of the tanh-Gaussian `dist` at data `actions` `(B, D)` -> `(B, D)`.

    `a` is clipped into `(-1+1e-5, 1-1e-5)`, `u = atanh(a)`, and
    `log pi(a_j) = log N(u_j; mu_j, sigma_j) - log(1 - tanh(u_j)^2)` (change of variables; the log-det
    in distrax's stable form `2 (log 2 - u - softplus(-2u))`). Because the base Gaussian is diagonal and
    the tanh is elementwise, the sum over `D` is `dist.log_prob(a)` and the sum over a subset of
    dimensions is the exact marginal log-likelihood of that subset.
    """
    u = jnp.arctanh(jnp.clip(actions, -DATA_ACTION_CLIP, DATA_ACTION_CLIP))  # (B, D)
    loc, scale = dist.distribution.loc, dist.distribution.scale_diag  # (B, D) each
    log_normal = -0.5 * jnp.square((u - loc) / scale) - jnp.log(scale) - 0.5 * jnp.log(2 * jnp.pi)
    log_det = 2.0 * (jnp.log(2.0) - u - jax.nn.softplus(-2.0 * u))  # log(1 - tanh(u)^2)
    return log_normal - log_det  # (B, D)


class ACRLPDAgent(flax.struct.PyTreeNode):
    """Soft actor-critic with a chunked critic ensemble: RLPD (h=1), RLPD-AC (h=5), QC-RLPD (h=5, bc_alpha)."""

    rng: Any
    network: Any
    config: Any = nonpytree_field()

    def critic_loss(self, batch, grad_params, rng):
        """TD loss of the critic ensemble on windows of `h` steps (SAC / RLPD backup)::

            A'           ~ pi(. | s_{t+h})                          # stored actor, rng split [0]
            next_q       = agg_k Qbar_k(s_{t+h}, A')                 # q_agg over the target ensemble
            target_q     = rewards[:, -1] + gamma^h * masks[:, -1] * next_q
                           [- gamma^h * masks[:, -1] * alpha * log pi(A' | s_{t+h})]   # backup_entropy
            critic_loss  = mean_{k,b} valid[b, -1] * (Q_k(s_t, A_t) - target_q)^2

        With `num_min_qs` (needs `q_agg='min'`), `agg` is RLPD's random-subset minimum: the min over
        `num_min_qs` members drawn without replacement (rng split [1]), one subset per batch.
        """
        cfg = self.config
        sample_rng, subset_rng = jax.random.split(rng)
        next_observations = batch["next_observations"][:, -1]  # (B, *ob): s_{t+h}
        next_dist = self.network.select("actor")(next_observations)
        next_actions, next_log_probs = next_dist.sample_and_log_prob(seed=sample_rng)  # (B, A), (B,)
        next_qs = ensemble_values(self.network, cfg, "target_critic", next_observations, next_actions)  # (K, B)
        if cfg["num_min_qs"] is not None:  # Difference from the reference: an option it lacks (RLPD's subset).
            members = jax.random.choice(subset_rng, cfg["num_qs"], (cfg["num_min_qs"],), replace=False)
            next_q = next_qs[members].min(axis=0)  # (num_min_qs, B) -> (B,)
        elif cfg["q_agg"] == "min":
            next_q = next_qs.min(axis=0)  # (B,)
        else:
            next_q = next_qs.mean(axis=0)  # (B,)
        chunk_reward = batch["rewards"][:, -1]  # (B,): sum_{k<h} gamma^k r_{t+k}
        bootstrap = cfg["discount"] ** cfg["horizon_length"] * batch["masks"][:, -1]  # (B,)
        target_q = chunk_reward + bootstrap * next_q
        if cfg["backup_entropy"]:
            # Difference from the reference: an option it lacks (RLPD's default; off in the paper's variants).
            target_q = target_q - bootstrap * self.network.select("temperature")() * next_log_probs

        actions = policy_actions(batch["actions"], cfg)
        q = ensemble_values(self.network, cfg, "critic", batch["observations"], actions, grad_params)  # (K, B)
        critic_loss = jnp.mean(batch["valid"][:, -1] * jnp.square(q - target_q))  # mean over K and B
        return critic_loss, {
            "critic/critic_loss": critic_loss,
            "critic/q_mean": q.mean(),
            "critic/q_max": q.max(),
            "critic/q_min": q.min(),
            "critic/target_q_mean": target_q.mean(),
        }

    def actor_loss(self, batch, grad_params, rng):
        """SAC policy loss plus the chunk BC term::

            A ~ pi(. | s_t) (reparameterised),   log_prob = log pi(A | s_t)
            sac_loss = mean_b [alpha * log_prob - mean_k Q_k(s_t, A)]          # alpha, Q: stored, no gradient
            bc_nll   = mean_b sum_{k<h} valid[b, k] * (-sum_j log pi(a_data[b, k, j] | s_t))
            actor_loss = sac_loss + bc_alpha * bc_nll

        `bc_nll` uses `_log_likelihood_per_dim` reshaped to `(B, h, action_dim)`: chunk steps
        with `valid` 0 (after the end of a trajectory) contribute nothing, and with every step valid
        it equals `-log pi(A_data | s_t)` of the whole chunk. Info `actor/entropy` feeds the
        temperature loss.
        """
        cfg = self.config
        observations = batch["observations"]
        dist = self.network.select("actor")(observations, params=grad_params)
        actions, log_probs = dist.sample_and_log_prob(seed=rng)  # (B, A), (B,)
        q = ensemble_values(self.network, cfg, "critic", observations, actions).mean(axis=0)  # (K, B) -> (B,)
        alpha = self.network.select("temperature")()  # stored: the actor loss does not move alpha
        sac_loss = jnp.mean(alpha * log_probs - q)

        data_actions = policy_actions(batch["actions"], cfg)  # (B, A)
        steps = policy_steps(cfg)
        log_lik = _log_likelihood_per_dim(dist, data_actions)  # (B, A)
        log_lik = log_lik.reshape(data_actions.shape[0], steps, cfg["action_dim"]).sum(axis=-1)  # (B, h)
        # Difference from the reference: it clones the whole chunk, post-terminal padding steps included.
        bc_nll = -jnp.mean(jnp.sum(batch["valid"][:, :steps] * log_lik, axis=-1))
        bc_loss = cfg["bc_alpha"] * bc_nll
        actor_loss = sac_loss + bc_loss
        return actor_loss, {
            "actor/total_loss": actor_loss,
            "actor/actor_loss": sac_loss,
            "actor/bc_loss": bc_loss,
            "actor/bc_nll": bc_nll,
            "actor/entropy": -log_probs.mean(),
            "actor/q": q.mean(),
        }

    def temperature_loss(self, grad_params, entropy):
        """SAC temperature loss `alpha * (entropy - target_entropy)` (entropy: stop-gradient, from the actor).

        Entropy above the target makes the loss increase with `alpha`, so `alpha` falls; below, it rises.
        Logged under the reference's names `actor/alpha` and `actor/alpha_loss`.
        """
        alpha = self.network.select("temperature")(params=grad_params)
        alpha_loss = alpha * (jax.lax.stop_gradient(entropy) - self.config["target_entropy"])
        return alpha_loss, {"actor/alpha_loss": alpha_loss, "actor/alpha": alpha}

    def total_loss(self, batch, grad_params, rng):
        """`critic_loss + actor_loss + temperature_loss` with independent randomness; info of all three."""
        critic_rng, actor_rng = jax.random.split(rng)
        critic_loss, critic_info = self.critic_loss(batch, grad_params, critic_rng)
        actor_loss, actor_info = self.actor_loss(batch, grad_params, actor_rng)
        alpha_loss, alpha_info = self.temperature_loss(grad_params, actor_info["actor/entropy"])
        return critic_loss + actor_loss + alpha_loss, {**critic_info, **actor_info, **alpha_info}

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
        return scan_updates(ACRLPDAgent._update, self, select_keys(stacked_batches, BATCH_KEYS))

    @jax.jit
    def sample_actions(self, observations, rng):
        """A sample of `pi(. | s)` clipped to [-1, 1] for `observations` `(*B, *ob)` (`*B` may be empty).

        Returns `(*B, h * action_dim)` with `action_chunking`, else `(*B, action_dim)`. Stochastic,
        for data collection and evaluation alike, as in the reference.
        """
        return jnp.clip(self.network.select("actor")(observations).sample(seed=rng), -1, 1)

    @classmethod
    def create(cls, seed, ex_observations, ex_actions, config):
        """New agent; `config` (`get_config()` with `horizon_length` set) is not modified.

        `ex_actions`: one action `(action_dim,)` with one observation `(*ob)`, or a batch
        `(B, action_dim)` with `(B, *ob)`. `action_dim`, `ob_dims` and (unless set)
        `target_entropy = -target_entropy_multiplier * h * action_dim` (`h` -> 1 without chunking)
        are filled in on a copy. Raises `ValueError` naming the key for a bad configuration.
        """
        config = common.fill_shapes(check_config(config), ex_observations, ex_actions)
        ex_observations = jnp.asarray(ex_observations)
        full_action_dim = config["action_dim"] * policy_steps(config)
        if config["target_entropy"] is None:
            config["target_entropy"] = -config["target_entropy_multiplier"] * full_action_dim
        ex_obs = ex_observations.reshape((-1, *config["ob_dims"]))[:1]  # (1, *ob)
        ex_chunk = jnp.zeros((1, full_action_dim))  # (1, h * A)

        critic_defs = [
            Value(
                hidden_dims=config["value_hidden_dims"], layer_norm=config["layer_norm"], num_ensembles=config["num_qs"]
            )
            for _ in range(2)
        ]  # critic, target_critic
        # log-std bounds [-20, 2]: RLPD's (and the reference's) TanhNormal, the module's defaults.
        actor_def = TanhNormalActor(
            hidden_dims=config["actor_hidden_dims"], action_dim=full_action_dim, layer_norm=config["actor_layer_norm"]
        )
        modules = dict(
            critic=critic_defs[0],
            target_critic=critic_defs[1],
            actor=actor_def,
            temperature=Temperature(config["init_temp"]),
        )
        args = dict(critic=(ex_obs, ex_chunk), target_critic=(ex_obs, ex_chunk), actor=(ex_obs,), temperature=())

        init_rng, rng = jax.random.split(common.init_key(seed))
        network_def = ModuleDict(modules)
        params = dict(network_def.init(init_rng, **args)["params"])
        params["modules_target_critic"] = params["modules_critic"]  # the target starts as the critic
        network = TrainState.create(network_def, params, tx=optax.adam(learning_rate=config["lr"]))
        return cls(rng=rng, network=network, config=flax.core.FrozenDict(config))


def get_config():
    """ACRLPD hyperparameters: the paper's RLPD variants (docs/settings.md).

    `agent_name` and `batch_size` are read by the drivers, every other key by this file.
    """
    placeholder = ml_collections.config_dict.placeholder
    return ml_collections.ConfigDict(
        dict(
            agent_name="acrlpd",  # Agent name (the drivers look the class up by it).
            lr=3e-4,  # Adam learning rate (actor, critic and temperature).
            batch_size=256,  # Windows per gradient step (main_online.py: half offline data, half replay).
            actor_hidden_dims=(512, 512, 512, 512),  # Hidden widths of the actor trunk.
            value_hidden_dims=(512, 512, 512, 512),  # Hidden widths of each critic member.
            layer_norm=True,  # Layer norm in the critic (RLPD).
            actor_layer_norm=False,  # Layer norm in the actor trunk.
            discount=0.99,  # gamma; the chunk reward sum uses the same number (set it in the dataset too).
            tau=0.005,  # Polyak rate of the target critic.
            num_qs=10,  # Critic ensemble size K (RLPD: 10).
            num_min_qs=placeholder(int),  # Set (RLPD: 2, with q_agg='min'): target = min over a random subset.
            q_agg="mean",  # Aggregation over the target ensemble ('mean' or 'min'; no clipped double Q: 'mean').
            backup_entropy=False,  # Subtract gamma^h * alpha * log pi(A'|s') in the target (SAC/RLPD default on).
            init_temp=1.0,  # Initial entropy temperature alpha.
            target_entropy_multiplier=0.5,  # target_entropy = -multiplier * (h * action_dim), h -> 1 unchunked.
            target_entropy=placeholder(float),  # Explicit target entropy; None: use the multiplier.
            bc_alpha=0.0,  # Weight of -log pi(A_data | s) masked by valid (QC-RLPD: 0.01).
            horizon_length=placeholder(int),  # Chunk length h; set by the driver from --horizon_length.
            action_chunking=True,  # False: actor and critic see the first action only (n-step baseline).
            ob_dims=placeholder(tuple),  # Observation shape; filled in by create().
            action_dim=placeholder(int),  # Single-step action size; filled in by create().
        )
    )


def check_config(config):
    """A plain-dict copy of `config` (hashable for jit) with every key checked.

    Raises `ValueError` naming `--agent.KEY` for an unknown or missing key or a bad value, and for
    `num_min_qs` above `num_qs` or set without `q_agg='min'`.
    """
    c = common.plain_config(config, get_config(), "acrlpd")
    common.check_shared(c, "acrlpd")
    num_min_qs = c["num_min_qs"]
    common.expect(c, "num_min_qs", num_min_qs is None or common.is_int(num_min_qs, 1), "None or an int >= 1")
    common.expect(c, "init_temp", common.is_number(c["init_temp"], 0, low_open=True), "a number > 0")
    multiplier = common.is_number(c["target_entropy_multiplier"], 0)
    common.expect(c, "target_entropy_multiplier", multiplier, "a number >= 0")
    entropy = c["target_entropy"] is None or common.is_number(c["target_entropy"])
    common.expect(c, "target_entropy", entropy, "None or a finite number")
    common.expect(c, "bc_alpha", common.is_number(c["bc_alpha"], 0), "a number >= 0")
    common.check_types(c, get_config())
    if num_min_qs is not None and num_min_qs > c["num_qs"]:
        raise ValueError(f"--agent.num_min_qs={num_min_qs} must be <= --agent.num_qs={c['num_qs']}.")
    if num_min_qs is not None and c["q_agg"] != "min":
        raise ValueError("--agent.q_agg must be 'min' when --agent.num_min_qs is set (RLPD's random-subset minimum).")
    return c


# ---- the paper's methods (Li, Zhou, Levine 2025, appendix; docs/settings.md) -------------------------------


def _method(label, h, bc_alpha):
    per_domain = {domain: {"sparse": row[0]} for domain, row in PAPER_DOMAINS.items()}
    settings = {"horizon_length": h, "agent.action_chunking": True, "agent.bc_alpha": bc_alpha}
    return label.lower(), common.Method(label, settings, per_domain, source="arXiv 2507.07969, appendix")


METHODS = dict(_method(*row) for row in (("RLPD", 1, 0.0), ("RLPD-AC", 5, 0.0), ("QC-RLPD", 5, 0.01)))


def method_of(config):
    """The paper method (`--method` name) a resolved config is: h > 1, chunking, a BC term or not; None if none."""
    bc = float(config.get("bc_alpha", 0.0)) != 0.0
    if int(config["horizon_length"]) == 1:
        return None if bc else "rlpd"
    if not config.get("action_chunking", True):
        return None  # the n-step variant: no method of the paper
    return "qc-rlpd" if bc else "rlpd-ac"


SPEC = common.AgentSpec(
    name="acrlpd",
    agent_class=ACRLPDAgent,
    get_config=get_config,
    check_config=check_config,
    drivers=("main_online",),
    batch_keys=BATCH_KEYS,
    methods=METHODS,
    method_of=method_of,
    short_names={"horizon_length": "h"},
)
