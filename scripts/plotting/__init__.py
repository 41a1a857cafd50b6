"""The parts of scripts/plot_curves.py, the command: `runs` (reading runs, labels, order), `stats` (bootstrap),
`paper` (the paper's released curves), `figure` (figure, styles, legend), `table` (`table.md`, `curves.csv`) and
`compare` (`--compare`: our runs against the released curves).

Importable as `plotting.*` with no `sys.path` edit: Python starts `python scripts/<command>.py` with scripts/ as
`sys.path[0]` (the tests: pytest's `pythonpath` in pyproject.toml). Nothing here is run as a program.
"""
