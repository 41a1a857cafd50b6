"""`RunConfig`: the run's settings, built and checked once from the parsed flags."""

import contextlib
import io
import json
import os
import sys
from typing import Dict, List, Optional

from absl import logging

import agents
import envs
from agents import common
from runner import methods
from runner.cli import DRIVER_ONLY_FLAGS, InputError, input_errors, parse_flags
from runner.flags import check_renamed
from runner.resume import RENAMED
from utils import seeding

# Flags a driver does not define, with the value the other driver's code reads.
ABSENT_FLAGS = {
    "offline_steps": 0,
    "offline_ratio": None,
    "updates_per_dispatch": 1,
    "offline_sampler": "auto",
}


class RunConfig:
    """Every flag value of the run (`cfg.<flag>`), the agent config and where `--method` got its values.

    `agent` is the agent config as a plain dict with `horizon_length` set; it owns `horizon_length`
    and `discount` from then on (the drivers read them only from there). Immutable: `replace` makes
    a changed copy.
    """

    def __init__(self, driver: str, values: Dict, agent: Dict, setting_sources: Optional[Dict] = None):
        object.__setattr__(self, "driver", driver)
        object.__setattr__(self, "values", {**ABSENT_FLAGS, **values})
        object.__setattr__(self, "agent", agent)
        object.__setattr__(self, "setting_sources", dict(setting_sources or {}))

    def __getattr__(self, name):
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        raise AttributeError("RunConfig is immutable; use replace()")

    def replace(self, **changes) -> "RunConfig":
        return RunConfig(self.driver, {**self.values, **changes}, self.agent, self.setting_sources)

    @property
    def horizon_length(self) -> Optional[int]:
        """The agent's chunk length `h` (None for an agent without `horizon_length`, such as DQC)."""
        return self.agent.get("horizon_length")

    @property
    def window_length(self) -> int:
        """Rows one batch window spans (`AgentSpec.window_length`: `h`, or DQC's backup horizon)."""
        return agents.get(self.agent["agent_name"]).window_length(self.agent)

    @property
    def flag_values(self) -> Dict:
        """Every setting but the agent config, plus `horizon_length` (for `flags.json`)."""
        return {**self.values, "horizon_length": self.horizon_length}

    @classmethod
    def from_flags(cls, flag_values, driver: str) -> "RunConfig":
        """Build from parsed absl flags; raises `InputError` for every bad value."""
        with input_errors():
            check_renamed(flag_values)
            values = {
                f.name: f.value
                for f in flag_values.get_flags_for_module("runner.flags")
                if not f.name.startswith("agent") and f.name not in RENAMED  # an old name: its flag holds the value
            }
            # `--save_dir=~/x` reaches us with the '~' (the shell expands it only at a word's start): every
            # path flag is expanded here once, so no part of the run goes to a literal './~' directory.
            for name in ("save_dir", "dataset_path", "dataset_dir"):
                if values.get(name):
                    values[name] = os.path.expanduser(values[name])
            values["agent_file"] = os.path.abspath(os.path.expanduser(flag_values["agent"].config_filename))
            for path, why in sorted(agents.PROBLEMS.items()):
                logging.warning("%s is not loaded (%s); runs of the agent it defines are refused.", path, why)
            # An agent outside agents/ registers itself; a file that defines a registered name again is refused.
            agents.load_file(values["agent_file"])
            config = flag_values.agent.copy_and_resolve_references().to_dict()
            # h: --horizon_length when passed; else --agent.horizon_length, else the agent's own default (IQL,
            # ReBRAC, IFQL: 1), else (a placeholder, ACFQL, ACRLPD) the flag's default. Both passed must agree.
            agent_h, flag_h = config.get("horizon_length"), flag_values.horizon_length
            agent_h_passed = "horizon_length" in flag_values["agent"].override_values
            if agent_h_passed and flag_values["horizon_length"].present and agent_h != flag_h:
                raise ValueError(
                    f"--agent.horizon_length={agent_h} disagrees with --horizon_length={flag_h}; set only "
                    "--horizon_length."
                )
            if "horizon_length" in config and (agent_h is None or flag_values["horizon_length"].present):
                config["horizon_length"] = flag_h
            spec = agents.REGISTRY.get(config.get("agent_name"))
            owner = agents.method_owner(values["method"]) if values.get("method") is not None else None
            if spec is not None and (owner is None or driver in owner.drivers):
                # Every mistake of the agent/driver pairing in one line, the wrong driver first. Not for a method of
                # the other driver (its error says it all), nor the driver when another check names the real
                # mistake: --method with another agent's --agent file, a config of another agent's keys.
                own_config = values.get("method") is None and set(config) == set(spec.get_config().keys())
                _check_agent_flags(spec, driver, flag_values, values, config, check_driver=own_config)
            if spec is not None and not spec.online:
                values["online_steps"] = 0
            sources = {}
            if values.get("method") is not None:
                sources = _apply_method(driver, flag_values, values, config)
            warn_if_dense_on_sparse_domain(values["env_name"], values["sparse"])
            run_config = cls(driver, values, config, sources)
            run_config.validate()
        return run_config

    def check_seeds(self):
        """`ValueError` for a `--seed` or `--seed`/`--num_seeds` pair outside the seeds a run can have."""
        seeding.check_seed(self.seed)
        if self.num_seeds < 1:
            raise ValueError(f"--num_seeds={self.num_seeds} must be >= 1.")
        if self.seed + self.num_seeds > seeding.SEED_LIMIT:
            raise ValueError(
                f"--seed={self.seed} --num_seeds={self.num_seeds}: the last seed, {self.seed + self.num_seeds - 1}, "
                "is outside [0, 2**32)."
            )

    def validate(self):
        """Raise `ValueError` naming the flag for every out-of-range value or impossible run."""
        self.check_seeds()
        if self.updates_per_dispatch < 1:
            raise ValueError(f"--updates_per_dispatch={self.updates_per_dispatch} must be >= 1.")
        if self.offline_sampler == "device" and self.updates_per_dispatch == 1 and self.offline_steps > 0:
            raise ValueError(
                "--offline_sampler=device needs --updates_per_dispatch > 1 (with 1 the offline phase is the "
                "reference's host loop); pass e.g. --updates_per_dispatch=100, or drop --offline_sampler."
            )
        checks = [
            ("offline_steps", self.offline_steps >= 0, "must be >= 0"),
            ("online_steps", self.online_steps >= 0, "must be >= 0"),
            ("buffer_size", self.buffer_size >= 1, "must be >= 1"),
            ("log_interval", self.log_interval >= 1, "must be >= 1"),
            ("eval_interval", self.eval_interval >= 0, "must be >= 0"),
            (
                "eval_episodes",
                self.eval_episodes >= 1,
                "must be >= 1 (every run evaluates at least at the end of each phase)",
            ),
            ("eval_envs", self.eval_envs >= 1, "must be >= 1"),
            ("video_episodes", self.video_episodes >= 0, "must be >= 0"),
            ("video_frame_skip", self.video_frame_skip >= 1, "must be >= 1"),
            ("start_training", self.start_training >= 0, "must be >= 0"),
            ("utd_ratio", self.utd_ratio >= 1, "must be >= 1"),
            ("horizon_length", self.horizon_length is None or self.horizon_length >= 1, "must be >= 1"),
            ("dataset_proportion", 0.0 < self.dataset_proportion <= 1.0, "must be in (0, 1]"),
            ("dataset_replace_interval", self.dataset_replace_interval >= 0, "must be >= 0"),
        ]
        if self.offline_ratio is not None:
            checks.append(("offline_ratio", 0.0 <= self.offline_ratio <= 1.0, "must be in [0, 1]"))
        for name, ok, why in checks:
            if not ok:
                value = self.horizon_length if name == "horizon_length" else getattr(self, name)
                raise ValueError(f"--{name}={value} {why}.")
        spec = agents.get(self.agent.get("agent_name"))
        agents.checked_config(spec, self.agent)
        if self.driver not in spec.drivers:
            runs = " or ".join(f"{d}.py" for d in spec.drivers)
            raise ValueError(f"--agent.agent_name={spec.name!r} runs with {runs}, not {self.driver}.py.")
        # From the env's name, before its data is loaded: the data's own checks (--sparse on a goal env, a missing
        # file) would otherwise come first, and fixing them would lead to this error.
        check_goal_conditioning(spec, envs.parse(self.env_name).goal_conditioned, self.env_name)
        # A run that can never take a gradient step is a mistake, not a result. Online updates start at
        # step max(start_training, 1), and main_online.py's also wait until the replay buffer holds one
        # window (h rows, one per step) unless every row comes from the offline data.
        first_update = max(self.start_training, 1)
        waits_for_window = self.driver == "main_online" and self.offline_ratio < 1.0
        if waits_for_window:
            first_update = max(first_update, self.window_length)
        if self.offline_steps == 0 and self.online_steps < first_update:
            offline = f"--offline_steps={self.offline_steps}, " if self.driver == "main" else ""
            window = f", the first full window of --horizon_length={self.window_length}" if waits_for_window else ""
            raise ValueError(
                f"this run takes no gradient step: {offline}--online_steps={self.online_steps}, but the first "
                f"online update is at step {first_update} (the largest of --start_training={self.start_training}, "
                f"1{window})."
            )
        if self.offline_steps > 0 and 0 < self.online_steps < first_update:
            logging.warning(
                "--online_steps=%d ends before the first online update (step %d, --start_training=%d): the online "
                "phase collects and evaluates but never updates the agent.",
                self.online_steps, first_update, self.start_training,
            )  # fmt: skip
        unreached = self.unreached_intervals(first_update)
        if unreached:
            logging.warning("Intervals this run never reaches: %s.", "; ".join(unreached))
        if self.resume and not self.run_name:
            raise ValueError("--resume needs --run_name (the run to continue).")
        for name in ("start_if_missing", "accept_changed_data", "accept_changed_agent", "accept_changed_family"):
            if getattr(self, name) and not self.resume:
                raise ValueError(f"--{name} applies to --resume only; pass --resume --run_name=NAME with it.")
        if self.state_interval < 0:
            raise ValueError(f"--state_interval={self.state_interval} must be >= 0.")
        if self.keep_states < 1:
            raise ValueError(f"--keep_states={self.keep_states} must be >= 1.")
        if self.sweep_info is not None:
            try:
                info = json.loads(self.sweep_info)
            except json.JSONDecodeError as e:
                raise ValueError(f"--sweep_info is not JSON: {e}") from None
            if not isinstance(info, dict):
                raise ValueError("--sweep_info must be a JSON object.")
        # Both name directories under --save_dir: a '/', '..' or an absolute path would put the run elsewhere.
        for name, value in (("run_name", self.run_name), ("run_group", self.run_group)):
            if value is not None and (not value.strip() or "/" in value or os.sep in value or value in (".", "..")):
                raise ValueError(f"--{name}={value!r} must be a plain directory name (no '/', not '.' or '..').")
            # A directory name holds 255 bytes; a seed group adds `_sd<seed>` (up to 13) to the run name.
            if value is not None and len(value.encode()) > 255 - 13:
                raise ValueError(
                    f"--{name} is {len(value.encode())} bytes long; at most {255 - 13} fit a directory name."
                )
        if os.path.exists(self.save_dir) and not os.path.isdir(self.save_dir):
            raise ValueError(f"--save_dir={self.save_dir} is a file, not a directory.")
        if self.wandb_mode == "online" and not _wandb_login_known():
            raise ValueError(
                "--wandb_mode=online needs a wandb login (`wandb login`, or WANDB_API_KEY); without one, pass "
                "--wandb_mode=offline (sync later with `wandb sync`) or --wandb_mode=disabled."
            )
        if self.driver == "main_online" and self.buffer_size < self.window_length and self.offline_ratio < 1.0:
            raise ValueError(
                f"--buffer_size={self.buffer_size} can never hold one window of --horizon_length="
                f"{self.window_length} rows, so no online batch can be drawn."
            )
        takes_best_of_n = common.sample_actions_takes(spec.agent_class, "best_of_n")
        for name in ("action_chunk_eval_sizes", "best_of_n_eval_values"):
            given = parse_eval_values(getattr(self, name), name)
            if name == "best_of_n_eval_values" and given != [0] and not takes_best_of_n:
                raise ValueError(f"--{name}: the {spec.name} agent has no best_of_n override (its sample_actions).")
        if not self.eval_temperature >= 0:
            raise ValueError(f"--eval_temperature={self.eval_temperature} must be >= 0.")
        if self.eval_temperature != 0 and not common.sample_actions_takes(spec.agent_class, "temperature"):
            raise ValueError(
                f"--eval_temperature={self.eval_temperature}: the {spec.name} agent's sample_actions takes no "
                "temperature (IQL and ReBRAC do); drop the flag."
            )
        chunk = spec.chunk_length(self.agent)
        uncut = sorted({n for n in parse_eval_values(self.action_chunk_eval_sizes, "") if n >= chunk})
        if uncut:  # as the DQC release: a cut as long as the chunk is the default evaluation
            logging.warning(
                "--action_chunk_eval_sizes=%s: %s not shorter than the policy's chunk of %d action(s); no ac<n> "
                "evaluation is run for %s.",
                self.action_chunk_eval_sizes, ",".join(map(str, uncut)), chunk, "it" if len(uncut) == 1 else "them",
            )  # fmt: skip

    def unreached_intervals(self, first_update: int) -> List[str]:
        """`--<interval>=<v> in the <phase> phase (<n> steps): <what follows>` for every log, evaluation, checkpoint
        and state interval (> 0) with no multiple in a phase of the run (online logs: from the first update on)."""
        phases = [("offline", 1, self.offline_steps), ("online", first_update, self.online_steps)]
        effects = {
            "log_interval": "no loss rows",
            "eval_interval": "evaluated only at its end",
            "save_interval": "a checkpoint only at its end",
            "state_interval": "no run state before its end",
        }
        found = []
        for name, effect in effects.items():
            value = getattr(self, name)
            for phase, first, steps in phases:
                first = first if name == "log_interval" else 1
                if value > 0 and 0 < steps and first <= steps < -(-first // value) * value:
                    found.append(f"--{name}={value} in the {phase} phase ({steps} steps): {effect}")
        return found


def _flag_problems(spec, driver: str, flag_values, values: Dict, has_horizon: bool) -> List[str]:
    """What the flags passed to `driver` get wrong for agent `spec` besides the driver itself: `--horizon_length`
    for an agent without one, `--online_steps > 0` for an offline-only agent and, when `spec` runs with another
    driver, the flags that driver does not have."""
    wrong = []
    if not has_horizon and flag_values["horizon_length"].present:
        wrong.append(
            f"--horizon_length: the {spec.name} agent has no horizon_length (its chunk lengths are --agent.* keys, "
            "e.g. DQC's --agent.backup_horizon and --agent.policy_chunk_size); drop the flag."
        )
    if not spec.online and flag_values["online_steps"].present and values["online_steps"] > 0:
        wrong.append(
            f"--online_steps={values['online_steps']}: the {spec.name} agent learns offline only; pass "
            "--online_steps=0 (or leave it out)."
        )
    if driver not in spec.drivers:
        lacks = [f"--{n}" for n in DRIVER_ONLY_FLAGS.get(driver, ()) if n in flag_values and flag_values[n].present]
        if lacks:
            wrong.append(
                f"{spec.drivers[0]}.py has no {' or '.join(lacks)} flag; drop {'them' if len(lacks) > 1 else 'it'}."
            )
    return wrong


def _check_agent_flags(spec, driver: str, flag_values, values: Dict, config: Dict, check_driver: bool = True):
    """`ValueError` naming, at once, every flag the agent `spec` cannot take on `driver`: the driver itself (the
    agent runs with another) and `_flag_problems`. One mistake, one message: doing what it says never leads to a
    second error about the same flags."""
    wrong = _flag_problems(spec, driver, flag_values, values, "horizon_length" in config)
    if driver not in spec.drivers and not check_driver:
        return  # validate() names the driver after the check that names the real mistake
    if driver not in spec.drivers:
        runs = " or ".join(f"{d}.py" for d in spec.drivers)
        also = f" With {spec.drivers[0]}.py: {' '.join(wrong)}" if wrong else ""
        raise ValueError(f"--agent.agent_name={spec.name!r} runs with {runs}, not {driver}.py.{also}")
    if wrong:
        raise ValueError(" ".join(wrong))


def warn_if_dense_on_sparse_domain(env_name: str, sparse: bool) -> bool:
    """Log a warning when the papers train `env_name` with `--sparse=True` (`Family.sparse_default`: scene and
    puzzle) and this run does not. Returns whether it warned; an unknown name is left to `envs.parse`'s error."""
    try:
        name = envs.parse(env_name)
    except ValueError:
        return False
    if sparse or not envs.family(name).sparse_default(name):
        return False
    logging.warning(
        "%s: the paper trains %s tasks with sparse rewards (--sparse=True, r -> -(r != 0)); this run uses the dense "
        "rewards, so its numbers are not comparable to the paper's.",
        env_name,
        name.domain,
    )
    return True


def check_goal_conditioning(spec, goal_env: bool, env_name: str):
    """`ValueError` when a goal-conditioned agent meets a single-task env, or the other way around."""
    if spec.goal_conditioned and not goal_env:
        raise ValueError(
            f"the {spec.name} agent is goal-conditioned, but {env_name} is a single-task env; use a goal-conditioned "
            "name such as cube-double-play-oraclerep-v0."
        )
    if goal_env and not spec.goal_conditioned:
        raise ValueError(
            f"{env_name} is goal-conditioned (evaluation goals, no task reward), but the {spec.name} agent is not; "
            "use a goal-conditioned agent (--agent=agents/dqc.py, or --method=dqc) or a singletask env name."
        )


def _apply_method(driver: str, flag_values, values: Dict, config: Dict) -> Dict:
    """Fill `values` and `config` from `--method`'s preset; return each setting's source.

    Explicitly passed flags (`present`) and `--agent.KEY` overrides win (`methods.resolve` raises for
    one that changes the method).
    """
    method = values["method"]
    owner = agents.method_owner(method)
    try:
        spec = methods.check_method(driver, method)
    except ValueError as e:  # a method of the other driver: what else to change there, in the same message
        wrong = (
            []
            if owner is None
            else _flag_problems(owner, driver, flag_values, values, "horizon_length" in owner.get_config())
        )
        raise ValueError(f"{e} With {owner.drivers[0]}.py: {' '.join(wrong)}" if wrong else str(e)) from None
    if config.get("agent_name") != spec.name:
        raise ValueError(
            f"--method={method} runs the {spec.name} agent, but the agent config is "
            f"{config.get('agent_name')!r} (--agent={flag_values['agent'].config_filename}); drop --agent or --method."
        )
    # Every driver flag the user passed (the methods set --horizon_length, --sparse, --online_steps, ...).
    explicit = {f.name: f.value for f in flag_values.get_flags_for_module("runner.flags") if f.present}
    for key, value in flag_values["agent"].override_values.items():
        explicit[f"agent.{key}"] = value
    if "agent.horizon_length" in explicit:  # counts as --horizon_length (from_flags checked they agree)
        explicit["horizon_length"] = explicit.pop("agent.horizon_length")
    resolved, sources = methods.resolve(driver, method, values["env_name"], explicit)
    for name, value in resolved.items():
        if name.startswith("agent."):
            config[name[len("agent.") :]] = value
        elif name == "horizon_length":
            config["horizon_length"] = value
        else:
            values[name] = value
    logging.info(
        "--method=%s: %s",
        method,
        ", ".join(f"{k}={v} ({sources[k]})" for k, v in {**explicit, **resolved}.items() if k in sources),
    )
    return sources


def parse_eval_values(text: str, name: str) -> List[int]:
    """`'0,1,5'` -> `[0, 1, 5]` (ints >= 0; 0 is the default evaluation); `ValueError` naming `--name`."""
    try:
        values = [int(v) for v in str(text).split(",")]
    except ValueError:
        values = [-1]
    if not values or min(values) < 0:
        raise ValueError(f"--{name}={text} must be comma-separated ints >= 0 (0: the default), e.g. 0,1,5.")
    return values


def _wandb_login_known() -> bool:
    """Whether wandb can find an API key: WANDB_API_KEY, or the host's entry in ~/.netrc (`wandb login`)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    import netrc
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def config_from_argv(driver: str, argv: List[str]) -> RunConfig:
    """The `RunConfig` that `python <driver>.py <argv>` would build, parsed in this process (the sweep's check).

    Raises `InputError` with the driver's own one-line message for anything the driver would refuse before
    loading data (flags, `--agent` keys and values, `--method`, ranges).
    """
    from absl import flags

    from runner.flags import define_flags

    full = [f"{driver}.py", *argv]
    saved, sys.argv = sys.argv, full  # ml_collections reads --agent.KEY overrides from sys.argv when --agent is defined
    stderr, verbosity = io.StringIO(), logging.get_verbosity()
    logging.set_verbosity(logging.ERROR)
    try:
        with contextlib.redirect_stderr(stderr):
            flag_values = flags.FlagValues()
            define_flags(driver, flag_values)
            parse_flags(full, driver, flag_values)
            return RunConfig.from_flags(flag_values, driver)
    except SystemExit:
        lines = [line for line in stderr.getvalue().splitlines() if line.startswith("error: ")]
        raise InputError(lines[-1][len("error: ") :] if lines else stderr.getvalue().strip()) from None
    finally:
        sys.argv = saved
        logging.set_verbosity(verbosity)
