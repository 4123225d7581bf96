"""Folding setup/call/teardown (and crash) reports into one outcome per test, without pytest runs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from conformance.model import TestIdentity
from conformance.outcome import OutcomeMerger, is_unexpected, report_message


def report(
    nodeid="f.py::T::t",
    when="call",
    outcome="passed",
    longrepr=None,
    duration=0.1,
    properties=(),
    **extra,
):
    return SimpleNamespace(
        nodeid=nodeid,
        when=when,
        outcome=outcome,
        passed=outcome == "passed",
        failed=outcome == "failed",
        skipped=outcome == "skipped",
        longrepr=longrepr,
        duration=duration,
        user_properties=list(properties),
        **extra,
    )


def crash_text(text):
    return SimpleNamespace(reprcrash=SimpleNamespace(message=text), __str__=lambda self: text)


def merger(timed_out=(), elapsed=None):
    """``timed_out``: the nodeids the watchdog stopped, or {nodeid: seconds it noted}."""
    noted = timed_out if isinstance(timed_out, dict) else dict.fromkeys(timed_out, 31.5)
    return OutcomeMerger(
        run_id="r1",
        device="emu",
        shard="1/2",
        identity_of=lambda nodeid: TestIdentity(
            nodeid=nodeid, test_id="parsed::" + nodeid, file="f.py"
        ),
        classify_failure=lambda exc, text: ("other", "from-text:" + text[:12]),
        classify_skip=lambda reason: ("upstream_skip", reason),
        timed_out=noted.get,
        elapsed=lambda nodeid: (elapsed or {}).get(nodeid),
        timeout_s=30,
    )


def run(m, *reports):
    records = [r for r in (m.add(rep) for rep in reports) if r is not None]
    assert len(records) == 1, records
    return records[0]


def test_a_passing_test_gives_one_record_with_the_summed_duration_and_shipped_facts():
    ident = {
        "nodeid": "f.py::T::t",
        "test_id": "f.py::T::t",
        "file": "f.py",
        "test_class": "T",
        "template": "t",
        "op": "add",
        "variant": "",
        "dtype": "float32",
        "params": "",
        "device": "emu",
    }
    props = [("test_identity", ident), ("ops_fallback", ["aten::sin.out"])]
    m = merger()
    rec = run(
        m,
        report(when="setup", properties=props),
        report(properties=props),
        report(when="teardown", properties=props),
    )
    assert (rec.outcome, rec.category, rec.op, rec.dtype, rec.device) == (
        "passed",
        "",
        "add",
        "float32",
        "emu",
    )
    assert rec.ops_fallback == ["aten::sin.out"]
    assert rec.duration_s == pytest.approx(0.3)
    assert (rec.run_id, rec.shard) == ("r1", "1/2")
    assert m.pending() == []


def test_setup_error_and_teardown_error_after_a_pass_are_errors():
    m = merger()
    failure = (
        "failure",
        {"when": "setup", "category": "missing_lowering", "detail": "aten::empty.memory_format"},
    )
    rec = run(
        m,
        report(
            when="setup",
            outcome="failed",
            longrepr=crash_text("NotImplementedError: x"),
            properties=[failure],
        ),
        report(when="teardown"),
    )
    assert (rec.outcome, rec.category, rec.detail) == (
        "error",
        "missing_lowering",
        "aten::empty.memory_format",
    )
    assert rec.test_id == "parsed::f.py::T::t"  # no identity shipped: parsed from the nodeid

    rec = run(
        m,
        report(when="setup"),
        report(),
        report(when="teardown", outcome="failed", longrepr=crash_text("RuntimeError: leak")),
    )
    assert (rec.outcome, rec.category, rec.message) == ("error", "other", "RuntimeError: leak")
    assert (
        rec.detail == "from-text:RuntimeError"
    )  # classified from the text: no worker classification

    # after a failure, a failing teardown does not change the outcome
    rec = run(
        m,
        report(when="setup"),
        report(outcome="failed", longrepr=crash_text("AssertionError: a")),
        report(when="teardown", outcome="failed", longrepr=crash_text("RuntimeError: b")),
    )
    assert (rec.outcome, rec.message) == ("failed", "AssertionError: a")


def test_skips_take_the_skiplist_category_else_the_skip_reason():
    m = merger()
    entry = [
        ("skip_entry", "emu.toml:4"),
        ("skip_category", "unsupported_feature"),
        ("skip_detail", "sparse"),
    ]
    rec = run(
        m,
        report(
            when="setup",
            outcome="skipped",
            longrepr=("f.py", 1, "Skipped: sparse"),
            properties=entry,
        ),
        report(when="teardown", properties=entry),
    )
    assert (rec.outcome, rec.category, rec.detail, rec.skip_entry) == (
        "skipped",
        "unsupported_feature",
        "sparse",
        "emu.toml:4",
    )
    assert rec.message == "sparse"
    rec = run(
        m,
        report(outcome="skipped", longrepr=("f.py", 1, "Skipped: Only runs on cuda")),
        report(when="teardown"),
    )
    assert (rec.outcome, rec.category, rec.detail) == (
        "skipped",
        "upstream_skip",
        "Only runs on cuda",
    )


def test_xfail_xpass_and_strict_xpass():
    m = merger()
    failure = (
        "failure",
        {"when": "call", "category": "missing_lowering", "detail": "aten::cumsum.out"},
    )
    rec = run(
        m,
        report(
            outcome="skipped",
            wasxfail="known",
            properties=[failure],
            longrepr=crash_text("NotImplementedError: Could not run"),
        ),
        report(when="teardown"),
    )
    assert (rec.outcome, rec.category, rec.detail) == (
        "xfailed",
        "missing_lowering",
        "aten::cumsum.out",
    )
    assert not is_unexpected(rec.outcome, rec.message)

    rec = run(m, report(wasxfail="flaky"), report(when="teardown"))
    assert (rec.outcome, rec.message) == ("xpassed", "flaky")
    assert not is_unexpected(rec.outcome, rec.message)

    rec = run(
        m,
        report(outcome="failed", longrepr="[XPASS(strict)] known_bug: fixed?"),
        report(when="teardown"),
    )
    assert (rec.outcome, rec.category) == ("xpassed", "")
    assert is_unexpected(rec.outcome, rec.message)

    # a strict xpass of a skiplist entry keeps the entry's category: the stale entry shows
    entry = [("skip_category", "missing_lowering"), ("skip_detail", "aten::cumsum.out")]
    rec = run(
        m,
        report(outcome="failed", longrepr="[XPASS(strict)] lowered", properties=entry),
        report(when="teardown"),
    )
    assert (rec.outcome, rec.category, rec.detail) == (
        "xpassed",
        "missing_lowering",
        "aten::cumsum.out",
    )

    # unittest's expectedFailure passing: an xpass, not strict without a strict entry
    rec = run(
        m,
        report(outcome="failed", longrepr=crash_text("Unexpected success")),
        report(when="teardown"),
    )
    assert rec.outcome == "xpassed" and not is_unexpected(rec.outcome, rec.message)


def test_a_dead_worker_is_a_crash_unless_the_watchdog_noted_a_timeout():
    m = merger(timed_out={"f.py::T::hang"})
    crashed = report(
        when="???",
        outcome="failed",
        longrepr="worker 'gw0' crashed while running 'f.py::T::t'",
        duration=0,
        node=SimpleNamespace(gateway=SimpleNamespace(id="gw0")),
    )
    rec = run(m, report(when="setup"), crashed)  # died during the call: the setup report came first
    assert (rec.outcome, rec.category, rec.worker) == ("crashed", "crash", "gw0")
    assert "crashed while running" in rec.message
    assert m.pending() == []
    rec = run(
        m, report(nodeid="f.py::T::hang", when="???", outcome="failed", longrepr="worker crashed")
    )
    assert (rec.outcome, rec.category, rec.message) == (
        "timeout",
        "timeout",
        "timed out after 30 s",
    )
    assert rec.duration_s == 31.5  # the time it ran, as the watchdog noted it
    assert all(is_unexpected(o, "") for o in ("failed", "error", "crashed", "timeout"))


def test_crashed_and_timed_out_tests_record_the_time_they_ran():
    m = merger(timed_out={"f.py::T::hang"}, elapsed={"f.py::T::t": 7.25, "f.py::T::hang": 2.0})
    crashed = report(when="???", outcome="failed", longrepr="worker crashed", duration=0)
    rec = run(m, report(when="setup", duration=0.5), crashed)
    assert (rec.outcome, rec.duration_s) == ("crashed", 7.25)  # from its start to the crash
    rec = run(m, report(nodeid="f.py::T::hang", when="???", outcome="failed", longrepr="x"))
    assert (rec.outcome, rec.duration_s) == ("timeout", 31.5)  # never less than the limit
    m = merger(timed_out={"f.py::T::hang": 0.0})  # a note without a time (an older run)
    rec = run(m, report(nodeid="f.py::T::hang", when="???", outcome="failed", longrepr="x"))
    assert rec.duration_s == 30


def test_long_messages_are_truncated():
    text = "E" * 5000
    msg = report_message(report(outcome="failed", longrepr=crash_text(text)))
    assert len(msg) == 2000 and msg.endswith("[truncated]")


def test_the_dispatcher_table_is_left_out_of_missing_kernel_messages():
    text = (
        "NotImplementedError: Could not run 'aten::cumsum.out' with arguments from the 'emu' "
        "backend. ... available for these backends: [CPU, Meta].\n\nCPU: registered at x.cpp:1\n"
    )
    msg = report_message(report(outcome="failed", longrepr=crash_text(text)))
    # which backends have kernels depends on what else the process imported: left out too
    assert msg == (
        "NotImplementedError: Could not run 'aten::cumsum.out' with arguments from the 'emu' "
        "backend."
    )


def test_the_repro_hint_is_left_out_of_messages():
    # present or not depending on when PYTORCH_PRINT_REPRO_ON_FAILURE was set: never kept
    text = (
        "AssertionError: Tensor-likes are not close!\n\nMismatched elements: 2 / 2\n\n"
        "To execute this test, run the following from the base repo dir:\n"
        "    python test_x.py TestXCPU.test_y_cpu\n\n"
        "This message can be suppressed by setting PYTORCH_PRINT_REPRO_ON_FAILURE=0"
    )
    msg = report_message(report(outcome="failed", longrepr=crash_text(text)))
    assert msg == "AssertionError: Tensor-likes are not close!\n\nMismatched elements: 2 / 2"
