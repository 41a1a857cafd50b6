"""--method presets (runner/methods.py, the agents' `SPEC.methods`): every method on every domain equals the
paper's tables; overrides, contradictions.

The numbers below are an independent copy of docs/settings.md (sections 2-4) and the README's method and
per-domain tables, written out by hand: a change to a value in an agent's method table must fail here.
"""

import itertools

import pytest

from runner import methods

MAIN = ("qc", "qc-fql", "bfn", "bfn-n", "fql", "fql-n")
ONLINE = ("rlpd", "rlpd-ac", "qc-rlpd")

# What defines each method (docs/method.md section 10, README "Methods").
DEFINITION = {
    "qc": {"horizon_length": 5, "agent.actor_type": "best-of-n", "agent.action_chunking": True},
    "qc-fql": {"horizon_length": 5, "agent.actor_type": "distill-ddpg", "agent.action_chunking": True},
    "bfn-n": {"horizon_length": 5, "agent.actor_type": "best-of-n", "agent.action_chunking": False},
    "bfn": {"horizon_length": 1, "agent.actor_type": "best-of-n", "agent.action_chunking": True},
    "fql-n": {"horizon_length": 5, "agent.actor_type": "distill-ddpg", "agent.action_chunking": False},
    "fql": {"horizon_length": 1, "agent.actor_type": "distill-ddpg", "agent.action_chunking": True},
    "rlpd": {"horizon_length": 1, "agent.action_chunking": True, "agent.bc_alpha": 0.0},
    "rlpd-ac": {"horizon_length": 5, "agent.action_chunking": True, "agent.bc_alpha": 0.0},
    "qc-rlpd": {"horizon_length": 5, "agent.action_chunking": True, "agent.bc_alpha": 0.01},
}

# docs/settings.md section 3 (OGBench) and 4 (robomimic):
# domain: (env name, sparse, alpha FQL, alpha FQL-n, alpha QC-FQL, N QC, N BFN and BFN-n; None: not given)
PAPER = {
    "scene": ("scene-play-singletask-task2-v0", True, 300, 100, 300, 32, 4),
    "puzzle-3x3": ("puzzle-3x3-play-singletask-task4-v0", True, 100, 100, 300, 64, 4),
    "cube-double": ("cube-double-play-singletask-task2-v0", False, 300, 100, 300, 32, 4),
    "cube-triple": ("cube-triple-play-singletask-task1-v0", False, 300, 100, 100, 32, 4),
    "cube-quadruple": ("cube-quadruple-play-singletask-task5-v0", False, 300, 100, 100, 32, 4),
    "lift": ("lift-mh-low_dim", False, 10000, 10000, 10000, 16, None),
    "can": ("can-mh-low_dim", False, 10000, 10000, 10000, 16, None),
    "square": ("square-mh-low_dim", False, 10000, 10000, 10000, 16, None),
    # Not in the paper: cube-double's row (the module's documented choice).
    "cube-single": ("cube-single-play-singletask-task1-v0", False, 300, 100, 300, 32, 4),
}


def expected(method, domain):
    """The paper's settings for `method` on `domain`; None where the tables give no value."""
    _, sparse, a_fql, a_fql_n, a_qc_fql, n_qc, n_bfn = PAPER[domain]
    per_domain = {
        "qc": {"agent.actor_num_samples": n_qc},
        "qc-fql": {"agent.alpha": a_qc_fql},
        "bfn-n": {"agent.actor_num_samples": n_bfn},
        "bfn": {"agent.actor_num_samples": n_bfn},
        "fql-n": {"agent.alpha": a_fql_n},
        "fql": {"agent.alpha": a_fql},
    }.get(method, {})
    return {**DEFINITION[method], **per_domain, "sparse": sparse}


def driver_of(method):
    return "main" if method in MAIN else "main_online"


CASES = [(m, d) for m, d in itertools.product(MAIN + ONLINE, PAPER)]


def test_method_names():
    dqc = ["dqc", "dqc-h25-ha1", "dqc-h5-ha1", "qc-h25", "qc-h5", "qc-ns", "ns-n25", "ns-n5", "os"]
    main = list(MAIN) + ["acsac", "acsac-fixed"] + dqc + ["ifql", "ifql-n", "qc-ifql", "iql", "rebrac"]  # file order
    assert methods.method_names("main") == main and methods.method_names("main_online") == list(ONLINE)


@pytest.mark.parametrize("method,domain", CASES)
def test_every_method_on_every_domain_is_the_paper_table(method, domain):
    env_name, want = PAPER[domain][0], expected(method, domain)
    if None in want.values():  # robomimic BFN(-n): the tables give no N, so the user must
        with pytest.raises(ValueError, match=r"--method=%s on %s: .*no --agent.actor_num_samples" % (method, domain)):
            methods.resolve(driver_of(method), method, env_name, {})
        with pytest.raises(ValueError, match="pass --agent.actor_num_samples=VALUE"):
            methods.preset(driver_of(method), method, env_name)
        values, sources = methods.resolve(driver_of(method), method, env_name, {"agent.actor_num_samples": 8})
        assert "agent.actor_num_samples" not in values
        assert sources["agent.actor_num_samples"] == "command line"
        assert values == {k: v for k, v in want.items() if v is not None}
        return
    values, sources = methods.resolve(driver_of(method), method, env_name, {})
    assert values == want
    assert sources == {key: "preset" for key in want}
    assert methods.preset(driver_of(method), method, env_name) == want
    # Types as the flags and agent configs have them (ml_collections checks the types of overrides).
    assert type(values["horizon_length"]) is int and type(values["sparse"]) is bool
    for key, kind in (("agent.alpha", float), ("agent.bc_alpha", float), ("agent.actor_num_samples", int)):
        if key in values:
            assert type(values[key]) is kind, key


@pytest.mark.parametrize("method", MAIN + ONLINE)
@pytest.mark.parametrize("env_name", ["scene-play-singletask-v0", "puzzle-3x3-play-singletask-task3-v0"])
def test_scene_and_puzzle_get_sparse_rewards_without_being_told(method, env_name):
    """The public report: puzzle-3x3 run without --sparse fell far below the paper."""
    values, sources = methods.resolve(driver_of(method), method, env_name, {"seed": 3, "online_steps": 10})
    assert values["sparse"] is True and sources["sparse"] == "preset"


@pytest.mark.parametrize("method", MAIN + ONLINE)
def test_cube_and_robomimic_are_dense(method):
    n = {"agent.actor_num_samples": 4}  # robomimic BFN(-n) needs it
    for env_name in ("cube-double-play-singletask-task2-v0", "cube-quadruple-play-singletask-v0", "can-mh-low_dim"):
        values, _ = methods.resolve(driver_of(method), method, env_name, n if method in ("bfn", "bfn-n") else {})
        assert values["sparse"] is False


def test_describe_prints_the_flags():
    assert methods.describe("main", "qc", "cube-double-play-singletask-task2-v0") == (
        "qc on cube-double: --horizon_length=5 --agent.actor_type=best-of-n --agent.action_chunking=True "
        "--agent.actor_num_samples=32 --sparse=False"
    )
    assert methods.describe("main", "fql", "puzzle-3x3-play-singletask-task4-v0") == (
        "fql on puzzle-3x3: --horizon_length=1 --agent.actor_type=distill-ddpg --agent.action_chunking=True "
        "--agent.alpha=100 --sparse=True"
    )
    assert methods.describe("main_online", "qc-rlpd", "scene-play-singletask-task2-v0") == (
        "qc-rlpd on scene: --horizon_length=5 --agent.action_chunking=True --agent.bc_alpha=0.01 --sparse=True"
    )
    assert methods.describe("main", "qc-fql", "lift-mh-low_dim").endswith("--agent.alpha=10000 --sparse=False")
    single = methods.describe("main", "qc-fql", "cube-single-play-singletask-task1-v0")
    assert single.startswith("qc-fql on cube-single: ") and "not in the paper" in single


# ---------------------------------------------------------------- domains


@pytest.mark.parametrize(
    "env_name,domain",
    [
        ("cube-double-play-singletask-task2-v0", "cube-double"),
        ("cube-double-play-singletask-v0", "cube-double"),
        ("cube-single-play-singletask-task1-v0", "cube-single"),
        ("cube-quadruple-play-singletask-task3-v0", "cube-quadruple"),
        ("puzzle-3x3-play-singletask-task4-v0", "puzzle-3x3"),
        ("scene-noisy-singletask-task5-v0", "scene"),
        ("cube-triple-play-oraclerep-v0", "cube-triple"),
        ("lift-mh-low_dim", "lift"),
        ("can-ph-low_dim", "can"),
        ("square-mh-low_dim", "square"),
    ],
)
def test_domain_of(env_name, domain):
    assert methods.domain_of(env_name) == domain


@pytest.mark.parametrize(
    "env_name",
    [
        "transport-mh-low_dim",
        "tool_hang-ph-low_dim",
        "antmaze-large-navigate-v0",
        "visual-cube-double-play-singletask-task1-v0",
        "cube-double",
        "cube-double-play-singletask-task2-v1",
        "",
    ],
)
def test_unknown_domain_is_an_error(env_name):
    with pytest.raises(ValueError, match="no paper settings for --env_name="):
        methods.domain_of(env_name)
    with pytest.raises(ValueError, match="--method=qc: no paper settings") as error:
        methods.resolve("main", "qc", env_name, {})
    assert str(error.value).endswith("; run without --method and set the flags yourself (docs/settings.md lists the "
                                     "paper's).")  # fmt: skip


def test_a_bad_part_of_a_known_name_is_the_familys_error_not_a_missing_domain():
    with pytest.raises(ValueError, match=r"--method=qc: .*task id must be in 1..5, got 7"):
        methods.resolve("main", "qc", "cube-double-play-singletask-task7-v0", {})
    with pytest.raises(ValueError, match="humanoidmaze-giant datasets are of type navigate"):
        methods.resolve("main", "dqc", "humanoidmaze-giant-play-oraclerep-v0", {})
    with pytest.raises(ValueError, match="no paper settings for --env_name=foo-v0"):  # no family's name
        methods.resolve("main", "qc", "foo-v0", {})


def test_a_domain_only_another_method_has_is_an_error():
    # puzzle-4x4 takes puzzle-4x5's DQC values; the Q-chunking paper has none for it.
    assert methods.domain_of("puzzle-4x4-play-oraclerep-v0") == "puzzle-4x4"
    with pytest.raises(ValueError, match="--method=qc: the paper has no values for puzzle-4x4.*; run without --method"):
        methods.resolve("main", "qc", "puzzle-4x4-play-oraclerep-v0", {})


def test_notes_where_the_values_are_not_the_papers_own():
    assert methods.note("cube-double-play-singletask-task2-v0") is None
    assert methods.note("lift-mh-low_dim") is None
    assert "cube-double's values" in methods.note("cube-single-play-singletask-task1-v0")
    assert "not noisy" in methods.note("cube-double-noisy-singletask-task2-v0")
    assert "not ph" in methods.note("lift-ph-low_dim")


# ---------------------------------------------------------------- methods and drivers


@pytest.mark.parametrize(
    "driver,method,accepted,hint",
    [
        ("main", "rlpd", "qc|qc-fql|bfn|bfn-n|fql|fql-n", "rlpd runs with main_online.py"),
        ("main", "qc-rlpd", "qc|qc-fql|bfn|bfn-n|fql|fql-n", "qc-rlpd runs with main_online.py"),
        ("main_online", "qc", "rlpd|rlpd-ac|qc-rlpd", "qc runs with main.py"),
        ("main_online", "fql-n", "rlpd|rlpd-ac|qc-rlpd", "fql-n runs with main.py"),
        ("main", "QC", "qc|qc-fql|bfn|bfn-n|fql|fql-n", None),
        ("main_online", "sac", "rlpd|rlpd-ac|qc-rlpd", None),
    ],
)
def test_unknown_or_other_drivers_method_is_an_error(driver, method, accepted, hint):
    for call in (methods.preset, methods.describe, lambda *a: methods.resolve(*a, {})):
        with pytest.raises(ValueError) as e:
            call(driver, method, "cube-double-play-singletask-task2-v0")
        message = str(e.value)
        assert f"--method={method} is not a method of" in message and f"--method={accepted}" in message
        if hint:
            assert hint in message


# ---------------------------------------------------------------- explicit values win


@pytest.mark.parametrize(
    "method,env_name,explicit",
    [
        ("qc", "cube-double-play-singletask-task2-v0", {"agent.actor_num_samples": 64}),
        ("qc", "cube-double-play-singletask-task2-v0", {"horizon_length": 3}),  # the paper's ablation over h
        ("qc-fql", "cube-triple-play-singletask-task2-v0", {"agent.alpha": 30.0, "horizon_length": 10}),
        ("fql-n", "cube-double-play-singletask-task2-v0", {"horizon_length": 3, "agent.action_chunking": False}),
        ("fql", "scene-play-singletask-task2-v0", {"agent.action_chunking": False}),  # irrelevant at h=1
        ("bfn", "scene-play-singletask-task2-v0", {"horizon_length": 1, "agent.actor_num_samples": 8}),
        ("qc", "puzzle-3x3-play-singletask-task4-v0", {"sparse": False}),  # allowed; the driver warns
        ("qc", "cube-double-play-singletask-task2-v0", {"agent.actor_type": "best-of-n"}),  # same as the preset
        ("rlpd", "cube-double-play-singletask-task2-v0", {"agent.action_chunking": False}),
        ("qc-rlpd", "cube-double-play-singletask-task2-v0", {"agent.bc_alpha": 0.1, "horizon_length": 3}),
        ("rlpd-ac", "scene-play-singletask-task2-v0", {"agent.bc_alpha": 0.0, "sparse": False}),
    ],
)
def test_explicit_value_wins_and_is_recorded(method, env_name, explicit):
    values, sources = methods.resolve(driver_of(method), method, env_name, {**explicit, "seed": 1})
    want = expected(method, methods.domain_of(env_name))
    assert set(sources) == set(want)
    for key in want:
        if key in explicit:
            assert sources[key] == "command line" and key not in values, key
        else:
            assert sources[key] == "preset" and values[key] == want[key], key
    assert "seed" not in values and "seed" not in sources


def test_command_line_strings_are_read_as_values():
    strings = {"horizon_length": "5", "agent.action_chunking": "False"}
    values, sources = methods.resolve("main", "fql-n", "cube-double-play-singletask-task2-v0", strings)
    assert sources["horizon_length"] == sources["agent.action_chunking"] == "command line"
    assert values == {"agent.actor_type": "distill-ddpg", "agent.alpha": 100, "sparse": False}
    with pytest.raises(ValueError, match="--agent.action_chunking=true contradicts --method=fql-n"):
        methods.resolve("main", "fql-n", "cube-double-play-singletask-task2-v0", {"agent.action_chunking": "true"})
    with pytest.raises(ValueError, match="--horizon_length=1 contradicts --method=rlpd-ac"):
        methods.resolve("main_online", "rlpd-ac", "scene-play-singletask-task2-v0", {"horizon_length": "1"})
    with pytest.raises(ValueError, match="--agent.action_chunking=maybe is not a boolean"):
        methods.resolve("main", "qc", "scene-play-singletask-task2-v0", {"agent.action_chunking": "maybe"})


# ---------------------------------------------------------------- contradictions


@pytest.mark.parametrize(
    "method,explicit,named,becomes",
    [
        # chunk length 1 vs > 1
        ("qc", {"horizon_length": 1}, "--horizon_length=1 contradicts --method=qc", "--method=bfn"),
        ("qc-fql", {"horizon_length": 1}, "--horizon_length=1 contradicts --method=qc-fql", "--method=fql"),
        ("bfn-n", {"horizon_length": 1}, "--horizon_length=1 contradicts --method=bfn-n", "--method=bfn"),
        ("fql-n", {"horizon_length": 1}, "--horizon_length=1 contradicts --method=fql-n", "--method=fql"),
        ("bfn", {"horizon_length": 5}, "--horizon_length=5 contradicts --method=bfn", "--method=qc"),
        (
            "fql",
            {"horizon_length": 3, "agent.action_chunking": False},
            "--horizon_length=3 contradicts --method=fql",
            "--method=fql-n",
        ),
        ("qc", {"agent.horizon_length": 1}, "--agent.horizon_length=1 contradicts --method=qc", "--method=bfn"),
        ("rlpd", {"horizon_length": 5}, "--horizon_length=5 contradicts --method=rlpd", "--method=rlpd-ac"),
        ("rlpd-ac", {"horizon_length": 1}, "--horizon_length=1 contradicts --method=rlpd-ac", "--method=rlpd"),
        ("qc-rlpd", {"horizon_length": 1}, "--horizon_length=1 contradicts --method=qc-rlpd", "no method of the paper"),
        # action chunking at h > 1
        (
            "fql-n",
            {"agent.action_chunking": True},
            "--agent.action_chunking=True contradicts --method=fql-n",
            "--method=qc-fql",
        ),
        (
            "bfn-n",
            {"agent.action_chunking": True},
            "--agent.action_chunking=True contradicts --method=bfn-n",
            "--method=qc",
        ),
        (
            "qc",
            {"agent.action_chunking": False, "horizon_length": 3},
            "--agent.action_chunking=False contradicts --method=qc",
            "--method=bfn-n",
        ),
        (
            "rlpd-ac",
            {"agent.action_chunking": False},
            "--agent.action_chunking=False contradicts --method=rlpd-ac",
            "no method of the paper",
        ),
        # actor type
        (
            "qc",
            {"agent.actor_type": "distill-ddpg"},
            "--agent.actor_type=distill-ddpg contradicts --method=qc",
            "--method=qc-fql",
        ),
        (
            "fql",
            {"agent.actor_type": "best-of-n"},
            "--agent.actor_type=best-of-n contradicts --method=fql",
            "--method=bfn",
        ),
        # BC term of the RLPD family
        ("qc-rlpd", {"agent.bc_alpha": 0.0}, "--agent.bc_alpha=0 contradicts --method=qc-rlpd", "--method=rlpd-ac"),
        ("rlpd-ac", {"agent.bc_alpha": 0.01}, "--agent.bc_alpha=0.01 contradicts --method=rlpd-ac", "--method=qc-rlpd"),
        ("rlpd", {"agent.bc_alpha": 0.5}, "--agent.bc_alpha=0.5 contradicts --method=rlpd", "no method of the paper"),
        # two at once
        (
            "qc",
            {"agent.actor_type": "distill-ddpg", "horizon_length": 1},
            "--agent.actor_type=distill-ddpg and --horizon_length=1 contradict --method=qc",
            "--method=fql",
        ),
        (
            "rlpd",
            {"horizon_length": 5, "agent.bc_alpha": 0.01},
            "--horizon_length=5 and --agent.bc_alpha=0.01 contradict --method=rlpd",
            "--method=qc-rlpd",
        ),
    ],
)
def test_contradiction_names_both_and_the_method_it_is(method, explicit, named, becomes):
    with pytest.raises(ValueError) as e:
        methods.resolve(driver_of(method), method, "cube-double-play-singletask-task2-v0", explicit)
    message = str(e.value)
    assert message.startswith(named), message
    assert becomes in message, message
    # The message shows what --method means, so the user sees which value disagrees.
    assert f"--horizon_length={DEFINITION[method]['horizon_length']}" in message


def test_contradiction_is_found_before_the_domain_is_needed():
    with pytest.raises(ValueError, match="contradicts --method=qc"):
        methods.resolve("main", "qc", "puzzle-4x4-play-singletask-task1-v0", {"horizon_length": 1})


DQC_METHODS = ("dqc", "dqc-h25-ha1", "dqc-h5-ha1", "qc-h25", "qc-h5", "qc-ns", "ns-n25", "ns-n5", "os")


@pytest.mark.parametrize("method", DQC_METHODS)
def test_dqc_methods_evaluate_every_250k_steps_unless_told(method, monkeypatch):
    """The DQC release evaluates every 250k steps: runs line up with its points at 0.25/0.5/0.75/1M."""
    from tests.test_cli import parse

    env = "cube-triple-play-oraclerep-v0"
    values, sources = methods.resolve("main", method, env, {})
    assert values["eval_interval"] == 250_000 and sources["eval_interval"] == "preset"
    values, sources = methods.resolve("main", method, env, {"eval_interval": 1000})
    assert "eval_interval" not in values and sources["eval_interval"] == "command line"
    cfg = parse(monkeypatch, "main", f"--method={method}", f"--env_name={env}")  # recorded in flags.json's method
    assert cfg.eval_interval == 250_000 and cfg.setting_sources["eval_interval"] == "preset"
    cfg = parse(monkeypatch, "main", f"--method={method}", f"--env_name={env}", "--eval_interval=5000")
    assert cfg.eval_interval == 5000 and cfg.setting_sources["eval_interval"] == "command line"
    cfg = parse(monkeypatch, "main", "--method=qc", "--env_name=cube-double-play-singletask-task2-v0")
    assert cfg.eval_interval == 100_000 and "eval_interval" not in cfg.setting_sources  # QC's paper: the default


# ---------------------------------------------------------------- the baselines IQL, ReBRAC, IFQL, IFQL-n, QC-IFQL

BASELINES = ("iql", "rebrac", "ifql", "ifql-n", "qc-ifql")
# The paper's appendix D.3 and Table 4 (docs/settings.md): what defines each method ...
BASELINE_DEFINITION = {
    "iql": {"horizon_length": 1, "agent.actor_loss": "awr"},
    "rebrac": {"horizon_length": 1},
    "ifql": {"horizon_length": 1, "agent.action_chunking": True},
    "ifql-n": {"horizon_length": 5, "agent.action_chunking": False},
    "qc-ifql": {"horizon_length": 5, "agent.action_chunking": True},
}
# ... and its per-domain values (OGBench only): IQL's AWR alpha, ReBRAC's actor BC alpha, sparse rewards.
IQL_ALPHA = {"scene": 10.0, "puzzle-3x3": 10.0, "cube-double": 0.3, "cube-triple": 0.3, "cube-quadruple": 0.3}
OGBENCH = ("scene", "puzzle-3x3", "cube-double", "cube-triple", "cube-quadruple", "cube-single")


def expected_baseline(method, domain):
    sparse = PAPER[domain][1]
    per_domain = {
        "iql": {"agent.alpha": IQL_ALPHA.get(domain, 0.3), "agent.expectile": 0.9},  # cube-single: cube-double's
        "rebrac": {"agent.alpha_actor": 0.1},
    }.get(method, {"agent.num_samples": 32, "agent.expectile": 0.9})
    return {**BASELINE_DEFINITION[method], **per_domain, "sparse": sparse}


@pytest.mark.parametrize("method", BASELINES)
def test_baselines_on_every_ogbench_domain_are_the_paper_values(method):
    for domain in OGBENCH:
        values, sources = methods.resolve("main", method, PAPER[domain][0], {})
        assert values == expected_baseline(method, domain), domain
        assert set(sources.values()) == {"preset"}
        for key, value in values.items():
            assert type(value) is type(expected_baseline(method, domain)[key]), key
    with pytest.raises(ValueError, match=f"--method={method}: the paper has no values for lift"):
        methods.resolve("main", method, "lift-mh-low_dim", {})


def test_baseline_labels_are_the_released_curves_names():
    """Plots put a run beside the released curve of the same name (data/paper/ogbench-agg.csv)."""
    import csv
    import os

    import agents

    with open(os.path.join(os.path.dirname(__file__), "..", "data", "paper", "ogbench-agg.csv")) as f:
        released = {row["method"] for row in csv.DictReader(f)}
    labels = {name: agents.method_owner(name).methods[name].label for name in BASELINES}
    assert labels == {"iql": "IQL", "rebrac": "ReBRAC", "ifql": "IFQL", "ifql-n": "IFQL-n", "qc-ifql": "QC-IFQL"}
    assert set(labels.values()) <= released


@pytest.mark.parametrize(
    "method,explicit",
    [
        ("iql", {"agent.alpha": 3.0}),
        ("iql", {"agent.expectile": 0.7, "sparse": False}),
        ("rebrac", {"agent.alpha_actor": 0.03}),
        ("ifql", {"agent.num_samples": 8}),
        ("qc-ifql", {"horizon_length": 3}),  # the paper's ablation over h keeps the method
        ("ifql-n", {"horizon_length": 3, "agent.expectile": 0.8}),
    ],
)
def test_baseline_explicit_value_wins(method, explicit):
    values, sources = methods.resolve("main", method, "puzzle-3x3-play-singletask-task4-v0", explicit)
    want = expected_baseline(method, "puzzle-3x3")
    for key in want:
        if key in explicit:
            assert sources[key] == "command line" and key not in values, key
        else:
            assert sources[key] == "preset" and values[key] == want[key], key


@pytest.mark.parametrize(
    "method,explicit,named,becomes",
    [
        ("ifql", {"horizon_length": 5}, "--horizon_length=5 contradicts --method=ifql", "--method=qc-ifql"),
        ("qc-ifql", {"horizon_length": 1}, "--horizon_length=1 contradicts --method=qc-ifql", "--method=ifql"),
        ("qc-ifql", {"agent.action_chunking": False}, "--agent.action_chunking=False contradicts", "--method=ifql-n"),
        ("ifql-n", {"agent.action_chunking": True}, "--agent.action_chunking=True contradicts", "--method=qc-ifql"),
        ("iql", {"horizon_length": 5}, "--horizon_length=5 contradicts --method=iql", "no method of the paper"),
        ("iql", {"agent.actor_loss": "ddpgbc"}, "--agent.actor_loss=ddpgbc contradicts", "no method of the paper"),
        ("rebrac", {"horizon_length": 5}, "--horizon_length=5 contradicts --method=rebrac", "no method of the paper"),
    ],
)
def test_baseline_contradictions(method, explicit, named, becomes):
    with pytest.raises(ValueError) as e:
        methods.resolve("main", method, "cube-double-play-singletask-task2-v0", explicit)
    assert str(e.value).startswith(named) and becomes in str(e.value), str(e.value)


def test_baseline_method_through_the_driver(monkeypatch):
    """`--method=NAME` alone loads the agent and its paper values; one explicit flag wins and is recorded."""
    from tests.test_cli import parse

    cfg = parse(monkeypatch, "main", "--method=iql", "--env_name=cube-double-play-singletask-task2-v0")
    assert cfg.agent["agent_name"] == "iql" and cfg.horizon_length == 1 and cfg.sparse is False
    assert cfg.agent["alpha"] == 0.3 and cfg.agent["expectile"] == 0.9 and cfg.agent["actor_loss"] == "awr"
    cfg = parse(monkeypatch, "main", "--method=rebrac", "--env_name=scene-play-singletask-task2-v0")
    assert cfg.agent["alpha_actor"] == 0.1 and cfg.agent["alpha_critic"] == 0.0 and cfg.sparse is True
    env = "--env_name=puzzle-3x3-play-singletask-task4-v0"
    cfg = parse(monkeypatch, "main", "--method=ifql-n", env, "--agent.num_samples=8")
    assert cfg.horizon_length == 5 and cfg.agent["action_chunking"] is False and cfg.agent["num_samples"] == 8
    assert cfg.setting_sources["agent.num_samples"] == "command line" and cfg.setting_sources["sparse"] == "preset"
    cfg = parse(monkeypatch, "main", "--method=qc-ifql", env)
    assert cfg.horizon_length == 5 and cfg.agent["action_chunking"] is True and cfg.agent["num_samples"] == 32
