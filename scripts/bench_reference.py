"""Speed of our ACFQL (DQC, IQL, ReBRAC, IFQL) gradient step against the authors' code, as a ratio measured in one run.

What it measures: steps/s of `ACFQLAgent.update(batch)` (one jitted gradient step of critic and
actor plus the target-critic update) in this repository (agents/acfql.py) and in the authors'
implementation (their agents/acfql.py), on the same machine, same configuration and same batches.

How: each round starts two worker processes one after the other, ours then the reference's (the
order is swapped on odd rounds so that slow drift of a shared, noisy machine cancels). The two
codebases both have top-level packages named `agents` and `utils`, so each worker runs in its
own Python process with only its own repository root on `sys.path`. A worker builds the agent
from each side's `get_config()` with the same overrides (`horizon_length`, `actor_type`,
`alpha` or `actor_num_samples`, `actor_hidden_dims`, `value_hidden_dims`), builds a few fixed
random batches with the keys and shapes of a `sample_sequence` batch (the same seed, so both sides
get identical arrays; a checksum is compared), puts them on the device, runs `--warmup` updates
(compilation is excluded from the timing), then times `--steps` sequential `agent.update(batch)`
calls cycling through the batches, with `jax.block_until_ready` on the final agent. Batch values do
not affect the speed. `JAX_PLATFORMS=cpu` is forced unless `--platform` is given.

Getting the reference code: clone the authors' repository at the commit this project reproduces,

    git clone https://github.com/ColinQiyangLi/qc /path/to/qc && git -C /path/to/qc checkout 48283b4

(nothing of it is copied here; the worker imports it at run time from `--reference_dir`). Its
`agents/__init__.py` also imports their ACRLPD agent, which needs `distrax` (in our requirements).

    python scripts/bench_reference.py --reference_dir=/path/to/qc                  # QC-FQL, paper size
    python scripts/bench_reference.py --reference_dir=/path/to/qc --method=qc      # QC, best-of-32
    python scripts/bench_reference.py --reference_dir=/path/to/qc --hidden=64 --layers=2 --batch=64
    python scripts/bench_reference.py --reference_dir=/path/to/dqc --method=dqc --h=25   # DQC h=25 h_a=5

`--method=iql|rebrac|ifql` times the Q-chunking paper's baselines against the release they come from,
seohongpark/fql at 719d044 (`git clone https://github.com/seohongpark/fql /path/to/fql && git -C /path/to/fql
checkout 719d044`; its `agents/__init__.py` imports all its agents). Both sides are one-step agents (h = 1): each
builds the same random batches; ours reads them as windows of one step `(B, 1, ...)` (docs/batch_contract.md),
the release as the single-step arrays `(B, ...)` its `main.py` feeds it (the same numbers, the window axis
dropped). ReBRAC's release update takes `full_update` from its caller (`i % actor_freq == 0` for update
`i = 1, 2, ...`, as its `main.py`); ours decides from its own step count, the same schedule.

    python scripts/bench_reference.py --reference_dir=/path/to/fql --method=rebrac --hidden=256 --batch=256

`--method=dqc` times `DQCAgent.update` against the DQC release (ColinQiyangLi/dqc at df89825) on batches of
its goal-conditioned windows (`--h` is the critic chunk `backup_horizon`, the policy chunk is 5, goals of
`--goal_dim`); the paper's size is batch 4096 and 4x1024 MLPs, a GPU's; on a CPU pass smaller ones.

What the figures mean: per round, gradient steps/s of each implementation and the ratio
ours/reference; above 1 means our update is faster. The median ratio over rounds is the result. The
absolute steps/s depend on the machine and its load (printed as the 1-minute load average before and
after) and mean little on their own; the ratio, measured back to back, is what to compare.
"""

import argparse
import hashlib
import importlib
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the repository's packages; scripts/ (the parts' packages) is sys.path[0] already

WORKERS = ("ours", "reference")
METHODS = {
    "qcfql": dict(actor_type="distill-ddpg", alpha=100.0),  # QC-FQL
    "qc": dict(actor_type="best-of-n", actor_num_samples=32),  # QC (best-of-N)
    # DQC h=25 h_a=5 as the DQC paper runs it (its per-domain kappas aside: they do not change the work).
    "dqc": dict(
        use_chunk_critic=True,
        policy_chunk_size=5,
        num_qs=2,
        distill_method="expectile",
        implicit_backup_type="quantile",
    ),  # fmt: skip
    # The Q-chunking paper's one-step baselines (its cube values; they do not change the work) against the FQL
    # release (seohongpark/fql at 719d044).
    "iql": dict(actor_loss="awr", alpha=0.3, expectile=0.9),
    "rebrac": dict(alpha_actor=0.1),
    "ifql": dict(num_samples=32, expectile=0.9),
}
# The methods whose reference is the FQL release: one-step agents, fed batches without a window axis.
FQL_RELEASE = ("iql", "rebrac", "ifql")
# The agent class of each method (ours and the reference's have the same names) and its module under agents/.
AGENTS = {
    "qcfql": ("acfql", "ACFQLAgent"),
    "qc": ("acfql", "ACFQLAgent"),
    "dqc": ("dqc", "DQCAgent"),
    "iql": ("iql", "IQLAgent"),
    "rebrac": ("rebrac", "ReBRACAgent"),
    "ifql": ("ifql", "IFQLAgent"),
}
# Config keys whose values legitimately differ in form between the two sides (filled in by create()).
SHAPE_KEYS = ("ob_dims", "action_dim")
# Size options forwarded unchanged from the parent to the workers.
FORWARDED = (
    "method",
    "steps",
    "warmup",
    "num_batches",
    "hidden",
    "layers",
    "batch",
    "h",
    "obs_dim",
    "action_dim",
    "goal_dim",
    "seed",
    "reference_dir",
)


def parse_args(argv=None):
    from utils.startup import ArgumentParser  # ours, in a worker too: run_worker isolates the path after this

    p = ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--reference_dir",
        default=None,
        help="root of the authors' repository (ColinQiyangLi/qc at commit 48283b4; ColinQiyangLi/dqc at df89825 "
        "for --method=dqc; seohongpark/fql at 719d044 for iql, rebrac, ifql), the folder that holds their agents/ "
        "and utils/; required",
    )
    p.add_argument(
        "--method",
        choices=sorted(METHODS),
        default="qcfql",
        help="qcfql: actor_type distill-ddpg, alpha 100 (default); qc: best-of-n with 32 samples; dqc: DQC h=--h "
        "h_a=5 against the DQC release; iql, rebrac, ifql: the paper's one-step baselines against the FQL release",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds; each runs both implementations once, order swapped on odd rounds (default 3)",
    )
    p.add_argument("--steps", type=int, default=30, help="timed agent.update calls per worker (default 30)")
    p.add_argument(
        "--warmup", type=int, default=3, help="untimed agent.update calls before timing; the first compiles (default 3)"
    )
    p.add_argument(
        "--num_batches",
        type=int,
        default=4,
        help="pre-built random batches the timed updates cycle through (default 4)",
    )
    p.add_argument("--hidden", type=int, default=512, help="width of every hidden layer, actors and critic (512)")
    p.add_argument("--layers", type=int, default=4, help="hidden layers per MLP, actors and critic (default 4)")
    p.add_argument("--batch", type=int, default=256, help="batch size B (default 256)")
    p.add_argument(
        "--h",
        type=int,
        default=None,
        help="action chunk length, horizon_length (default 5; iql, rebrac, ifql: 1, the only one they take)",
    )
    p.add_argument("--obs_dim", type=int, default=40, help="observation size D (default 40)")
    p.add_argument("--action_dim", type=int, default=5, help="single-step action size A (default 5)")
    p.add_argument("--goal_dim", type=int, default=9, help="dqc: goal (oracle representation) size G (default 9)")
    p.add_argument("--seed", type=int, default=0, help="seed of the agents and of the random batches (default 0)")
    p.add_argument(
        "--platform",
        default=None,
        help="JAX_PLATFORMS for the workers, e.g. cuda; default cpu (forced, whatever the environment)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=3600.0,
        help="seconds after which a worker is killed and the run fails (default 3600)",
    )
    p.add_argument("--out", default=None, help="also write the table (and the settings) as JSON to this file")
    p.add_argument(
        "--worker",
        choices=WORKERS,
        default=None,
        help="internal: run one timing worker for this implementation and print one JSON line",
    )
    args = p.parse_args(argv)
    if args.h is None:
        args.h = 1 if args.method in FQL_RELEASE else 5
    elif args.method in FQL_RELEASE and args.h != 1:
        p.error(f"--method={args.method}: the release's agent is one-step, --h must be 1, got {args.h}")
    for name in ("rounds", "steps", "warmup", "num_batches", "hidden", "layers", "batch", "h", "obs_dim", "action_dim",
                 "goal_dim"):  # fmt: skip
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    if args.worker != "ours":
        if not args.reference_dir:
            p.error("--reference_dir is required (the root of the authors' repository)")
        args.reference_dir = os.path.abspath(os.path.expanduser(args.reference_dir))
        agent_file = AGENTS[args.method][0] + ".py"
        if not os.path.isfile(os.path.join(args.reference_dir, "agents", agent_file)):
            p.error(f"--reference_dir={args.reference_dir} has no agents/{agent_file}")
    return args


# ----------------------------------------------------------------------------------------------- worker


def _isolate_path(root, other):
    """Make `root` the only one of the two repository roots importable (and the first entry)."""
    drop = {os.path.realpath(d) for d in (root, other, os.getcwd()) if d}
    sys.path[:] = [d for d in sys.path if os.path.realpath(d or os.getcwd()) not in drop]
    sys.path.insert(0, root)
    for name in [m for m in sys.modules if m.split(".")[0] in ("agents", "utils")]:
        del sys.modules[name]


def make_batches(args):
    """`num_batches` dicts of float32 numpy arrays shaped like a `sample_sequence` batch."""
    import numpy as np

    rng = np.random.default_rng(args.seed)
    b, h, d, a = args.batch, args.h, args.obs_dim, args.action_dim
    batches = []
    for _ in range(args.num_batches):
        batches.append(
            dict(
                observations=rng.normal(size=(b, d)),
                actions=rng.uniform(-1, 1, (b, h, a)),
                next_observations=rng.normal(size=(b, h, d)),
                rewards=rng.normal(size=(b, h)),
                masks=(rng.uniform(size=(b, h)) > 0.01),
                valid=np.ones((b, h)),
                terminals=(rng.uniform(size=(b, h)) < 0.01),
                full_observations=rng.normal(size=(b, h, d)),
                next_actions=rng.uniform(-1, 1, (b, h, a)),
            )
        )
    return [{k: np.asarray(v, np.float32) for k, v in batch.items()} for batch in batches]


def make_dqc_batches(args):
    """`num_batches` dicts shaped like a batch of DQC's goal-conditioned windows (both sides' keys)."""
    import numpy as np

    rng = np.random.default_rng(args.seed)
    b, h, d, a, g = args.batch, args.h, args.obs_dim, args.action_dim, args.goal_dim
    batches = []
    for _ in range(args.num_batches):
        horizon = rng.integers(1, h + 1, b)
        reached = (horizon < h).astype(np.float32)
        batches.append(
            dict(
                observations=rng.normal(size=(b, d)).astype(np.float32),
                actions=rng.uniform(-1, 1, (b, a)).astype(np.float32),
                high_value_goals=rng.normal(size=(b, g)).astype(np.float32),
                high_value_action_chunks=rng.uniform(-1, 1, (b, h * a)).astype(np.float32),
                high_value_next_observations=rng.normal(size=(b, d)).astype(np.float32),
                high_value_backup_horizon=horizon.astype(np.int32),
                high_value_masks=1.0 - reached,
                high_value_rewards=(0.999**horizon * reached).astype(np.float32),
                valids=np.ones((b, h), np.float32),
            )
        )
    return batches


def _checksum(batches):
    digest = hashlib.sha256()
    for batch in batches:
        for key in sorted(batch):
            digest.update(key.encode())
            digest.update(batch[key].tobytes())
    return digest.hexdigest()[:16]


def single_step(batch):
    """A one-step window batch `(B, 1, ...)` as the FQL release's `main.py` feeds its agents: `(B, ...)`."""
    return {k: v if k == "observations" else v[:, 0] for k, v in batch.items()}


def update_call(args, config):
    """`(agent, batch, i) -> (agent, info)` for update `i = 1, 2, ...`: `agent.update(batch)`, except the FQL
    release's ReBRAC, whose caller passes `full_update=(i % actor_freq == 0)` (its `main.py`)."""
    if args.method == "rebrac" and args.worker == "reference":
        freq = config["actor_freq"]
        return lambda agent, batch, i: agent.update(batch, full_update=(i % freq == 0))
    return lambda agent, batch, i: agent.update(batch)


def _jsonable(config):
    return json.loads(json.dumps({k: config[k] for k in config}, default=str))


def run_worker(args):
    """Time `agent.update` of one implementation; print one JSON line."""
    root = ROOT if args.worker == "ours" else args.reference_dir
    _isolate_path(root, args.reference_dir if args.worker == "ours" else ROOT)
    import jax
    import numpy as np

    dqc = args.method == "dqc"
    module_name, class_name = AGENTS[args.method]
    module = importlib.import_module(f"agents.{module_name}")
    if not os.path.realpath(module.__file__).startswith(os.path.realpath(root) + os.sep):
        raise RuntimeError(f"imported {module.__file__}, expected a file under {root}")

    config = module.get_config()
    config.update(METHODS[args.method])
    if args.method not in FQL_RELEASE:  # the release's baselines have no h; ours default to the one step they run
        config["backup_horizon" if dqc else "horizon_length"] = args.h
    config["batch_size"] = args.batch  # read only by the drivers; set so that the configs say what was run
    config["actor_hidden_dims"] = config["value_hidden_dims"] = (args.hidden,) * args.layers
    ex_obs, ex_action = np.zeros(args.obs_dim, np.float32), np.zeros(args.action_dim, np.float32)
    host_batches = make_dqc_batches(args) if dqc else make_batches(args)
    checksum = _checksum(host_batches)  # of the numbers both sides get, before the release's reshaping
    agent_class = getattr(module, class_name)
    if args.method in FQL_RELEASE and args.worker == "reference":  # the release builds from example batches
        host_batches = [single_step(b) for b in host_batches]
        agent = agent_class.create(args.seed, ex_obs[None], ex_action[None], config)
    elif not dqc:
        agent = agent_class.create(args.seed, ex_obs, ex_action, config)
    elif args.worker == "ours":
        agent = agent_class.create(args.seed, ex_obs, ex_action, config, ex_goals=np.zeros(args.goal_dim))
    else:  # the release builds from an example batch
        agent = agent_class.create(args.seed, {k: v[:1] for k, v in host_batches[0].items()}, config)
    update = update_call(args, config)

    batches = [jax.device_put(b) for b in host_batches]
    jax.block_until_ready(batches)

    start = time.perf_counter()
    for i in range(args.warmup):
        agent, _ = update(agent, batches[i % len(batches)], i + 1)
    jax.block_until_ready(agent)
    warmup_s = time.perf_counter() - start

    start = time.perf_counter()
    for i in range(args.steps):
        agent, _ = update(agent, batches[i % len(batches)], args.warmup + i + 1)
    jax.block_until_ready(agent)
    seconds = time.perf_counter() - start

    print(
        json.dumps(
            dict(
                worker=args.worker,
                module=os.path.realpath(module.__file__),
                steps=args.steps,
                seconds=seconds,
                steps_per_s=args.steps / seconds,
                warmup_s=warmup_s,
                backend=jax.default_backend(),
                devices=[str(d) for d in jax.devices()],
                batch_checksum=checksum,
                config=_jsonable(agent.config),
            )
        ),
        flush=True,
    )


# ----------------------------------------------------------------------------------------------- parent


def spawn(worker, args):
    """Run one worker process; its JSON result as a dict."""
    cmd = [sys.executable, os.path.abspath(__file__), f"--worker={worker}"]
    cmd += [f"--{name}={getattr(args, name)}" for name in FORWARDED]
    env = dict(os.environ, JAX_PLATFORMS=args.platform or "cpu")
    proc = subprocess.run(
        cmd,
        env=env,
        cwd=ROOT if worker == "ours" else args.reference_dir,
        capture_output=True,
        text=True,
        timeout=args.timeout,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"error: worker {worker} failed (exit status {proc.returncode})")
    return json.loads(lines[-1])


def config_differences(ours, reference):
    """Lines naming the config keys on which the two agents differ (shape keys excluded)."""
    lines = []
    for key in sorted(set(ours) | set(reference)):
        if key in SHAPE_KEYS:
            continue
        if key not in reference:
            lines.append(f"  {key}: ours {ours[key]!r}, reference has no such key")
        elif key not in ours:
            lines.append(f"  {key}: reference {reference[key]!r}, ours has no such key")
        elif ours[key] != reference[key]:
            lines.append(f"  {key}: ours {ours[key]!r}, reference {reference[key]!r}")
    return lines


def main(args):
    size = (
        f"method={args.method} {METHODS[args.method]} hidden={args.layers}x{args.hidden} batch={args.batch} "
        f"h={args.h} obs_dim={args.obs_dim} action_dim={args.action_dim} steps={args.steps} "
        f"warmup={args.warmup} platform={args.platform or 'cpu'}"
    )
    load_before = os.getloadavg()[0]
    print(f"bench_reference: {size}")
    print(f"reference: {args.reference_dir}   load average (1 min) at start: {load_before:.2f}", flush=True)
    started = time.perf_counter()
    rows, first = [], None
    for r in range(args.rounds):
        order = WORKERS if r % 2 == 0 else WORKERS[::-1]
        results = {worker: spawn(worker, args) for worker in order}
        if first is None:
            first = results
            if results["ours"]["batch_checksum"] != results["reference"]["batch_checksum"]:
                raise SystemExit("error: the two workers built different batches")
            diffs = config_differences(results["ours"]["config"], results["reference"]["config"])
            print(
                "config: the agents agree on every shared key"
                if not diffs
                else "config differences (ours vs reference):\n" + "\n".join(diffs)
            )
            print(f"backend: {results['ours']['backend']}")
            print(f"{'round':>5}  {'order':<16} {'ours steps/s':>13} {'reference steps/s':>18} {'ours/reference':>15}")
        ours, ref = results["ours"]["steps_per_s"], results["reference"]["steps_per_s"]
        rows.append(
            dict(
                round=r + 1,
                order=list(order),
                ours_steps_per_s=ours,
                reference_steps_per_s=ref,
                ratio=ours / ref,
                ours_warmup_s=results["ours"]["warmup_s"],
                reference_warmup_s=results["reference"]["warmup_s"],
            )
        )
        print(f"{r + 1:>5}  {','.join(order):<16} {ours:>13.2f} {ref:>18.2f} {ours / ref:>15.3f}", flush=True)
    median = statistics.median(row["ratio"] for row in rows)
    load_after = os.getloadavg()[0]
    wall = time.perf_counter() - started
    print(f"median ratio ours/reference: {median:.3f} over {len(rows)} rounds (>1: ours faster)")
    print(f"load average (1 min) at end: {load_after:.2f}   wall time: {wall:.0f} s")
    if args.out:
        report = dict(
            settings={k: v for k, v in vars(args).items() if k not in ("worker", "out")},
            overrides=METHODS[args.method],
            rows=rows,
            median_ratio=median,
            load_average_1min=dict(start=load_before, end=load_after),
            wall_s=wall,
            backend=first["ours"]["backend"],
            modules={w: first[w]["module"] for w in WORKERS},
            config_differences=config_differences(first["ours"]["config"], first["reference"]["config"]),
        )
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
        print(f"wrote {args.out}")
    return median


if __name__ == "__main__":
    cli = parse_args()
    if cli.worker:
        run_worker(cli)
    else:
        main(cli)
