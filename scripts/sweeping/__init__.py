"""The parts of scripts/sweep.py, the command: `run` (one run, `SweepRun`), `local` (the local executor) and
`slurm` (the SLURM executor through submitit); `values` (a grid's value list, read by evaluate_checkpoint.py too).

Importable as `sweeping.*` with no `sys.path` edit: Python starts `python scripts/<command>.py` with scripts/ as
`sys.path[0]` (the tests: pytest's `pythonpath` in pyproject.toml). Nothing here is run as a program.
"""
