"""The benchmark scripts refuse bad arguments with one argparse error line (exit status 2), before timing anything."""

import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _script(name):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))  # bench_agents imports its sibling bench_reference
    try:
        spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "scripts", f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(os.path.join(ROOT, "scripts"))
    return module


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--sections=updates", "--methods=qc,xyz"], "--methods: unknown method 'xyz'"),
        (["--utd=0"], "--utd=0 must be comma-separated integers >= 1"),
        (["--utd=a"], "--utd=a must be comma-separated integers >= 1"),
        (["--seeds=0"], "--seeds=0 must be comma-separated integers >= 1"),
        (["--dispatch=1,0"], "--dispatch=1,0 must be comma-separated integers >= 1"),
        (["--rows=3"], "--rows=3 must be > 5"),
        (["--sections=foo"], "--sections: unknown section 'foo'"),
        (["--steps=0"], "--steps must be >= 1"),
    ],
)
def test_bench_agents_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        _script("bench_agents").parse_args(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--repeats=0"], ["--warmup=-1"]])
def test_benchmark_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as e:
        _script("benchmark").main(argv)
    assert e.value.code == 2 and "must be >= 1 and --warmup" in capsys.readouterr().err
