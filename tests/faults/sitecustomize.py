"""Fault injection for the driver processes the tests start (never part of a user's run).

A test puts this folder first on `PYTHONPATH` and sets `QC_FAULT`; Python imports this file at
start-up, and it wraps `runner.seed_group.SeedGroup.write_state_if_due` (the loop's last call of a
step) from outside the project:

* `QC_FAULT=kill@<phase>:<step>`: SIGKILL once that step is done (its state written, if one was due);
* `QC_FAULT=signal@<phase>:<step>`: SIGTERM before that step's state check, as SLURM's preemption would;
* `QC_FAULT=interrupt@<phase>:<step>`: SIGINT there, as Ctrl-C would.

`QC_MARK_STEPS=1` (with or without a fault) writes `qc-step <phase>:<step>` to stderr at the end of every
step (after its run state): a test reading stderr then knows at which step each other line was written
(tests/test_compilations.py places JAX's compilation messages so).
"""

import os
import signal
import sys

_FAULT = os.environ.get("QC_FAULT")
_MARKS = os.environ.get("QC_MARK_STEPS") == "1"
if _FAULT or _MARKS:
    _ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if _ROOT not in sys.path:
        sys.path.insert(0, _ROOT)
    _kind, _at = _FAULT.split("@") if _FAULT else (None, None)
    from runner.seed_group import SeedGroup

    _original = SeedGroup.write_state_if_due

    def _write_state_if_due(self, agent, step_in_phase, phase):
        here = f"{phase}:{step_in_phase}" == _at
        if here and _kind in ("signal", "interrupt"):
            os.kill(os.getpid(), signal.SIGTERM if _kind == "signal" else signal.SIGINT)
        _original(self, agent, step_in_phase, phase)
        if _MARKS:
            print(f"qc-step {phase}:{step_in_phase}", file=sys.stderr, flush=True)
        if here and _kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)

    SeedGroup.write_state_if_due = _write_state_if_due
