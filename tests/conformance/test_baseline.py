"""Joining a device run with its CPU baseline."""

from __future__ import annotations

import pandas

from conformance.baseline import compare, read_baseline, write_baseline
from conformance.model import RECORD_COLUMNS


def frame(rows):
    defaults = dict.fromkeys(RECORD_COLUMNS, "")
    return pandas.DataFrame([{**defaults, **row} for row in rows], columns=list(RECORD_COLUMNS))


def test_backend_only_failures_are_told_apart_from_shared_ones(tmp_path):
    device = frame(
        [
            {
                "test_id": "t::A::x",
                "nodeid": "t::APRIVATEUSE1::x_emu",
                "outcome": "failed",
                "category": "missing_lowering",
                "detail": "aten::add.out",
            },
            {"test_id": "t::A::y", "outcome": "failed", "category": "numerical_mismatch"},
            {"test_id": "t::A::z", "outcome": "passed"},
            {"test_id": "t::A::w", "outcome": "crashed", "category": "crash"},
        ]
    )
    cpu = frame(
        [
            {"test_id": "t::A::x", "outcome": "passed"},
            {"test_id": "t::A::y", "outcome": "failed", "category": "numerical_mismatch"},
            {"test_id": "t::A::z", "outcome": "passed"},
        ]
    )
    joined = compare(device, cpu).set_index("test_id")
    assert joined.loc["t::A::x", "backend_only"]
    assert joined.loc["t::A::x", "failure_scope"] == "backend"
    assert joined.loc["t::A::x", "detail"] == "aten::add.out"
    assert not joined.loc["t::A::y", "backend_only"]
    assert joined.loc["t::A::y", "failure_scope"] == "both"
    assert joined.loc["t::A::z", "failure_scope"] == ""
    assert joined.loc["t::A::w", "failure_scope"] == "unknown"
    assert joined.loc["t::A::w", "baseline_outcome"] == ""

    write_baseline(tmp_path, joined.reset_index(), baseline_run="cpu-run", baseline_device="cpu")
    summary, back = read_baseline(tmp_path)
    assert summary == {
        "baseline_run_id": "cpu-run",
        "baseline_device": "cpu",
        "backend_only": 1,
        "both": 1,
    }
    assert len(back) == 4
