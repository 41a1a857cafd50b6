"""Speed of the agents and of a whole run, ours beside the authors' code measured in the same run.

    python scripts/bench_agents.py --reference_dir=/path/to/qc        # every section, both sides
    python scripts/bench_agents.py --sections=seeds,dispatch --seeds=1,2,4,8 --dispatch=1,10,100
    python scripts/bench_agents.py --sections=updates --methods=qc,qcfql --utd=1,10

Sections (QC-FQL at the paper's size unless said: 4x512 MLPs, batch 256, h = 5, cube-double shapes,
observation 40, action 5):

* `updates`: gradient steps/s of `batch_update` on U stacked batches (`--utd`) and chunk decisions/s
  (`sample_actions` on one observation) for QC (best-of-N, N = 32) and QC-FQL (`--methods`; also `acsac` and
  `acsac-fixed`: the Transformer critic, N = 4, at the same 4x512 actor), and the critic alone (its value and
  gradient on one batch).
* `seeds`: seeds x gradient steps/s of `--num_seeds=S` (S agents stacked, one jitted update on S fixed
  batches, `--seed_batching` as the driver resolves it: `map` on CPU, `vmap` on an accelerator) for
  each S in `--seeds`. The authors' code runs one seed per process: their figure for
  S is the sum of the steps/s of S processes timing their `agent.update` at the same time.
* `dispatch`: offline steps/s including the sampling of the windows from a `--rows`-row dataset: ours
  with `--updates_per_dispatch=k` for each k in `--dispatch` (k = 1: host sampling and one update per
  call, the reference loop; k > 1: the device sampler and k steps per `lax.scan`); the authors' loop
  (their `Dataset.sample_sequence`, then `agent.update`, every step).
* `overhead`: the same loops as `dispatch` with 2x64 MLPs and batch 64, where the arithmetic is negligible and
  what remains is host work: ours runs the driver's own update (`SeedGroup.update_fn`) on the run's host
  windows for k = 1, and the device sampler's `offline_updates_traced` (the agent donated) for k = 10, 100; the
  authors' loop; and the floor, the same 100 updates in one bare jitted `lax.scan` over batches sampled and put
  on the device beforehand. Online: environment steps/s of cube-double (UTD 1, from a `--rows`-row buffer),
  ours (`runner.collector.OnlineCollector`, the buffer insert, `SeedGroup.batch_update_fn`) beside the authors'
  online loop (their main.py without its per-step env-info logging). Each measurement is its own process (one's
  compilation or memory cannot slow another), all of them once per round for `--rounds` rounds, interleaved:
  a ratio is the median of the rounds' ratios, so a load that changes between rounds cancels.
* `eval`: wall seconds of `--eval_episodes` evaluation episodes of cube-double with a fresh agent:
  ours sequential, batched (`--eval_envs` envs in lockstep, in this process) and batched with
  `--eval_async_envs` envs in subprocesses; the authors' `evaluate` (which also calls the policy at
  every step of a chunk). Env start-up and compilation are not timed.
* `memory`: peak resident memory (and wall seconds) of a short main job in a subprocess: `main.py
  --method=qc-fql` on cube-single task 1 with 4x256 MLPs, `--memory_steps` offline and online steps, a
  200k-row replay buffer and 10 evaluation episodes, with `--eval_envs` 1 and 10 (`--memory_dataset`: the
  README's generated dataset by default). The authors' code is not run here (it needs robomimic and a wandb
  login); docs/benchmarks.md gives its figure on the same job.
* `donation`: XLA's memory analysis (`compiled.memory_analysis()`) of the jitted update the driver runs, with the
  agent donated (`runner.seed_group.donating`, `donate_argnums=0`) and without: one step (k = 1) and 100 steps on
  the device sampler (k = 100, `--rows` rows). `held` = arguments + outputs - aliased + temporaries: the device
  bytes of one call; donation aliases the new agent to the old one's buffers. Nothing is run or timed.
* `startup`: seconds from starting `main.py` to its first gradient step, with an empty compilation cache
  (`--compilation_cache_dir`, a fresh folder) and then with the one that start filled, for the README's
  main job (QC-FQL, 4x256 MLPs, cube-single task 1) and its CPU-sized DQC run (3x256 MLPs, cube-single
  oraclerep), both on a 2-episode generated dataset: `--startup_repeats` rounds of a cold and a warm start of
  each, interleaved, and the medians over rounds (the process is stopped once the step is done).
* `generation`: episodes/s of `python -m envs.generate_dataset` with `--num_workers` 1 and 2
  (`--gen_episodes` episodes of 1001 steps; the authors' repository has no generator: OGBench's own
  script is sequential, our W = 1).

Every figure of one section is measured back to back in this run; on a shared machine compare the
two columns of one run, not figures of different runs. The authors' side needs `--reference_dir`, a
clone of ColinQiyangLi/qc (see scripts/bench_reference.py); without it only our column is measured.
`--out` writes every row as JSON.
"""

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the repository's packages; scripts/ (the parts' packages) is sys.path[0] already

import bench_reference  # noqa: E402
from utils.startup import ArgumentParser  # noqa: E402

QCFQL = dict(actor_type="distill-ddpg", alpha=100.0)
# The updates section's agents: name -> (agent file, config settings). ACSAC's critic is a Transformer over
# (state, a_1..a_h) in place of QC's MLP over (state, chunk); its actor is QC's flow BC policy.
METHODS = {
    "qc": ("acfql", dict(actor_type="best-of-n", actor_num_samples=32)),
    "qcfql": ("acfql", QCFQL),
    "acsac": ("acsac", {}),
    "acsac-fixed": ("acsac", dict(adaptive_length=False)),
}
SECTIONS = ("updates", "seeds", "dispatch", "overhead", "eval", "memory", "donation", "generation", "startup")
OVERHEAD_SIZE = dict(hidden=64, layers=2, batch=64)  # the overhead section's networks: compute is negligible
ENV_NAME = "cube-double-play-singletask-task2-v0"


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default="seeds,dispatch,eval,memory,generation",
                   help=f"comma-separated sections: {', '.join(SECTIONS)} (startup: only when named)")  # fmt: skip
    p.add_argument("--memory_dataset", default=os.path.expanduser("~/.ogbench/data/cube-single-play-v0.npz"),
                   help="memory section: the cube-single dataset (the README's main job generates it)")  # fmt: skip
    p.add_argument("--memory_steps", type=int, default=1000, help="memory section: offline and online steps (1000)")
    p.add_argument(
        "--methods", default="qc,qcfql", help=f"updates section: comma-separated subset of {', '.join(METHODS)}"
    )
    p.add_argument("--utd", default="1,10", help="updates section: numbers of stacked batches per call")
    p.add_argument("--decisions", type=int, default=100, help="updates section: timed sample_actions calls")
    p.add_argument("--reference_dir", default=None, help="root of the authors' repository (optional)")
    p.add_argument("--seeds", default="1,2,4,8", help="values of S for the seeds section")
    p.add_argument("--dispatch", default="1,10,100", help="values of k for the dispatch section")
    p.add_argument("--steps", type=int, default=20, help="timed gradient steps per measurement (seeds: per seed)")
    p.add_argument("--rows", type=int, default=1_000_000, help="rows of the synthetic offline dataset (dispatch)")
    p.add_argument("--hidden", type=int, default=512, help="hidden width of every MLP")
    p.add_argument("--layers", type=int, default=4, help="hidden layers of every MLP")
    p.add_argument("--batch", type=int, default=256, help="batch size B")
    p.add_argument("--eval_episodes", type=int, default=50, help="episodes of the eval section")
    p.add_argument("--eval_envs", type=int, default=10, help="envs in lockstep of the batched evaluation")
    p.add_argument("--eval_async_envs", type=int, default=2, help="envs of the async batched evaluation (0: skip)")
    p.add_argument("--gen_episodes", type=int, default=4, help="episodes generated per worker count")
    p.add_argument("--rounds", type=int, default=3, help="overhead section: rounds of interleaved measurements")
    p.add_argument("--startup_repeats", type=int, default=3,
                   help="startup section: rounds of a cold and a warm start of each run (medians)")  # fmt: skip
    p.add_argument("--out", default=None, help="write the rows as JSON to this file")
    p.add_argument("--worker", default=None, help="internal: run one timing worker and print JSON")
    p.add_argument("--k", type=int, default=1, help="internal: the worker's steps per call (device, floor)")
    p.add_argument("--side", default="ours", choices=("ours", "reference"), help="internal: the worker's code")
    args = p.parse_args(argv)
    for name in ("steps", "rows", "hidden", "layers", "batch", "eval_episodes", "eval_envs", "gen_episodes",
                 "decisions", "startup_repeats", "rounds"):  # fmt: skip
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    if args.rows <= 5:
        p.error(f"--rows={args.rows} must be > 5 (one window of h=5 steps)")
    for name in args.sections.split(","):
        if name not in SECTIONS:
            p.error(f"--sections: unknown section {name!r}; sections are {', '.join(SECTIONS)}")
    for name in args.methods.split(","):
        if name not in METHODS:
            p.error(f"--methods: unknown method {name!r}; methods are {', '.join(METHODS)}")
    for name in ("utd", "seeds", "dispatch"):
        try:
            values = _ints(getattr(args, name))
        except ValueError:
            values = []
        if not values or min(values) < 1:
            p.error(f"--{name}={getattr(args, name)} must be comma-separated integers >= 1")
    if args.reference_dir is not None:
        args.reference_dir = os.path.abspath(os.path.expanduser(args.reference_dir))
        if not os.path.isfile(os.path.join(args.reference_dir, "agents", "acfql.py")):
            p.error(f"--reference_dir={args.reference_dir} has no agents/acfql.py")
    return args


def _ints(text):
    return [int(x) for x in text.split(",") if x]


# ----------------------------------------------------------------------------------------------- pieces


def _config(module, args):
    config = module.get_config()
    config.update(QCFQL)
    config["horizon_length"] = 5
    config["batch_size"] = args.batch
    config["actor_hidden_dims"] = config["value_hidden_dims"] = (args.hidden,) * args.layers
    return config


def _batches(args, num=4, seed=0):
    ns = argparse.Namespace(seed=seed, batch=args.batch, h=5, obs_dim=40, action_dim=5, num_batches=num)
    return bench_reference.make_batches(ns)


def _synthetic_fields(rows, seed=0, obs_dim=40):
    """A dataset of cube-double's shapes (`obs_dim`: the env's 37 for the online loops): 1001-row episodes,
    sparse successes."""
    import numpy as np

    rng = np.random.default_rng(seed)
    terminals = np.zeros(rows, np.float32)
    terminals[1000::1001] = 1.0
    terminals[-1] = 1.0
    success = rng.random(rows) < 0.05
    return dict(
        observations=rng.normal(size=(rows, obs_dim)).astype(np.float32),
        next_observations=rng.normal(size=(rows, obs_dim)).astype(np.float32),
        actions=rng.uniform(-1, 1, size=(rows, 5)).astype(np.float32),
        rewards=np.where(success, 0.0, -1.0).astype(np.float32),
        masks=(~success).astype(np.float32),
        terminals=terminals,
    )


def _timed(fn, steps):
    """Seconds for `steps` calls of `fn` (each returns something to block on) after two warm-up calls."""
    import jax

    for _ in range(2):
        jax.block_until_ready(fn())
    start = time.perf_counter()
    out = None
    for _ in range(steps):
        out = fn()
    jax.block_until_ready(out)
    return time.perf_counter() - start


# ----------------------------------------------------------------------------------------------- workers


def worker(args):
    """Run one measurement in this process (ours or the reference's code) and print one JSON line."""
    if args.side == "reference":
        bench_reference._isolate_path(args.reference_dir, ROOT)
    import importlib

    import jax
    import numpy as np

    acfql = importlib.import_module("agents.acfql")
    config = _config(acfql, args)
    agent = acfql.ACFQLAgent.create(0, np.zeros(40, np.float32), np.zeros(5, np.float32), config)
    result = {"side": args.side, "worker": args.worker}
    if args.worker == "update":
        batches = [jax.device_put(b) for b in _batches(args)]
        state = {"agent": agent, "i": 0}

        def step():
            state["agent"], info = state["agent"].update(batches[state["i"] % len(batches)])
            state["i"] += 1
            return info

        result["steps_per_s"] = args.steps / _timed(step, args.steps)
    elif args.worker == "loop":
        datasets = importlib.import_module("utils.datasets")
        fields = _synthetic_fields(args.rows)
        if args.side == "reference":
            dataset = datasets.Dataset.create(**fields)
            update = type(agent).update
        else:  # the driver's k = 1 path: host windows, then the group's donating update
            from runner.seed_group import SeedGroup

            dataset = datasets.Dataset.create(**fields, seed=0)
            group = SeedGroup([argparse.Namespace(agent=agent, cfg=None)])
            agent, update = group.agent, group.update_fn()
        state = {"agent": agent}

        def step():
            batch = dataset.sample_sequence(args.batch, sequence_length=5, discount=config["discount"])
            state["agent"], info = update(state["agent"], batch)
            return info

        result["steps_per_s"] = args.steps / _timed(step, args.steps)
    elif args.worker in ("device", "floor"):  # k steps per call: on the device sampler, or the bare scan
        from utils import device_sampler
        from utils.datasets import Dataset
        from utils.flax_utils import scan_updates

        k = args.k
        if args.worker == "device":
            dataset = Dataset.create(**_synthetic_fields(args.rows), seed=0)
            sampler = device_sampler.DeviceWindowSampler.create(dataset, 5, config["discount"])
            # the driver's program: the step count traced (runner.dispatch), the agent donated
            fn = jax.jit(functools.partial(device_sampler.offline_updates_traced, max_steps=k), donate_argnums=0)
            key, first, count = jax.random.PRNGKey(0), {"t": 1}, jax.device_put(np.int32(k))

            def call(agent):
                agent, info = fn(agent, sampler, key, jax.device_put(np.int32(first["t"])), count)
                first["t"] += k
                return agent, info
        else:
            rng = np.random.default_rng(0)
            batches = jax.device_put(_stacked_random_batches(rng, k, args.batch))
            fn = jax.jit(functools.partial(scan_updates, acfql.ACFQLAgent._update, reduce="last"), donate_argnums=0)

            def call(agent):
                return fn(agent, batches)

        from runner.seed_group import distinct_buffers

        state = {"agent": distinct_buffers(agent)}  # donated: no buffer twice

        def step():
            state["agent"], info = call(state["agent"])
            return info

        calls = max(1, args.steps // k)
        result["steps_per_s"] = calls * k / _timed(step, calls)
    elif args.worker == "online":  # environment steps/s: act from the chunk queue, insert, sample, update
        import gymnasium
        import ogbench  # noqa: F401 - registers the envs

        datasets = importlib.import_module("utils.datasets")
        env = gymnasium.make(ENV_NAME.replace("-play", ""))
        observation = env.reset(seed=0)[0]
        fields, utd, batch_size = _synthetic_fields(args.rows, obs_dim=observation.shape[0]), 1, args.batch
        size = args.rows + args.steps + 10  # the buffer never wraps while timed
        state = {"agent": acfql.ACFQLAgent.create(0, observation, np.zeros(5, np.float32), config)}
        if args.side == "reference":  # the authors' online loop (their main.py), inline as they wrote it
            buffer = datasets.ReplayBuffer.create_from_initial_dataset(fields, size)
            queue, state["ob"], state["rng"] = [], observation, jax.random.PRNGKey(0)

            def step():
                state["rng"], key = jax.random.split(state["rng"])
                if not queue:
                    chunk = state["agent"].sample_actions(observations=state["ob"], rng=key)
                    queue.extend(np.array(chunk).reshape(-1, 5))
                action = queue.pop(0)
                next_ob, reward, terminated, truncated, _ = env.step(action)
                done = terminated or truncated
                transition = dict(observations=state["ob"], actions=action, rewards=reward, terminals=float(done),
                                  masks=1.0 - terminated, next_observations=next_ob)  # fmt: skip
                buffer.add_transition(transition)
                state["ob"] = env.reset()[0] if done else next_ob
                if done:
                    queue.clear()
                batch = buffer.sample_sequence(batch_size * utd, sequence_length=5, discount=config["discount"])
                batch = jax.tree_util.tree_map(lambda x: x.reshape((utd, batch_size) + x.shape[1:]), batch)
                state["agent"], info = state["agent"].batch_update(batch)
                return info
        else:  # the driver's online step (main.py): group.collect, group.sample_replay, batch_update
            from runner.collector import OnlineCollector
            from runner.seed_group import SeedGroup, sample_windows, stack_for_utd

            buffer = datasets.ReplayBuffer.create_from_initial_dataset(fields, size, rng=np.random.default_rng(0))
            collector = OnlineCollector(env, 5, lambda r: r, jax.random.PRNGKey(0), reset_seed=0)
            group = SeedGroup([argparse.Namespace(agent=state["agent"], cfg=None)])
            state["agent"], update = group.agent, group.batch_update_fn()

            def step():
                collector.step(state["agent"], buffer)
                batch = stack_for_utd(sample_windows(buffer, config, batch_size * utd), utd)
                state["agent"], info = update(state["agent"], batch)
                return info

        result["steps_per_s"] = args.steps / _timed(step, args.steps)
    elif args.worker == "eval":
        import gymnasium
        import ogbench  # noqa: F401 - registers the envs

        evaluation = importlib.import_module("evaluation")
        env = gymnasium.make(ENV_NAME.replace("-play", ""))  # ogbench's registered id drops the dataset type
        observation, _ = env.reset(seed=0)
        np.random.seed(0)
        agent = acfql.ACFQLAgent.create(0, observation, np.zeros(5, np.float32), config)
        np.asarray(agent.sample_actions(observations=observation, rng=jax.random.PRNGKey(0)))
        start = time.perf_counter()
        evaluation.evaluate(agent, env, num_eval_episodes=args.eval_episodes, action_dim=5)
        result["seconds"] = time.perf_counter() - start
    else:
        raise SystemExit(f"error: unknown worker {args.worker}")
    print(json.dumps(result), flush=True)


def spawn(side, task, args, extra=()):
    """Start one worker process; returns the Popen (read its JSON with `collect`)."""
    cmd = [sys.executable, os.path.abspath(__file__), f"--worker={task}", f"--side={side}"]
    for name in ("steps", "rows", "hidden", "layers", "batch", "eval_episodes", "k"):
        cmd.append(f"--{name}={getattr(args, name)}")
    if args.reference_dir:
        cmd.append(f"--reference_dir={args.reference_dir}")
    cmd += list(extra)
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    cwd = ROOT if side == "ours" else args.reference_dir
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def collect(proc):
    out, err = proc.communicate()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(out[-3000:] + err[-3000:])
        raise SystemExit(f"error: a worker failed (exit status {proc.returncode})")
    return json.loads(lines[-1])


# ----------------------------------------------------------------------------------------------- sections


def section_updates(args, rows):
    """The agents alone: `batch_update` steps/s for each U of `--utd`, and decisions/s."""
    import jax
    import numpy as np

    import agents

    for method in args.methods.split(","):
        agent_name, settings = METHODS[method]
        spec = agents.get(agent_name)
        config = spec.get_config()
        config.update(settings)
        config["horizon_length"] = 5
        for key in ("actor_hidden_dims", "value_hidden_dims"):  # ACSAC's critic has no MLP widths
            if key in config:
                config[key] = (args.hidden,) * args.layers
        agent = spec.agent_class.create(0, np.zeros(40, np.float32), np.zeros(5, np.float32), config)
        rng = np.random.default_rng(0)
        for utd in _ints(args.utd):
            batches = jax.device_put(_stacked_random_batches(rng, utd, args.batch))
            state = {"agent": agent}

            def step(state=state, batches=batches):
                state["agent"], info = state["agent"].batch_update(batches)
                return info

            calls = max(1, args.steps // utd)
            rate = calls * utd / _timed(step, calls)
            rows.append(dict(section="updates", setting=f"{method} U={utd}", unit="gradient steps/s", ours=rate))
            _print(rows[-1])
        obs = jax.device_put(np.zeros(40, np.float32))
        keys = iter(jax.random.split(jax.random.PRNGKey(1), args.decisions + 3))
        rate = args.decisions / _timed(
            functools.partial(lambda a, o, k: a.sample_actions(o, next(k)), agent, obs, keys), args.decisions
        )
        rows.append(dict(section="updates", setting=f"{method} decisions", unit="chunk decisions/s", ours=rate))
        _print(rows[-1])
        # The critic alone: its value and gradient on one batch of (s, chunk), the part of the update that
        # scales with how many (state, chunk) pairs the loss evaluates.
        critic_obs = jax.device_put(rng.normal(size=(args.batch, 40)).astype(np.float32))
        chunks = jax.device_put(rng.uniform(-1, 1, (args.batch, 25)).astype(np.float32))
        critic_grad = jax.jit(jax.grad(lambda p, a, o, c: a.network.select("critic")(o, c, params=p).sum()))
        critic_step = functools.partial(critic_grad, agent.network.params, agent, critic_obs, chunks)
        rate = args.steps / _timed(critic_step, args.steps)
        rows.append(dict(section="updates", setting=f"{method} critic", unit="critic value+grad/s", ours=rate))
        _print(rows[-1])


def _stacked_random_batches(rng, utd, batch_size, h=5, obs_dim=40, action_dim=5):
    import numpy as np

    shape = (utd, batch_size)
    return dict(
        observations=rng.normal(size=(*shape, obs_dim)).astype(np.float32),
        actions=rng.uniform(-1, 1, (*shape, h, action_dim)).astype(np.float32),
        next_observations=rng.normal(size=(*shape, h, obs_dim)).astype(np.float32),
        rewards=rng.normal(size=(*shape, h)).astype(np.float32),
        masks=np.ones((*shape, h), np.float32),
        valid=np.ones((*shape, h), np.float32),
    )


def section_seeds(args, rows):
    import jax
    import numpy as np

    from agents import acfql
    from runner import seed_group

    config = _config(acfql, args)
    for s in _ints(args.seeds):
        agents = [
            acfql.ACFQLAgent.create(i, np.zeros(40, np.float32), np.zeros(5, np.float32), config) for i in range(s)
        ]
        group = seed_group.SeedGroup([argparse.Namespace(agent=a, cfg=None) for a in agents])
        per_seed = [_batches(args, seed=i) for i in range(s)]
        if s == 1:
            batches = [jax.device_put(b) for b in per_seed[0]]
        else:
            batches = [
                jax.device_put({k: np.stack([p[j][k] for p in per_seed]) for k in per_seed[0][j]}) for j in range(4)
            ]
        state = {"i": 0, "agent": group.agent}
        update = group.update_fn()

        def step(batches=batches, state=state, update=update):
            state["i"] += 1
            state["agent"], info = update(state["agent"], batches[state["i"] % len(batches)])
            return info

        ours = s * args.steps / _timed(step, args.steps)
        theirs = None
        if args.reference_dir:
            procs = [spawn("reference", "update", args) for _ in range(s)]
            theirs = sum(collect(p)["steps_per_s"] for p in procs)
        rows.append(
            dict(section="seeds", setting=f"S={s}", unit="seeds x gradient steps/s", ours=ours, reference=theirs)
        )
        _print(rows[-1])


def section_dispatch(args, rows):
    import jax
    import numpy as np

    from agents import acfql
    from utils import device_sampler
    from utils.datasets import Dataset

    config = _config(acfql, args)
    dataset = Dataset.create(**_synthetic_fields(args.rows), seed=0)
    sampler = None
    theirs = None
    if args.reference_dir:
        theirs = collect(spawn("reference", "loop", args))["steps_per_s"]
    for k in _ints(args.dispatch):
        agent = acfql.ACFQLAgent.create(0, np.zeros(40, np.float32), np.zeros(5, np.float32), config)
        state = {"agent": agent, "t": 1}
        if k == 1:

            def step(state=state):
                batch = dataset.sample_sequence(args.batch, sequence_length=5, discount=config["discount"])
                state["agent"], info = state["agent"].update(batch)
                return info

            calls = args.steps
        else:
            if sampler is None:
                sampler = device_sampler.DeviceWindowSampler.create(dataset, 5, config["discount"])
            key = jax.random.PRNGKey(0)
            fn = jax.jit(functools.partial(device_sampler.offline_updates, num_steps=k))

            def step(state=state, fn=fn, key=key, k=k, sampler=sampler):
                state["agent"], info = fn(state["agent"], sampler, key, np.int32(state["t"]))
                state["t"] += k
                return info

            calls = max(1, args.steps // k) if k <= args.steps else 1
        seconds = _timed(step, calls)
        ours = calls * k / seconds
        ms = 1000.0 / ours
        rows.append(
            dict(
                section="dispatch",
                setting=f"k={k}",
                unit="offline steps/s (ms/step)",
                ours=ours,
                ours_ms=ms,
                reference=theirs if k == 1 else None,
            )  # fmt: skip
        )
        _print(rows[-1])


def section_overhead(args, rows):
    """Host overhead per step with tiny networks: ours (driver paths) beside the authors' loops and the floor."""
    import numpy as np

    tiny = argparse.Namespace(**{**vars(args), **OVERHEAD_SIZE})
    tiny.steps = max(tiny.steps, 2000)  # tiny steps are fast: enough of them to time
    runs = {  # setting: (side, worker, k)
        "k=1": ("ours", "loop", 1), "authors' k=1": ("reference", "loop", 1), "k=10": ("ours", "device", 10),
        "k=100": ("ours", "device", 100), "floor k=100": ("ours", "floor", 100),
        "online": ("ours", "online", 1), "authors' online": ("reference", "online", 1),
    }  # fmt: skip
    if not args.reference_dir:
        runs = {setting: run for setting, run in runs.items() if run[0] == "ours"}
    measured = {setting: [] for setting in runs}
    for _ in range(args.rounds):
        for setting, (side, task, k) in runs.items():
            tiny.k = k
            measured[setting].append(collect(spawn(side, task, tiny))["steps_per_s"])
    # (ours, its baseline): the ratio is the median over rounds of ours / baseline of the same round
    pairs = {"k=1": "authors' k=1", "k=100": "floor k=100", "online": "authors' online"}
    ours = [dict(section="overhead", setting=s) for s in ("k=1", "k=10", "k=100", "floor k=100", "online")]
    for row in ours:
        setting = row["setting"]
        base = pairs.get(setting)
        theirs = measured.get(base) if base and base.startswith("authors") else None
        row.update(ours=float(np.median(measured[setting])), rounds=measured[setting],
                   unit="env steps/s (2x64, batch 64, UTD 1)" if setting == "online" else
                   "offline steps/s (2x64, batch 64)")  # fmt: skip
        if theirs is not None:
            row.update(reference=float(np.median(theirs)), reference_rounds=theirs)
        if base in measured:
            row["ratio"] = float(np.median(np.array(measured[setting]) / np.array(measured[base])))
            row["ratio_to"] = base
        rows.append(row)
        _print(row)
    for row in ours:
        if "ratio" in row:
            print(f"             {row['setting']}: ours / {row['ratio_to']} = {row['ratio']:.2f} (median of "
                  f"{args.rounds} rounds)", flush=True)  # fmt: skip


def section_eval(args, rows):
    import jax
    import numpy as np

    import evaluation
    from agents import acfql
    from envs.ogbench import make_eval_env

    make_env = functools.partial(make_eval_env, ENV_NAME)
    env = make_env()
    observation, _ = env.reset(seed=0)
    config = _config(acfql, args)
    agent = acfql.ACFQLAgent.create(0, observation, np.zeros(5, np.float32), config)
    np.asarray(agent.sample_actions(observation, jax.random.PRNGKey(0)))
    start = time.perf_counter()
    stats, _, _ = evaluation.evaluate(agent, env, args.eval_episodes, seed=0, step=0, progress=False)
    sequential = time.perf_counter() - start

    def batched_seconds(num_envs, mode):
        """Wall seconds of the batched evaluation (env start-up and compilation not timed)."""
        vector_env = evaluation.make_eval_vector_env(make_env, num_envs, mode)
        try:
            evaluation.evaluate_batched(agent, vector_env, 1, seed=1, step=1, progress=False)  # compiles
            start = time.perf_counter()
            batched_stats, _, _ = evaluation.evaluate_batched(agent, vector_env, args.eval_episodes, seed=0, step=0,
                                                              progress=False)  # fmt: skip
            seconds = time.perf_counter() - start
        finally:
            vector_env.close()
        if batched_stats["success"] != stats["success"]:
            raise SystemExit(f"error: {mode} batched and sequential evaluation disagree")
        return seconds

    batched = batched_seconds(args.eval_envs, "sync")
    # One subprocess per env: the env steps spread over the cores.
    async_seconds = batched_seconds(args.eval_async_envs, "async") if args.eval_async_envs > 1 else None
    theirs = collect(spawn("reference", "eval", args))["seconds"] if args.reference_dir else None
    unit = f"seconds for {args.eval_episodes} episodes"
    rows.append(dict(section="eval", setting="sequential", unit=unit, ours=sequential, reference=theirs))
    _print(rows[-1])
    rows.append(
        dict(section="eval", setting=f"batched E={args.eval_envs}", unit=unit, ours=batched, ratio=batched / sequential)
    )
    _print(rows[-1])
    if async_seconds is not None:
        setting = f"async E={args.eval_async_envs}"
        rows.append(
            dict(section="eval", setting=setting, unit=unit, ours=async_seconds, ratio=async_seconds / sequential)
        )
        _print(rows[-1])


def section_memory(args, rows):
    for eval_envs in (1, 10):
        with tempfile.TemporaryDirectory() as tmp:
            command = [
                sys.executable, os.path.join(ROOT, "main.py"), "--method=qc-fql",
                "--env_name=cube-single-play-singletask-task1-v0", f"--dataset_path={args.memory_dataset}",
                "--agent.actor_hidden_dims=(256,256,256,256)", "--agent.value_hidden_dims=(256,256,256,256)",
                f"--offline_steps={args.memory_steps}", f"--online_steps={args.memory_steps}", "--start_training=1",
                "--buffer_size=200000", f"--eval_interval={args.memory_steps}", "--eval_episodes=10",
                f"--eval_envs={eval_envs}", f"--save_dir={tmp}", "--progress=False",
            ]  # fmt: skip
            start = time.perf_counter()
            proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            _, status, usage = os.wait4(proc.pid, 0)
            seconds = time.perf_counter() - start
            if status != 0:
                raise SystemExit(f"error: the memory job failed: {proc.stderr.read()[-2000:]}")
        rows.append(
            dict(section="memory", setting=f"E={eval_envs}", unit="peak GB (main job)", ours=usage.ru_maxrss / 2**20)
        )
        _print(rows[-1])
        rows.append(dict(section="memory", setting=f"E={eval_envs} time", unit="wall seconds", ours=seconds))
        _print(rows[-1])


def section_donation(args, rows):
    import functools

    import jax
    import numpy as np

    from agents import acfql
    from runner.seed_group import distinct_buffers
    from utils import device_sampler
    from utils.datasets import Dataset

    config = _config(acfql, args)
    agent = distinct_buffers(acfql.ACFQLAgent.create(0, np.zeros(40, np.float32), np.zeros(5, np.float32), config))
    batch = jax.device_put(_stacked_random_batches(np.random.default_rng(0), 1, args.batch))
    batch = {k: v[0] for k, v in batch.items()}
    sampler = device_sampler.DeviceWindowSampler.create(
        Dataset.create(**_synthetic_fields(args.rows), seed=0), 5, config["discount"]
    )
    calls = {
        "k=1": (lambda a, b: a.update(b), (agent, batch)),
        "k=100": (
            functools.partial(device_sampler.offline_updates, num_steps=100),
            (agent, sampler, jax.random.PRNGKey(0), np.int32(1)),
        ),
    }
    for setting, (fn, call_args) in calls.items():
        for donate in (False, True):
            jitted = jax.jit(fn, donate_argnums=0) if donate else jax.jit(fn)
            stats = jitted.lower(*call_args).compile().memory_analysis()
            held = (stats.argument_size_in_bytes + stats.output_size_in_bytes - stats.alias_size_in_bytes
                    + stats.temp_size_in_bytes)  # fmt: skip
            detail = {
                name: getattr(stats, f"{name}_size_in_bytes") / 2**20
                for name in ("argument", "output", "alias", "temp")
            }
            label = f"{setting}, {'donated' if donate else 'not donated'}"
            rows.append(dict(section="donation", setting=label, unit="device MB held by one call", ours=held / 2**20,
                             **detail))  # fmt: skip
            _print(rows[-1])
            print("             " + ", ".join(f"{k} {v:.1f} MB" for k, v in detail.items()), flush=True)


def section_generation(args, rows):
    from envs.generate_dataset import generate_dataset

    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            generate_dataset("cube-double-play-v0", num_episodes=args.gen_episodes, num_val_episodes=1,
                             save_path=os.path.join(tmp, "d.npz"), progress=False, num_workers=workers)  # fmt: skip
            seconds = time.perf_counter() - start
        rows.append(
            dict(
                section="generation",
                setting=f"W={workers}",
                unit="episodes/s (1001 steps)",
                ours=(args.gen_episodes + 1) / seconds,
            )  # fmt: skip
        )
        _print(rows[-1])


STARTUP_RUNS = {
    "main job": ["--method=qc-fql", "--env_name=cube-single-play-singletask-task1-v0",
                 "--agent.actor_hidden_dims=(256,256,256,256)", "--agent.value_hidden_dims=(256,256,256,256)"],
    "DQC": ["--method=dqc", "--env_name=cube-single-play-oraclerep-v0", "--agent.actor_hidden_dims=(256,256,256)",
            "--agent.value_hidden_dims=(256,256,256)", "--agent.batch_size=256"],
}  # fmt: skip


def _seconds_to_first_step(flags, data, cache, save):
    """Start `main.py` for one offline step and time it until its progress line says the step is done."""
    cmd = [sys.executable, "main.py", *flags, "--offline_steps=1", "--online_steps=0", "--progress=True",
           f"--dataset_path={data}", f"--compilation_cache_dir={cache}", f"--save_dir={save}"]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds, tail = None, []
    for line in proc.stderr:
        tail = (tail + [line])[-20:]
        if "offline: 1/1 steps" in line:
            seconds = time.perf_counter() - start
            break
    proc.kill()
    proc.wait()
    if seconds is None:
        raise RuntimeError(f"{' '.join(cmd)} ended before its first step:\n{''.join(tail)}")
    return seconds


def section_startup(args, rows):
    from envs.generate_dataset import generate_dataset
    from utils.startup import quiet_startup

    quiet_startup()

    # Rounds, each a cold start (a fresh cache folder) then a warm one (the folder it filled) of every run, so that
    # a machine whose speed drifts slows both alike; the medians over rounds make the ratio.
    times = {(name, kind): [] for name in STARTUP_RUNS for kind in ("cold cache", "warm cache")}
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "cube-single-play-v0.npz")
        generate_dataset("cube-single-play-v0", num_episodes=2, seed=0, save_path=data, progress=False)
        for r in range(args.startup_repeats):
            for i, (name, flags) in enumerate(STARTUP_RUNS.items()):
                cache = os.path.join(tmp, f"cache_{r}_{i}")
                for kind in ("cold cache", "warm cache"):
                    times[name, kind].append(_seconds_to_first_step(flags, data, cache, os.path.join(tmp, "exp")))
            print(f"  startup round {r + 1}/{args.startup_repeats}: "
                  + ", ".join(f"{n}, {k} {v[-1]:.1f} s" for (n, k), v in times.items()), flush=True)  # fmt: skip
    for name in STARTUP_RUNS:
        cold, warm = (statistics.median(times[name, kind]) for kind in ("cold cache", "warm cache"))
        for setting, seconds in (("cold cache", cold), ("warm cache", warm)):
            rows.append(dict(section="startup", setting=f"{name}, {setting}", unit="median s to the first step",
                             ours=seconds, each=times[name, setting]))  # fmt: skip
            _print(rows[-1])
        rows.append(dict(section="startup", setting=f"{name}, warm/cold", unit="ratio of medians", ours=warm / cold))
        _print(rows[-1])


def _print(row):
    ref = row.get("reference")
    ref_text = "-" if ref is None else f"{ref:.3f}"
    line = f"  {row['section']:10s} {row['setting']:24s} ours {row['ours']:9.3f}   authors {ref_text:>9s}"
    print(f"{line}   {row['unit']}", flush=True)


def main(args):
    import jax

    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    print(f"QC-FQL {args.layers}x{args.hidden}, batch {args.batch}, h=5, obs 40, action 5")
    rows = []
    sections = {"updates": section_updates, "seeds": section_seeds, "dispatch": section_dispatch,
                "overhead": section_overhead, "eval": section_eval,
                "memory": section_memory, "donation": section_donation, "generation": section_generation,
                "startup": section_startup}  # fmt: skip
    for name in args.sections.split(","):
        sections[name](args, rows)
    print(f"load {os.getloadavg()[0]:.2f}")
    print("\n| section | setting | ours | authors' code | unit |\n| --- | --- | --- | --- | --- |")
    for row in rows:
        ref = row.get("reference")
        print(f"| {row['section']} | {row['setting']} | {row['ours']:.3g} | {'-' if ref is None else f'{ref:.3g}'} | "
              f"{row['unit']} |")  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    cli = parse_args()
    if cli.worker:
        worker(cli)
    else:
        main(cli)
