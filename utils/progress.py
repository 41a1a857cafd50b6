"""Progress that reads well where it is shown: a tqdm bar on a terminal, plain lines in a log file.

`progress(...)` takes tqdm's arguments. When stderr is a terminal it is `tqdm.tqdm`; otherwise (a
cluster log, `2> run.log`) it writes one plain line at each tenth of the total and at most every
`PLAIN_EVERY_S` seconds, and nothing else: no carriage returns, no escape codes. A line reads
`offline: 14420/100000 steps (14%), 8.04 steps/s, 1792 s, 2 h 57 min left` (the time left at this process's
rate). `leave=False` bars (evaluation episodes) write no lines at all off a terminal.
"""

import sys
import time

from tqdm import tqdm

PLAIN_EVERY_S = 300.0


def duration_text(seconds: float) -> str:
    """`'2 h 57 min'`, `'12 min'` or `'40 s'`: a duration in the largest units that say it to a minute."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


def _is_terminal(stream) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


class PlainProgress:
    """tqdm's interface (`update`, `close`, iteration, context manager) writing plain lines to `file`."""

    def __init__(self, iterable=None, total=None, desc="", initial=0, unit="it", leave=True, file=None, delay=0, **_):
        self.iterable, self.desc, self.unit, self.leave = iterable, desc or "progress", unit, leave
        self.total = len(iterable) if total is None and hasattr(iterable, "__len__") else total
        self.n = self._start = initial
        self.file = file or sys.stderr
        self.delay = delay  # as tqdm's: no line in the first `delay` seconds
        self._t0 = self._last = time.monotonic()
        self._next_tenth = self._tenth_after(initial)

    def _tenth_after(self, n):
        if not self.total:
            return None
        return (int(10 * n / self.total) + 1) * self.total / 10

    def _line(self):
        elapsed = time.monotonic() - self._t0
        rate = (self.n - self._start) / elapsed if elapsed > 0 else 0.0
        done = f"{self.n}/{self.total} {self.unit} ({100 * self.n / self.total:.0f}%)" if self.total else str(self.n)
        left = f", {duration_text((self.total - self.n) / rate)} left" if self.total and rate > 0 else ""
        print(f"{self.desc}: {done}, {rate:.3g} {self.unit}/s, {elapsed:.0f} s{left}", file=self.file, flush=True)
        self._last = time.monotonic()

    def update(self, n=1):
        self.n += n
        if not self.leave:
            return
        due = self._next_tenth is not None and self.n >= self._next_tenth
        if due or time.monotonic() - self._last >= PLAIN_EVERY_S:
            if time.monotonic() - self._t0 >= self.delay:
                self._line()
            self._next_tenth = self._tenth_after(self.n)

    def __iter__(self):
        for item in self.iterable:
            yield item
            self.update(1)

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def progress(iterable=None, disable=False, file=None, **kwargs):
    """A tqdm bar on a terminal, plain lines elsewhere (module docstring); `disable=True`: nothing."""
    stream = file or sys.stderr
    if disable:
        return tqdm(iterable, disable=True, **kwargs)
    if _is_terminal(stream):
        return tqdm(iterable, file=stream, dynamic_ncols=True, **kwargs)
    plain = {k: v for k, v in kwargs.items() if k in ("total", "desc", "initial", "unit", "leave", "delay")}
    return PlainProgress(iterable, file=stream, **plain)
