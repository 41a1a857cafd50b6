"""Speed of the ACFQL agent at the paper configuration: gradient steps/s and chunk decisions/s.

    python scripts/bench_agents.py                      # QC (best-of-n, N=32) and QC-FQL, UTD 1 and 10
    python scripts/bench_agents.py --methods qc --utd 1 --hidden 512 --layers 4 --obs_dim 40

Gradient steps/s: `batch_update` on U stacked batches (lax.scan), timed over `--calls` calls after
a warm-up call (compilation excluded), `block_until_ready` on the result. Decisions/s:
`sample_actions` on one observation (no batch axis, the driver's call), timed the same way.
Batches are random numbers of the shape of a `sample_sequence` batch (values do not affect speed).
For scale, the authors' code on 2 CPU cores: QC N=32 about 0.9 steps/s, QC-FQL about 12 steps/s,
about 180 QC decisions/s (measured when this project started).
"""

import argparse
import os
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agents.acfql import ACFQLAgent, get_config  # noqa: E402

METHODS = {
    "qc": dict(actor_type="best-of-n", actor_num_samples=32),
    "qcfql": dict(actor_type="distill-ddpg", alpha=100.0),
}


def make_batches(rng, utd, batch_size, h, obs_dim, action_dim):
    shape = (utd, batch_size)
    return dict(
        observations=rng.normal(size=(*shape, obs_dim)).astype(np.float32),
        actions=rng.uniform(-1, 1, (*shape, h, action_dim)).astype(np.float32),
        next_observations=rng.normal(size=(*shape, h, obs_dim)).astype(np.float32),
        rewards=rng.normal(size=(*shape, h)).astype(np.float32),
        masks=np.ones((*shape, h), np.float32),
        valid=np.ones((*shape, h), np.float32),
    )


def timed(fn, calls):
    """Seconds per call of `fn` after one warm-up call (which compiles)."""
    jax.block_until_ready(fn())
    start = time.perf_counter()
    for _ in range(calls):
        jax.block_until_ready(fn())
    return (time.perf_counter() - start) / calls


def bench_method(method, args):
    """Rows `(method, measurement, rate, unit)` for one method."""
    config = get_config()
    config.update(METHODS[method])
    config.horizon_length = args.horizon_length
    config.flow_steps = args.flow_steps
    config.actor_hidden_dims = config.value_hidden_dims = (args.hidden,) * args.layers
    ex_obs, ex_action = np.zeros(args.obs_dim, np.float32), np.zeros(args.action_dim, np.float32)
    agent = ACFQLAgent.create(0, ex_obs, ex_action, config)
    rng, rows = np.random.default_rng(0), []
    for utd in (int(u) for u in args.utd.split(",")):
        shape = (utd, args.batch_size, args.horizon_length, args.obs_dim, args.action_dim)
        batches = jax.device_put(make_batches(rng, *shape))
        state = {"agent": agent}

        def step(state=state, batches=batches):
            state["agent"], info = state["agent"].batch_update(batches)
            return state["agent"].network.params, info

        rows.append((method, f"batch_update U={utd}", utd / timed(step, args.calls), "gradient steps/s"))
        print("  {:6s} {:22s} {:9.2f} {}".format(*rows[-1]), flush=True)
    obs = jax.device_put(ex_obs)
    keys = iter(jax.random.split(jax.random.PRNGKey(1), args.decisions + 1))
    seconds = timed(lambda: agent.sample_actions(obs, next(keys)), args.decisions)
    rows.append((method, "sample_actions 1 obs", 1 / seconds, "chunk decisions/s"))
    print("  {:6s} {:22s} {:9.2f} {}".format(*rows[-1]), flush=True)
    return rows


def main():
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--methods", default="qc,qcfql", help="comma-separated subset of: qc, qcfql")
    parser.add_argument("--utd", default="1,10", help="comma-separated numbers of stacked batches per call")
    parser.add_argument("--calls", type=int, default=3, help="timed batch_update calls per setting")
    parser.add_argument("--decisions", type=int, default=200, help="timed sample_actions calls")
    parser.add_argument("--batch_size", type=int, default=256, help="windows per gradient step")
    parser.add_argument("--horizon_length", type=int, default=5, help="chunk length h")
    parser.add_argument("--obs_dim", type=int, default=40, help="observation size")
    parser.add_argument("--action_dim", type=int, default=5, help="single-step action size")
    parser.add_argument("--hidden", type=int, default=512, help="hidden width of every MLP")
    parser.add_argument("--layers", type=int, default=4, help="hidden layers of every MLP")
    parser.add_argument("--flow_steps", type=int, default=10, help="Euler steps of the BC flow")
    args = parser.parse_args()

    print(
        f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"MLPs {args.layers}x{args.hidden}, batch {args.batch_size}, h={args.horizon_length}, "
        f"obs {args.obs_dim}, action {args.action_dim}, flow_steps {args.flow_steps}"
    )
    rows = [row for method in args.methods.split(",") for row in bench_method(method, args)]
    print(f"\nload average {os.getloadavg()[0]:.2f}")
    print("| method | measurement | rate | unit |\n| --- | --- | --- | --- |")
    for method, what, rate, unit in rows:
        print(f"| {method} | {what} | {rate:.2f} | {unit} |")


if __name__ == "__main__":
    main()
