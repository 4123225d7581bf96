"""Turning pytest's per-phase reports into one outcome per test.

pytest reports each test up to three times (setup, call, teardown), and xdist adds a
synthetic report (phase ``???``) for a test that killed its worker, which carries no
duration: a crashed test is recorded with the time from its start to the crash, a timed-out
one with the time it ran (at least the limit). :class:`OutcomeMerger`
folds them into one :class:`~conformance.model.ResultRecord` when the last report of a test
arrives. Reports from different tests may interleave (xdist), so state is kept per nodeid.

The rules, in order:

- a crash report ends the test: ``crashed``, or ``timeout`` when the watchdog noted that
  the test ran out of time;
- a failing setup is ``error``; a skipped setup is ``skipped`` (or ``xfailed``);
- the call decides otherwise: passed, failed, skipped, xfailed, xpassed (pytest's
  ``[XPASS(strict)]`` failure is a strict xpass; unittest's "Unexpected success" of an
  upstream ``@expectedFailure`` is an xpass, strict only through a strict skiplist entry);
- a failing teardown turns a pass into ``error`` and is ignored after a failure.

Per-test facts computed where the test ran travel in ``report.user_properties``
(see :mod:`conformance.worker` for the keys).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.model import ResultRecord, TestIdentity

__all__ = [
    "MESSAGE_LIMIT",
    "STRICT_XPASS_PREFIX",
    "OutcomeMerger",
    "collection_message",
    "is_unexpected",
    "report_message",
]

#: Messages are cut to this many characters; the full text stays in pytest's own output.
MESSAGE_LIMIT = 2000
STRICT_XPASS_PREFIX = "[XPASS(strict)]"
_UNEXPECTED_SUCCESS = "Unexpected success"
_BARE_XFAIL = "_pytest.outcomes.XFailed"
_FAILING_OUTCOMES = frozenset({"failed", "error", "crashed", "timeout"})

ClassifyFailure = Callable[[BaseException | None, str], tuple[str, str]]
ClassifySkip = Callable[[str], tuple[str, str]]
IdentityOf = Callable[[str], TestIdentity]


def is_unexpected(outcome: str, message: str) -> bool:
    """Whether an outcome fails a run: a failure, error, crash or timeout, or a strict xpass."""
    return outcome in _FAILING_OUTCOMES or (
        outcome == "xpassed" and message.startswith(STRICT_XPASS_PREFIX)
    )


def report_message(report: Any) -> str:
    """The short raw text of a report: the exception line(s) or the skip reason, truncated."""
    longrepr = report.longrepr
    if longrepr is None:
        text = ""
    elif isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, reason)
        text = str(longrepr[2]).removeprefix("Skipped: ")
    elif getattr(longrepr, "reprcrash", None) is not None:
        text = longrepr.reprcrash.message
    else:
        text = str(longrepr)
    return truncate(_without_repro_hint(_without_dispatch_table(text)))


#: pytest's marker of the exception's lines in a traceback ("E   SyntaxError: ...").
_FAIL_MARKER = "E   "
#: The line that names the exception: its type (dotted), then ": message" or nothing.
_EXCEPTION_LINE = re.compile(r"(?P<type>[A-Za-z_][\w.]*)(?::\s|:?$)")


def collection_message(report: Any) -> tuple[str, str]:
    """The exception of a failed collection report and its type:
    ``("SyntaxError: invalid syntax\n  File ..., line 3 ...", "SyntaxError")``.

    pytest words an import's failure as text (``ImportError while importing test module
    ...``, a SyntaxError's short traceback) whose ``E`` lines hold the exception: the
    message starts with its line, then any lines of its own, then the lines before it (a
    SyntaxError's file, line and caret). Any other exception comes with its crash line.
    Text without an ``E`` block is kept from its start; the type is then "". Truncated.
    """
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    text = str(crash.message) if crash is not None else _exception_of(str(longrepr or ""))
    found = _EXCEPTION_LINE.match(text)
    return truncate(text), found["type"] if found else ""


def _exception_of(text: str) -> str:
    """The exception in pytest's text of a failed import: the last block of ``E`` lines,
    from the exception's line on, then the lines before it; ``text`` when it has none."""
    blocks: list[list[str]] = []
    in_block = False
    for line in text.splitlines():
        marked = line.startswith(_FAIL_MARKER) or line == _FAIL_MARKER.rstrip()
        if marked and not in_block:
            blocks.append([])
        if marked:
            blocks[-1].append(line[len(_FAIL_MARKER) :])
        in_block = marked
    if not blocks:
        return text.strip()
    lines = blocks[-1]
    start = next((i for i, line in enumerate(lines) if _EXCEPTION_LINE.match(line)), 0)
    return "\n".join([*lines[start:], *lines[:start]]).strip()


_COULD_NOT_RUN = re.compile(r"Could not run '[^']+' with arguments from the '[^']+' backend\.")


def _without_dispatch_table(text: str) -> str:
    # The dispatcher's "Could not run" error goes on with the backends the op has kernels
    # for and a table of every registration, which differ between processes (whatever
    # else they imported) and run to kilobytes: its first sentence says what is missing.
    found = _COULD_NOT_RUN.search(text)
    return text[: found.end()] if found else text


_REPRO_HINT = re.compile(
    r"\s*To execute this test, run the following from the base repo dir:\n(?:[ \t]+\S.*(?:\n|$))*"
    r"(?:\s*This message can be suppressed by setting PYTORCH_PRINT_REPRO_ON_FAILURE=0\.?)?"
)


def _without_repro_hint(text: str) -> str:
    # torch appends a command to re-run the test unless PYTORCH_PRINT_REPRO_ON_FAILURE=0,
    # which only takes effect if set before torch's test utilities are imported: drop it,
    # so the message is the same however the process was started.
    return _REPRO_HINT.sub(lambda hint: "" if hint.end() == len(text) else "\n", text)


def truncate(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` cut to at most ``limit`` characters, the cut marked."""
    marker = " ... [truncated]"
    return text if len(text) <= limit else text[: limit - len(marker)] + marker


@dataclass
class _Partial:
    outcome: str = ""
    message: str = ""
    when: str = ""  # the phase that decided the outcome
    duration_s: float = 0.0
    properties: dict[str, Any] = field(default_factory=dict)


class OutcomeMerger:
    """Folds the reports of each test into one record.

    ``identity_of(nodeid)`` gives the identity of a test no report carried one for (a
    crash); ``timed_out(nodeid)`` says whether a crashed test was stopped by the watchdog.
    """

    def __init__(
        self,
        *,
        run_id: str,
        device: str,
        shard: str,
        identity_of: IdentityOf,
        mode: str = "eager",
        classify_failure: ClassifyFailure,
        classify_skip: ClassifySkip,
        timed_out: Callable[[str], float | None] = lambda nodeid: None,
        elapsed: Callable[[str], float | None] = lambda nodeid: None,
        timeout_s: float | None = None,
    ) -> None:
        self.run_id = run_id
        self.device = device
        self.shard = shard
        self.mode = mode
        self._identity_of = identity_of
        self._classify_failure = classify_failure
        self._classify_skip = classify_skip
        self._timed_out = timed_out
        self._elapsed = elapsed
        self._timeout_s = timeout_s
        self._pending: dict[str, _Partial] = {}

    def add(self, report: Any) -> ResultRecord | None:
        """Take one report; return the test's record once its last report has arrived."""
        nodeid = report.nodeid
        when = report.when
        if when == "???":  # xdist: the worker died while running this test
            partial = self._pending.pop(nodeid, None) or _Partial()
            partial.properties.update(_properties(report))
            ran_s = self._timed_out(nodeid)
            if ran_s is not None:
                limit = f" after {self._timeout_s:g} s" if self._timeout_s else ""
                partial.outcome, partial.message = "timeout", f"timed out{limit}"
                # Stopped at the limit: it ran at least that long, whatever the clock said.
                ran_s = max(ran_s, self._timeout_s or 0.0)
            else:
                partial.outcome, partial.message = "crashed", report_message(report)
            # The reports of a dead worker carry no time: the test ran until it stopped.
            partial.duration_s = max(partial.duration_s, ran_s or 0.0, self._elapsed(nodeid) or 0.0)
            partial.when = when
            return self._record(nodeid, partial, worker=_worker_of(report))

        partial = self._pending.setdefault(nodeid, _Partial())
        partial.duration_s += float(getattr(report, "duration", 0.0) or 0.0)
        partial.properties.update(_properties(report))
        if when == "setup":
            if report.failed:
                self._decide(partial, "error", report, when)
            elif report.skipped:
                self._decide(partial, _skip_outcome(report), report, when)
        elif when == "call":
            self._decide(partial, _call_outcome(report), report, when)
        elif when == "teardown":
            if report.failed and partial.outcome in ("", "passed", "xpassed"):
                self._decide(partial, "error", report, when)
            del self._pending[nodeid]
            if not partial.outcome:  # no call report: a plugin skipped the call phase
                partial.outcome = "passed"
            return self._record(nodeid, partial, worker=_worker_of(report))
        return None

    def pending(self) -> list[str]:
        """Nodeids that started but have not finished (seen only when a run is cut off)."""
        return list(self._pending)

    def _decide(self, partial: _Partial, outcome: str, report: Any, when: str) -> None:
        partial.outcome = outcome
        partial.when = when
        message = report_message(report)
        if outcome == "xpassed" and report.failed:
            # pytest's strict xpass keeps its "[XPASS(strict)]" prefix; unittest's
            # "Unexpected success" stays as it is: not strict (the skiplists' convention).
            message = message.removeprefix("Failed: ")
        elif outcome == "xpassed":
            message = str(getattr(report, "wasxfail", "") or "")
        elif outcome == "xfailed" and message in ("", _BARE_XFAIL):
            # unittest's expectedFailure reaches pytest as an xfail() without a message.
            message = str(getattr(report, "wasxfail", "") or "") or "expected failure"
        partial.message = truncate(message)

    def _record(self, nodeid: str, partial: _Partial, *, worker: str) -> ResultRecord:
        properties = partial.properties
        identity_fields = properties.get("test_identity")
        if isinstance(identity_fields, dict):
            identity = TestIdentity(**identity_fields)
        else:
            identity = self._identity_of(nodeid)
        category, detail = self._categorize(partial)
        return ResultRecord.of_test(
            self.run_id,
            identity,
            nodeid=nodeid,
            device=self.device,
            outcome=partial.outcome,
            category=category,
            detail=detail,
            message=partial.message,
            duration_s=round(partial.duration_s, 6),
            skip_entry=str(properties.get("skip_entry", "") or ""),
            ops_dispatched=list(properties.get("ops_dispatched", ()) or ()),
            ops_fallback=list(properties.get("ops_fallback", ()) or ()),
            worker=worker,
            shard=self.shard,
            sample_index=_sample_index(partial),
            mode=self.mode,
        )

    def _categorize(self, partial: _Partial) -> tuple[str, str]:
        outcome = partial.outcome
        properties = partial.properties
        if outcome == "passed":
            return "", ""
        if outcome == "xpassed":
            # Keep what the skiplist entry said the test suffered from: the entry that a
            # fix made stale is then visible by category (known_bug, missing_lowering...).
            return (
                str(properties.get("skip_category", "") or ""),
                str(properties.get("skip_detail", "") or ""),
            )
        if outcome == "crashed":
            return "crash", ""
        if outcome == "timeout":
            return "timeout", ""
        if outcome in ("skipped", "xfailed") and properties.get("skip_category"):
            return str(properties["skip_category"]), str(properties.get("skip_detail", "") or "")
        if outcome == "skipped":
            return self._classify_skip(partial.message)
        failure = properties.get("failure")
        if isinstance(failure, dict) and failure.get("when") == partial.when:
            return str(failure.get("category", "other")), str(failure.get("detail", ""))
        return self._classify_failure(None, partial.message)


def _sample_index(partial: _Partial) -> int:
    """The failing sample's index, from the failure of the phase that decided the outcome."""
    failure = partial.properties.get("failure")
    if partial.outcome == "passed" or not isinstance(failure, dict):
        return -1
    if failure.get("when") != partial.when:
        return -1
    return int(failure.get("sample_index", -1))


def _properties(report: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    properties: Sequence[Any] = getattr(report, "user_properties", None) or ()
    for entry in properties:
        if isinstance(entry, (tuple, list)) and len(entry) == 2:
            found[str(entry[0])] = entry[1]
    return found


def _skip_outcome(report: Any) -> str:
    return "xfailed" if getattr(report, "wasxfail", None) is not None else "skipped"


def _call_outcome(report: Any) -> str:
    if report.passed:
        return "xpassed" if getattr(report, "wasxfail", None) is not None else "passed"
    if report.skipped:
        return _skip_outcome(report)
    message = report_message(report).removeprefix("Failed: ")
    if message.startswith((STRICT_XPASS_PREFIX, _UNEXPECTED_SUCCESS)):
        return "xpassed"
    return "failed"


def _worker_of(report: Any) -> str:
    worker = getattr(report, "worker_id", None)
    if worker:
        return str(worker)
    node = getattr(report, "node", None)
    gateway = getattr(node, "gateway", None)
    return str(getattr(gateway, "id", "") or "")
