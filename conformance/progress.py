"""A progress line for long runs: how far, how fast, how long to go, what failed so far.

A nightly run of 150K tests takes hours; pytest's dots say nothing about how far it is.
:class:`Progress` lives beside the recorder (the process that owns the run) and prints one
plain line at most every ``interval_s`` seconds, never per test, with no terminal control
codes, so it reads the same in a terminal and in a CI log::

    conformance: 12,345/89,367 tests (13.8%) in 12m 03s, 17.1/s, ETA 1h 15m; 123 failed, 2 crashed

The total is the number of tests this session runs: collected, less the shard's other
tests, the skiplist's deselected tests and, on resume, those already recorded. The ETA is
:class:`~conformance.eta.EtaModel`'s: the expected time of the tests still to run, from the
durations earlier runs recorded (``--shard-durations``, the run being resumed) and the
tests this run finished, shown as a range while much of it is guessed
(``ETA 12m (8m 10s-20m)``); before anything is known to estimate from, the mean rate's.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from conformance.eta import EtaModel
from conformance.model import ResultRecord
from conformance.outcome import is_unexpected

__all__ = ["DEFAULT_INTERVAL_S", "Progress", "format_duration"]

#: Seconds between two progress lines unless --progress-interval says otherwise.
DEFAULT_INTERVAL_S = 10.0
#: Unexpected outcomes, as the line names them.
_FAILING = {
    "failed": "failed",
    "error": "errors",
    "crashed": "crashed",
    "timeout": "timed out",
    "xpassed": "strict xpass",
}


def format_duration(seconds: float) -> str:
    """``3725`` -> ``"1h 02m"``, ``125`` -> ``"2m 05s"``, ``9`` -> ``"9s"``."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


class Progress:
    """Counts the records of the tests that ran and prints a line every ``interval_s``."""

    def __init__(
        self,
        write_line: Callable[[str], None],
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        eta: EtaModel | None = None,
    ) -> None:
        self._write_line = write_line
        self.eta = eta
        self.interval_s = interval_s
        self._clock = clock
        self.total = 0
        self.done = 0
        self.failures: Counter[str] = Counter()
        self._start: float | None = None
        self._last = clock()

    def started(self, nodeid: str = "") -> None:
        """A test started (the first: the rate counts from here, not from the workers'
        start-up, seconds of importing torch and collecting)."""
        now = self._clock()
        if self._start is None:
            self._start = self._last = now
        if self.eta is not None and nodeid:
            self.eta.started(nodeid, now - self._start)

    def add_total(self, count: int) -> None:
        self.total += count

    def set_total(self, count: int) -> None:
        self.total = count

    def add(
        self,
        outcome: str,
        message: str = "",
        *,
        nodeid: str = "",
        test_id: str = "",
        seconds: float = 0.0,
    ) -> None:
        """Count one finished test; print the line when the interval has passed."""
        if outcome == "deselected":
            return
        self.done += 1
        if self.eta is not None and nodeid:
            self.eta.finished(nodeid, test_id, seconds)
        if is_unexpected(outcome, message):
            self.failures[outcome] += 1
        now = self._clock()
        if self.interval_s > 0 and now - self._last >= self.interval_s:
            self._last = now
            self._write_line(self.line(now))

    def line(self, now: float | None = None) -> str:
        now = self._clock() if now is None else now
        if self._start is None:
            self._start = now
        elapsed = max(now - self._start, 1e-9)
        rate = self.done / elapsed
        total = max(self.total, self.done)
        share = f" ({100 * self.done / total:.1f}%)" if total else ""
        text = f"conformance: {self.done:,}/{total:,} tests{share} in {format_duration(elapsed)}"
        text += f", {rate:.1f}/s"
        if total > self.done:
            text += self._eta_text(elapsed, rate, total)
        failing = [
            f"{self.failures[o]:,} {name}" for o, name in _FAILING.items() if self.failures[o]
        ]
        return text + "; " + (", ".join(failing) if failing else "no failures")

    def _eta_text(self, elapsed: float, rate: float, total: int) -> str:
        eta = self.eta.estimate(elapsed) if self.eta is not None else None
        if eta is not None:
            text = f", ETA {format_duration(eta.seconds)}"
            if eta.is_range:
                text += f" ({format_duration(eta.low)}-{format_duration(eta.high)})"
            return text
        if rate > 0:
            return f", ETA {format_duration((total - self.done) / rate)}"
        return ""


class ProgressPlugin:
    """The pytest side: learns the total from the collection and counts each record."""

    def __init__(
        self,
        config: pytest.Config,
        interval_s: float,
        *,
        recorded: dict[str, float] | None = None,
    ) -> None:
        self.config = config
        self.eta = EtaModel(recorded=dict(recorded or {}))
        self.progress = Progress(self._write_line, interval_s=interval_s, eta=self.eta)

    def _expect(self, nodeids: list[str]) -> None:
        # Keyed by nodeid: an xdist controller has no test identities (it never imports
        # torch, whose dtype names parsing a test_id needs), and the durations that time a
        # run come from the same device's earlier runs, whose nodeids are this run's.
        self.eta.expect((nodeid, nodeid) for nodeid in nodeids)

    def _write_line(self, text: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        # Progress dots (xdist's among them) leave the line open: the line starts anew.
        writer = getattr(reporter, "_tw", None)
        if getattr(writer, "width_of_current_line", 0):
            reporter.write("\n")
        reporter.write_line(text)

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        self.progress.started(nodeid)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # A serial run: the items left after the shard, skiplist and resume passes (an
        # xdist controller collects nothing; its workers report below).
        if session.items:
            self.progress.set_total(len(session.items))
            self._expect([item.nodeid for item in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        # Every worker collects the same tests (after deselection): the first one counts.
        workers = getattr(self.config.option, "numprocesses", None)
        self.eta.workers = workers if isinstance(workers, int) and workers > 0 else 1
        if not self.progress.total:
            self.progress.set_total(len(ids))
            self._expect(list(ids))

    @pytest.hookimpl
    def pytest_conformance_record(self, record: ResultRecord, config: pytest.Config) -> None:
        self.progress.add(
            record.outcome,
            record.message,
            nodeid=record.nodeid,
            test_id=record.nodeid,
            seconds=record.duration_s,
        )
