"""Bad command lines end before setup with one `error:` line and exit status 2 (both drivers).

Table-driven over the drivers' flags and both agents' config keys: stray words (space-separated
booleans), unknown `--agent.KEY` (the closest key, the other agent's keys), values of the wrong
type, out-of-range values and runs that could never take a gradient step. Parsing runs in-process
on a fresh `FlagValues` per case; a few subprocess cases check the real exit status.
"""

import json
import os
import subprocess
import sys

import pytest
from absl import flags

from agents import acfql, acrlpd
from runner import cli
from runner.config import RunConfig
from runner.flags import define_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse(monkeypatch, driver, *args):
    """Parse `args` for `driver` into a fresh FlagValues; returns the RunConfig."""
    argv = [f"{driver}.py", *args]
    # ml_collections reads the --agent.* overrides from sys.argv when --agent is defined (import time
    # of a driver), so argv must be in place before define_flags.
    monkeypatch.setattr(sys, "argv", argv)
    flag_values = flags.FlagValues()
    define_flags(driver, flag_values)
    cli.parse_flags(argv, driver, flag_values)
    return RunConfig.from_flags(flag_values, driver)


def error_of(monkeypatch, capsys, driver, *args) -> str:
    """The one error line that `args` end with (asserts exit status 2 or an InputError)."""
    try:
        parse(monkeypatch, driver, *args)
    except SystemExit as e:
        assert e.code == 2
        err = capsys.readouterr().err.strip()
    except cli.InputError as e:
        err = f"error: {e}"
    else:
        pytest.fail(f"{driver} {args} was accepted")
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def boolean_flags(driver):
    flag_values = flags.FlagValues()
    define_flags(driver, flag_values)
    return sorted(name for name in flag_values if flag_values[name].boolean and "help" not in name)


AGENT_CONFIGS = {"main": acfql.get_config(), "main_online": acrlpd.get_config()}
BOOL_CASES = [(d, f"--{n}") for d in ("main", "main_online") for n in boolean_flags(d)] + [
    (d, f"--agent.{k}") for d, c in AGENT_CONFIGS.items() for k, v in c.items() if isinstance(v, bool)
]


@pytest.mark.parametrize("driver, flag", BOOL_CASES)
@pytest.mark.parametrize("word", ["False", "true"])
def test_space_separated_boolean_is_an_error(monkeypatch, capsys, driver, flag, word):
    err = error_of(monkeypatch, capsys, driver, flag, word)
    name = flag[2:]
    assert f"'{word}'" in err and f"--{name}={word.lower()}" in err and f"--no{name}" in err


def test_every_boolean_is_covered():
    names = {flag for _, flag in BOOL_CASES}
    assert {
        "--sparse",
        "--progress",
        "--stop_reward_at_mask_zero",
        "--agent.action_chunking",
        "--agent.layer_norm",
        "--agent.backup_entropy",
    } <= names


@pytest.mark.parametrize("driver", ["main", "main_online"])
def test_stray_word_is_an_error(monkeypatch, capsys, driver):
    err = error_of(monkeypatch, capsys, driver, "--seed=1", "oops", "--sparse=true")
    assert "unexpected word(s) on the command line: 'oops'" in err


@pytest.mark.parametrize(
    "driver, args, message",
    [
        ("main", ["--agent.alhpa=3"], 'no config key \'alhpa\'; Did you mean "alpha" instead of "alhpa"?'),
        ("main", ["--agent.bc_alpha=0.1"], "it is a key of the acrlpd agent, which main_online.py runs"),
        ("main", ["--agent.init_temp=0.5"], "it is a key of the acrlpd agent"),
        ("main_online", ["--agent.actor_type=best-of-n"], "it is a key of the acfql agent, which main.py runs"),
        ("main_online", ["--agent.flow_steps=3"], "the acrlpd agent has no config key 'flow_steps'"),
        ("main_online", ["--agent.num_qz=3"], 'Did you mean "num_qs" instead of "num_qz"?'),
        ("main", ["--nosuchflag=1"], "Unknown command line flag 'nosuchflag'"),
    ],
)
def test_unknown_keys_name_the_key(monkeypatch, capsys, driver, args, message):
    assert message in error_of(monkeypatch, capsys, driver, *args)


# One bad value for every agent config key (wrong type or out of range); the error names the key.
BAD_VALUES = {
    "main": {
        "agent_name": "sac",
        "lr": "0",
        "batch_size": "0",
        "actor_hidden_dims": "(a,b)",
        "value_hidden_dims": "(0,4)",
        "layer_norm": "maybe",
        "actor_layer_norm": "2",
        "discount": "1.5",
        "tau": "0",
        "q_agg": "max",
        "alpha": "-1",
        "num_qs": "2.5",
        "flow_steps": "0",
        "normalize_q_loss": "x",
        "horizon_length": "0",
        "action_chunking": "no",
        "actor_type": "sac",
        "actor_num_samples": "0",
        "use_fourier_features": "x",
        "fourier_feature_dim": "3",
        "weight_decay": "-0.1",
        "action_dim": "0",
        "ob_dims": "(0,)",
    },
    "main_online": {
        "agent_name": "acfql2",
        "lr": "-1",
        "batch_size": "abc",
        "actor_hidden_dims": "()",
        "value_hidden_dims": "(a,)",
        "layer_norm": "maybe",
        "actor_layer_norm": "2",
        "discount": "0",
        "tau": "2",
        "num_qs": "0",
        "num_min_qs": "20",
        "q_agg": "median",
        "backup_entropy": "x",
        "init_temp": "0",
        "target_entropy_multiplier": "-1",
        "target_entropy": "nan",
        "bc_alpha": "-0.01",
        "horizon_length": "0",
        "action_chunking": "x",
        "action_dim": "-2",
        "ob_dims": "(0,)",
    },
}


def test_bad_value_table_covers_every_key():
    for driver, config in AGENT_CONFIGS.items():
        assert set(BAD_VALUES[driver]) == set(config.keys()), driver


@pytest.mark.parametrize("driver, key, value", [(d, k, v) for d, t in BAD_VALUES.items() for k, v in t.items()])
def test_bad_agent_value_names_the_key(monkeypatch, capsys, driver, key, value):
    err = error_of(monkeypatch, capsys, driver, f"--agent.{key}={value}")
    assert f"agent.{key}" in err or f"--{key}" in err, err


@pytest.mark.parametrize(
    "driver, args, message",
    [
        ("main", ["--seed=-1"], "--seed=-1 must be an int in [0, 2**32)"),
        ("main", ["--seed=4294967296"], "--seed=4294967296 must be an int in [0, 2**32)"),
        ("main_online", ["--seed=4294967296"], "--seed"),
        ("main", ["--horizon_length=0"], "--horizon_length=0 must be >= 1"),
        ("main", ["--offline_steps=-1"], "--offline_steps=-1 must be >= 0"),
        ("main", ["--online_steps=-1"], "--online_steps=-1 must be >= 0"),
        ("main", ["--buffer_size=0"], "--buffer_size=0 must be >= 1"),
        ("main", ["--log_interval=0"], "--log_interval=0 must be >= 1"),
        ("main", ["--eval_interval=-1"], "--eval_interval=-1 must be >= 0"),
        ("main", ["--eval_episodes=0"], "--eval_episodes=0 must be >= 1"),
        # Names of directories under --save_dir: nothing that points elsewhere.
        ("main", ["--run_group=/tmp/elsewhere"], "--run_group='/tmp/elsewhere' must be a plain directory name"),
        ("main", ["--run_group=.."], "--run_group='..' must be a plain directory name"),
        ("main", ["--run_group=a/../../b"], "--run_group='a/../../b' must be a plain directory name"),
        ("main", ["--run_name=a/b"], "--run_name='a/b' must be a plain directory name"),
        ("main", ["--run_name=" + "r" * 243], "--run_name is 243 bytes long; at most 242 fit a directory name"),
        ("main", ["--run_group=" + "é" * 122], "--run_group is 244 bytes long"),
        ("main", ["--video_episodes=-1"], "--video_episodes=-1 must be >= 0"),
        ("main", ["--video_frame_skip=0"], "--video_frame_skip=0 must be >= 1"),
        ("main", ["--start_training=-1"], "--start_training=-1 must be >= 0"),
        ("main", ["--utd_ratio=0"], "--utd_ratio=0 must be >= 1"),
        ("main", ["--dataset_proportion=0"], "--dataset_proportion=0.0 must be in (0, 1]"),
        ("main", ["--dataset_replace_interval=-1"], "--dataset_replace_interval=-1 must be >= 0"),
        ("main", ["--success_timing=mid"], "--success_timing"),
        ("main_online", ["--offline_ratio=1.5"], "--offline_ratio=1.5 must be in [0, 1]"),
        ("main", ["--agent.horizon_length=3", "--horizon_length=5"], "disagrees with --horizon_length=5"),
        # Runs that could never take a gradient step.
        ("main_online", ["--buffer_size=2", "--horizon_length=3"], "--buffer_size=2 can never hold one window"),
        ("main", ["--offline_steps=0", "--online_steps=0"], "takes no gradient step"),
        ("main", ["--offline_steps=0", "--online_steps=10", "--start_training=11"], "takes no gradient step"),
        ("main_online", ["--online_steps=10", "--start_training=20"], "takes no gradient step"),
    ],
)
def test_bad_flag_values(monkeypatch, capsys, driver, args, message):
    assert message in error_of(monkeypatch, capsys, driver, *args)


def test_good_command_lines_parse(monkeypatch):
    cfg = parse(
        monkeypatch,
        "main",
        "--sparse=false",
        "--noagent.action_chunking",
        "--agent.alpha=3",
        "--seed=4294967295",
        "--horizon_length=4",
        "--offline_steps=0",
        "--online_steps=10",
        "--start_training=10",
    )
    assert cfg.sparse is False and cfg.agent["action_chunking"] is False and cfg.agent["alpha"] == 3.0
    assert cfg.seed == 2**32 - 1 and cfg.horizon_length == 4 and cfg.agent["horizon_length"] == 4
    cfg = parse(
        monkeypatch, "main_online", "--nosparse", "--agent.bc_alpha=0.01", "--buffer_size=3", "--horizon_length=3"
    )
    assert cfg.agent["bc_alpha"] == 0.01 and cfg.offline_ratio == 0.5 and cfg.offline_steps == 0


def test_a_tilde_in_a_path_flag_is_the_home_directory(monkeypatch, tmp_path):
    """`--save_dir=~/x` keeps its '~' past the shell: every path flag expands it (no './~' directory)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = parse(monkeypatch, "main", "--save_dir=~/runs", "--dataset_path=~/d.npz", "--dataset_dir=~/data")
    assert (cfg.save_dir, cfg.dataset_path) == (f"{tmp_path}/runs", f"{tmp_path}/d.npz")
    assert cfg.dataset_dir == f"{tmp_path}/data"
    assert parse(monkeypatch, "main", "--ogbench_dataset_dir=~/old").dataset_dir == f"{tmp_path}/old"  # the old name
    (tmp_path / "plain.py").write_text("from agents.acfql import get_config  # noqa: F401\n")
    assert parse(monkeypatch, "main", "--agent=~/plain.py").agent_file == f"{tmp_path}/plain.py"


def test_the_data_folder_flag_is_dataset_dir_and_its_old_name_an_alias(monkeypatch, capsys, tmp_path):
    """`--dataset_dir` (every family's, `DataOptions.dataset_dir`); `--ogbench_dataset_dir` sets it too, flags.json
    records only the new name, and both at once are refused (absl would keep the last silently)."""
    for driver in ("main", "main_online"):
        for flag in ("--dataset_dir", "--ogbench_dataset_dir"):
            cfg = parse(monkeypatch, driver, f"{flag}={tmp_path}/d")
            assert cfg.dataset_dir == f"{tmp_path}/d"
            assert cfg.flag_values["dataset_dir"] == f"{tmp_path}/d" and "ogbench_dataset_dir" not in cfg.flag_values
    line = error_of(monkeypatch, capsys, "main", "--dataset_dir=/a", "--ogbench_dataset_dir=/b")
    assert (
        line
        == "error: --ogbench_dataset_dir is the old name of --dataset_dir, and both are given: pass only --dataset_dir."
    )


def test_a_run_recorded_with_the_old_data_folder_flag_resumes(monkeypatch, tmp_path):
    """A `flags.json` written before the rename (`ogbench_dataset_dir`) is the same run for `--resume`, with the
    new name or the old one: no setting changed, no move recorded; another folder is a move of `dataset_dir`."""
    from runner import resume

    common = (f"--save_dir={tmp_path}", "--run_name=r", "--resume", f"--dataset_dir={tmp_path}/data")
    cfg = parse(monkeypatch, "main", *common)
    values = {k: v for k, v in cfg.flag_values.items() if k != "dataset_dir"}
    os.makedirs(resume.run_dir_of(cfg))
    with open(os.path.join(resume.run_dir_of(cfg), "flags.json"), "w") as f:
        json.dump({"flags": {**values, "ogbench_dataset_dir": f"{tmp_path}/data"}, "agent": cfg.agent}, f)
    record = resume.read_record(resume.run_dir_of(cfg))  # what --resume compares (resume.check_runs)
    assert record["flags"]["dataset_dir"] == f"{tmp_path}/data" and "ogbench_dataset_dir" not in record["flags"]
    for flag in ("--dataset_dir", "--ogbench_dataset_dir"):
        again = parse(monkeypatch, "main", *common[:-1], f"{flag}={tmp_path}/data")
        assert resume.changed_settings(record, again.flag_values, again.agent) == []
        assert resume.moves(record, again.flag_values) == []
    # What evaluate_checkpoint.py reads too: the old name as the new; a record with both keeps the new one's value.
    assert resume.current_names({"seed": 0, "ogbench_dataset_dir": "/x"}) == {"seed": 0, "dataset_dir": "/x"}
    assert resume.current_names({"dataset_dir": "/y", "ogbench_dataset_dir": "/x"}) == {"dataset_dir": "/y"}
    moved = parse(monkeypatch, "main", *common[:-1], f"--dataset_dir={tmp_path}/elsewhere")
    assert resume.changed_settings(record, moved.flag_values, moved.agent) == []  # a move, not a setting
    assert resume.moves(record, moved.flag_values) == [
        {"dataset_dir": {"then": f"{tmp_path}/data", "now": f"{tmp_path}/elsewhere"}}
    ]


def _run_driver(script, *args, env=None):
    env = dict(os.environ if env is None else env, JAX_PLATFORMS="cpu")
    return subprocess.run(
        [sys.executable, script, "--progress=False", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    "script, args, message",
    [
        ("main.py", ["--sparse", "False"], "--sparse=false"),
        ("main_online.py", ["--agent.alhpa=3"], "no config key 'alhpa'"),
        ("main.py", ["--agent.num_qs=abc"], "--agent.num_qs"),
    ],
)
def test_real_exit_status(script, args, message):
    result = _run_driver(script, *args)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "argv, message",
    [
        (["-m", "envs.generate_dataset", "--nope=1"], "Unknown command line flag 'nope'"),
        (["-m", "envs.generate_dataset", "--env_name=cube-single-play-v0", "--seed=x"], "--seed=x"),
        (["-m", "envs.download_datasets", "--env_names=cube-single-play-v0", "oops"], "unexpected word(s)"),
        (["scripts/benchmark.py", "--repeats=0"], "--repeats=0 must be >= 1"),
        (["scripts/bench_state.py", "--nope"], "unrecognized arguments: --nope"),
        (["scripts/bench_reference.py", "--batch=0"], "--batch must be >= 1"),
    ],
)
def test_the_tools_end_a_bad_command_line_with_one_error_line(argv, message):
    """The dataset tools (absl) and the benchmark scripts (argparse) report like the drivers: `error: ...`, status 2."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


# ---------------------------------------------------------------- --method (presets.py) on the command line


def test_method_sets_the_paper_settings_and_records_their_source(monkeypatch):
    cfg = parse(
        monkeypatch,
        "main",
        "--method=qc-fql",
        "--env_name=scene-play-singletask-task2-v0",
        "--horizon_length=3",
        "--offline_steps=10",
    )
    assert cfg.sparse is True  # scene gets sparse rewards without being told
    assert cfg.agent["actor_type"] == "distill-ddpg" and cfg.agent["alpha"] == 300.0 and cfg.horizon_length == 3
    assert cfg.setting_sources["horizon_length"] == "command line"
    assert cfg.setting_sources["agent.alpha"] == "preset" and cfg.setting_sources["sparse"] == "preset"
    cfg = parse(
        monkeypatch,
        "main",
        "--method=qc",
        "--env_name=puzzle-3x3-play-singletask-task4-v0",
        "--agent.actor_num_samples=8",
        "--nosparse",
        "--offline_steps=10",
    )
    assert cfg.agent["actor_num_samples"] == 8 and cfg.sparse is False and cfg.method == "qc"
    assert cfg.setting_sources["agent.actor_num_samples"] == "command line"
    cfg = parse(monkeypatch, "main_online", "--method=qc-rlpd", "--env_name=cube-triple-play-singletask-task1-v0")
    assert cfg.agent["bc_alpha"] == 0.01 and cfg.horizon_length == 5 and cfg.sparse is False


def test_without_method_the_flags_stay_as_given(monkeypatch):
    cfg = parse(monkeypatch, "main", "--env_name=scene-play-singletask-task2-v0", "--offline_steps=10")
    assert cfg.sparse is False and cfg.method is None and cfg.setting_sources == {}
    assert cfg.agent["actor_type"] == "best-of-n" and cfg.agent["alpha"] == 100.0


@pytest.mark.parametrize(
    "driver, args, message",
    [
        ("main", ["--method=qc", "--horizon_length=1"], "--horizon_length=1 contradicts --method=qc"),
        ("main", ["--method=qc", "--agent.actor_type=distill-ddpg"], "contradicts --method=qc"),
        ("main", ["--method=fql-n", "--agent.action_chunking=True"], "contradicts --method=fql-n"),
        ("main_online", ["--method=rlpd", "--horizon_length=5"], "contradicts --method=rlpd"),
        ("main", ["--method=rlpd"], "--method=rlpd is not a method of main.py"),
        ("main", ["--method=foo"], "--method=foo"),
    ],
)
def test_method_contradictions_are_errors(monkeypatch, capsys, driver, args, message):
    assert message in error_of(monkeypatch, capsys, driver, *args)


# ---------------------------------------------------------------- found by trying to break the command line


@pytest.mark.parametrize(
    "driver, args, message",
    [
        ("main", ["--agent.=1"], "bad --agent override"),
        ("main", ["--agent.1=2"], "bad --agent override"),
        ("main", ["--agent.actor_hidden_dims[0]=32"], "bad --agent override"),
        ("main", ["--agent=/nonexistent.py"], "--agent=/nonexistent.py: no such file."),
        ("main_online", ["--agent="], "--agent= names no file; pass --agent=path/to/agent.py"),
        # ml_collections joins repeated tuple overrides; repeated scalars keep the last one.
        (
            "main",
            ["--agent.actor_hidden_dims=(16,16)", "--agent.actor_hidden_dims=512"],
            "--agent.actor_hidden_dims is given 2 times",
        ),
        ("main", ["--agent.lr=0.1", "--agent.lr=0.2"], "--agent.lr is given 2 times"),
        ("main", ["--nosparse", "False"], "--sparse=false"),
        ("main", ["--run_group", "False", "--sparse", "False"], "--sparse False: a boolean"),
        (
            "main_online",
            ["--online_steps=4", "--start_training=1", "--horizon_length=5"],
            "the first online update is at step 5",
        ),
        ("main_online", ["--online_steps=0"], "this run takes no gradient step: --online_steps=0"),
        ("main_online", ["--agent.target_entropy=inf"], "--agent.target_entropy must be None or a finite number"),
        ("main", ["--agent.agent_name=acrlpd"], "is --agent.agent_name or the --agent config file the right one?"),
        ("main", ["--method=qc", f"--agent={ROOT}/agents/acrlpd.py"], "--method=qc runs the acfql agent"),
        ("main", ["--save_dir=" + os.path.abspath(__file__)], "is a file, not a directory"),
    ],
)
def test_more_bad_command_lines(monkeypatch, capsys, driver, args, message):
    err = error_of(monkeypatch, capsys, driver, *args)
    assert message in err, err
    assert "--offline_steps" not in err or driver == "main"


def test_stray_words_from_a_flagfile(monkeypatch, capsys, tmp_path):
    flagfile = tmp_path / "flags.txt"
    flagfile.write_text("--seed=1\nfoo\n")
    assert "unexpected word(s) on the command line: 'foo'" in error_of(
        monkeypatch, capsys, "main", f"--flagfile={flagfile}"
    )


def test_agent_horizon_length_alone_counts_as_horizon_length(monkeypatch):
    cfg = parse(monkeypatch, "main", "--method=bfn", "--agent.horizon_length=1", "--offline_steps=10")
    assert cfg.horizon_length == 1 and cfg.agent["actor_type"] == "best-of-n"
    cfg = parse(monkeypatch, "main", "--method=qc", "--agent.horizon_length=3", "--offline_steps=10")
    assert cfg.horizon_length == 3 and cfg.setting_sources["horizon_length"] == "command line"


def test_a_second_file_for_a_registered_agent_name_is_refused(monkeypatch, capsys, tmp_path):
    """A copy of agents/acfql.py that kept its name: which code ran would depend on the loading order."""
    import agents

    monkeypatch.setattr(agents, "CLASHES", {})  # the refusal marks the name; keep other tests clear of it
    copy = tmp_path / "mine.py"
    copy.write_text(open(os.path.join(os.path.dirname(acfql.__file__), "acfql.py")).read())
    err = error_of(monkeypatch, capsys, "main", f"--agent={copy}")
    assert f"two files define agent 'acfql': {acfql.__file__} and {copy}" in err, err
    # ... and the name stays refused, --method too, until one file is renamed.
    assert "two files define agent 'acfql'" in error_of(monkeypatch, capsys, "main", "--method=qc")


def test_agent_files_that_cannot_be_loaded_are_named(monkeypatch, capsys, tmp_path, caplog):
    import logging

    import agents

    broken = "/repo/agents/half_edited.py"
    monkeypatch.setattr(agents, "PROBLEMS", {broken: "SyntaxError: invalid syntax (half_edited.py, line 3)"})
    with caplog.at_level(logging.WARNING):
        parse(monkeypatch, "main", "--method=qc")  # other agents still run
    assert f"{broken} is not loaded (SyntaxError: invalid syntax" in caplog.text
    err = error_of(monkeypatch, capsys, "main", "--agent.agent_name=half_edited")
    assert f"{broken} could not be loaded (SyntaxError" in err, err
    not_a_config = tmp_path / "five.py"
    not_a_config.write_text("def get_config():\n    return 5\n")
    err = error_of(monkeypatch, capsys, "main", f"--agent={not_a_config}")
    assert err == f"error: --agent={not_a_config}: get_config() returned int, not an ml_collections.ConfigDict.", err
    syntax = tmp_path / "syntax.py"
    syntax.write_text("def get_config(:\n")
    assert "syntax.py" in error_of(monkeypatch, capsys, "main", f"--agent={syntax}")


def test_a_flagfile_that_is_not_text_is_one_line(monkeypatch, capsys, tmp_path):
    flagfile = tmp_path / "flags.txt"
    flagfile.write_bytes(b"--seed=\xff\xfe\n")
    err = error_of(monkeypatch, capsys, "main", f"--flagfile={flagfile}")
    assert err == f"error: --flagfile={flagfile}: not UTF-8 text (invalid start byte at byte 7).", err


def test_a_link_to_a_registered_agent_file_does_not_replace_its_path(tmp_path):
    """agents/zlink.py -> acfql.py: the registry keeps agents/acfql.py as the agent's file (the default --agent)."""
    import agents

    link = tmp_path / "zlink.py"
    os.symlink(acfql.__file__, link)
    assert agents.register(acfql.SPEC, str(link)) is agents.REGISTRY["acfql"]
    assert agents.CONFIG_FILES["acfql"] == os.path.abspath(acfql.__file__)


def test_a_short_config_file_of_a_registered_agent_is_named_not_the_agent(monkeypatch, capsys, tmp_path):
    short = tmp_path / "short.py"
    short.write_text(
        "import ml_collections\n\ndef get_config():\n    return ml_collections.ConfigDict(dict(agent_name='acfql'))\n"
    )
    err = error_of(monkeypatch, capsys, "main", f"--agent={short}", "--agent.batch_size=8")
    assert f"--agent.batch_size: {short}'s get_config() has no key 'batch_size', which the acfql agent has" in err, err
