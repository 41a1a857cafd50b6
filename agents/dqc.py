"""DQC: Decoupled Q-chunking (Li, Park, Levine, ICLR 2026, arXiv 2512.10926), offline goal-conditioned.

The critic is trained on long chunks (`backup_horizon` h actions) while the policy acts in short
chunks (`policy_chunk_size` h_a <= h actions). As in the authors' release (ColinQiyangLi/dqc at
df89825, `agents/dqc.py`), with s the observation, g the goal and A = a_{t:t+h}:

* `chunk_critic` Q_h(s, g, A) (`num_qs` members, no target): h-step backup from V.
* `action_critic` Q_a(s, g, A[:h_a]) (`num_qs` members, Polyak target `target_action_critic`):
  distilled from Q_h by an implicit maximisation over the last h - h_a actions.
* `value` V(s, g): implicit maximisation of the target Q_a over the first h_a actions.
* `actor_bc` v(s, x_t, t): flow-matching behaviour cloning of h_a-action chunks, no goal.

Every critic outputs a logit; its value is the sigmoid (in [0, 1]) and takes `concat(s, g[, A])`.
The loss docstrings name the paper's parts by topic (its section numbers were not checked against the
PDF). With `use_chunk_critic=False` there is no Q_h and Q_a learns from the h-step target itself (QC with
h_a = h, the n-step baselines NS / OS with h_a = 1). Acting is best-of-N over flow samples scored by Q_a.

Gradient routing (utils/flax_utils.py): a module gets gradient only when called with
`params=grad_params`. The value inside the backup targets, Q_h inside the distillation and the
target Q_a inside the value loss are called without it and get exactly zero gradient (tests/test_dqc.py).

Windows: `utils/goal_windows.py` (the release's `CGCDataset`); `BATCH_KEYS` below are what the losses read.
"""

import dataclasses
from functools import partial
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import optax

from agents import common
from agents.common import aggregate
from utils.flax_utils import ModuleDict, TrainState, nonpytree_field, scan_updates, select_keys, target_update
from utils.goal_windows import GoalWindowSource
from utils.networks import ActorVectorField, Value

# What the losses read. Difference from the reference: its actor loss also read `actions`, only for the
# batch size; the observations give it here, so the first actions need not cross the jit boundary.
BATCH_KEYS = (
    "observations",  # (B, D) s_t
    "high_value_goals",  # (B, G) value goal g (oracle representation where the dataset has one)
    "high_value_action_chunks",  # (B, h * A) a_{t:t+h}, flattened
    "high_value_next_observations",  # (B, D) s_{t+k}
    "high_value_backup_horizon",  # (B,) int k <= h: h cut at the goal (and at the trajectory end)
    "high_value_masks",  # (B,) 0 where the goal is reached inside the window, else 1
    "high_value_rewards",  # (B,) gamma^k where the goal is reached inside the window, else 0
    "valids",  # (B, h) 1 where step t+j is in the trajectory of s_t
)
IMPLICIT_LOSSES = ("expectile", "quantile")


def _bce(logits, targets):
    """Binary cross-entropy of `sigmoid(logits)` against `targets` in [0, 1], elementwise."""
    return -(jax.nn.log_sigmoid(logits) * targets + jax.nn.log_sigmoid(-logits) * (1 - targets))


def _policy_dim(cfg):
    """Size of a policy chunk `h_a * action_dim` (the release's `ac_action_dim`)."""
    return cfg["policy_chunk_size"] * cfg["action_dim"]


def _valid_weights(batch, cfg):
    """`(B,)` weights of the distillation, value and actor losses: one column of `valids`.

    The release reads `valids[..., ac_action_dim - 1]` with `ac_action_dim = h_a * action_dim`, where
    column `h_a - 1` (the policy chunk's last action) seems meant; JAX clamps the index to the last
    column `h - 1` when `h_a * action_dim > h`. We read the release's column, written out, so that the
    golden updates match. In the windows the sampler draws for training (starts only where a whole
    window fits) every column is 1, so the two readings give the same losses.
    """
    column = min(_policy_dim(cfg), cfg["backup_horizon"]) - 1
    return batch["valids"][:, column]  # (B,)


def _logits(network, cfg, name, observations, goals, actions=None, params=None):
    """Logits of critic `name` on `concat(s, g[, actions])`: `(K, *B)` for the ensembles, `(*B,)` for the value.

    Difference from the reference: with `num_qs=1` its ensembles lose the member axis, so its `q_agg` over
    axis 0 would reduce over the batch; the axis is kept here (`common.ensemble_values`).
    """
    inputs = jnp.concatenate([observations, goals], axis=-1)  # (*B, D + G)
    if name == "value":
        return network.select(name)(inputs, params=params)
    return common.ensemble_values(network, cfg, name, inputs, actions, params)


def _backup_target(network, cfg, batch):
    """The h-step target `clip(r + gamma^k * m * sigmoid(V(s_{t+k}, g)), 0, 1)` `(B,)`; V: no gradient."""
    next_v = jax.nn.sigmoid(
        _logits(network, cfg, "value", batch["high_value_next_observations"], batch["high_value_goals"])
    )
    bootstrap = cfg["discount"] ** batch["high_value_backup_horizon"] * batch["high_value_masks"]
    return jnp.clip(batch["high_value_rewards"] + bootstrap * next_v, 0, 1)  # (B,)


class DQCAgent(flax.struct.PyTreeNode):
    """Decoupled Q-chunking: chunked critic, distilled action critic, implicit value, best-of-N flow policy."""

    rng: Any
    network: Any
    config: Any = nonpytree_field()

    def chunk_critic_loss(self, batch, grad_params, rng):
        """Chunked critic on h-action chunks, BCE against the value backup (paper: the chunked critic)::

            target_q   = clip(r + gamma^k * m * sigmoid(V(s_{t+k}, g)), 0, 1)   # V: no gradient
            critic_loss = mean_{i,b} BCE(Q_h^i(s_t, g, a_{t:t+h}), target_q)

        k, r, m: the batch's backup horizon, reward and mask. No `valids` weight (as in the release).
        """
        cfg = self.config
        obs, goals, chunks = batch["observations"], batch["high_value_goals"], batch["high_value_action_chunks"]
        target_q = _backup_target(self.network, cfg, batch)  # (B,)
        q_logit = _logits(self.network, cfg, "chunk_critic", obs, goals, chunks, grad_params)  # (K, B)
        q = jax.nn.sigmoid(q_logit)
        critic_loss = _bce(q_logit, target_q).mean()
        return critic_loss, {
            "chunk_critic/critic_loss": critic_loss,
            "chunk_critic/q_mean": q.mean(),
            "chunk_critic/q_max": q.max(),
            "chunk_critic/q_min": q.min(),
            "chunk_critic/q_logit_mean": q_logit.mean(),
            "chunk_critic/q_logit_max": q_logit.max(),
            "chunk_critic/q_logit_min": q_logit.min(),
        }

    def action_critic_loss(self, batch, grad_params, rng):
        """Distillation of Q_h into the action critic Q_a on the first h_a actions (paper: the distilled critic)::

            target_q = sigmoid(Q_h^i(s, g, a_{t:t+h}))        # use_chunk_critic; no gradient, member i
                     = the h-step target of chunk_critic_loss  # otherwise
            w        = kappa_d if target_q >= Q_a^i else 1 - kappa_d
            expectile: mean_{i,b} w * BCE(Q_a^i logit, target_q) * valid_b
            quantile:  mean_{i,b} w * |Q_a^i logit - logit(clip(target_q, 1e-5, 1 - 1e-5))| * valid_b

        Q_a^i = Q_a^i(s, g, a_{t:t+h_a}); valid: `_valid_weights`.
        """
        cfg = self.config
        obs, goals, chunks = batch["observations"], batch["high_value_goals"], batch["high_value_action_chunks"]
        if cfg["use_chunk_critic"]:
            target_q = jax.nn.sigmoid(_logits(self.network, cfg, "chunk_critic", obs, goals, chunks))  # (K, B)
        else:
            target_q = _backup_target(self.network, cfg, batch)  # (B,)
        policy_chunks = chunks[:, : _policy_dim(cfg)]  # (B, h_a * A)
        q_logit = _logits(self.network, cfg, "action_critic", obs, goals, policy_chunks, grad_params)  # (K, B)
        q = jax.nn.sigmoid(q_logit)
        clipped = jnp.clip(target_q, 1e-5, 1.0 - 1e-5)
        target_logit = jnp.log(clipped) - jnp.log(1.0 - clipped)
        weight = jnp.where(target_q >= q, cfg["kappa_d"], 1 - cfg["kappa_d"])  # (K, B)
        if cfg["distill_method"] == "expectile":
            errors = _bce(q_logit, target_q)
        else:
            errors = jnp.abs(q_logit - target_logit)
        critic_loss = (weight * errors * _valid_weights(batch, cfg)).mean()
        return critic_loss, {
            "action_critic/critic_loss": critic_loss,
            "action_critic/q_mean": q.mean(),
            "action_critic/q_max": q.max(),
            "action_critic/q_min": q.min(),
        }

    def value_loss(self, batch, grad_params, rng):
        """Implicit backup: V(s, g) toward the target action critic's best action chunk (paper: implicit value backup)::

            q = agg_i sigmoid(Qbar_a^i(s, g, a_{t:t+h_a}))   # target action critic, no gradient
            w = kappa_b if q >= sigmoid(V) else 1 - kappa_b
            expectile: mean_b w * BCE(V logit, q) * valid_b
            quantile:  mean_b w * |V logit - logit(q)| * valid_b

        agg: `q_agg`. As in the release, logit(q) is not clipped (q of exactly 0 or 1 in float32 makes the
        quantile loss infinite; its gradient stays finite). Info keys are the release's (`action_critic/...`).
        """
        cfg = self.config
        obs, goals = batch["observations"], batch["high_value_goals"]
        policy_chunks = batch["high_value_action_chunks"][:, : _policy_dim(cfg)]  # (B, h_a * A)
        qs = jax.nn.sigmoid(_logits(self.network, cfg, "target_action_critic", obs, goals, policy_chunks))  # (K, B)
        q = aggregate(qs, cfg["q_agg"])  # (B,)
        q_logit = jnp.log(q) - jnp.log(1.0 - q)
        v_logit = _logits(self.network, cfg, "value", obs, goals, params=grad_params)  # (B,)
        v = jax.nn.sigmoid(v_logit)
        weight = jnp.where(q >= v, cfg["kappa_b"], 1 - cfg["kappa_b"])  # (B,)
        if cfg["implicit_backup_type"] == "expectile":
            errors = _bce(v_logit, q)
        else:
            errors = jnp.abs(v_logit - q_logit)
        value_loss = (weight * errors * _valid_weights(batch, cfg)).mean()
        return value_loss, {
            "action_critic/value_loss": value_loss,
            "action_critic/adv": (q - v).mean(),
            "action_critic/v_mean": v.mean(),
            "action_critic/v_max": v.max(),
            "action_critic/v_min": v.min(),
        }

    def actor_loss(self, batch, grad_params, rng):
        """Flow-matching BC over h_a-action chunks, observation only, no goal (paper: policy extraction)::

            x_t = (1 - t) x_0 + t x_1,  x_0 ~ N(0, I),  x_1 = a_{t:t+h_a},  t ~ U[0, 1) per row
            bc_flow_loss = mean_b valid_b * mean_j (v(s, x_t, t) - (x_1 - x_0))_j^2

        valid: `_valid_weights`. x_0 is drawn before t, from the release's key split.
        """
        cfg = self.config
        batch_size = batch["observations"].shape[0]
        _, x_rng, t_rng, _ = jax.random.split(rng, 4)  # the release's split
        x_0 = jax.random.normal(x_rng, (batch_size, _policy_dim(cfg)))  # (B, h_a * A)
        x_1 = batch["high_value_action_chunks"][:, : _policy_dim(cfg)]
        t = jax.random.uniform(t_rng, (batch_size, 1))
        x_t = (1 - t) * x_0 + t * x_1
        pred = self.network.select("actor_bc")(batch["observations"], x_t, t, params=grad_params)  # (B, h_a * A)
        bc_flow_loss = jnp.mean(jnp.mean(jnp.square(pred - (x_1 - x_0)), axis=-1) * _valid_weights(batch, cfg))
        return bc_flow_loss, {"actor/bc_flow_loss": bc_flow_loss}

    def total_loss(self, batch, grad_params, rng):
        """Sum of the four losses (one optimizer over all modules); info of all of them."""
        cfg = self.config
        chunks, valids = batch["high_value_action_chunks"], batch["valids"]
        if chunks.shape[-1] != cfg["backup_horizon"] * cfg["action_dim"] or valids.shape[-1] != cfg["backup_horizon"]:
            raise ValueError(
                f"Batch windows have high_value_action_chunks {tuple(chunks.shape)} and valids {tuple(valids.shape)}, "
                f"but backup_horizon={cfg['backup_horizon']} and action_dim={cfg['action_dim']}; sample them with "
                "utils.goal_windows for this config."
            )
        _, actor_rng, action_critic_rng, chunk_critic_rng = jax.random.split(rng, 4)  # the release's split
        losses = [self.chunk_critic_loss(batch, grad_params, chunk_critic_rng)] if cfg["use_chunk_critic"] else []
        losses += [
            self.action_critic_loss(batch, grad_params, action_critic_rng),
            self.value_loss(batch, grad_params, action_critic_rng),
            self.actor_loss(batch, grad_params, actor_rng),
        ]
        info = {k: v for _, part in losses for k, v in part.items()}
        return sum(loss for loss, _ in losses), info

    @staticmethod
    @jax.jit
    def _update(agent, batch):
        """One Adam step on `total_loss`, then Polyak of the target action critic toward the pre-step one."""
        new_rng, rng = jax.random.split(agent.rng)

        def loss_fn(grad_params):
            return agent.total_loss(batch, grad_params, rng)

        network, info = agent.network.apply_loss_fn(loss_fn)
        # As in the release, the target moves toward the action critic as it was before the step.
        network = target_update(network, agent.network, "action_critic", agent.config["tau"])
        return agent.replace(network=network, rng=new_rng), info

    def update(self, batch):
        """One update on `batch` (B windows, `BATCH_KEYS`; other keys stay outside jit): `(agent, info)`."""
        return self._update(self, select_keys(batch, BATCH_KEYS))

    def batch_update(self, batches):
        """`update` on each batch along the leading (UTD) axis `(U, B, ...)` in one `lax.scan`; info averaged."""
        return scan_updates(DQCAgent._update, self, select_keys(batches, BATCH_KEYS))

    @partial(jax.jit, static_argnames=("best_of_n",))
    def sample_actions(self, observations, rng, goals=None, best_of_n=None):
        """Best-of-N policy chunks in [-1, 1] for `observations` `(*B, D)` and `goals` `(*B, G)`.

        N = `best_of_n` (default `config['best_of_n']`) flow samples of h_a actions per observation, each
        from its own key of `jax.random.split(rng, N)` (`flow_steps` Euler steps, then clipped to [-1, 1]);
        the one with the highest `q_agg` value of the online action critic is returned, `(*B, h_a * A)`.
        """
        cfg = self.config
        if goals is None:
            raise ValueError("DQC is goal-conditioned: sample_actions needs goals (*B, G) beside the observations.")
        n = cfg["best_of_n"] if best_of_n is None else best_of_n
        batch_shape = observations.shape[: observations.ndim - len(cfg["ob_dims"])]
        keys = jax.random.split(rng, n)
        noises = jax.vmap(lambda key: jax.random.normal(key, (*batch_shape, _policy_dim(cfg))))(keys)  # (N, *B, hA)
        observations = jnp.broadcast_to(observations, (n, *observations.shape))  # (N, *B, D)
        goals = jnp.broadcast_to(goals, (n, *goals.shape))  # (N, *B, G)
        velocity = partial(self.network.select("actor_bc"), observations)  # t: (N, *B, 1)
        actions = jnp.clip(common.euler_flow(velocity, noises, cfg["flow_steps"]), -1, 1)  # (N, *B, hA)
        q = aggregate(
            _logits(self.network, cfg, "action_critic", observations, goals, actions), cfg["q_agg"]
        )  # (N, *B)
        best = jnp.argmax(q, axis=0)  # (*B,)
        return jnp.take_along_axis(actions, best[None, ..., None], axis=0)[0]  # (*B, hA)

    @classmethod
    def create(cls, seed, ex_observations, ex_actions, config, ex_goals=None):
        """New agent; `config` (`get_config()`) is not modified (`ob_dims`, `action_dim` filled on a copy).

        `seed`: an int or a JAX key. `ex_actions`: one action `(A,)` with one observation `(D,)`, or
        `(B, A)` with `(B, D)`. `ex_goals`: the goals the critics will see, `(G,)` or `(B, G)` (e.g. oracle
        representations); default: goals shaped like the observations. Raises `ValueError` for a bad config.
        """
        config = common.fill_shapes(check_config(config), ex_observations, ex_actions)
        if len(config["ob_dims"]) != 1:
            raise ValueError(
                f"DQC concatenates observation and goal: observations must be vectors, got {config['ob_dims']}."
            )
        ex_obs = jnp.asarray(ex_observations).reshape(-1, config["ob_dims"][0])[:1]  # (1, D)
        goals = ex_observations if ex_goals is None else ex_goals
        ex_goals = jnp.asarray(goals).reshape(-1, jnp.shape(goals)[-1])[:1]  # (1, G)
        ex_chunk = jnp.zeros((1, config["backup_horizon"] * config["action_dim"]))  # (1, h * A)
        ex_policy_chunk = ex_chunk[:, : _policy_dim(config)]  # (1, h_a * A)
        ex_obs_goals = jnp.concatenate([ex_obs, ex_goals], axis=-1)  # (1, D + G)

        rng, init_rng = jax.random.split(common.init_key(seed))  # the release's order
        critic = partial(Value, hidden_dims=config["value_hidden_dims"], layer_norm=config["layer_norm"])
        modules = {
            "action_critic": (critic(num_ensembles=config["num_qs"]), (ex_obs_goals, ex_policy_chunk)),
            "target_action_critic": (critic(num_ensembles=config["num_qs"]), (ex_obs_goals, ex_policy_chunk)),
            "actor_bc": (
                ActorVectorField(
                    hidden_dims=config["actor_hidden_dims"],
                    action_dim=_policy_dim(config),
                    layer_norm=config["actor_layer_norm"],
                ),
                (ex_obs, ex_policy_chunk, ex_chunk[:, :1]),
            ),
            "value": (critic(num_ensembles=1), (ex_obs_goals,)),
        }
        if config["use_chunk_critic"]:
            modules["chunk_critic"] = (critic(num_ensembles=config["num_qs"]), (ex_obs_goals, ex_chunk))
        network_def = ModuleDict({name: module for name, (module, _) in modules.items()})
        params = dict(network_def.init(init_rng, **{name: args for name, (_, args) in modules.items()})["params"])
        params["modules_target_action_critic"] = params["modules_action_critic"]  # the target starts as Q_a
        network = TrainState.create(network_def, params, tx=optax.adam(learning_rate=config["lr"]))
        return cls(rng=rng, network=network, config=flax.core.FrozenDict(config))


def check_config(config):
    """A plain-dict copy of `config` (lists as tuples, hashable for jit) with every key checked.

    Raises `ValueError` (`--agent.KEY must be ..., got ...`) for a bad value, and for an unknown or
    missing key.
    """
    c = common.plain_config(config, get_config(), "dqc")
    common.check_shared(c, "dqc")
    expect, is_int, is_number = common.expect, common.is_int, common.is_number
    # Difference from the reference: it accepts any discount; gamma^k needs one in (0, 1).
    expect(c, "discount", is_number(c["discount"], 0, 1, low_open=True, high_open=True), "a number in (0, 1)")
    expect(c, "flow_steps", is_int(c["flow_steps"], 1), "an int >= 1")
    expect(c, "backup_horizon", is_int(c["backup_horizon"], 1), "an int >= 1")
    horizon = c["backup_horizon"]
    ok = is_int(c["policy_chunk_size"], 1) and c["policy_chunk_size"] <= horizon
    expect(c, "policy_chunk_size", ok, f"an int in [1, backup_horizon={horizon}]")
    for key in ("distill_method", "implicit_backup_type"):
        expect(c, key, c[key] in IMPLICIT_LOSSES, f"one of {IMPLICIT_LOSSES}")
    for key in ("kappa_d", "kappa_b"):
        expect(c, key, is_number(c[key], 0, 1, low_open=True, high_open=True), "a number in (0, 1)")
    expect(c, "best_of_n", is_int(c["best_of_n"], 1), "an int >= 1")
    for key in ("value_p_curgoal", "value_p_trajgoal", "value_p_randomgoal"):
        expect(c, key, is_number(c[key], 0, 1), "a number in [0, 1]")
    common.check_types(c, get_config())
    p_sum = c["value_p_curgoal"] + c["value_p_trajgoal"] + c["value_p_randomgoal"]
    if abs(p_sum - 1.0) > 1e-6:
        raise ValueError(f"--agent.value_p_randomgoal must make the three goal probabilities sum to 1, got {p_sum!r}.")
    return c


def get_config():
    """DQC hyperparameters: the release's `get_config()` defaults (the paper's per-domain values: `METHODS` below).

    `agent_name` and `batch_size` are read by the drivers, the `value_*` goal keys by utils/goal_windows.py
    (which reads `backup_horizon` and `discount` too), every other key by this file. Dropped from the
    release's config: `dataset_class` (its only value named the window sampler, utils/goal_windows.py here).
    """
    placeholder = ml_collections.config_dict.placeholder
    return ml_collections.ConfigDict(
        dict(
            agent_name="dqc",  # Agent name (the drivers look the class up by it).
            lr=3e-4,  # Adam learning rate (one optimizer over all modules).
            batch_size=4096,  # Windows per gradient step (the drivers sample batches of this size).
            actor_hidden_dims=(1024, 1024, 1024, 1024),  # Hidden widths of the flow policy.
            value_hidden_dims=(1024, 1024, 1024, 1024),  # Hidden widths of each critic and of the value.
            layer_norm=True,  # Layer norm in the critics and the value.
            actor_layer_norm=True,  # Layer norm in the flow policy.
            discount=0.999,  # gamma; the sampler's gamma^k rewards and the critics' gamma^k bootstrap.
            tau=0.005,  # Polyak rate of the target action critic.
            num_qs=2,  # Ensemble size of the chunk critic and the action critic.
            q_agg="mean",  # Ensemble aggregation ('mean' or 'min') in the value target and best-of-N.
            flow_steps=10,  # Euler steps of the flow policy.
            value_p_curgoal=0.2,  # Probability that the value goal is the current state.
            value_p_trajgoal=0.5,  # Probability that it is a later state of the same trajectory.
            value_p_randomgoal=0.3,  # Probability that it is a random state (the three sum to 1).
            value_geom_sample=False,  # Later-state goals at a geometric(1 - discount) offset, else uniform.
            use_chunk_critic=True,  # Train Q_h on h-action chunks and distill it (False: QC / n-step baselines).
            backup_horizon=25,  # h: actions per critic chunk and steps of the value backup.
            policy_chunk_size=1,  # h_a <= h: actions per policy chunk (and per action-critic input).
            distill_method="expectile",  # Implicit maximisation of the distillation ('expectile' or 'quantile').
            kappa_d=0.5,  # Expectile / quantile of the distillation, in (0, 1).
            implicit_backup_type="quantile",  # Implicit maximisation of the value backup ('expectile'/'quantile').
            kappa_b=0.9,  # Expectile / quantile of the value backup, in (0, 1).
            best_of_n=32,  # N: flow samples scored by the action critic per decision.
            ob_dims=placeholder(tuple),  # Observation shape; filled in by create().
            action_dim=placeholder(int),  # Single-step action size; filled in by create().
        )
    )


# ---- the paper's methods (experiments/reproduce.py of the release; Li, Park, Levine 2026) --------------------

# kappa_b / kappa_d per (use_chunk_critic, h, h_a) and domain; kappa_d only where a chunk critic is distilled.
# Order of the domains: cube-triple, cube-quadruple, cube-octuple, humanoidmaze-giant, puzzle-4x5, puzzle-4x6.
PAPER_DOMAINS = ("cube-triple", "cube-quadruple", "cube-octuple", "humanoidmaze-giant", "puzzle-4x5", "puzzle-4x6")
_KAPPAS = {
    ("DQC h=25 h_a=5", True, 25, 5): [(0.93, 0.8), (0.93, 0.8), (0.93, 0.5), (0.5, 0.8), (0.9, 0.5), (0.7, 0.5)],
    ("DQC h=25 h_a=1", True, 25, 1): [(0.93, 0.8), (0.93, 0.8), (0.93, 0.5), (0.5, 0.8), (0.9, 0.5), (0.7, 0.5)],
    ("DQC h=5 h_a=1", True, 5, 1): [(0.5, 0.8), (0.5, 0.8), (0.93, 0.5), (0.5, 0.5), (0.5, 0.5), (0.5, 0.5)],
    ("QC h=25", False, 25, 25): [0.93, 0.93, 0.93, 0.5, 0.9, 0.7],
    ("QC h=5", False, 5, 5): [0.93, 0.93, 0.93, 0.5, 0.9, 0.7],
    ("QC-NS n=25 h_a=5", False, 25, 5): [0.93, 0.93, 0.93, 0.5, 0.7, 0.5],
    ("NS n=25", False, 25, 1): [0.5, 0.5, 0.97, 0.5, 0.7, 0.7],
    ("NS n=5", False, 5, 1): [0.5, 0.7, 0.5, 0.5, 0.5, 0.5],
    ("OS", False, 1, 1): [0.5, 0.7, 0.7, 0.5, 0.7, 0.7],
}
# --method names of the labels above.
_NAMES = {
    "DQC h=25 h_a=5": "dqc",
    "DQC h=25 h_a=1": "dqc-h25-ha1",
    "DQC h=5 h_a=1": "dqc-h5-ha1",
    "QC h=25": "qc-h25",
    "QC h=5": "qc-h5",
    "QC-NS n=25 h_a=5": "qc-ns",
    "NS n=25": "ns-n25",
    "NS n=5": "ns-n5",
    "OS": "os",
}
# Not in the paper: smaller domains of the same kind borrow these rows (for CPU-sized runs).
BORROWED = {
    "cube-single": "cube-triple",
    "cube-double": "cube-triple",
    "puzzle-3x3": "puzzle-4x5",
    "puzzle-4x4": "puzzle-4x5",
}


def _method(label, chunk_critic, h, h_a, kappas):
    settings = {
        "agent.use_chunk_critic": chunk_critic,
        "agent.backup_horizon": h,
        "agent.policy_chunk_size": h_a,
        "agent.num_qs": 2,
        "agent.distill_method": "expectile",
        "agent.implicit_backup_type": "quantile",
        "online_steps": 0,  # offline only
        "eval_interval": 250_000,  # the release's: evaluations line up with its points at 0.25/0.5/0.75/1M
    }
    if label.startswith("QC h="):
        settings["action_chunk_eval_sizes"] = "0,1,5"  # DQC-naive: only the first actions of each chunk
    per_domain = {}
    for domain, value in zip(PAPER_DOMAINS, kappas, strict=True):
        kappa_b, kappa_d = value if isinstance(value, tuple) else (value, None)
        row = {"agent.kappa_b": kappa_b, "agent.q_agg": "min" if domain.startswith("cube") else "mean"}
        if kappa_d is not None:
            row["agent.kappa_d"] = kappa_d
        per_domain[domain] = row
    entry = common.Method(label, settings, per_domain, source="ColinQiyangLi/dqc experiments/reproduce.py")
    # The release's "DQC-naive": QC's chunk executed only in part (its first h_a actions).
    cuts = {n: f"DQC-naïve h={h} h_a={n}" for n in (1, 5) if label.startswith("QC h=") and n < h}
    return _NAMES[label], dataclasses.replace(entry, borrowed=BORROWED, cut_labels=cuts)


METHODS = dict(_method(*key, kappas) for key, kappas in _KAPPAS.items())


def method_of(config):
    """The paper method (`--method` name) of a resolved config: chunk critic or not, h and h_a; None if none."""
    key = (config.get("use_chunk_critic"), config.get("backup_horizon"), config.get("policy_chunk_size"))
    return next((name for name, m in METHODS.items() if key == _identity(m)), None)


def _identity(method):
    s = method.settings
    return s["agent.use_chunk_critic"], s["agent.backup_horizon"], s["agent.policy_chunk_size"]


SPEC = common.AgentSpec(
    name="dqc",
    agent_class=DQCAgent,
    get_config=get_config,
    check_config=check_config,
    drivers=("main",),
    batch_keys=BATCH_KEYS,
    methods=METHODS,
    method_of=method_of,
    short_names={"agent.backup_horizon": "h", "agent.policy_chunk_size": "h_a"},
    goal_conditioned=True,
    windows=GoalWindowSource,
    window_length=lambda config: config["backup_horizon"],
    chunk_length=lambda config: config["policy_chunk_size"],
    online=False,
)
