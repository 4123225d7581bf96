"""What happens where tests run (the pytest process itself, or each xdist worker).

:class:`TestRunAgent` selects (shard, skiplist, resume), names each test, measures it and
classifies its failure where the real exception still exists. It writes nothing: its
findings travel to the controller as ``report.user_properties`` entries:

``test_identity``
    dict of :class:`~conformance.model.TestIdentity` fields, on every report.
``skip_entry``, ``skip_category``, ``skip_detail``
    set by the skiplist pass on tests an entry applies to, or after the test ran, by the
    cause entry that explains its failure (the failure is then reported as an xfail).
``failure``
    ``{"when", "category", "detail"}`` from the exception of the phase that raised it.
``ops_dispatched``, ``ops_fallback``
    the ATen overloads the call dispatched (``--trace-ops``) and ran on the CPU fallback.

Tests removed by the skiplist's deselect tier are kept as ``deselected`` entries for the
controller: directly in a serial run, through ``config.workeroutput`` under xdist.
"""

from __future__ import annotations

import dataclasses
import sys
import unittest
from collections.abc import Generator
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from conformance.backends import Backend
from conformance.model import TestIdentity
from conformance.sharding import Durations, select_shard
from conformance.watchdog import Watchdog, note_timeout

if TYPE_CHECKING:
    from conformance.session import RunRecorder

__all__ = ["BackendLoadFailure", "TestRunAgent"]

#: Keys in ``config.workeroutput`` read by the controller when a worker finishes.
OUTPUT_DESELECTED = "conformance_deselected"
OUTPUT_COLLECTED = "conformance_collected"
#: The backend as the worker loaded it: the controller only described it (no import).
OUTPUT_BACKEND = "conformance_backend"
#: Why the worker could not load the backend (it then ran nothing).
OUTPUT_LOAD_ERROR = "conformance_load_error"


class BackendLoadFailure:
    """Registered instead of the agent in an xdist worker whose backend failed to load: the
    worker collects nothing (so imports no test module) and hands the error to the
    controller, which reports it once and fails the run."""

    def __init__(self, config: pytest.Config, message: str) -> None:
        self.config = config
        self.message = message

    @pytest.hookimpl(tryfirst=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> pytest.CollectReport:
        # An empty report for the session itself: no file is collected, none imported.
        return pytest.CollectReport(collector.nodeid, "passed", None, [])

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        output = getattr(self.config, "workeroutput", None)
        if output is not None:
            output[OUTPUT_LOAD_ERROR] = self.message


class TestRunAgent:
    """Registered in every process that collects and runs tests during a device run."""

    __test__ = False

    def __init__(
        self,
        config: pytest.Config,
        backend: Backend,
        *,
        run_dir: Path,
        skiplist: Any,
        already_recorded: frozenset[str],
        shard: tuple[int, int] | None,
        shard_durations: Durations | None = None,
        timeout_s: float | None,
        trace_ops: bool,
        recorder: RunRecorder | None = None,
        only_test_ids: frozenset[str] | None = None,
    ) -> None:
        self.config = config
        self.backend = backend
        self.run_dir = run_dir
        self.skiplist = skiplist
        self.already_recorded = already_recorded
        self.shard = shard
        self.shard_durations = shard_durations
        self.trace_ops = trace_ops
        self.recorder = recorder  # set in a serial run, where this process also records
        self.only_test_ids = only_test_ids  # a rerun: only these tests run
        self.collected = 0
        self.deselected: list[dict[str, Any]] = []
        self.identities: dict[str, TestIdentity] = {}
        self.watchdog = Watchdog(timeout_s, self._on_timeout) if timeout_s else None
        self._running: pytest.Item | None = None  # the test the watchdog is timing

    # -- collection ---------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)  # after -k/-m/--deselect: those choose what the user runs
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        from conformance.identity import identity_from_item

        _keep_tracked_inputs()  # the test files are imported by now
        names = self.backend.device_names
        identities = {item.nodeid: identity_from_item(item, names) for item in items}
        self.identities = identities  # for the cause entries, once the tests have run
        removed: list[pytest.Item] = []
        if self.only_test_ids is not None:
            only = self.only_test_ids
            removed = [i for i in items if identities[i.nodeid].test_id not in only]
            items[:] = [i for i in items if identities[i.nodeid].test_id in only]
        if self.shard is not None:
            # By test_id, so that the shard holds the same tests on every device.
            mine = select_shard(
                [identities[i.nodeid] for i in items], self.shard, self.shard_durations
            )
            removed += [i for i in items if identities[i.nodeid].test_id not in mine]
            items[:] = [i for i in items if identities[i.nodeid].test_id in mine]
        self.collected = len(items)

        skiplisted: list[pytest.Item] = []
        if self.skiplist is not None:
            import skiplists

            skiplisted = list(skiplists.apply_to_items(items, self.skiplist, identities))
            for item in skiplisted:
                if identities[item.nodeid].test_id not in self.already_recorded:
                    self.deselected.append(self._deselected_entry(item, identities[item.nodeid]))
        resumed = [i for i in items if identities[i.nodeid].test_id in self.already_recorded]
        dropped = {id(i) for i in (*skiplisted, *resumed)}
        removed += [i for i in items if id(i) in dropped]
        items[:] = [i for i in items if id(i) not in dropped]
        for item in items:
            item.user_properties.append(("test_identity", _fields(identities[item.nodeid])))
        if removed:
            config.hook.pytest_deselected(items=removed)
        if self.recorder is not None:
            self.recorder.add_collection(self.collected, self.deselected)

    def _deselected_entry(self, item: pytest.Item, identity: TestIdentity) -> dict[str, Any]:
        entry = self.skiplist.match(identity)
        return {
            **_fields(identity),
            "outcome": "deselected",
            "category": entry.category if entry else "",
            "detail": entry.detail if entry else "",
            "skip_entry": entry.where if entry else "",
            "message": entry.reason if entry else "",
        }

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        output = getattr(self.config, "workeroutput", None)
        if output is not None:
            output[OUTPUT_COLLECTED] = self.collected
            output[OUTPUT_DESELECTED] = self.deselected
            output[OUTPUT_BACKEND] = {
                "version": str(self.backend.version),
                "git": str(self.backend.git),
            }

    # -- running ------------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        _last_tracked.clear()
        if self.watchdog is None:
            return (yield)
        self._running = item
        self.watchdog.start(item.nodeid)
        try:
            return (yield)
        finally:
            self.watchdog.stop()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        backend = self.backend
        if not self.trace_ops and backend.fallback_counts is None:
            return (yield)
        if backend.reset_fallback_counts is not None:
            backend.reset_fallback_counts()
        tracer = _trace_ops(backend.name) if self.trace_ops else nullcontext()
        trace = None
        try:
            with tracer as trace:
                return (yield)
        finally:
            if self.trace_ops and trace is not None:
                item.user_properties.append(("ops_dispatched", list(trace.ops)))
            fallback = backend.fallback_ops()
            if fallback:
                item.user_properties.append(("ops_fallback", fallback))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        excinfo = call.excinfo
        if excinfo is not None and not excinfo.errisinstance(
            (pytest.skip.Exception, unittest.SkipTest)
        ):
            category, detail = _classify(excinfo.value)
            failure = {"when": call.when, "category": category, "detail": detail}
            sample = _failing_sample(excinfo.value, _last_tracked[0] if _last_tracked else None)
            if sample is not None:
                failure["sample_index"] = sample
            report.user_properties.append(("failure", failure))
            if report.failed and call.when in ("setup", "call"):
                self._expect_by_cause(item, report, category, detail)
        elif call.when == "call" and report.passed:
            self._named_cause_passed(item, report)
        return report

    def _cause_candidate(self, item: pytest.Item) -> TestIdentity | None:
        """The test's identity when cause entries may apply to it: the skiplist has some,
        and no entry selected the test at collection (those take precedence)."""
        if self.skiplist is None or not self.skiplist.causes:
            return None
        if any(name == "skip_entry" for name, _value in item.user_properties):
            return None
        return self.identities.get(item.nodeid)

    def _expect_by_cause(
        self, item: pytest.Item, report: pytest.TestReport, category: str, detail: str
    ) -> None:
        """A failure a cause entry explains becomes an expected failure (xfailed), with
        the entry that applied; any other failure stays a failure."""
        identity = self._cause_candidate(item)
        entry = identity and self.skiplist.match_cause(identity, category, detail)
        if not entry:
            return
        report.outcome = "skipped"
        report.wasxfail = entry.mark_reason()
        _note_entry(item, report, entry)

    def _named_cause_passed(self, item: pytest.Item, report: pytest.TestReport) -> None:
        """A test a cause entry names by test_id passed: the cause is gone, so it is an
        xpass, strict (a failure) unless the entry says ``strict = false``."""
        identity = self._cause_candidate(item)
        entry = identity and self.skiplist.named_cause(identity)
        if not entry:
            return
        if entry.strict:
            report.outcome = "failed"
            report.longrepr = f"[XPASS(strict)] {entry.mark_reason()}"
        else:
            report.wasxfail = entry.mark_reason()
        _note_entry(item, report, entry)

    def _on_timeout(self, nodeid: str, elapsed_s: float) -> None:
        note_timeout(self.run_dir, nodeid, elapsed_s)
        if self.recorder is not None:  # serial run: no controller will outlive this process
            running = self._running
            facts = dict(running.user_properties) if running is not None else {}
            self.recorder.record_timeout(nodeid, facts.get("test_identity"), elapsed_s)


def _note_entry(item: pytest.Item, report: pytest.TestReport, entry: Any) -> None:
    facts = (
        ("skip_entry", entry.where),
        ("skip_category", entry.category),
        ("skip_detail", entry.detail),
    )
    # The report holds a copy of the item's properties; later reports copy them again.
    report.user_properties.extend(facts)
    item.user_properties.extend(facts)


def _classify(exc: BaseException) -> tuple[str, str]:
    from conformance.classify import classify_failure

    # unittest's expectedFailure reaches pytest as an empty xfail(): upstream declared it.
    if isinstance(exc, pytest.xfail.Exception) and not getattr(exc, "msg", ""):
        return "known_bug", "upstream expectedFailure"
    text = f"{type(exc).__name__}: {exc}"
    return classify_failure(exc, text)


def _failing_sample(exc: BaseException, tracked: Any) -> int | None:
    from conformance.classify import failing_sample

    return failing_sample(exc, tracked)


#: The input upstream's OpInfo test wrapper tracked when the running test ended.
_last_tracked: list[Any] = []


def _keep_tracked_inputs() -> None:
    """Keep the input upstream's OpInfo test wrapper tracks as a test draws its samples.

    Upstream names the failing sample in an exception that wraps the test's own, raised
    only when PYTORCH_PRINT_REPRO_ON_FAILURE is on; the plugin turns that off so that tests
    raise their own exceptions, which classify reads. The wrapper still tracks the input
    and clears it when the test ends, through its module's ``clear_tracked_input``: that
    function, replaced here, keeps the input in ``_last_tracked`` first."""
    module = sys.modules.get("torch.testing._internal.common_device_type")
    clear = getattr(module, "clear_tracked_input", None)
    get = getattr(module, "get_tracked_input", None)
    if clear is None or get is None or getattr(clear, "_conformance", False):
        return

    def clear_tracked_input() -> None:
        tracked = get()
        if tracked is not None:
            _last_tracked[:] = [tracked]
        clear()

    clear_tracked_input._conformance = True  # type: ignore[attr-defined]
    module.clear_tracked_input = clear_tracked_input


def _trace_ops(device_type: str) -> Any:
    from op_coverage.tracing import trace_ops

    return trace_ops(device_type)


def _fields(identity: TestIdentity) -> dict[str, str]:
    # Not dataclasses.asdict: its deep copy costs more per test than all the recording.
    return {name: getattr(identity, name) for name in _IDENTITY_FIELDS}


_IDENTITY_FIELDS = tuple(f.name for f in dataclasses.fields(TestIdentity))
