"""The parts of scripts/plot_curves.py, the command: `runs` (reading runs, labels, order), `stats` (bootstrap),
`paper` (the paper's released curves), `figure` (figure, styles, legend), `table` (`table.md`, `curves.csv`) and
`compare` (`--compare`: our runs against the released curves).

Importable as `plotting.*` because a command run as `python scripts/<command>.py` has scripts/ first on `sys.path`
(tests: `pythonpath` in pyproject.toml).
"""
