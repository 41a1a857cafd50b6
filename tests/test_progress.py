"""Plain progress lines in a log file: what a long run's log says, and the time left."""

import io

from utils import progress


def test_plain_lines_at_each_tenth_with_the_time_left(monkeypatch):
    clock = {"t": 1000.0}
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock["t"])
    out = io.StringIO()
    bar = progress.progress(total=100000, initial=20000, desc="offline", unit="steps", file=out)
    assert isinstance(bar, progress.PlainProgress)  # a StringIO is no terminal
    for _ in range(2):  # 10000 steps in 1250 s: 8 steps/s; 70000 steps to go take 8750 s
        clock["t"] += 625.0
        bar.update(5000)
    assert out.getvalue().splitlines() == [
        "offline: 25000/100000 steps (25%), 8 steps/s, 625 s, 2 h 36 min left",  # past 300 s: a line
        "offline: 30000/100000 steps (30%), 8 steps/s, 1250 s, 2 h 26 min left",  # a tenth: a line
    ]
    clock["t"] += 10.0
    bar.update(70000)
    assert out.getvalue().splitlines()[-1] == "offline: 100000/100000 steps (100%), 63.5 steps/s, 1260 s, 0 s left"


def test_duration_text():
    assert [progress.duration_text(s) for s in (0, 40.4, 59.6, 60, 719, 3600, 10620, -5)] == [
        "0 s", "40 s", "1 min", "1 min", "12 min", "1 h 0 min", "2 h 57 min", "0 s"
    ]  # fmt: skip
