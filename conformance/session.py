"""The controller's side of a device run: one record per test, written as it finishes.

:class:`RunRecorder` lives only in the process that owns the run (the pytest process, or
the xdist controller), never in an xdist worker. It turns reports into records with
:class:`~conformance.outcome.OutcomeMerger`, appends them with
:class:`~conformance.store.RunWriter`, adds the tests the skiplist deselected (shipped by
workers when they finish), records each file, module or class that failed to collect (xdist
hands the workers' failed collection reports to the controller's ``pytest_collectreport``),
and consolidates the run when the session ends.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from conformance.backends import Backend
from conformance.classify import classify_failure, classify_skip
from conformance.identity import collector_identity, parse_nodeid
from conformance.model import COLLECTION_ERROR, ResultRecord, TestIdentity, is_collection_record
from conformance.outcome import OutcomeMerger, collection_message
from conformance.store import RunWriter, read_records, utc_now
from conformance.watchdog import timeout_notes
from conformance.worker import (
    OUTPUT_BACKEND,
    OUTPUT_COLLECTED,
    OUTPUT_DESELECTED,
    OUTPUT_LOAD_ERROR,
)

__all__ = ["WORKER_RESUME_COUNT", "WORKER_RUN_DIR", "WORKER_RUN_ID", "RunRecorder"]

#: Keys in ``workerinput`` that tell each xdist worker which run it works for.
WORKER_RUN_DIR = "conformance_run_dir"
WORKER_RUN_ID = "conformance_run_id"
WORKER_RESUME_COUNT = "conformance_resume_count"


#: The outcome of a collection error a skiplist entry expects, by the entry's tier.
_EXPECTED_BY_TIER = {"xfail": "xfailed", "skip": "skipped", "deselect": "deselected"}


class RunRecorder:
    """Writes one run folder from the reports of a pytest session."""

    def __init__(
        self,
        config: pytest.Config,
        backend: Backend,
        writer: RunWriter,
        *,
        timeout_s: float | None,
        skiplist: Any = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.writer = writer
        #: The run's skiplist: its entries may expect a file not to collect.
        self.skiplist = skiplist
        self.run_dir = writer.run_dir
        self.run_id = writer.meta.run_id
        #: Records present when this session started (a resumed run); workers skip them.
        self.resume_count = len(writer.recorded)
        self.collected = 0
        self.written = 0
        #: Set when xdist workers could not load the backend (they then ran nothing).
        self.load_error = ""
        self.merger = OutcomeMerger(
            run_id=self.run_id,
            device=backend.name,
            shard=writer.meta.shard,
            mode=writer.meta.mode,
            identity_of=self._parse_identity,
            classify_failure=classify_failure,
            classify_skip=classify_skip,
            timed_out=lambda nodeid: timeout_notes(self.run_dir).get(nodeid),
            elapsed=self._elapsed,
            timeout_s=timeout_s,
        )
        #: When each running test started (monotonic seconds): a test that kills its
        #: worker sends no duration, so its record takes the time since its start.
        self._started: dict[str, float] = {}
        #: Nodeids of the run's records that stand for collectors, not tests (a resumed
        #: run's too): they do not count towards the collected tests a complete run has.
        self.collection_errors: set[str] = set()
        if self.resume_count:
            self.collection_errors = {
                r["nodeid"]
                for r in read_records(self.run_dir)
                if is_collection_record(r["category"], r["template"])
            }

    # -- xdist ----------------------------------------------------------------------------

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[WORKER_RUN_DIR] = str(self.run_dir)
        node.workerinput[WORKER_RUN_ID] = self.run_id
        node.workerinput[WORKER_RESUME_COUNT] = self.resume_count

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        # A worker that died sends no output; the workers that finish carry the same lists.
        output = getattr(node, "workeroutput", None) or {}
        self.load_error = self.load_error or output.get(OUTPUT_LOAD_ERROR, "")
        if OUTPUT_COLLECTED in output:
            self.add_collection(int(output[OUTPUT_COLLECTED]), output.get(OUTPUT_DESELECTED, ()))
        loaded = output.get(OUTPUT_BACKEND) or {}
        updates = {
            f"backend_{key}": value
            for key, value in loaded.items()
            if value and value != getattr(self.writer.meta, f"backend_{key}", value)
        }
        if updates:
            self.writer.update_meta(**updates)

    # -- recording ------------------------------------------------------------------------

    def add_collection(self, collected: int, deselected: Any) -> None:
        """Note the number of tests collected and record the ones the skiplist deselected."""
        self.collected = max(self.collected, collected)
        for entry in deselected:
            fields = {k: v for k, v in entry.items() if k != "device"}
            self._write(
                ResultRecord(
                    run_id=self.run_id,
                    device=self.backend.name,
                    shard=self.writer.meta.shard,
                    mode=self.writer.meta.mode,
                    **fields,
                )
            )

    def record_timeout(
        self, nodeid: str, identity_fields: dict[str, str] | None = None, elapsed_s: float = 0.0
    ) -> None:
        """Record a test the watchdog is about to stop in this very process (serial run);
        ``identity_fields`` are the test's TestIdentity fields where known, ``elapsed_s``
        the time it ran."""
        if identity_fields:
            identity = TestIdentity(**identity_fields)
        else:
            identity = self._parse_identity(nodeid)
        self._write(
            ResultRecord.of_test(
                self.run_id,
                identity,
                nodeid=nodeid,
                device=self.backend.name,
                outcome="timeout",
                category="timeout",
                message="timed out; the run stopped (resume it to finish)",
                duration_s=round(elapsed_s, 6),
                shard=self.writer.meta.shard,
                mode=self.writer.meta.mode,
            )
        )

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Record a file, module or class that failed to collect, once (every xdist worker
        collects every file, and a resumed run collects it again: the writer keeps the
        first record of a nodeid)."""
        if report.failed:
            record = self.collection_error(report)
            self.collection_errors.add(record.nodeid)
            self._write(record)

    def collection_error(self, report: pytest.CollectReport) -> ResultRecord:
        """The record of a failed collection report: outcome ``error``, category
        ``collection_error``, the exception as message and its type as detail. A skiplist
        entry that selects the collector (its test_id, or its file with no template) makes
        it the entry's expected outcome: xfailed, skipped or deselected by its tier."""
        identity = collector_identity(
            report.nodeid, self.backend.device_names, self.config.rootpath
        )
        message, exception = collection_message(report)
        entry = self.skiplist.match(identity) if self.skiplist is not None else None
        return ResultRecord.of_test(
            self.run_id,
            identity,
            device=self.backend.name,
            outcome=_EXPECTED_BY_TIER[entry.tier] if entry is not None else "error",
            category=COLLECTION_ERROR,
            detail=exception,
            message=message,
            skip_entry=entry.where if entry is not None else "",
            shard=self.writer.meta.shard,
            mode=self.writer.meta.mode,
        )

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        self._started[nodeid] = time.monotonic()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = self.merger.add(report)
        if record is not None:
            self._started.pop(report.nodeid, None)
            self._write(record)

    def _elapsed(self, nodeid: str) -> float | None:
        started = self._started.get(nodeid)
        return None if started is None else time.monotonic() - started

    def _write(self, record: ResultRecord) -> None:
        if self.writer.write(record):
            self.written += 1
            self.config.hook.pytest_conformance_record(record=record, config=self.config)

    def _parse_identity(self, nodeid: str) -> TestIdentity:
        return parse_nodeid(nodeid, self.backend.device_names, self.config.rootpath)

    # -- the end ----------------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        collected = max(self.collected, self.writer.meta.collected)
        # Complete when every collected test has a record: an interrupted session, or
        # xdist giving up after too many crashed workers, leaves tests to resume.
        # Records of collection errors stand for no collected test.
        tests_recorded = len(self.writer.recorded) - len(
            self.collection_errors & self.writer.recorded
        )
        complete = (
            tests_recorded >= collected
            and exitstatus not in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR)
            and not self.load_error
        )
        if self.load_error:
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
        self.writer.close(complete=complete, collected=collected, end_time=utc_now())

    @pytest.hookimpl
    def pytest_report_header(self) -> str:
        meta = self.writer.meta
        version = f" {meta.backend_version}" if meta.backend_version else ""
        resumed = f", resuming after {self.resume_count} records" if self.resume_count else ""
        return f"conformance: {meta.backend}{version}, run {self.run_dir}{resumed}"

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        meta = self.writer.meta
        terminalreporter.write_sep("-", "conformance")
        if self.load_error:
            terminalreporter.write_line(f"ERROR: in the workers: {self.load_error}", red=True)
        terminalreporter.write_line(
            f"{self.written} outcomes recorded for {meta.backend} in {Path(self.run_dir)}"
        )
        if self.collection_errors:
            terminalreporter.write_line(
                f"{len(self.collection_errors)} file(s) or class(es) failed to collect, "
                f"recorded as {COLLECTION_ERROR}: {', '.join(sorted(self.collection_errors))}",
                red=True,
            )
        if not meta.complete:
            first = "once the backend loads, " if self.load_error else ""
            terminalreporter.write_line(
                f"the run is incomplete: {first}finish it with --resume {self.run_dir}",
                yellow=True,
            )
        if meta.expected is not None and meta.collected < meta.expected:
            terminalreporter.write_line(
                f"collected {meta.collected} tests, expected {meta.expected}", red=True
            )
