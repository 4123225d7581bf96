"""The baseline on demand: the device runs first, then the baseline device runs only the
tests that did not pass on it, and every statement of the join's coverage says so."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas
import pytest

from conformance import run_cli
from conformance.baseline import JoinCoverage, join_coverage, read_baseline
from conformance.store import read_run

BASELINE_FILE = """
import pathlib

import pytest

MARK = pathlib.Path(__file__).with_name("seen.mark")


def test_pass():
    pass


def test_fail():
    raise AssertionError("fails everywhere")


def test_device_only_failure():  # the device runs it first: it fails there alone
    if not MARK.exists():
        MARK.write_text("seen")
        raise AssertionError("fails the first time it runs")


@pytest.mark.skip(reason="not here")
def test_skip():
    pass


@pytest.mark.xfail(reason="known", strict=True)
def test_xfail():
    raise AssertionError("known")
"""
TESTS = "test_base.py::"


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    run_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["run", *argv])
    return args.handler(args)


def cpu_run(tmp_path: Path, run_id: str, *extra: str) -> int:
    """A run of BASELINE_FILE (a fresh copy) on cpu, no retries (a failure stays one)."""
    tests = tmp_path / f"tests-{run_id}"
    tests.mkdir()
    (tests / "test_base.py").write_text(BASELINE_FILE)
    return run(
        "--device", "cpu", "--tests", str(tests / "test_base.py"), "-n", "1", "--no-skiplist",
        "--runs-root", str(tmp_path / "runs"), "--run-id", run_id, "--retry-failures", "0",
        *extra,
    )  # fmt: skip


@pytest.mark.slow
def test_the_baseline_runs_after_the_device_and_only_what_did_not_pass(tmp_path, capsys):
    assert cpu_run(tmp_path, "device", "--baseline", "cpu") == 1
    out, err = capsys.readouterr()
    assert (
        "baseline cpu on demand: 4 of 5 tests did not pass on cpu; 1 passing tests not re-run"
        in out
    )
    summary, joined = read_baseline(tmp_path / "runs" / "device")
    base_dir = tmp_path / "runs" / summary["baseline_run_id"]
    base_meta, base = read_run(base_dir)
    meta, _ = read_run(tmp_path / "runs" / "device")
    assert base_meta.baseline_for == "device" and base_meta.start_time >= meta.start_time
    assert (tmp_path / "runs" / "latest").resolve().name == "device"  # not its baseline
    # Every outcome but a pass: the join classifies failures, expected failures and skips.
    assert set(base["test_id"]) == {
        TESTS + name
        for name in ("test_fail", "test_device_only_failure", "test_skip", "test_xfail")
    }
    assert (summary["on_demand"], summary["needed"], summary["not_rerun"]) == (True, 4, 1)
    assert (summary["in_both"], summary["only_here"], summary["only_baseline"]) == (4, 0, 0)
    rows = joined.set_index("test_id")
    assert rows.loc[TESTS + "test_device_only_failure", "failure_scope"] == "backend"
    assert rows.loc[TESTS + "test_fail", "failure_scope"] == "both"
    assert rows.loc[TESTS + "test_pass", "baseline_outcome"] == ""  # not re-run, by design
    assert summary["backend_only"] == 1
    assert (
        "baseline on demand: 4 of the 4 tests that did not pass in this run joined (every one), "
        "1 passing tests not re-run in the baseline, 0 only in the baseline" in out
    )
    assert "warning" not in err  # a passing test not re-run is no gap in the join

    # The report states the same coverage, and warns of nothing.
    from reports.build import build_model
    from reports.machine import json_summary, markdown_summary

    model = build_model(tmp_path / "runs" / "device", baseline_dir=base_dir)
    b = model.baseline
    assert (b.coverage.on_demand, b.coverage.needed, b.coverage.not_rerun, b.warning) == (
        True,
        4,
        1,
        "",
    )
    assert len(b.backend_only) == 1
    data = json_summary(model)["baseline"]
    assert (data["on_demand"], data["needed"], data["not_rerun"], data["warning"]) == (
        True,
        4,
        1,
        None,
    )
    assert "Coverage: baseline on demand: 4 of the 4 tests that did not pass" in markdown_summary(
        model
    )


@pytest.mark.slow
def test_a_full_baseline_runs_the_whole_selection_first(tmp_path, capsys):
    assert cpu_run(tmp_path, "device", "--baseline", "cpu", "--baseline-full") == 1
    capsys.readouterr()
    summary, joined = read_baseline(tmp_path / "runs" / "device")
    base_meta, base = read_run(tmp_path / "runs" / summary["baseline_run_id"])
    meta, _ = read_run(tmp_path / "runs" / "device")
    assert base_meta.baseline_for == "" and base_meta.start_time <= meta.start_time
    assert len(base) == 5 and (summary["on_demand"], summary["in_both"]) == (False, 5)
    # The baseline ran first: the test that fails the first time fails there, not here.
    rows = joined.set_index("test_id")
    assert rows.loc[TESTS + "test_device_only_failure", "outcome"] == "passed"
    assert rows.loc[TESTS + "test_device_only_failure", "baseline_outcome"] == "failed"


@pytest.mark.slow
def test_an_on_demand_baseline_of_runs_made_elsewhere_keeps_their_shard(tmp_path, capsys):
    """A CI machine's shard on the device, then its baseline as a step of its own."""
    shard = "1/2" if _shard_of_fail() == 1 else "2/2"
    assert cpu_run(tmp_path, "device", "--shard", shard) == 1
    _, device = read_run(tmp_path / "runs" / "device")
    tests = tmp_path / "tests-device" / "test_base.py"
    code = run(
        "--device", "cpu", "--tests", str(tests), "-n", "1", "--no-skiplist",
        "--runs-root", str(tmp_path / "runs"), "--run-id", "base",
        "--baseline-for", "device", "--retry-failures", "0",
    )  # fmt: skip
    assert code == 1  # test_fail fails on the baseline too
    meta, base = read_run(tmp_path / "runs" / "base")
    assert (meta.shard, meta.baseline_for, meta.complete) == (shard, "device", True)
    wanted = set(device.loc[device["outcome"] != "passed", "test_id"])
    assert TESTS + "test_fail" in wanted and set(base["test_id"]) == wanted
    capsys.readouterr()


@pytest.mark.slow
def test_a_run_that_passed_everything_gets_an_empty_baseline_and_a_whole_join(tmp_path, capsys):
    assert cpu_run(tmp_path, "device", "--baseline", "cpu", "--", "-k", "test_pass") == 0
    out, err = capsys.readouterr()
    summary, _ = read_baseline(tmp_path / "runs" / "device")
    base_meta, base = read_run(tmp_path / "runs" / summary["baseline_run_id"])
    assert base.empty and base_meta.complete and base_meta.backend == "cpu"
    assert (summary["needed"], summary["not_rerun"], summary["in_both"]) == (0, 1, 0)
    assert "0 of the 0 tests that did not pass in this run joined (every one)" in out
    assert "warning" not in err


def _shard_of_fail() -> int:
    from conformance.sharding import in_shard

    return 1 if in_shard(TESTS + "test_fail", (1, 2)) else 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--baseline-full"], "--baseline-full: needs --baseline DEVICE"),
        (["--baseline-for", "x", "--shard", "1/2"], "not with --shard"),
        (["--baseline-for", "x", "--baseline", "cpu"], "not with --baseline"),
    ],
)
def test_bad_baseline_options_are_named(tmp_path, capsys, argv, message):
    from conformance.cli import main

    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    assert main(["run", "--device", "cpu", "--tests", str(tmp_path / "test_x.py"), *argv]) == 2
    err = capsys.readouterr().err
    assert "conformance run: error: " in err and message in err
    assert not (tmp_path / "runs").exists()


def test_on_demand_coverage_is_judged_on_the_tests_that_did_not_pass():
    here = ["a", "b", "c", "d", "e"]
    passed = ["a", "b", "c"]
    full = join_coverage(here, ["d", "e"])
    assert full == JoinCoverage(in_both=2, only_here=3, only_baseline=0)
    assert full.warning("cpu") is not None  # a full baseline missing 3 of 5 tests is low

    coverage = join_coverage(here, ["d", "e"], passed)
    assert coverage == JoinCoverage(
        in_both=2, only_here=0, only_baseline=0, not_rerun=3, needed=2, on_demand=True
    )
    assert coverage.here == 5 and not coverage.low and coverage.warning("cpu") is None
    assert coverage.describe("emu", "cpu") == (
        "baseline on demand: 2 of the 2 tests that did not pass on emu joined (every one), "
        "3 passing tests not re-run on cpu, 0 only on cpu"
    )
    # A test that did not pass and is missing from the baseline is a gap, and said.
    gap = join_coverage(here, ["e", "z"], passed)
    assert (gap.in_both, gap.only_here, gap.only_baseline, gap.needed) == (1, 1, 1, 2)
    assert gap.describe("emu", "cpu").startswith(
        "baseline on demand: 1 of the 2 tests that did not pass on emu joined, "
    )
    assert gap.warning("cpu") == (
        "warning: only 1 of the 2 tests of this run that did not pass (50.0%) are in the cpu "
        "baseline; the backend-only count covers only those 1 tests"
    )
    # A passing test the baseline ran anyway (it failed in another mode) counts as joined.
    extra = join_coverage(here, ["a", "d", "e"], passed)
    assert (extra.in_both, extra.not_rerun, extra.only_here, extra.joined) == (3, 2, 0, 2)


def test_the_tests_an_on_demand_baseline_runs():
    from conformance.baseline import tests_needing_baseline

    frame = pandas.DataFrame(
        {
            "test_id": ["a", "b", "c", "d", "e", "f", "g", "h", "broken.py"],
            "outcome": [
                "passed", "failed", "error", "crashed", "timeout", "xfailed", "flaky",
                "skipped", "error",
            ],
            "category": ["", "other", "other", "crash", "timeout", "known_bug", "flaky",
                         "upstream_skip", "collection_error"],
            "template": ["t"] * 8 + [""],
        }
    )  # fmt: skip
    # Every test that did not pass; a file that failed to collect is no test.
    assert tests_needing_baseline(frame) == ["b", "c", "d", "e", "f", "g", "h"]
