"""Multi-process tests are tests: every way a rank can end, through the harness.

tests/fixtures/distributed/test_fixture_ranks.py holds two-rank tests (the embedded suite's
RankTestCase) that pass, crash, fail, disagree, skip, hang or do not apply, on cpu with
gloo. Under the harness with two workers each must end as its own outcome, the hang as a
timeout (the watchdog's, or the test's own limit), and no rank may outlive the run.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pandas  # noqa: F401  (loaded before pytester's runs, whose module snapshot would drop it)
import pyarrow.parquet  # noqa: F401
import pytest

from conformance.store import read_run

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "distributed" / "test_fixture_ranks.py"
CLASS = "test_fixture_ranks.py::TestFixtureRanks::"

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _run(pytester: pytest.Pytester, *args: str, limit_s: str) -> tuple[object, object, list[int]]:
    shutil.copy(FIXTURE, pytester.path / FIXTURE.name)
    pids = pytester.path / "pids"
    pids.mkdir()
    os.environ["RANKS_PID_DIR"] = str(pids)
    os.environ["CONFORMANCE_DIST_TIMEOUT"] = limit_s
    try:
        result = pytester.runpytest_subprocess(
            FIXTURE.name, "--device", "cpu", "--run-dir", "run", "-p", "no:cacheprovider", *args
        )
    finally:
        del os.environ["RANKS_PID_DIR"], os.environ["CONFORMANCE_DIST_TIMEOUT"]
    _meta, frame = read_run(pytester.path / "run")
    rows = frame.set_index("test_id")
    started = [int(p.name.removesuffix(".pid")) for p in pids.iterdir()]
    return result, rows, started


def _none_alive(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def test_each_rank_ending_is_the_tests_and_no_rank_outlives_the_run(pytester):
    result, rows, started = _run(pytester, "-n", "2", "--test-timeout", "15", limit_s="120")
    assert result.ret == 1
    outcome = {test: (row.outcome, row.category, row.detail) for test, row in rows.iterrows()}
    assert outcome[CLASS + "test_a_pass"] == ("passed", "", "")
    assert outcome[CLASS + "test_b_rank_crashes"] == ("failed", "crash", "SIGSEGV")
    assert "rank 1 crashed with signal SIGSEGV" in rows.loc[CLASS + "test_b_rank_crashes"].message
    failed = rows.loc[CLASS + "test_c_rank_fails"]
    assert failed.outcome == "failed"
    assert "rank 1 failed: AssertionError: rank one's own failure" in failed.message
    assert failed.message.startswith("AssertionError: 2 ranks on gloo, ")
    assert failed.detail.endswith(" on gloo")  # the collective, or the rank's error, on gloo
    disagree = rows.loc[CLASS + "test_d_ranks_disagree"]
    assert disagree.outcome == "failed"
    assert "rank 0 skipped: rank zero refuses" in disagree.message
    assert "rank 1 passed" in disagree.message
    assert outcome[CLASS + "test_e_all_skip"][0] == "skipped"
    assert rows.loc[CLASS + "test_e_all_skip"].message.endswith("no rank can")
    assert outcome[CLASS + "test_f_rank_hangs"][:2] == ("timeout", "timeout")
    assert outcome[CLASS + "test_g_not_applicable"][0] == "skipped"
    assert outcome[CLASS + "test_h_after"] == ("passed", "", "")
    # Two ranks for each test that started any (not test_g), every one gone.
    assert len(started) == 2 * 7
    assert _none_alive(started) == []


def test_a_hang_past_the_tests_own_limit_fails_as_a_timeout(pytester):
    _result, rows, started = _run(pytester, "-k", "hangs", "--test-timeout", "120", limit_s="2")
    hang = rows.loc[CLASS + "test_f_rank_hangs"]
    assert (hang.outcome, hang.category) == ("failed", "timeout")
    assert "timed out after 2 s" in hang.message
    assert len(started) == 2
    assert _none_alive(started) == []
