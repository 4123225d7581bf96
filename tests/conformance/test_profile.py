"""``--profile``: the profiler's rows per test, how they reach the run, and how they survive a
crash, a resume and a merge."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pandas  # (loaded before in-process runs, whose module snapshot would drop it)
import pyarrow.parquet  # noqa: F401
import pytest
import torch
import torch.testing._internal.common_device_type  # (as pandas: imported again, it would
from torch.autograd import DeviceType  #  register torch's test ops twice)

from conformance.cli import main
from conformance.merge import merge_runs
from conformance.model import PROFILE_COLUMNS, ResultRecord, RunMeta
from conformance.profile import ROW_FIELDS, device_activities, summarize_events
from conformance.profile_store import (
    PROFILE_JSONL_NAME,
    PROFILE_PARQUET_NAME,
    ProfileWriter,
    read_profile,
)
from conformance.store import RunWriter, read_run
from op_coverage.perf import time_metric

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "upstream"


def event(name: str, device_type=DeviceType.CPU, shapes=(), dtypes=(), **times):
    fields = {"cpu_time_total": 0.0, "self_cpu_time_total": 0.0}
    fields.update(times)
    return SimpleNamespace(
        name=name,
        device_type=device_type,
        input_shapes=list(shapes),
        input_dtypes=list(dtypes),
        **fields,
    )


def test_events_are_summed_by_op_and_input_signature_keeping_aten_ops_and_kernels():
    times = {"cpu_time_total": 10.0, "self_cpu_time_total": 4.0}
    device = {"device_time_total": 3.0, "self_device_time_total": 3.0}
    events = [
        event("aten::mm", shapes=[[4, 4], [4, 4]], dtypes=["float", "float"], **times, **device),
        event("aten::mm", shapes=[[4, 4], [4, 4]], dtypes=["float", "float"], **times, **device),
        event("aten::mm", shapes=[[4, 4], [4, 4]], dtypes=["double", "double"], **times),
        event("aten::mm", shapes=[[8, 8], [8, 8]], dtypes=["float", "float"], **times),
        event("emu_kernel:mm", DeviceType.PrivateUse1, **device),
        event("emu_kernel:mm", DeviceType.PrivateUse1, **device),
        event("autograd::engine::evaluate_function: MmBackward0", **times),  # not an ATen op
        event("[memory]"),
        event("cudaLaunchKernel", DeviceType.CUDA, **device),  # another device's
    ]
    rows = [
        dict(zip(ROW_FIELDS, r, strict=True))
        for r in summarize_events(events, DeviceType.PrivateUse1)
    ]
    signatures = [
        (r["op"], r["calls"], r["device_calls"], r["input_shapes"], r["input_dtypes"]) for r in rows
    ]
    assert signatures == [
        ("aten::mm", 2, 2, "[[4, 4], [4, 4]]", "['float', 'float']"),
        ("aten::mm", 1, 0, "[[4, 4], [4, 4]]", "['double', 'double']"),
        ("aten::mm", 1, 0, "[[8, 8], [8, 8]]", "['float', 'float']"),
        ("emu_kernel:mm", 2, 2, "", ""),
    ]
    first, third, kernel = rows[0], rows[2], rows[3]
    assert (first["cpu_time_us"], first["self_cpu_time_us"]) == (20.0, 8.0)
    assert (first["device_time_us"], first["self_device_time_us"]) == (6.0, 6.0)
    # no device time on the event (a device that reports none): 0
    assert (third["device_time_us"], third["self_device_time_us"]) == (0.0, 0.0)
    assert (kernel["cpu_time_us"], kernel["device_time_us"]) == (0.0, 6.0)
    # on cpu, no device events are kept
    assert [r[0] for r in summarize_events(events, None)] == ["aten::mm"] * 3


def test_the_profiler_of_a_cpu_run_records_shapes_and_dtypes():
    activities, kernel_type = device_activities("cpu")
    assert kernel_type is None and activities == [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, record_shapes=True) as profiler:
        torch.mm(torch.ones(4, 5), torch.ones(5, 3))
    rows = {
        r[0]: dict(zip(ROW_FIELDS, r, strict=True)) for r in summarize_events(profiler.events())
    }
    mm = rows["aten::mm"]
    assert (mm["calls"], mm["input_shapes"], mm["input_dtypes"]) == (
        1,
        "[[4, 5], [5, 3]]",
        "['float', 'float']",
    )
    assert mm["cpu_time_us"] >= mm["self_cpu_time_us"] > 0 and mm["device_time_us"] == 0


# -- the store ----------------------------------------------------------------------------


def profile_row(test_id: str, op: str = "aten::add", cpu: float = 1.0) -> dict:
    return {
        "test_id": test_id,
        "file": "t.py",
        "op": op,
        "calls": 1,
        "cpu_time_us": cpu,
        "self_cpu_time_us": cpu,
        "input_shapes": "[[2]]",
        "input_dtypes": "['float']",
    }


def test_profile_rows_are_appended_kept_on_reopening_and_consolidated(tmp_path):
    writer = ProfileWriter(tmp_path)
    assert writer.write([profile_row("a"), profile_row("a", "aten::mul")]) == 2
    assert writer.write([]) == 0
    writer.close()
    frame = read_profile(tmp_path)
    assert list(frame.columns) == list(PROFILE_COLUMNS)
    assert list(frame["op"]) == ["aten::add", "aten::mul"]
    assert list(frame["device_time_us"]) == [0.0, 0.0]  # left out: the default

    # A resumed session: the earlier rows stay, the stale Parquet goes until it ends.
    resumed = ProfileWriter(tmp_path)
    assert not (tmp_path / PROFILE_PARQUET_NAME).exists()
    resumed.write([profile_row("b")])
    assert list(read_profile(tmp_path)["test_id"]) == ["a", "a", "b"]  # from the JSON lines
    with open(tmp_path / PROFILE_JSONL_NAME, "a") as handle:
        handle.write('{"test_id": "c", "op": "aten::')  # the controller killed mid-write
    assert list(read_profile(tmp_path)["test_id"]) == ["a", "a", "b"]
    ProfileWriter(tmp_path).close()  # drops the torn line
    assert list(read_profile(tmp_path)["test_id"]) == ["a", "a", "b"]
    assert (tmp_path / PROFILE_JSONL_NAME).read_text().endswith('"input_dtypes": "[\'float\']"}\n')


def test_an_empty_profile_is_a_profile_with_no_rows(tmp_path):
    ProfileWriter(tmp_path).close()
    frame = read_profile(tmp_path)
    assert frame.empty and list(frame.columns) == list(PROFILE_COLUMNS)


def test_merged_shards_keep_every_profile_row(tmp_path):
    shards = []
    for index in (1, 2):
        meta = RunMeta(run_id=f"s{index}", backend="cpu", shard=f"{index}/2")
        writer = RunWriter(tmp_path / f"s{index}", meta)
        writer.write(
            ResultRecord(f"s{index}", nodeid=f"t{index}", test_id=f"t{index}", file="t.py")
        )
        writer.close()
        profile = ProfileWriter(tmp_path / f"s{index}")
        profile.write([profile_row(f"t{index}")])
        profile.close()
        shards.append(tmp_path / f"s{index}")
    merge_runs(shards, tmp_path / "merged")
    assert sorted(read_profile(tmp_path / "merged")["test_id"]) == ["t1", "t2"]
    merge_runs(shards[:1], tmp_path / "one")
    assert list(read_profile(tmp_path / "one")["test_id"]) == ["t1"]


# -- end to end ---------------------------------------------------------------------------

SKIPLIST = """\
[[skip]]
test_id = "test_fixture_ops.py::TestFixtureDevice::test_fill_int64"
tier = "deselect"
category = "crash"
reason = "stands for a test that takes its process down"

[[skip]]
op = "add"
dtypes = ["int64"]
tier = "skip"
category = "unsupported_dtype"
detail = "int64"
reason = "no integer add"
"""
OPS = "test_fixture_ops.py::"


def test_a_profiled_run_records_the_ops_of_each_test_that_ran(pytester: pytest.Pytester):
    shutil.copy(FIXTURES / "test_fixture_ops.py", pytester.path)
    (pytester.path / "skip.toml").write_text(SKIPLIST)
    result = pytester.runpytest_inprocess(
        "test_fixture_ops.py", "--device", "cpu", "--run-dir", "run", "--skiplist", "skip.toml",
        "-p", "no:cacheprovider", "--profile",
    )  # fmt: skip
    result.assert_outcomes(passed=6, failed=2, skipped=2, xfailed=1, deselected=1)
    result.stdout.fnmatch_lines(["per-op profile of 8 tests (* rows) in run"])
    _, records = read_run(pytester.path / "run")
    profile = read_profile(pytester.path / "run")
    assert (pytester.path / "run" / PROFILE_PARQUET_NAME).is_file()
    ran = set(records.loc[~records["outcome"].isin(["deselected", "skipped"]), "test_id"])
    # Every test whose call dispatched ATen ops, and none that did not run; the plain
    # expected failure raises before any op.
    assert set(profile["test_id"]) == ran - {OPS + "TestFixturePlain::test_plain_expected_failure"}
    assert set(zip(profile["test_id"], profile["file"], strict=True)) <= set(
        zip(records["test_id"], records["file"], strict=True)
    )
    add = profile[(profile["test_id"] == OPS + "TestFixtureCommon::test_samples_add_float32")]
    add = add[add["op"] == "aten::add"]
    assert add["calls"].sum() > 0 and (add["cpu_time_us"] > 0).all()
    assert set(add["input_dtypes"]) >= {"['float', 'float', 'Scalar']"}
    assert (profile["device_time_us"] == 0).all()  # cpu reports no device time


def test_tests_that_run_a_profiler_of_their_own_keep_their_outcomes(pytester: pytest.Pytester):
    shutil.copy(FIXTURES / "test_fixture_profiler.py", pytester.path)
    common = ("test_fixture_profiler.py", "--device", "cpu", "-p", "no:cacheprovider")
    outcomes = {}
    for name, extra in (("plain", ()), ("profiled", ("--profile",))):
        result = pytester.runpytest_inprocess(*common, "--run-dir", name, *extra)
        result.assert_outcomes(passed=5)
        _, records = read_run(pytester.path / name)
        outcomes[name] = dict(zip(records["test_id"], records["outcome"], strict=True))
    assert outcomes["profiled"] == outcomes["plain"]
    # Profilers do not nest: the test's own took over, so these tests have no rows.
    assert read_profile(pytester.path / "profiled").empty


KILLED_ONCE = """
import os, signal, pathlib
import torch

FLAG = pathlib.Path(__file__).with_name("killed.flag")

def test_1():
    torch.ones(2, 3).sum()

def test_2():
    assert torch.mm(torch.ones(2, 3), torch.ones(3, 4)).sum() == 0

def test_3():
    torch.ones(5).neg()
    if not FLAG.exists():  # the first run dies here, as if killed from outside
        FLAG.write_text("killed")
        os.kill(os.getpid(), signal.SIGKILL)

def test_4():
    torch.zeros(7).exp()
"""


def profiled_tests(frame) -> list[str]:
    return sorted(set(frame["test_id"]))


@pytest.mark.slow
def test_a_killed_run_keeps_its_rows_and_its_resume_adds_the_rest(pytester: pytest.Pytester):
    pytester.makepyfile(test_killed=KILLED_ONCE)
    common = ("--device", "cpu", "-p", "no:cacheprovider", "--profile")
    first = pytester.runpytest_subprocess(*common, "--run-dir", "run")
    assert first.ret != 0 and (pytester.path / "killed.flag").exists()
    before = read_profile(pytester.path / "run")  # from the JSON lines: never consolidated
    assert profiled_tests(before) == ["test_killed.py::test_1", "test_killed.py::test_2"]
    assert "aten::mm" in set(before["op"])

    second = pytester.runpytest_subprocess(*common, "--resume", "run", "-n", "1")
    second.assert_outcomes(passed=2)
    meta, records = read_run(pytester.path / "run")
    assert meta.complete and (pytester.path / "run" / PROFILE_PARQUET_NAME).is_file()
    after = read_profile(pytester.path / "run")
    assert (
        profiled_tests(after)
        == profiled_tests(records)
        == [f"test_killed.py::test_{i}" for i in range(1, 5)]
    )
    kept = after[after["test_id"].isin(before["test_id"])].reset_index(drop=True)
    pandas.testing.assert_frame_equal(kept, before)
    assert set(after.loc[after["test_id"] == "test_killed.py::test_4", "op"]) >= {"aten::exp"}


CRASHES = """
import ctypes
import torch

def test_1():
    torch.ones(2).sum()

def test_2():
    torch.ones(3).neg()
    ctypes.string_at(0)

def test_3():
    torch.ones(4).exp()
"""


@pytest.mark.slow
def test_a_test_that_kills_its_worker_loses_only_its_own_rows(pytester: pytest.Pytester):
    pytester.makepyfile(test_crashes=CRASHES)
    result = pytester.runpytest_subprocess(
        "--device", "cpu", "-p", "no:cacheprovider", "--profile", "--run-dir", "run", "-n", "1"
    )
    assert result.ret == 1
    meta, records = read_run(pytester.path / "run")
    assert meta.complete
    assert dict(zip(records["test_id"], records["outcome"], strict=True)) == {
        "test_crashes.py::test_1": "passed",
        "test_crashes.py::test_2": "crashed",
        "test_crashes.py::test_3": "passed",
    }
    profile = read_profile(pytester.path / "run")
    assert profiled_tests(profile) == ["test_crashes.py::test_1", "test_crashes.py::test_3"]


# -- through the command line -------------------------------------------------------------

#: The fixture's tests that pass on cpu and emu: the OpInfo samples and a plain test.
PASSING = "samples or plain_pass"


def profiled_run(tmp_path: Path, device: str) -> Path:
    tests = tmp_path / "test"
    tests.mkdir(exist_ok=True)
    shutil.copy(FIXTURES / "test_fixture_ops.py", tests)
    runs = tmp_path / "runs"
    code = main(
        ["run", "--device", device, "--tests", str(tests), "--files", "test_fixture_ops",
         "-n", "1", "--runs-root", str(runs), "--run-id", device, "--profile", "--no-skiplist",
         "--retry-failures", "0", "--progress-interval", "0", "--", "-k", PASSING]
    )  # fmt: skip
    assert code == 0
    return runs / device


def test_conformance_run_profile_then_ops_perf_on_cpu(tmp_path, capsys):
    run = profiled_run(tmp_path, "cpu")
    assert (run / PROFILE_PARQUET_NAME).is_file()
    profile = read_profile(run)
    _, records = read_run(run)
    assert set(profile["test_id"]) == set(records["test_id"]) and len(records) == 5
    capsys.readouterr()
    assert main(["ops", "perf", "cpu", "--runs-root", str(tmp_path / "runs"), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CPU time by op in run cpu (cpu): 5 tests profiled")
    assert "tests that spend most in each:" in out


@pytest.mark.slow
def test_conformance_run_profile_on_emu_then_ops_perf_against_cpu(tmp_path, capsys):
    pytest.importorskip("torch_emu")
    emu, cpu = profiled_run(tmp_path, "emu"), profiled_run(tmp_path, "cpu")
    profile = read_profile(emu)
    _, records = read_run(emu)
    assert set(profile["test_id"]) == set(records["test_id"]) and len(records) == 5
    assert "aten::add" in set(profile["op"])
    # Device time where emu reports its kernels to the profiler, else none: CPU time.
    metric = time_metric(profile)
    capsys.readouterr()
    root = ("--runs-root", str(tmp_path / "runs"))
    assert main(["ops", "perf", "emu", *root, "--by", "op-shape"]) == 0
    out = capsys.readouterr().out
    named = {"device": "device time", "cpu": "CPU time"}[metric]
    assert out.startswith(f"{named} by op and input signature in run emu (emu): 5 tests profiled")
    assert main(["ops", "perf", "emu", "--compare", str(cpu), *root]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CPU time per call, run emu (emu) against cpu (cpu): ")
    assert (metric == "device") == ("note: only one of the runs has device time" in out)
    assert "aten::add" in out
