"""The env registry (`envs/__init__.py`) refuses what it cannot trust, naming the family file.

Each test saves family files into a copy of the repository's tracked files, beside envs/README.md's Pendulum
example, and parses names in a fresh process there, as a run would (one runs `main.py`): two families that
claim one name, a `parse` that raises `ValueError` for names not its own, a file that raises at import
(SystemExit too), a `FAMILY` or field of the wrong kind, and a `parse` that returns something else than its own
`EnvName`. The rule they follow: envs/README.md, "How the registry asks the families".
"""

import os
import shutil
import subprocess
import sys

import pytest

from tests.driver_runs import ROOT
from tests.test_plugin_env import example_family

OGBENCH = "cube-double-play-singletask-task2-v0"
PENDULUM = "pendulum-random-v1"

# A family file whose parse is `{parse}` (the body of `parse(env_name)`); its load is never called here.
FAMILY_FILE = """from envs.common import EnvName, Family, never_sparse, no_numbered_tasks


def parse(env_name):
    {parse}


FAMILY = Family(name={name!r}, patterns={patterns}, parse=parse, load=print, envs_for_seed=print, renders=False,
                env_bytes=1, sparse_default=never_sparse, with_task=no_numbered_tasks){tail}
"""


def family_file(name, parse, patterns=None, tail=""):
    patterns = (f"{name}-v0",) if patterns is None else patterns
    return FAMILY_FILE.format(name=name, parse=parse, patterns=repr(patterns), tail=tail)


def own(name, env_name="env_name"):
    """A parse body's `EnvName` of family `name` for `env_name` (an expression)."""
    return f"EnvName({name!r}, {env_name}, {name!r}, None, None, False, {name!r}, {name!r}, {name!r})"


@pytest.fixture
def repo(tmp_path):
    """A copy of the repository's tracked files, with envs/README.md's example saved as envs/pendulum.py."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    for path in filter(None, tracked.stdout.decode().split("\0")):
        if not os.path.isfile(os.path.join(ROOT, path)):
            continue  # deleted in the work tree
        os.makedirs(os.path.dirname(tmp_path / path), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, path), tmp_path / path)
    (tmp_path / "envs" / "pendulum.py").write_text(example_family())
    return tmp_path


def parse_in(repo, files, *names):
    """`(lines, stderr)`: `envs.parse(name).family`, or the error's class and message, of each name, in a process
    started in `repo` with `files` ({name: text}) added to its envs/."""
    for file, text in files.items():
        (repo / "envs" / file).write_text(text)
    code = "import envs, sys\nfor n in sys.argv[1:]:\n    try:\n        print(envs.parse(n).family)\n" \
           "    except ValueError as e:\n        print(type(e).__name__, e)"  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code, *names], cwd=repo, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines(), result.stderr


def test_two_families_that_claim_the_name_being_run_are_one_error_naming_both(repo):
    twin = example_family().replace('name="pendulum"', 'name="twin"').replace('EnvName("pendulum",', 'EnvName("twin",')
    lines, _ = parse_in(repo, {"twin.py": twin}, PENDULUM, OGBENCH)
    assert lines == [
        f"ValueError {PENDULUM!r} is parsed by envs/pendulum.py and envs/twin.py: an env name belongs to one family, "
        "so the parse of each family it is not for must return None for it (envs/README.md).",
        "ogbench",  # the collision is checked for the name being run: the other families' names still run
    ]


def test_a_parse_that_claims_every_name_collides_with_ogbench(repo):
    lines, _ = parse_in(repo, {"greedy.py": family_file("greedy", f"return {own('greedy')}")}, OGBENCH, "foo-v0")
    assert lines[0] == (
        f"ValueError {OGBENCH!r} is parsed by envs/greedy.py and envs/ogbench.py: an env name belongs to one family, "
        "so the parse of each family it is not for must return None for it (envs/README.md)."
    )
    assert lines[1] == "greedy"  # a name only it claims is its

    # A run of the name: one error line before anything is made (the file named), not a cube run on other data.
    save = repo / "runs"
    command = [sys.executable, "main.py", f"--env_name={OGBENCH}", f"--save_dir={save}", "--run_name=r"]
    run = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=300, env=dict(os.environ,
                         JAX_PLATFORMS="cpu", WANDB_MODE="disabled"))  # fmt: skip
    assert (
        run.returncode == 2 and run.stderr.strip().splitlines()[-1] == f"error: {lines[0].removeprefix('ValueError ')}"
    )
    assert not save.exists()


def test_a_parse_that_raises_value_error_for_names_not_its_own_is_named_and_stops_no_other_family(repo):
    strict = family_file(
        "strict",
        "if not env_name.startswith('strict-'):\n        raise ValueError(f'not a strict name: {env_name!r}')\n"
        "    if env_name != 'strict-v0':\n        raise ValueError(f'{env_name!r}: strict has only strict-v0')\n"
        f"    return {own('strict')}",
    )
    task9 = "cube-double-play-singletask-task9-v0"
    lines, stderr = parse_in(repo, {"strict.py": strict}, OGBENCH, PENDULUM, "strict-v0", "strict-v9", "x-v0", task9)
    assert lines[:3] == ["ogbench", "pendulum", "strict"]
    # Another family parses the name: the ValueError is the raising family's bug, a warning naming its file.
    assert (
        f"{OGBENCH}: envs/strict.py's parse raised ValueError for it (not a strict name: {OGBENCH!r}); parsed by "
        "envs/ogbench.py instead." in stderr
    )
    # No family parses it, one refuses it: its message (a bad part of its name, or its bug), naming its file.
    assert lines[3] == "ValueError 'strict-v9': strict has only strict-v0 (envs/strict.py's parse)"
    assert lines[4] == "ValueError not a strict name: 'x-v0' (envs/strict.py's parse)"
    # Several refuse it: which is right cannot be told, so one line names them all.
    assert lines[5] == (
        f"ValueError {task9!r} is refused by 2 families, but a parse raises ValueError only for a bad part of its "
        "own names (others: None), so all but one are wrong: envs/ogbench.py's parse says "
        f'"{task9!r}: task id must be in 1..5, got 9."; envs/strict.py\'s parse says "not a strict name: {task9!r}".'
    )


def test_family_files_the_registry_cannot_use_are_left_out_and_named(repo):
    files = {
        "argv.py": "import argparse\n\nargparse.ArgumentParser().parse_args()\n",  # SystemExit at import
        "comma.py": family_file("comma", "return None", tail=","),  # FAMILY = Family(...),: a tuple
        "letters.py": family_file("letters", "return None", patterns="letters-v0"),  # a string, not a tuple
        "texts.py": family_file("texts", "return env_name"),  # a str for every name
        "borrowed.py": family_file("borrowed", f"return {own('pendulum')} if env_name == 'borrowed-v0' else None"),
        "heavy.py": family_file("heavy", "return None").replace("env_bytes=1", "env_bytes=-1"),
    }
    lines, stderr = parse_in(repo, files, PENDULUM, OGBENCH, "x-v0", "borrowed-v0")
    assert lines[:2] == ["pendulum", "ogbench"]  # none of them stops another family's run
    assert "usage:" not in stderr  # argparse's message at import is held back, and named below
    assert f"{OGBENCH}: envs/texts.py's parse returned a str ({OGBENCH!r}) for it" in stderr  # a warning
    unknown, borrowed = lines[2:]
    assert unknown.startswith("UnknownEnvName Unknown environment 'x-v0'. Supported: ")
    patterns, notes = unknown.split("; texts: texts-v0; ")  # the families' patterns (the last: texts'), the notes
    assert "pendulum: pendulum-random-v1" in patterns and "comma" not in patterns and "letters" not in patterns
    argv = "could not be imported (SystemExit: 2; it printed '-c: error: unrecognized arguments: "
    assert notes.split("; envs/") == [
        f"envs/argv.py {argv}{PENDULUM} {OGBENCH} x-v0 borrowed-v0')",
        "comma.py is left out: FAMILY is a tuple, not an envs.common.Family: the comma after Family(...) makes "
        "it a tuple",
        "heavy.py is left out: FAMILY.env_bytes must be an int >= 0, got -1",
        "letters.py is left out: FAMILY.patterns must be a tuple of env-name patterns (strings), e.g. "
        "('pendulum-random-v1',), got 'letters-v0'",
        "texts.py's parse returned a str ('x-v0') for it, not None or an EnvName of its own family",
    ]
    assert (
        "envs/borrowed.py's parse returned an EnvName of the family 'pendulum' (its FAMILY is 'borrowed') for it, "
        "not None or an EnvName of its own family" in borrowed
    )


def test_the_users_ctrl_c_while_a_family_file_is_imported_still_stops_the_process(repo):
    (repo / "envs" / "interrupted.py").write_text("raise KeyboardInterrupt\n")
    result = subprocess.run([sys.executable, "-c", "import envs"], cwd=repo, capture_output=True, text=True)
    assert result.returncode != 0 and result.stderr.rstrip().endswith("KeyboardInterrupt"), result.stderr
