"""The progress line: done/total, rate, ETA and failures, at most every interval, plain text."""

from __future__ import annotations

import re

import pandas  # noqa: F401 (loaded before pytester, whose module snapshot would drop it)
import pyarrow.parquet  # noqa: F401
import pytest

from conformance.progress import Progress, format_duration


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_line_at_most_every_interval_with_rate_eta_and_failures():
    clock, lines = Clock(), []
    progress = Progress(lines.append, interval_s=10, clock=clock)
    progress.set_total(1000)
    clock.now += 30  # workers start up: not part of the rate
    progress.started()
    for n in range(100):
        clock.now += 0.5  # 2 tests a second
        progress.add("failed" if n % 10 == 0 else "passed")
    assert len(lines) == 5  # 50 s in all: one line every 10 s, not one per test
    assert lines[-1] == (
        "conformance: 100/1,000 tests (10.0%) in 50s, 2.0/s, ETA 7m 30s; 10 failed"
    )
    progress.add("crashed")
    progress.add("xpassed", "[XPASS(strict)] fixed")
    progress.add("xpassed", "not strict")
    progress.add("deselected")  # not run: not counted
    clock.now += 10
    progress.add("timeout")
    assert lines[-1].startswith("conformance: 104/1,000 tests (10.4%) in 1m 00s, 1.7/s, ETA 8m")
    assert lines[-1].endswith("; 10 failed, 1 crashed, 1 timed out, 1 strict xpass")


def test_no_failures_and_no_known_total_read_plainly():
    clock, lines = Clock(), []
    progress = Progress(lines.append, interval_s=1, clock=clock)
    progress.started()
    clock.now += 4
    progress.add("passed")
    assert lines == ["conformance: 1/1 tests (100.0%) in 4s, 0.2/s; no failures"]


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (9.4, "9s"), (125, "2m 05s"), (3725, "1h 02m")]
)
def test_durations_read_as_a_person_would(seconds, text):
    assert format_duration(seconds) == text


SLOW_TESTS = """
import time
import pytest

@pytest.mark.parametrize("n", range(12))
def test_slow(n):
    time.sleep(0.05)
    assert n != 3
"""


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "1"]])
def test_long_runs_print_progress_without_terminal_codes(pytester: pytest.Pytester, workers):
    pytester.makepyfile(test_slow=SLOW_TESTS)
    result = pytester.runpytest_subprocess(
        "--device", "cpu", "--run-dir", "run", "--progress-interval", "0.2",
        "-p", "no:cacheprovider", *workers,
    )  # fmt: skip
    assert result.ret == 1
    out = result.stdout.str()
    lines = re.findall(
        r"^conformance: (\d+)/(\d+) tests \(\d+\.\d%\) in \d+s, [\d.]+/s(?:, ETA \d+s)?; "
        r"(?:no failures|1 failed)$",
        out,
        re.M,
    )
    assert lines, out
    assert all(total == "12" and 0 < int(done) <= 12 for done, total in lines)
    assert [int(done) for done, _ in lines] == sorted(int(done) for done, _ in lines)
    assert len(lines) < 12  # not a line per test
    assert "\x1b" not in out and "\r" not in out  # plain text in a CI log
