"""End to end: the plugin over upstream-style fixture files, serial and under xdist.

The fixture files (tests/fixtures/upstream/) hold device-generic classes, @ops over an
op_db subset, @dtypes, an upstream skip decorator, expected failures, a missing kernel, a
numerical mismatch, a segfault and a hang. Every run here must record exactly the
outcomes in EXPECTED, field by field, whatever the number of workers.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas  # (loaded before in-process runs, whose module snapshot would drop it)
import pyarrow.parquet  # noqa: F401
import pytest
import torch  # noqa: F401

from conformance.store import read_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "upstream"

SKIPLIST = """\
[[skip]]
test_id = "test_fixture_ops.py::TestFixtureDevice::test_fill_int64"
tier = "deselect"
category = "crash"
reason = "stands for a test that takes its process down"

[[skip]]
test_id = "test_fixture_ops.py::TestFixtureDevice::test_mismatch"
tier = "xfail"
category = "known_bug"
detail = "fill"
reason = "wrong values"

[[skip]]
op = "add"
dtypes = ["int64"]
tier = "skip"
category = "unsupported_dtype"
detail = "int64"
reason = "no integer add"
"""

OPS = "test_fixture_ops.py::"
#: test_id -> (outcome, category, detail), for a cpu run with SKIPLIST.
EXPECTED = {
    OPS + "TestFixtureCommon::test_samples_abs_float32": ("passed", "", ""),
    OPS + "TestFixtureCommon::test_samples_abs_int64": ("passed", "", ""),
    OPS + "TestFixtureCommon::test_samples_add_float32": ("passed", "", ""),
    OPS + "TestFixtureCommon::test_samples_add_int64": ("skipped", "unsupported_dtype", "int64"),
    OPS + "TestFixtureDevice::test_fill_float32": ("passed", "", ""),
    OPS + "TestFixtureDevice::test_fill_int64": ("deselected", "crash", ""),
    OPS + "TestFixtureDevice::test_missing_kernel": (
        "failed",
        "missing_lowering",
        "aten::_cslt_compress",
    ),
    OPS + "TestFixtureDevice::test_mismatch": ("xfailed", "known_bug", "fill"),
    OPS + "TestFixtureDevice::test_cuda_only": ("skipped", "not_applicable", "cuda"),
    # torch's device-type expectedFailure turns the expected failure into a pass
    OPS + "TestFixtureDevice::test_known_failure": ("passed", "", ""),
    OPS + "TestFixturePlain::test_plain_pass": ("passed", "", ""),
    OPS + "TestFixturePlain::test_plain_expected_failure": (
        "xfailed",
        "known_bug",
        "upstream expectedFailure",
    ),
}
CRASH = "test_fixture_crash.py::TestFixtureCrash::"
EXPECTED_CRASH = {
    CRASH + "test_a_before": ("passed", "", ""),
    CRASH + "test_b_segfault": ("crashed", "crash", ""),
    CRASH + "test_c_hang": ("timeout", "timeout", ""),
    CRASH + "test_d_after": ("passed", "", ""),
}


def setup_files(pytester: pytest.Pytester, *names: str) -> None:
    for name in names:
        shutil.copy(FIXTURES / name, pytester.path / name)
    (pytester.path / "skip.toml").write_text(SKIPLIST)


def outcomes(frame) -> dict[str, tuple[str, str, str]]:
    return {row.test_id: (row.outcome, row.category, row.detail) for row in frame.itertuples()}


def check_common_fields(frame, meta, run_dir) -> None:
    assert frame["nodeid"].is_unique
    assert set(frame["run_id"]) == {meta.run_id} and meta.run_id == run_dir.name
    assert set(frame["device"]) == {"cpu"}
    rows = frame.set_index("test_id")
    add = rows.loc[OPS + "TestFixtureCommon::test_samples_add_float32"]
    assert add.nodeid == OPS + "TestFixtureCommonCPU::test_samples_add_cpu_float32"
    assert add[["file", "test_class", "template", "op", "dtype"]].tolist() == [
        "test_fixture_ops.py",
        "TestFixtureCommon",
        "test_samples",
        "add",
        "float32",
    ]
    assert add.duration_s > 0 and add.skip_entry == "" and add.message == ""
    missing = rows.loc[OPS + "TestFixtureDevice::test_missing_kernel"]
    assert missing.message.startswith(
        "NotImplementedError: Could not run 'aten::_cslt_compress' with arguments from the 'CPU'"
    )
    assert len(missing.message) <= 2000
    skipped = rows.loc[OPS + "TestFixtureCommon::test_samples_add_int64"]
    assert skipped.skip_entry.endswith("skip.toml:14") and "no integer add" in skipped.message
    deselected = rows.loc[OPS + "TestFixtureDevice::test_fill_int64"]
    assert deselected.skip_entry.endswith("skip.toml:1")
    assert deselected.message == "stands for a test that takes its process down"
    assert rows.loc[OPS + "TestFixtureDevice::test_cuda_only"].message == "Only runs on cuda"
    assert meta.complete and meta.backend == "cpu" and meta.torch_version
    assert meta.collected == len(frame)


RECORD_HOOK = """
def pytest_conformance_record(record, config):
    with open("seen.txt", "a") as seen:
        seen.write(record.nodeid + "\\n")


def pytest_conformance_configure(config, device_type, run_dir, owns_run, runs_tests):
    with open("configured.txt", "a") as configured:
        configured.write(f"{device_type} {run_dir.name} {owns_run} {runs_tests}\\n")
"""


#: The serial run's records, kept for the xdist test when both run in one process.
_serial_records: list = []


def serial_run(pytester: pytest.Pytester):
    """Run test_fixture_ops.py serially, in process; return (meta, frame)."""
    setup_files(pytester, "test_fixture_ops.py")
    pytester.makeconftest(RECORD_HOOK)
    result = pytester.runpytest_inprocess(
        "test_fixture_ops.py", "--device", "cpu", "--run-dir", "run", "--skiplist", "skip.toml",
        "-p", "no:cacheprovider", "--tb=line",
    )  # fmt: skip
    result.assert_outcomes(passed=6, failed=1, skipped=2, xfailed=2, deselected=1)
    meta, frame = read_run(pytester.path / "run")
    _serial_records[:] = [comparable(frame)]
    return meta, frame


def comparable(frame):
    """The records without what may differ between two runs of the same tests."""
    kept = frame.drop(columns=["run_id", "worker", "duration_s"])
    kept["skip_entry"] = kept["skip_entry"].map(lambda where: Path(where).name)
    return kept.sort_values("nodeid").reset_index(drop=True)


def test_a_serial_run_records_every_outcome_field_by_field(pytester: pytest.Pytester):
    meta, frame = serial_run(pytester)
    assert outcomes(frame) == EXPECTED
    check_common_fields(frame, meta, pytester.path / "run")
    assert set(frame["worker"]) == {""}
    assert meta.suite == "tests:test_fixture_ops.py"
    assert (pytester.path / "runs").exists() is False  # --run-dir wins over --runs-root
    # the record hook saw every record, in the order written
    assert (pytester.path / "seen.txt").read_text().split() == list(frame["nodeid"])
    # a feature area's plugin is configured once, where tests run and the run is owned
    assert (pytester.path / "configured.txt").read_text().split() == ["cpu", "run", "True", "True"]


@pytest.mark.slow
def test_xdist_run_survives_a_segfault_and_a_hang_and_records_the_same(pytester: pytest.Pytester):
    setup_files(pytester, "test_fixture_ops.py", "test_fixture_crash.py")
    result = pytester.runpytest_subprocess(
        "--device",
        "cpu",
        "--runs-root",
        "runs",
        "--run-id",
        "par",
        "--skiplist",
        "skip.toml",
        "-n",
        "2",
        "--test-timeout",
        "4",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == 1
    meta, frame = read_run(pytester.path / "runs" / "par")
    assert outcomes(frame) == {**EXPECTED, **EXPECTED_CRASH}
    check_common_fields(frame, meta, pytester.path / "runs" / "par")
    ran = frame[frame["outcome"] != "deselected"]
    assert set(ran["worker"]) <= {f"gw{i}" for i in range(8)}
    rows = frame.set_index("test_id")
    assert "crashed while running" in rows.loc[CRASH + "test_b_segfault"].message
    assert rows.loc[CRASH + "test_c_hang"].message == "timed out after 4 s"
    # Stopped tests keep the time they ran: durations balance shards by them.
    assert rows.loc[CRASH + "test_c_hang"].duration_s >= 4
    assert rows.loc[CRASH + "test_b_segfault"].duration_s > 0
    assert (pytester.path / "runs" / "latest").resolve().name == "par"

    # the same tests run serially give the same records, field by field
    if not _serial_records:
        serial_run(pytester)
    ops_rows = frame[frame["file"] == "test_fixture_ops.py"]
    pandas.testing.assert_frame_equal(comparable(ops_rows), _serial_records[0])


KILLED_ONCE = """
import os, signal, pathlib, time

FLAG = pathlib.Path(__file__).with_name("killed.flag")

def test_1():
    pass

def test_2():
    assert 1 == 2

def test_3():
    if not FLAG.exists():  # the first run dies here, as if killed from outside
        FLAG.write_text("killed")
        os.kill(os.getpid(), signal.SIGKILL)

def test_4():
    time.sleep(600)

def test_5():
    pass
"""


@pytest.mark.slow
def test_a_killed_run_resumes_without_losing_or_repeating_a_record(pytester: pytest.Pytester):
    pytester.makepyfile(test_killed=KILLED_ONCE)
    common = ("--device", "cpu", "-p", "no:cacheprovider", "--test-timeout", "3")
    first = pytester.runpytest_subprocess(*common, "--run-dir", "run")
    assert first.ret != 0 and (pytester.path / "killed.flag").exists()
    meta, frame = read_run(pytester.path / "run")
    assert not meta.complete
    assert list(frame["outcome"]) == ["passed", "failed"]
    before = frame.copy()
    with open(pytester.path / "run" / "outcomes.jsonl", "a") as handle:
        handle.write('{"run_id": "run", "nodeid": "test_killed.py::tes')  # torn by the kill

    # Serial again: test_3 passes now, test_4 hangs and the watchdog records it, then
    # ends the process (nothing else can stop a hang in the only process there is).
    second = pytester.runpytest_subprocess(*common, "--resume", "run")
    assert second.ret == 124
    meta, frame = read_run(pytester.path / "run")
    assert not meta.complete
    assert list(frame["outcome"]) == ["passed", "failed", "passed", "timeout"]

    third = pytester.runpytest_subprocess(*common, "--resume", "run", "-n", "1")
    third.assert_outcomes(passed=1)  # under xdist the four resumed tests are deselected in workers
    meta, frame = read_run(pytester.path / "run")
    assert meta.complete and meta.collected == 5
    assert sorted(frame["nodeid"]) == [f"test_killed.py::test_{i}" for i in range(1, 6)]
    rows = frame.set_index("nodeid")
    assert rows.loc["test_killed.py::test_4", ["outcome", "category"]].tolist() == [
        "timeout",
        "timeout",
    ]
    assert rows.loc["test_killed.py::test_4", "duration_s"] >= 3  # the serial watchdog's time
    assert rows.loc["test_killed.py::test_5", "outcome"] == "passed"
    kept = frame[frame["nodeid"].isin(before["nodeid"])].reset_index(drop=True)
    assert kept.equals(before)


@pytest.mark.slow
def test_a_backend_that_fails_to_load_in_the_workers_is_reported_once(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    # The controller only describes the backend; the workers import it, and fail.
    pytester.makepyfile(
        broken_backend_pkg="raise RuntimeError('driver not found: libbrk.so')\n",
        test_never_runs="def test_a():\n    pass\n",
    )
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    result = pytester.runpytest_subprocess(
        "--device",
        "brk",
        "--backend-module",
        "broken_backend_pkg",
        "--run-dir",
        "run",
        "-n",
        "2",
        "-p",
        "no:cacheprovider",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = result.stdout.str() + result.stderr.str()
    lines = [line for line in out.splitlines() if "driver not found" in line]
    assert lines == [
        "ERROR: in the workers: --backend-module: cannot import 'broken_backend_pkg': "
        "RuntimeError: driver not found: libbrk.so "
        f"(at {pytester.path / 'broken_backend_pkg.py'}:1)"
    ]
    assert "Traceback" not in out
    assert "the run is incomplete: once the backend loads, finish it with --resume run" in out
    meta, frame = read_run(pytester.path / "run")
    assert len(frame) == 0 and not meta.complete
