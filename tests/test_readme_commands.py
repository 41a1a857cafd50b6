"""Every command that the README, docs/*.md and agents/README.md show parses with the parser of the program it runs.

- `python main.py ...` / `python main_online.py ...`: the driver's own parser (flags, `--agent.*` keys and values,
  `--method` and its per-domain values; no data is loaded);
- `python scripts/sweep.py ...`: the sweep's dry run (its parser, the grid expanded, every run through the driver's
  parser, the SLURM job script written out), with SLURM's `sinfo` taken as silent and no finished runs around;
- `python scripts/reproduce.py ...`: its parser, then the sweeps it would launch, as above;
- `python scripts/plot_curves.py ...`: its parser;
- `python -m envs.generate_dataset ...` / `python -m envs.download_datasets ...`: their absl flags, defined and
  parsed in one subprocess per module (absl defines them on its global flag set).

Also: the README's first sections hold exactly two commands, one line each (install and the main job; install and
the tests), `.ci/run` runs the second as written, and every sweep example that launches follows its dry run.
Words such as `...`, `PATH` or `<sweep>` are placeholders: a command holding one is skipped, except a lone `...`
at the end of a command ("the other flags"), which is dropped.
"""

import glob
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

import agents
import plot_curves
import reproduce
import sweep
from runner.config import config_from_argv
from tests.driver_runs import ROOT
from tests.test_plugin_agent import write_pessimistic_agent

DOCS = ["README.md", "agents/README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(f"{ROOT}/docs/*.md"))
PROGRAMS = {  # how a command starts -> the kind of check
    "python main.py": "main",
    "python main_online.py": "main_online",
    "python scripts/sweep.py": "sweep",
    "python scripts/reproduce.py": "reproduce",
    "python scripts/plot_curves.py": "plot_curves",
    "python -m envs.generate_dataset": "envs.generate_dataset",
    "python -m envs.download_datasets": "envs.download_datasets",
}
PLACEHOLDERS = ("...", "PATH", "<", "NAME[")
PLUGIN = "agents/pessimistic.py"  # agents/README.md's worked example, written by the test (tests/test_plugin_agent.py)


def _read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def command_lines(text):
    """The shell lines of a page: each line of its bash blocks (continuations joined) and each inline code span."""
    lines = re.findall(r"`((?:[A-Z_]+=\S+ )*python [^`]*)`", text)
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        lines += block.replace("\\\n", " ").splitlines()
    return lines


def page_commands(path):
    """`(kind, argv)` of every command of a page the checks know, in the page's order (`&&` chains split)."""
    commands = []
    for line in command_lines(_read(path)):
        for part in line.split("  #")[0].split(" && "):
            part = re.sub(r"^(?:[A-Z_]+=\S+ )+", "", part.strip())  # JAX_PLATFORMS=cpu python ...
            kind = next((k for start, k in PROGRAMS.items() if part == start or part.startswith(start + " ")), None)
            if kind is None:
                continue
            words = shlex.split(part)[len(next(s for s in PROGRAMS if part.startswith(s)).split()) :]
            if len(words) > 1 and words[-1] == "...":
                words = words[:-1]
            if any(p in w for w in words for p in PLACEHOLDERS) or {"--help", "--helpfull"} & set(words) or not words:
                continue  # a placeholder, a help text, or the program named without a command
            commands.append((kind, words))
    return commands


def _checked(kind, argv):
    """What the check runs: a sweep always as a dry run, so a sweep and its dry run are one check."""
    return tuple(w for w in argv if not (kind == "sweep" and w == "--dry_run"))


COMMANDS = sorted({(path, kind, _checked(kind, argv)) for path in DOCS for kind, argv in page_commands(path)})


@pytest.fixture(scope="module")
def plugin_file(tmp_path_factory):
    """agents/README.md's example agent, on disk; the registry as it was afterwards (other tests list it)."""
    saved = {name: dict(getattr(agents, name)) for name in ("REGISTRY", "CONFIG_FILES", "CLASHES", "PROBLEMS")}
    yield write_pessimistic_agent(tmp_path_factory.mktemp("plugin"))
    for name, value in saved.items():
        getattr(agents, name).clear()
        getattr(agents, name).update(value)


def _with_plugin(argv, plugin_file):
    return [w.replace(PLUGIN, plugin_file) for w in argv]


def check_sweep(argv, tmp_path, capsys, monkeypatch):
    """`python scripts/sweep.py <argv> --dry_run`, with run directories under `tmp_path` and no cluster asked."""
    monkeypatch.setattr(sweep.slurm, "slurm_answers", lambda: False)
    own, fixed = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = sweep.make_parser().parse_args([*own, f"--save_dir={tmp_path}"])
    args.dry_run = True
    assert sweep.run(args, fixed) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed and all(shlex.split(line)[1] == args.driver_path for line in printed)


@pytest.fixture(scope="module")
def absl_results():
    """{(module, argv): None or the error absl gives}, for every command of a module run with `python -m`."""
    code = (
        "import json, sys\n"
        "from absl import flags\n"
        "module = __import__(sys.argv[1], fromlist=['_define_flags'])\n"
        "module._define_flags()\n"
        "results = []\n"
        "for argv in json.load(sys.stdin):\n"
        "    flags.FLAGS.unparse_flags()\n"
        "    try:\n"
        "        rest = flags.FLAGS([sys.argv[1], *argv])[1:]\n"
        "        results.append(f'words left over: {rest}' if rest else None)\n"
        "    except flags.Error as e:\n"
        "        results.append(str(e))\n"
        "print(json.dumps(results))\n"
    )
    by_module = {}
    for _, kind, argv in COMMANDS:
        if kind.startswith("envs."):
            by_module.setdefault(kind, []).append(list(argv))
    pipes = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    processes = {m: subprocess.Popen([sys.executable, "-c", code, m], cwd=ROOT, env=env, **pipes) for m in by_module}
    results = {}
    for module, process in processes.items():
        out, err = process.communicate(json.dumps(by_module[module]), timeout=300)
        assert process.returncode == 0, err
        for argv, result in zip(by_module[module], json.loads(out), strict=True):
            results[(module, tuple(argv))] = result
    return results


def test_the_pages_have_the_commands_they_promise():
    kinds = [kind for _, kind, _ in COMMANDS]
    assert kinds.count("main") + kinds.count("main_online") >= 15
    assert set(kinds) == set(PROGRAMS.values()), set(PROGRAMS.values()) - set(kinds)
    argvs = [argv for _, _, argv in COMMANDS]
    assert any("--method=dqc" in argv for argv in argvs)  # the README's DQC section
    assert any("--method=qc-rlpd" in argv for argv in argvs)
    assert any("--if_missing" in argv for argv in argvs)  # the README's first command


@pytest.mark.parametrize("path, kind, argv", COMMANDS, ids=[f"{p}: {k} {' '.join(a)}"[:100] for p, k, a in COMMANDS])
def test_command_parses(path, kind, argv, plugin_file, absl_results, tmp_path, capsys, monkeypatch):
    argv = _with_plugin(list(argv), plugin_file)
    if kind in ("main", "main_online"):
        cfg = config_from_argv(kind, argv)
        assert cfg.agent["agent_name"] in ("acfql", "acrlpd", "dqc", "iql", "rebrac", "ifql", "acsac", "pessimistic")
    elif kind == "sweep":
        check_sweep(argv, tmp_path, capsys, monkeypatch)
    elif kind == "reproduce":
        own, flags = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
        args, sweep_options = reproduce.make_parser().parse_known_args(own)
        for sweep_argv in reproduce.sweep_argvs(args, sweep_options, flags):
            check_sweep(sweep_argv, tmp_path, capsys, monkeypatch)
    elif kind == "plot_curves":
        if "--compare" in argv and "--compare" not in plot_curves.make_parser().format_help():
            pytest.skip("docs/results.md's --compare: scripts/plot_curves.py does not have it yet")
        plot_curves.make_parser().parse_args(argv)
    else:
        assert absl_results[(kind, tuple(argv))] is None, absl_results[(kind, tuple(argv))]


def _section_blocks(text, heading):
    """The bash blocks of the README section whose heading starts with `heading`."""
    section = re.search(rf"^## {re.escape(heading)}.*?\n(.*?)(?=^## )", text, re.S | re.M)
    assert section, heading
    return re.findall(r"```bash\n(.*?)```", section[1], re.S)


def test_the_readme_starts_with_two_one_line_commands_and_ci_runs_the_second():
    text = _read("README.md")
    headings = re.findall(r"^## (.*)$", text, re.M)
    assert headings[:2] == ["Install and run the main job (CPU, no network)", "Run the tests"], headings
    [install] = _section_blocks(text, "Install and run the main job")
    [tests] = _section_blocks(text, "Run the tests")
    assert len(install.splitlines()) == 1 and len(tests.splitlines()) == 1, (install, tests)
    install, tests = install.strip(), tests.strip()
    setup = "python3.11 -m venv .venv && . .venv/bin/activate && pip install -r requirements.txt && "
    assert install.startswith(setup) and tests.startswith(setup)
    steps = install[len(setup) :].split(" && ")
    assert [s.split(" --")[0] for s in steps] == ["python -m envs.generate_dataset", "python main.py"], steps
    assert "--if_missing" in steps[0].split()
    assert tests[len(setup) :].endswith("python -m pytest tests -n 2")
    # The first bash block before any other: the README shows no other command before these two.
    assert text.index("```bash") == text.index(install) - len("```bash\n")
    assert tests in _read(".ci/run").splitlines(), "the README's test line must stand in .ci/run as written"


def test_every_sweep_that_launches_follows_its_dry_run():
    for path in ["README.md"] + [p for p in DOCS if p.startswith("docs/")]:
        seen = []
        for kind, argv in page_commands(path):
            if kind != "sweep":
                continue
            if "--dry_run" not in argv:
                assert argv in seen, f"{path}: this sweep launches without its dry run before it: {shlex.join(argv)}"
            seen.append([w for w in argv if w != "--dry_run"])


def test_the_readme_is_short_and_in_the_order_a_reader_needs():
    """Issue 27, item 1: at most 250 lines, its sections in this order (everything else lives in docs/)."""
    with open(os.path.join(ROOT, "README.md")) as f:
        lines = f.read().splitlines()
    assert len(lines) <= 250, len(lines)
    assert [line for line in lines if line.startswith("## ")] == [
        "## Install and run the main job (CPU, no network)",
        "## Run the tests",
        "## Reproduced results",
        "## Methods: one command each",
        "## Decoupled Q-chunking (DQC): offline, goal-conditioned",
        "## Speed: what a GPU pays for on every start and every step",
        "## Your own agent",
        "## Reading the code and the layout",
        "## Links",
    ]
