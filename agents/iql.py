"""IQL: implicit Q-learning (Kostrikov, Nair, Levine, ICLR 2022), a baseline of the Q-chunking paper.

As the FQL release has it (seohongpark/fql at 719d044, `agents/iql.py`; the paper's IQL runs use that code):
an expectile value `V(s)`, a TD critic pair `Q_1, Q_2` bootstrapped from `V`, and a Gaussian policy extracted
by AWR (`actor_loss='awr'`) or DDPG+BC (`'ddpgbc'`). The value, critic and actor losses are summed and take
one Adam step together; the target critic moves by Polyak averaging from the parameters before the step.

Windows: the batch holds `h = horizon_length` steps (docs/batch_contract.md); the agent reads the first action
`a_t` and, for the TD target, the h-step reward sum, `gamma^h` and `s_{t+h}`. With `h = 1` (the paper's IQL)
this is the release's one-step update value for value (tests/test_golden_baselines.py); `h > 1` is an n-step
IQL that the paper does not run (docs/differences.md, section 24).

Networks (one `ModuleDict`, one Adam optimizer; `params['modules_<name>']`): `value` (`Value`, one member),
`critic`, `target_critic` (`Value`, two members), `actor` (`GaussianActor`).

Gradient routing (utils/flax_utils.py): the value loss reads the target critic, the critic loss reads `V(s')`,
the AWR weights read `Q` and `V`, the DDPG+BC Q term reads `Q`, all without `params=`: exactly zero gradient.
"""

from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import optax

from agents import common
from utils.flax_utils import ModuleDict, TrainState, nonpytree_field, scan_updates, select_keys, target_update
from utils.networks import GaussianActor, Value

ACTOR_LOSSES = ("awr", "ddpgbc")
# The batch keys the losses read (docs/batch_contract.md); only these cross the jit boundary.
BATCH_KEYS = ("observations", "actions", "next_observations", "rewards", "masks", "valid")
AWR_MAX_WEIGHT = 100.0  # the release clips exp(alpha * adv) at 100


def expectile_loss(diff, expectile):
    """`|expectile - 1(diff < 0)| * diff^2`, elementwise (IQL eq. 1; the release's `expectile_loss(adv, diff)`
    with `adv = diff`): weight `expectile` where `Q - V >= 0`, `1 - expectile` below."""
    weight = jnp.where(diff >= 0, expectile, 1 - expectile)
    return weight * jnp.square(diff)


def first_actions(actions, config):
    """The first action of each window: `(B, h, A) -> (B, A)`; `ValueError` unless the windows have `h` steps."""
    return common.policy_actions(actions, {"horizon_length": config["horizon_length"], "action_chunking": False})


class IQLAgent(flax.struct.PyTreeNode):
    """Implicit Q-learning with AWR or DDPG+BC policy extraction (the FQL release's IQL baseline)."""

    rng: Any
    network: Any
    config: Any = nonpytree_field()

    def value_loss(self, batch, grad_params):
        """Expectile regression of `V(s)` on the target critic (IQL eq. 1, release `value_loss`)::

        q = min_k Qbar_k(s_t, a_t)
        value_loss = mean_b L_tau(q - V(s_t)),   L_tau(u) = |tau - 1(u < 0)| u^2,  tau = `expectile`
        """
        actions = first_actions(batch["actions"], self.config)  # (B, A)
        q = self.network.select("target_critic")(batch["observations"], actions).min(axis=0)  # (B,)
        v = self.network.select("value")(batch["observations"], params=grad_params)  # (B,)
        value_loss = expectile_loss(q - v, self.config["expectile"]).mean()
        return value_loss, {
            "value/value_loss": value_loss,
            "value/v_mean": v.mean(),
            "value/v_max": v.max(),
            "value/v_min": v.min(),
        }

    def critic_loss(self, batch, grad_params):
        """TD regression of both critics on `V` of the bootstrap state (IQL eq. 2, release `critic_loss`)::

            target = rewards[:, -1] + gamma^h * masks[:, -1] * V(next_observations[:, -1])     # (B,)
            critic_loss = mean_b valid[b, -1] * sum_k (Q_k(s_t, a_t) - target)^2

        (h = 1: the release's `((q1 - q)**2 + (q2 - q)**2).mean()`). `critic/q_*` describe the target, as the
        release logs them.
        """
        cfg = self.config
        next_v = self.network.select("value")(batch["next_observations"][:, -1])  # (B,)
        bootstrap = cfg["discount"] ** cfg["horizon_length"] * batch["masks"][:, -1]  # (B,)
        target = batch["rewards"][:, -1] + bootstrap * next_v  # (B,)
        actions = first_actions(batch["actions"], cfg)
        qs = self.network.select("critic")(batch["observations"], actions, params=grad_params)  # (2, B)
        critic_loss = (batch["valid"][:, -1] * jnp.square(qs - target).sum(axis=0)).mean()
        return critic_loss, {
            "critic/critic_loss": critic_loss,
            "critic/q_mean": target.mean(),
            "critic/q_max": target.max(),
            "critic/q_min": target.min(),
        }

    def actor_loss(self, batch, grad_params, rng):
        """Policy extraction (release `actor_loss`), `alpha` the AWR temperature or the BC coefficient::

            awr:    w = min(exp(alpha * (min_k Q_k(s, a) - V(s))), 100);  loss = -mean_b w * log pi(a | s)
            ddpgbc: a_pi = clip(mode or sample of pi(s), -1, 1);  q = min_k Q_k(s, a_pi)
                    loss = -mean q / stop_gradient(mean |q|) - alpha * mean log pi(a | s)

        `a = a_t`, the first action of the window; `rng` draws `a_pi` only for ddpgbc without `const_std`.
        """
        cfg = self.config
        observations = batch["observations"]
        actions = first_actions(batch["actions"], cfg)  # (B, A)
        dist = self.network.select("actor")(observations, params=grad_params)
        log_prob = dist.log_prob(actions)  # (B,)
        common_info = {
            "actor/bc_log_prob": log_prob.mean(),
            "actor/mse": jnp.mean(jnp.square(dist.mode() - actions)),
            "actor/std": jnp.mean(dist.scale_diag),
        }
        if cfg["actor_loss"] == "awr":
            v = self.network.select("value")(observations)  # (B,)
            q = self.network.select("critic")(observations, actions).min(axis=0)  # (B,)
            adv = q - v
            weights = jnp.minimum(jnp.exp(adv * cfg["alpha"]), AWR_MAX_WEIGHT)
            actor_loss = -(weights * log_prob).mean()
            return actor_loss, {"actor/actor_loss": actor_loss, "actor/adv": adv.mean(), **common_info}

        if cfg["const_std"]:
            pi_actions = dist.mode()
        else:
            pi_actions = dist.mode() + dist.scale_diag * jax.random.normal(rng, dist.mode().shape)
        q = self.network.select("critic")(observations, jnp.clip(pi_actions, -1, 1)).min(axis=0)  # (B,)
        q_abs_mean = jnp.abs(q).mean()
        q_loss = -q.mean() / jax.lax.stop_gradient(q_abs_mean)  # scale-free Q term, as the release
        bc_loss = -(cfg["alpha"] * log_prob).mean()
        actor_loss = q_loss + bc_loss
        return actor_loss, {
            "actor/actor_loss": actor_loss,
            "actor/q_loss": q_loss,
            "actor/bc_loss": bc_loss,
            "actor/q_mean": q.mean(),
            "actor/q_abs_mean": q_abs_mean,
            **common_info,
        }

    def total_loss(self, batch, grad_params, rng):
        """`value_loss + critic_loss + actor_loss` (one optimizer step for all three, as the release); info of all."""
        value_loss, value_info = self.value_loss(batch, grad_params)
        critic_loss, critic_info = self.critic_loss(batch, grad_params)
        _, actor_rng = jax.random.split(rng)
        actor_loss, actor_info = self.actor_loss(batch, grad_params, actor_rng)
        return value_loss + critic_loss + actor_loss, {**value_info, **critic_info, **actor_info}

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
        return scan_updates(IQLAgent._update, self, select_keys(stacked_batches, BATCH_KEYS))

    @jax.jit
    def sample_actions(self, observations, rng, temperature=1.0):
        """`clip(mean(s) + temperature * std * n, -1, 1)`, `n ~ N(0, I)`: `(*B, *ob) -> (*B, A)` (release
        `sample_actions`). Temperature 1 (the default) collects online data; evaluation passes
        `--eval_temperature` (0, the release's evaluation: the mean action). One action per call: the chunk
        length is 1 whatever `horizon_length` is."""
        dist = self.network.select("actor")(observations)
        means = dist.mode()
        return jnp.clip(means + temperature * dist.scale_diag * jax.random.normal(rng, means.shape), -1, 1)

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
        value_dims, norm = config["value_hidden_dims"], config["layer_norm"]
        modules = {
            "value": Value(hidden_dims=value_dims, layer_norm=norm, num_ensembles=1),
            "critic": Value(hidden_dims=value_dims, layer_norm=norm, num_ensembles=2),
            "target_critic": Value(hidden_dims=value_dims, layer_norm=norm, num_ensembles=2),
            "actor": GaussianActor(
                hidden_dims=config["actor_hidden_dims"],
                action_dim=config["action_dim"],
                layer_norm=config["actor_layer_norm"],
                const_std=config["const_std"],
            ),
        }
        args = {"value": (ex_obs,), "critic": (ex_obs, ex_act), "target_critic": (ex_obs, ex_act), "actor": (ex_obs,)}
        network_def = ModuleDict(modules)
        params = dict(network_def.init(init_rng, **args)["params"])
        params["modules_target_critic"] = params["modules_critic"]
        network = TrainState.create(network_def, params, tx=optax.adam(learning_rate=config["lr"]))
        return cls(rng=rng, network=network, config=flax.core.FrozenDict(config))


def get_config():
    """IQL hyperparameters: the FQL release's keys and defaults, plus the window and shape keys of this repository.

    The paper's settings (Li, Zhou, Levine 2025, appendix): expectile 0.9; alpha (AWR temperature) 0.3 on cube,
    10 on scene and puzzle-3x3; h = 1 (the default here; `--horizon_length` overrides it).
    """
    placeholder = ml_collections.config_dict.placeholder
    return ml_collections.ConfigDict(
        dict(
            agent_name="iql",  # Agent name (the drivers look the class up by it).
            lr=3e-4,  # Adam learning rate.
            batch_size=256,  # Windows per gradient step.
            actor_hidden_dims=(512, 512, 512, 512),  # Hidden widths of the actor.
            value_hidden_dims=(512, 512, 512, 512),  # Hidden widths of the value and of each critic.
            layer_norm=True,  # Layer norm in the value and critic.
            actor_layer_norm=False,  # Layer norm in the actor.
            discount=0.99,  # gamma (also the dataset's reward sums).
            tau=0.005,  # Polyak rate of the target critic.
            expectile=0.9,  # IQL expectile of the value regression.
            actor_loss="awr",  # Policy extraction: 'awr' or 'ddpgbc'.
            alpha=10.0,  # AWR temperature, or the BC coefficient of DDPG+BC.
            const_std=True,  # Fixed unit std of the actor (else a learned state-independent log std).
            encoder=placeholder(str),  # Visual encoder of the release; none is implemented here: must stay None.
            horizon_length=1,  # Window length h (the paper's IQL: 1); --horizon_length overrides it.
            ob_dims=placeholder(tuple),  # Observation shape; filled in by create().
            action_dim=placeholder(int),  # Action size; filled in by create().
        )
    )


def check_config(config):
    """A plain-dict copy of `config` (hashable for jit) with every key checked.

    Raises `ValueError` naming `--agent.KEY` for an unknown or missing key or a bad value.
    """
    c = common.plain_config(config, get_config(), "iql")
    common.check_shared(c, "iql")
    expectile_ok = common.is_number(c["expectile"], 0, 1, low_open=True, high_open=True)
    common.expect(c, "expectile", expectile_ok, "a number in (0, 1)")
    common.expect(c, "actor_loss", c["actor_loss"] in ACTOR_LOSSES, f"one of {ACTOR_LOSSES}")
    common.expect(c, "alpha", common.is_number(c["alpha"], 0), "a number >= 0")
    common.expect(c, "encoder", c["encoder"] is None, "None (no visual encoder is implemented here)")
    common.check_types(c, get_config())
    return c


# ---- the paper's method (Li, Zhou, Levine 2025, appendix D.3; docs/settings.md) ------------------------------

# Per OGBench domain (the paper runs IQL on OGBench only): --sparse and alpha, the AWR temperature.
PAPER_DOMAINS = {
    "scene": (True, 10.0),
    "puzzle-3x3": (True, 10.0),
    "cube-double": (False, 0.3),
    "cube-triple": (False, 0.3),
    "cube-quadruple": (False, 0.3),
}

METHODS = {
    "iql": common.Method(
        "IQL",
        {"horizon_length": 1, "agent.actor_loss": "awr"},
        {
            d: {"agent.alpha": alpha, "agent.expectile": 0.9, "sparse": sparse}
            for d, (sparse, alpha) in PAPER_DOMAINS.items()
        },
        source="arXiv 2507.07969, appendix D.3",
    )
}


def method_of(config):
    """`'iql'` for the paper's IQL (h = 1, AWR extraction); None otherwise (an n-step or DDPG+BC IQL)."""
    return "iql" if int(config["horizon_length"]) == 1 and config.get("actor_loss") == "awr" else None


SPEC = common.AgentSpec(
    name="iql",
    agent_class=IQLAgent,
    get_config=get_config,
    check_config=check_config,
    drivers=("main",),
    batch_keys=BATCH_KEYS,
    methods=METHODS,
    method_of=method_of,
    short_names={"horizon_length": "h"},
    chunk_length=lambda config: 1,
)
