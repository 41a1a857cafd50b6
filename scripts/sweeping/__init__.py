"""The parts of scripts/sweep.py, the command: `run` (one run, `SweepRun`), `local` (the local executor) and
`slurm` (the SLURM executor through submitit).

Importable as `sweeping.*` because a command run as `python scripts/<command>.py` has scripts/ first on `sys.path`
(tests: `pythonpath` in pyproject.toml).
"""
