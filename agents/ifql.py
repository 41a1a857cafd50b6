"""IFQL: implicit flow Q-learning, with the n-step (IFQL-n) and chunked (QC-IFQL) variants of the Q-chunking paper.

IFQL as the FQL release has it (seohongpark/fql at 719d044, `agents/ifql.py`; the flow version of IDQL, Hansen-
Estruch et al. 2023): IQL's expectile value `V(s)` and TD critic pair, a flow-matching BC policy, and best-of-N
extraction at acting time (N = `num_samples` flow samples, the one with the highest `min_k Q_k` is taken).

One file for the three methods, as `agents/acfql.py` serves FQL / FQL-n / QC-FQL (Li, Zhou, Levine 2025; paper
settings N = 32, expectile 0.9):

* IFQL: `horizon_length = 1` (either `action_chunking`; at h = 1 both are the release's update, value for value,
  tests/test_golden_baselines.py).
* IFQL-n: `horizon_length = 5`, `action_chunking = False`: critic, value and policy see the single action `a_t`;
  the target uses the 5-step reward sum and `gamma^5`.
* QC-IFQL: `horizon_length = 5`, `action_chunking = True`: critic `Q(s_t, A_t)` and flow policy over the
  flattened chunk `A_t = a_{t:t+h}` `(B, h * A)`, executed open-loop (`sample_actions` returns the chunk).

The batch contract, the h-step target and the `valid` weights are ACFQL's (docs/batch_contract.md)::

    target = rewards[:, -1] + gamma^h * masks[:, -1] * V(next_observations[:, -1])

Networks (one `ModuleDict`, one Adam optimizer): `value` (`Value`, one member), `critic`, `target_critic`
(`Value`, two members, on `(s, A)`), `actor_flow` (`ActorVectorField` over `A`). Gradient routing
(utils/flax_utils.py): the value loss reads the target critic, the critic loss `V(s')`, without `params=`.
"""

from functools import partial
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import optax

from agents import common
from agents.common import policy_actions, policy_steps
from agents.iql import expectile_loss
from utils.flax_utils import ModuleDict, TrainState, nonpytree_field, scan_updates, select_keys, target_update
from utils.networks import ActorVectorField, Value

# The batch keys the losses read (docs/batch_contract.md); only these cross the jit boundary.
BATCH_KEYS = ("observations", "actions", "next_observations", "rewards", "masks", "valid")


class IFQLAgent(flax.struct.PyTreeNode):
    """Implicit flow Q-learning over single actions or action chunks (IFQL, IFQL-n, QC-IFQL)."""

    rng: Any
    network: Any
    config: Any = nonpytree_field()

    def value_loss(self, batch, grad_params):
        """Expectile regression of `V(s_t)` on the target critic (release `value_loss`), `A_t` the policy's
        input (`policy_actions`: the chunk `(B, h * A)`, or `a_t`)::

            value_loss = mean_b valid[b, -1] * L_tau(min_k Qbar_k(s_t, A_t) - V(s_t)),  L_tau(u) = |tau - 1(u<0)| u^2

        The `valid` weight is the critic's: a chunk that runs past its trajectory's end trains neither (1 at h = 1).
        """
        actions = policy_actions(batch["actions"], self.config)
        q = self.network.select("target_critic")(batch["observations"], actions).min(axis=0)  # (B,)
        v = self.network.select("value")(batch["observations"], params=grad_params)  # (B,)
        value_loss = jnp.mean(batch["valid"][:, -1] * expectile_loss(q - v, self.config["expectile"]))
        return value_loss, {
            "value/value_loss": value_loss,
            "value/v_mean": v.mean(),
            "value/v_max": v.max(),
            "value/v_min": v.min(),
        }

    def critic_loss(self, batch, grad_params):
        """h-step TD regression of both critics on `V` (release `critic_loss` at h = 1)::

            target = rewards[:, -1] + gamma^h * masks[:, -1] * V(next_observations[:, -1])    # (B,)
            critic_loss = mean_b valid[b, -1] * sum_k (Q_k(s_t, A_t) - target)^2

        `critic/q_*` describe the target, as the release logs them.
        """
        cfg = self.config
        next_v = self.network.select("value")(batch["next_observations"][:, -1])  # (B,)
        bootstrap = cfg["discount"] ** cfg["horizon_length"] * batch["masks"][:, -1]  # (B,)
        target = batch["rewards"][:, -1] + bootstrap * next_v  # (B,)
        actions = policy_actions(batch["actions"], cfg)
        qs = self.network.select("critic")(batch["observations"], actions, params=grad_params)  # (2, B)
        critic_loss = jnp.mean(batch["valid"][:, -1] * jnp.square(qs - target).sum(axis=0))
        return critic_loss, {
            "critic/critic_loss": critic_loss,
            "critic/q_mean": target.mean(),
            "critic/q_max": target.max(),
            "critic/q_min": target.min(),
        }

    def actor_loss(self, batch, grad_params, rng):
        """Flow-matching BC over `A_t` (release `actor_loss`; over chunks as ACFQL's `bc_flow_loss`)::

        x_t = (1 - t) x_0 + t x_1,  x_0 ~ N(0, I) (B, h*A),  x_1 = A_t,  t ~ U[0, 1] (B, 1)
        actor_loss = mean_{b,k,j} valid[b, k] * (v(s, x_t, t) - (x_1 - x_0))[b, k, j]^2
        """
        cfg = self.config
        x_1 = policy_actions(batch["actions"], cfg)  # (B, h * A) or (B, A)
        batch_size, action_dim = x_1.shape
        x_rng, t_rng = jax.random.split(rng)
        x_0 = jax.random.normal(x_rng, (batch_size, action_dim))
        t = jax.random.uniform(t_rng, (batch_size, 1))
        x_t = (1 - t) * x_0 + t * x_1
        pred = self.network.select("actor_flow")(batch["observations"], x_t, t, params=grad_params)
        steps = policy_steps(cfg)
        error = jnp.square(pred - (x_1 - x_0)).reshape(batch_size, steps, cfg["action_dim"])  # (B, h, A)
        actor_loss = jnp.mean(error * batch["valid"][:, :steps, None])
        return actor_loss, {"actor/actor_loss": actor_loss}

    def total_loss(self, batch, grad_params, rng):
        """`value_loss + critic_loss + actor_loss` (one optimizer step for all three, as the release)."""
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
        return scan_updates(IFQLAgent._update, self, select_keys(stacked_batches, BATCH_KEYS))

    @partial(jax.jit, static_argnames=("best_of_n",))
    def sample_actions(self, observations, rng, best_of_n=None):
        """Best of N flow samples by `min_k Q_k`, chosen per observation (release `sample_actions`); N =
        `best_of_n` when given (`--best_of_n_eval_values`), else `num_samples`.

        `observations` `(*B, *ob)` (`*B` may be empty) -> `(*B, h * A)` with `action_chunking`, else `(*B, A)`.
        Noises `(*B, N, h * A)` from `rng`, `flow_steps` Euler steps at `t = i / flow_steps`, clipped to [-1, 1].
        The release takes `argmax` over the flattened `(N,)` values, right for one observation only; here the
        argmax runs over the N axis of each observation (docs/differences.md, section 24).
        """
        cfg = self.config
        batch_axes = observations.ndim - len(cfg["ob_dims"])
        n = cfg["num_samples"] if best_of_n is None else best_of_n
        action_dim = cfg["action_dim"] * policy_steps(cfg)
        actions = jax.random.normal(rng, (*observations.shape[:batch_axes], n, action_dim))  # (*B, N, hA)
        repeated = jnp.repeat(jnp.expand_dims(observations, batch_axes), n, axis=batch_axes)  # (*B, N, *ob)
        velocity = partial(self.network.select("actor_flow"), repeated)  # t: (*B, N, 1)
        actions = jnp.clip(common.euler_flow(velocity, actions, cfg["flow_steps"]), -1, 1)
        q = self.network.select("critic")(repeated, actions).min(axis=0)  # (*B, N)
        best = jnp.argmax(q, axis=-1)  # (*B,)
        return jnp.take_along_axis(actions, best[..., None, None], axis=-2)[..., 0, :]  # (*B, hA)

    @classmethod
    def create(cls, seed, ex_observations, ex_actions, config):
        """New agent; `config` (`get_config()` with `horizon_length` set) is not modified.

        `ex_actions`: one action `(A,)` with one observation `(*ob)`, or `(B, A)` with `(B, *ob)`.
        Raises `ValueError` naming the key for a bad configuration.
        """
        config = common.fill_shapes(check_config(config), ex_observations, ex_actions)
        ex_obs = jnp.asarray(ex_observations).reshape((-1, *config["ob_dims"]))[:1]  # (1, *ob)
        ex_chunk = jnp.zeros((1, config["action_dim"] * policy_steps(config)))
        rng, init_rng = jax.random.split(common.init_key(seed))  # the release's order: same initial parameters
        value_dims, norm = config["value_hidden_dims"], config["layer_norm"]
        modules = {
            "value": Value(hidden_dims=value_dims, layer_norm=norm, num_ensembles=1),
            "critic": Value(hidden_dims=value_dims, layer_norm=norm, num_ensembles=2),
            "target_critic": Value(hidden_dims=value_dims, layer_norm=norm, num_ensembles=2),
            "actor_flow": ActorVectorField(
                hidden_dims=config["actor_hidden_dims"],
                action_dim=ex_chunk.shape[-1],
                layer_norm=config["actor_layer_norm"],
            ),
        }
        args = {
            "value": (ex_obs,),
            "critic": (ex_obs, ex_chunk),
            "target_critic": (ex_obs, ex_chunk),
            "actor_flow": (ex_obs, ex_chunk, jnp.zeros((1, 1))),
        }
        network_def = ModuleDict(modules)
        params = dict(network_def.init(init_rng, **args)["params"])
        params["modules_target_critic"] = params["modules_critic"]
        network = TrainState.create(network_def, params, tx=optax.adam(learning_rate=config["lr"]))
        return cls(rng=rng, network=network, config=flax.core.FrozenDict(config))


def get_config():
    """IFQL hyperparameters: the FQL release's keys and defaults, plus the window, chunking and shape keys.

    The paper's settings (Li, Zhou, Levine 2025, appendix): `num_samples` N = 32, expectile 0.9; IFQL h = 1,
    IFQL-n h = 5 without chunking, QC-IFQL h = 5 with chunking.
    """
    placeholder = ml_collections.config_dict.placeholder
    return ml_collections.ConfigDict(
        dict(
            agent_name="ifql",  # Agent name (the drivers look the class up by it).
            action_dim=placeholder(int),  # Single-step action size; filled in by create().
            lr=3e-4,  # Adam learning rate.
            batch_size=256,  # Windows per gradient step.
            actor_hidden_dims=(512, 512, 512, 512),  # Hidden widths of the flow policy.
            value_hidden_dims=(512, 512, 512, 512),  # Hidden widths of the value and of each critic.
            layer_norm=True,  # Layer norm in the value and critic.
            actor_layer_norm=False,  # Layer norm in the flow policy.
            discount=0.99,  # gamma (also the dataset's reward sums).
            tau=0.005,  # Polyak rate of the target critic.
            expectile=0.9,  # IQL expectile of the value regression.
            num_samples=32,  # Flow samples N per decision (best-of-N by min_k Q_k).
            flow_steps=10,  # Euler steps of the flow.
            encoder=placeholder(str),  # Visual encoder of the release; none is implemented here: must stay None.
            horizon_length=1,  # Window (and chunk) length h (IFQL: 1); --horizon_length overrides it.
            action_chunking=True,  # False: critic and policy see the first action only (IFQL-n).
            ob_dims=placeholder(tuple),  # Observation shape; filled in by create().
        )
    )


def check_config(config):
    """A plain-dict copy of `config` (hashable for jit) with every key checked.

    Raises `ValueError` naming `--agent.KEY` for an unknown or missing key or a bad value.
    """
    c = common.plain_config(config, get_config(), "ifql")
    common.check_shared(c, "ifql")
    expectile_ok = common.is_number(c["expectile"], 0, 1, low_open=True, high_open=True)
    common.expect(c, "expectile", expectile_ok, "a number in (0, 1)")
    common.expect(c, "num_samples", common.is_int(c["num_samples"], 1), "an int >= 1")
    common.expect(c, "flow_steps", common.is_int(c["flow_steps"], 1), "an int >= 1")
    common.expect(c, "encoder", c["encoder"] is None, "None (no visual encoder is implemented here)")
    common.check_types(c, get_config())
    return c


# ---- the paper's methods (Li, Zhou, Levine 2025, appendix D.3; docs/settings.md) -----------------------------

# Per OGBench domain (the paper runs IFQL on OGBench only): --sparse. N = 32 and expectile 0.9 everywhere.
PAPER_DOMAINS = {"scene": True, "puzzle-3x3": True, "cube-double": False, "cube-triple": False, "cube-quadruple": False}


def _method(label, h, chunking):
    per_domain = {
        d: {"agent.num_samples": 32, "agent.expectile": 0.9, "sparse": sparse} for d, sparse in PAPER_DOMAINS.items()
    }
    settings = {"horizon_length": h, "agent.action_chunking": chunking}
    return label.lower(), common.Method(label, settings, per_domain, source="arXiv 2507.07969, appendix D.3")


METHODS = dict(
    _method(*row)
    for row in (
        ("IFQL", 1, True),  # action_chunking changes nothing at h = 1: the config default
        ("IFQL-n", 5, False),
        ("QC-IFQL", 5, True),
    )
)


def method_of(config):
    """The paper method (`--method` name) a resolved config is: h > 1 and chunking; None if none."""
    if int(config["horizon_length"]) == 1:
        return "ifql"
    return "qc-ifql" if config.get("action_chunking", True) else "ifql-n"


SPEC = common.AgentSpec(
    name="ifql",
    agent_class=IFQLAgent,
    get_config=get_config,
    check_config=check_config,
    drivers=("main",),
    batch_keys=BATCH_KEYS,
    methods=METHODS,
    method_of=method_of,
    short_names={"horizon_length": "h", "agent.num_samples": "N"},
)
