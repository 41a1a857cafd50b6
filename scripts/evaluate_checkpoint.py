"""Evaluate a run's saved checkpoint again, with the run's evaluation or with acting changed.

    python scripts/evaluate_checkpoint.py RUN_DIR --step=10000 [--episodes=100] [--seed=S]
        [--agent adaptive_length=False] [--action_chunk_eval_size=1] [--agent_grid commit_margin=0,0.5,1]

The agent is rebuilt from the run's `flags.json` (its agent config, then each `--agent KEY=VALUE`), its
parameters read from `RUN_DIR/checkpoints/agent_<step>.msgpack`, and its evaluation env made by the run's
benchmark family with the run's data options; then `evaluation.evaluate` runs with the run's seed, that step
and the run's `--eval_temperature`. With no option changed this is the run's own evaluation: the printed
statistics equal its `eval.csv` row at that step. Changing acting answers questions such as "the same networks,
executing whole chunks?" (`--agent adaptive_length=False` for `--method=acsac`) or "executing only the first
action?" (`--action_chunk_eval_size=1`). `--seed` draws other episodes. Prints the statistics as one JSON
object; writes nothing into the run.

`--agent_grid KEY=V1,V2,...` evaluates the checkpoint once per value of one agent key (on top of the `--agent`
changes; values separated as `sweep.py --grid` separates them), each on the same episodes, e.g. an ACSAC agent at
several commitment margins; it prints one JSON object per value, one line each, with `"agent.KEY": value` first.

An override may only change a key that exists in the run's config, to a value of the same type that the agent's
own `check_config` accepts (`create` runs it; a key that changes the networks' shapes fails when the checkpoint is
read). A key the agent gained after the run was recorded takes the agent's default (a line on stderr names it;
ACSAC's `target_choice` and `commit_margin` default to what it did before them). Errors are one `error:` line,
exit status 2; every agent config is checked before the first evaluation.
"""

import ast
import glob
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from utils.startup import ArgumentParser, exit_with_error  # noqa: E402


def _tuples(value):
    """JSON lists back to the tuples agent configs hold (hidden sizes, observation shapes)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def agent_config(record: dict, overrides, defaults=None, flag: str = "--agent") -> dict:
    """The run's agent config with `KEY=VALUE` overrides (VALUE a Python literal, or a bare word as a string);
    a key of `defaults` (a mapping: the agent's `get_config()`) that the record lacks takes the default's value.
    Errors name the override as `flag 'KEY=VALUE'`.

    Raises:
        ValueError: not KEY=VALUE, a key the config lacks, or a value of another type than the key's.
    """
    config = {k: _tuples(v) for k, v in {**(defaults or {}), **record["agent"]}.items()}
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or key not in config:
            known = ", ".join(sorted(config))
            raise ValueError(f"{flag} {item!r}: expected KEY=VALUE with KEY one of the run's agent keys ({known}).")
        try:
            value = _tuples(ast.literal_eval(text))
        except (ValueError, SyntaxError):
            value = text
        old = config[key]
        if old is not None and not isinstance(value, type(old)) and not (type(old) is float and type(value) is int):
            raise ValueError(f"{flag} {item!r}: {key} is {type(old).__name__} ({old!r}), not {type(value).__name__}.")
        config[key] = float(value) if type(old) is float else value
    return config


def checkpoint_path(run_dir: str, step: int) -> str:
    """`RUN_DIR/checkpoints/agent_<step>.msgpack`; `FileNotFoundError` listing the steps that were saved."""
    path = os.path.join(run_dir, "checkpoints", f"agent_{step}.msgpack")
    if not os.path.isfile(path):
        saved = sorted(int(m[1]) for p in glob.glob(os.path.join(run_dir, "checkpoints", "agent_*.msgpack"))
                       if (m := re.search(r"agent_(\d+)\.msgpack$", p)))  # fmt: skip
        raise FileNotFoundError(f"no checkpoint {path}; checkpoints of this run: steps {saved or 'none'}.")
    return path


def grid_values(spec: str):
    """`--agent_grid KEY=V1,V2,...` -> `(KEY, ['V1', 'V2', ...])`, the values split as `sweep.py --grid` does.

    Raises `ValueError` for another form, an empty or repeated value or unbalanced brackets."""
    from sweeping.values import split_values

    key, sep, text = spec.partition("=")
    if not sep or not key:
        raise ValueError(f"--agent_grid {spec!r}: the form is KEY=V1,V2,... (e.g. commit_margin=0,0.5,1).")
    try:
        return key, split_values(text)
    except ValueError as e:
        raise ValueError(f"--agent_grid {spec!r}: {e}.") from None


def evaluate_checkpoint(run_dir, step, episodes=None, seed=None, overrides=(), action_chunk_eval_size=None):
    """The statistics of `evaluation.evaluate` (`success`, `episode.*`, `executed_length.*`, ...) for the
    checkpoint of `run_dir` at `step`: the module docstring. `episodes`/`seed` None: the run's own."""
    return evaluate_checkpoints(run_dir, step, episodes, seed, overrides, action_chunk_eval_size)[0][1]


def evaluate_checkpoints(run_dir, step, episodes=None, seed=None, overrides=(), action_chunk_eval_size=None, grid=None):
    """`[(agent config, evaluate_checkpoint's statistics)]`: one pair, or with `grid = (KEY, ['V1', ...])` one per
    value (`KEY=V` on top of `overrides`), in order, on the same episodes; the env and data are made once, and
    every config is checked (`create`) before any evaluation.

    Raises `ValueError` for a bad override or config, `FileNotFoundError` for a missing checkpoint.
    """
    import numpy as np

    import agents
    import envs
    from agents import common
    from evaluation import evaluate
    from runner.resume import current_names
    from utils.flax_utils import restore_agent

    with open(os.path.join(run_dir, "flags.json")) as f:
        record = json.load(f)
    flags = current_names(record["flags"])  # a run recorded as --ogbench_dataset_dir: its --dataset_dir
    path = checkpoint_path(run_dir, step)
    name = record["agent"].get("agent_name")
    if name in agents.names() or not flags.get("agent_file"):
        spec = agents.get(name)
    else:  # an agent file of the user's, outside agents/ (--agent=PATH)
        spec = agents.load_file(flags["agent_file"])
    defaults = spec.get_config().to_dict()
    gained = sorted(set(defaults) - set(record["agent"]))
    if gained:
        filled = ", ".join(f"{k}={defaults[k]!r}" for k in gained)
        print(f"note: {run_dir}/flags.json predates the agent key(s) {filled}: the agent's defaults", file=sys.stderr)
    config = agent_config(record, overrides, defaults)
    key, values = grid or (None, [])
    configs = [agent_config({"agent": config}, [f"{key}={v}"], flag="--agent_grid") for v in values] or [config]
    env_data = envs.make_env_and_datasets(
        flags["env_name"],
        dataset_path=flags.get("dataset_path"),
        dataset_dir=flags.get("dataset_dir"),
        dataset_proportion=flags.get("dataset_proportion", 1.0),
        sparse=bool(flags.get("sparse")),
        seed=int(flags["seed"]),
        success_timing=flags.get("success_timing", "post"),
        dataset_success_timing=flags.get("dataset_success_timing", "pre"),
        hash_datasets=False,
    )
    data = env_data.train_dataset
    goals = {"ex_goals": data["oracle_reps"][:1]} if spec.goal_conditioned else {}
    templates = [spec.agent_class.create(0, data["observations"][:1], data["actions"][:1], c, **goals) for c in configs]
    takes_temperature = common.sample_actions_takes(spec.agent_class, "temperature")
    results = []
    for config, template in zip(configs, templates, strict=True):
        stats, _, _ = evaluate(
            restore_agent(template, path),
            env_data.eval_env,
            num_eval_episodes=int(flags["eval_episodes"] if episodes is None else episodes),
            action_dim=int(np.shape(data["actions"])[-1]),
            seed=int(flags["seed"] if seed is None else seed),
            step=step,
            progress=False,
            task_names=env_data.task_names or None,
            action_chunk_eval_size=action_chunk_eval_size,
            temperature=flags.get("eval_temperature") if takes_temperature else None,
        )
        results.append((config, stats))
    return results


def main(argv=None) -> int:
    parser = ArgumentParser(prog="python scripts/evaluate_checkpoint.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="A run directory (flags.json and checkpoints/).")
    parser.add_argument("--step", type=int, required=True, help="The checkpoint's global step (agent_<step>.msgpack).")
    parser.add_argument("--episodes", type=int, default=None, help="Episodes (default: the run's --eval_episodes).")
    parser.add_argument("--seed", type=int, default=None, help="Seed of the episodes (default: the run's --seed).")
    parser.add_argument("--agent", action="append", default=[], metavar="KEY=VALUE",
                        help="Change one agent config key, e.g. adaptive_length=False (repeatable).")  # fmt: skip
    parser.add_argument("--agent_grid", default=None, metavar="KEY=V1,V2,...",
                        help="Evaluate at each value of one agent key, e.g. commit_margin=0,0.5,1.")  # fmt: skip
    parser.add_argument("--action_chunk_eval_size", type=int, default=None,
                        help="Execute only the first n actions of each chunk (the ac<n>/ evaluation).")  # fmt: skip
    args = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(args.run_dir, "flags.json")):
        exit_with_error(f"{args.run_dir} has no flags.json: not a run directory of main.py or main_online.py.")
    if args.episodes is not None and args.episodes < 1:
        exit_with_error(f"--episodes={args.episodes}: must be at least 1.")
    if args.action_chunk_eval_size is not None and args.action_chunk_eval_size < 1:
        exit_with_error(f"--action_chunk_eval_size={args.action_chunk_eval_size}: must be at least 1.")
    from utils.startup import quiet_startup

    quiet_startup(dm_control=False)  # the run's family imports it if its envs use it
    try:
        grid = grid_values(args.agent_grid) if args.agent_grid else None
        results = evaluate_checkpoints(args.run_dir, args.step, args.episodes, args.seed, args.agent,
                                       args.action_chunk_eval_size, grid)  # fmt: skip
    except (ValueError, FileNotFoundError) as e:
        exit_with_error(str(e))
    if grid is None:
        print(json.dumps({k: float(v) for k, v in results[0][1].items()}, indent=1, sort_keys=True))
    for config, stats in results if grid else ():
        print(json.dumps({f"agent.{grid[0]}": config[grid[0]], **{k: float(v) for k, v in sorted(stats.items())}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
