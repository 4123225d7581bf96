"""Joining a device run with its CPU baseline."""

from __future__ import annotations

import json

import pandas

from conformance.baseline import (
    BASELINE_JSON,
    JoinCoverage,
    compare,
    join_coverage,
    read_baseline,
    write_baseline,
)
from conformance.model import RECORD_COLUMNS, ResultRecord, RunMeta
from conformance.run_cli import join_baseline
from conformance.store import RunWriter


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

    coverage = join_coverage(device["test_id"], cpu["test_id"])
    write_baseline(
        tmp_path,
        joined.reset_index(),
        baseline_run="cpu-run",
        baseline_device="cpu",
        coverage=coverage,
    )
    summary, back = read_baseline(tmp_path)
    assert summary == {
        "baseline_run_id": "cpu-run",
        "baseline_device": "cpu",
        "backend_only": 1,
        "both": 1,
        "in_both": 3,
        "only_here": 1,
        "only_baseline": 0,
        "on_demand": False,
        "needed": 0,
        "not_rerun": 0,
    }
    assert len(back) == 4


def partly_overlapping():
    """A device run and a baseline that share two tests; each has tests the other lacks."""
    device = frame(
        [
            {"test_id": "t::A::both_fail", "outcome": "failed", "category": "other"},
            {"test_id": "t::A::both_pass", "outcome": "passed"},
            {"test_id": "t::A::here_fail", "outcome": "failed", "category": "other"},
            {"test_id": "t::A::here_pass", "outcome": "passed"},
            {"test_id": "t::A::here_skip", "outcome": "skipped", "category": "upstream_skip"},
        ]
    )
    cpu = frame(
        [
            {"test_id": "t::A::both_fail", "outcome": "passed"},
            {"test_id": "t::A::both_pass", "outcome": "passed"},
            {"test_id": "t::A::there_1", "outcome": "passed"},
            {"test_id": "t::A::there_2", "outcome": "failed", "category": "other"},
            {"test_id": "t::A::there_2", "outcome": "failed", "category": "other"},  # rerun
        ]
    )
    return device, cpu


def test_coverage_counts_the_tests_in_both_runs_and_in_one_only():
    device, cpu = partly_overlapping()
    coverage = join_coverage(device["test_id"], cpu["test_id"])
    assert coverage == JoinCoverage(in_both=2, only_here=3, only_baseline=2)
    assert coverage.here == 5
    assert coverage.describe("emu", "cpu") == ("2 tests in both runs, 3 only on emu, 2 only on cpu")
    assert coverage.describe() == (
        "2 tests in both runs, 3 only in this run, 2 only in the baseline"
    )
    # The join keeps the device run's tests: those the baseline lacks are "unknown".
    joined = compare(device, cpu).set_index("test_id")
    assert joined.loc["t::A::here_fail", "failure_scope"] == "unknown"
    assert int(joined["backend_only"].sum()) == 1


def test_low_coverage_warns_that_backend_only_counts_cover_part_of_the_run():
    assert JoinCoverage(in_both=9, only_here=1, only_baseline=50).warning("cpu") is None
    assert JoinCoverage(in_both=0, only_here=0, only_baseline=3).warning("cpu") is None
    low = JoinCoverage(in_both=223, only_here=4049, only_baseline=0)
    assert low.low
    assert low.warning("cpu") == (
        "warning: only 223 of the 4,272 tests of this run (5.2%) are in the cpu baseline; "
        "the backend-only count covers only those 223 tests"
    )
    assert JoinCoverage(in_both=89, only_here=11, only_baseline=0).warning() == (
        "warning: only 89 of the 100 tests of this run (89.0%) are in the baseline; "
        "the backend-only count covers only those 89 tests"
    )
    assert "(<0.1%)" in JoinCoverage(in_both=1, only_here=9999, only_baseline=0).warning()


def test_a_baseline_json_without_coverage_still_reads(tmp_path):
    device, cpu = partly_overlapping()
    write_baseline(
        tmp_path,
        compare(device, cpu),
        baseline_run="cpu-run",
        baseline_device="cpu",
        coverage=join_coverage(device["test_id"], cpu["test_id"]),
    )
    old = {"baseline_run_id": "cpu-run", "baseline_device": "cpu", "backend_only": 1, "both": 0}
    (tmp_path / BASELINE_JSON).write_text(json.dumps(old), encoding="utf-8")
    summary, joined = read_baseline(tmp_path)
    # What the join itself shows; the tests only the baseline had are not in it.
    assert summary == {
        **old,
        "in_both": 2,
        "only_here": 3,
        "only_baseline": None,
        "on_demand": False,  # written before baselines ran on demand: a full baseline
        "needed": 0,
        "not_rerun": 0,
    }
    assert len(joined) == 5


def write_store_run(path, backend, rows):
    writer = RunWriter(path, RunMeta(run_id=path.name, backend=backend))
    for test_id, outcome in rows:
        writer.write(
            ResultRecord(
                run_id=path.name,
                nodeid=f"{test_id}_{backend}",
                test_id=test_id,
                file="t.py",
                outcome=outcome,
                device=backend,
            )
        )
    writer.close(collected=len(rows))
    return path


def test_the_terminal_states_the_coverage_and_warns_when_it_is_low(tmp_path, capsys):
    here = [(f"t::A::x{i}", "failed" if i < 3 else "passed") for i in range(10)]
    run = write_store_run(tmp_path / "emu-run", "emu", here)
    there = [(test_id, "failed" if test_id == "t::A::x2" else "passed") for test_id, _ in here]
    cpu = write_store_run(tmp_path / "cpu-run", "cpu", [*there[1:], ("t::A::cpu_only", "passed")])
    join_baseline(run, cpu, "cpu")
    out, err = capsys.readouterr()
    # x0 fails on emu and is not in the baseline; x1 passes on cpu, x2 fails there too.
    assert out == (
        f"baseline cpu ({cpu}): 9 tests in both runs, 1 only on emu, 1 only on cpu; "
        "1 failures are backend-only, 1 fail on cpu too\n"
    )
    assert err == ""
    summary, _ = read_baseline(run)
    assert (summary["in_both"], summary["only_here"], summary["only_baseline"]) == (9, 1, 1)

    cpu = write_store_run(tmp_path / "cpu-part", "cpu", [(t, "passed") for t, _ in here[:4]])
    join_baseline(run, cpu, "cpu")
    out, err = capsys.readouterr()
    assert out == (
        f"baseline cpu ({cpu}): 4 tests in both runs, 6 only on emu, 0 only on cpu; "
        "3 failures are backend-only, 0 fail on cpu too\n"
    )
    assert err == (
        "warning: only 4 of the 10 tests of this run (40.0%) are in the cpu baseline; "
        "the backend-only count covers only those 4 tests\n"
    )
    summary, _ = read_baseline(run)
    assert (summary["in_both"], summary["only_here"], summary["only_baseline"]) == (4, 6, 0)
