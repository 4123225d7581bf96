"""``ops perf``: ranking ops by time and comparing runs, on hand-made profile frames and on
planted run folders."""

from __future__ import annotations

import json
import math

import pandas
import pytest

import conformance.cli
from conformance.model import PROFILE_COLUMNS, ResultRecord, RunMeta
from conformance.profile_store import ProfileWriter
from conformance.store import RunWriter
from op_coverage.perf import compare_runs, rank_ops, time_metric

MM = "[[4, 4], [4, 4]]"
BIG_MM = "[[64, 64], [64, 64]]"
FLOATS = "['float', 'float']"


def row(test_id: str, op: str, calls: int = 1, cpu: float = 0.0, device: float = 0.0, **fields):
    """A profile row; self times default to the totals, the calls with device time to all
    calls when there is some, input shapes to none."""
    data = {
        "test_id": test_id,
        "file": test_id.split("::")[0],
        "op": op,
        "calls": calls,
        "device_calls": fields.pop("device_calls", calls if device > 0 else 0),
        "cpu_time_us": cpu,
        "self_cpu_time_us": fields.pop("self_cpu", cpu),
        "device_time_us": device,
        "self_device_time_us": fields.pop("self_device", device),
        "input_shapes": "",
        "input_dtypes": "",
    }
    data.update(fields)
    return data


def frame(rows) -> pandas.DataFrame:
    return pandas.DataFrame.from_records(rows, columns=list(PROFILE_COLUMNS))


T1, T2, T3 = "t.py::C::test_1", "t.py::C::test_2", "t.py::C::test_3"


@pytest.fixture
def device_rows():
    """Two tests on a device with kernel events: aten::linear calls aten::mm, whose kernel
    is emu_kernel:mm. Time in ATen ops (self device time): 40 + 90 + 10 + 0 = 140 us."""
    return [
        row(T1, "aten::mm", 2, cpu=100, self_cpu=60, device=40, input_shapes=MM),
        row(T2, "aten::mm", 1, cpu=300, self_cpu=200, device=90, input_shapes=BIG_MM),
        row(T1, "aten::add", 4, cpu=40, device=10),
        row(T2, "aten::linear", 1, cpu=400, self_cpu=100, device=90, self_device=0),
        row(T2, "emu_kernel:mm", 1, device=90),
    ]


def test_ops_rank_by_total_device_time_with_mean_share_and_heaviest_tests(device_rows):
    ranking = rank_ops(frame(device_rows))
    assert (ranking.metric, ranking.aten_us, ranking.tests) == ("device", 140.0, 2)
    assert [(t.op, t.calls, t.total_us) for t in ranking.ops] == [
        ("aten::mm", 3, 130.0),
        ("aten::linear", 1, 90.0),  # ties by name: the ATen op, then the kernel
        ("emu_kernel:mm", 1, 90.0),
        ("aten::add", 4, 10.0),
    ]
    mm = ranking.ops[0]
    assert mm.mean_us == pytest.approx(130 / 3) and mm.share == pytest.approx(130 / 140)
    assert mm.self_us == 130.0 and mm.input_shapes == ""
    assert mm.tests == [(T2, 90.0), (T1, 40.0)]  # the heaviest first
    assert rank_ops(frame(device_rows), tests=1).ops[0].tests == [(T2, 90.0)]
    assert rank_ops(frame(device_rows), tests=0).ops[0].tests == []


def test_without_device_time_ops_rank_by_cpu_time_and_kernel_events_drop_out(device_rows):
    cpu_only = [{**r, "device_time_us": 0.0, "self_device_time_us": 0.0} for r in device_rows]
    assert time_metric(frame(cpu_only)) == "cpu"
    ranking = rank_ops(frame(cpu_only))
    assert ranking.metric == "cpu" and ranking.aten_us == 60 + 200 + 40 + 100
    assert [(t.op, t.total_us) for t in ranking.ops] == [
        ("aten::linear", 400.0),
        ("aten::mm", 400.0),
        ("aten::add", 40.0),
    ]
    # device rows are ranked on their CPU time when asked
    forced = rank_ops(frame(device_rows), metric="cpu")
    assert [t.op for t in forced.ops] == ["aten::linear", "aten::mm", "aten::add"]


def test_a_tests_calls_on_cpu_tensors_do_not_dilute_the_device_time_per_call():
    # A compare-with-CPU test calls conv2d 8 times on the device and 8 times on the CPU.
    rows = [row(T1, "aten::conv2d", 16, cpu=1600, device=800, device_calls=8)]
    (device,) = rank_ops(frame(rows)).ops
    assert (device.calls, device.total_us, device.mean_us) == (8, 800.0, 100.0)
    (cpu,) = rank_ops(frame(rows), metric="cpu").ops
    assert (cpu.calls, cpu.total_us, cpu.mean_us) == (16, 1600.0, 100.0)
    # An op that ran on the CPU only has no place in the device ranking.
    rows.append(row(T1, "aten::isclose", 8, cpu=80))
    assert [t.op for t in rank_ops(frame(rows)).ops] == ["aten::conv2d"]


def test_by_op_shape_keeps_each_input_signature_apart(device_rows):
    ranking = rank_ops(frame(device_rows), by="op-shape")
    mm = [(t.input_shapes, t.calls, t.total_us) for t in ranking.ops if t.op == "aten::mm"]
    assert mm == [(BIG_MM, 1, 90.0), (MM, 2, 40.0)]
    assert [t.key for t in ranking.ops[:2]] == [("aten::linear", "", ""), ("aten::mm", BIG_MM, "")]


def test_an_empty_profile_ranks_nothing():
    ranking = rank_ops(frame([]))
    assert (ranking.metric, ranking.ops, ranking.aten_us, ranking.tests) == ("cpu", [], 0.0, 0)


def test_compare_ranks_the_slowdown_per_call_and_lists_ops_of_one_run_apart():
    reference = frame(
        [
            row(T1, "aten::mm", 10, cpu=1000),  # 100 us per call
            row(T1, "aten::add", 10, cpu=100),  # 10
            row(T2, "aten::sum", 2, cpu=100),  # 50
            row(T2, "aten::gone", 1, cpu=5),
        ]
    )
    run = frame(
        [
            row(T1, "aten::mm", 20, cpu=2400),  # 120 us per call: 1.2x
            row(T1, "aten::add", 5, cpu=150),  # 30: 3x, the worst
            row(T2, "aten::sum", 4, cpu=100),  # 25: faster
            row(T3, "aten::new", 3, cpu=30),
        ]
    )
    comparison = compare_runs(run, reference)
    assert comparison.metric == "cpu" and comparison.note == ""
    assert [(d.op, round(d.ratio, 3)) for d in comparison.changes] == [
        ("aten::add", 3.0),
        ("aten::mm", 1.2),
        ("aten::sum", 0.5),
    ]
    add = comparison.changes[0]
    assert (add.calls, add.reference_calls) == (5, 10)
    assert (add.mean_us, add.reference_mean_us, add.diff_us) == (30.0, 10.0, 20.0)
    assert add.total_diff_us == 50.0
    assert [t.op for t in comparison.only_run] == ["aten::new"]
    assert [t.op for t in comparison.only_reference] == ["aten::gone"]


def test_compare_falls_back_to_cpu_time_unless_both_runs_have_device_time(device_rows):
    cpu_only = frame(
        [{**r, "device_time_us": 0.0, "self_device_time_us": 0.0} for r in device_rows]
    )
    with_device = frame(device_rows)
    both = compare_runs(with_device, with_device)
    assert both.metric == "device" and both.note == ""
    assert all(d.ratio == 1.0 for d in both.changes)
    one = compare_runs(with_device, cpu_only)
    assert one.metric == "cpu" and "only one of the runs has device time" in one.note
    assert "emu_kernel:mm" not in {d.op for d in one.changes}
    # time only in the run: an infinite ratio, ranked first
    slower = [{**r, "device_time_us": 0.0} if r["op"] == "aten::add" else r for r in device_rows]
    first = compare_runs(with_device, frame(slower), metric="device").changes[0]
    assert first.op == "aten::add" and math.isinf(first.ratio)


# -- the command --------------------------------------------------------------------------


@pytest.fixture
def ops(monkeypatch, capsys):
    monkeypatch.setattr(conformance.cli, "PART_MODULES", ("op_coverage.cli",))

    def run(*argv: str) -> tuple[int, str, str]:
        code = conformance.cli.main(["ops", *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def planted_run(root, run_id, test_ids, profile_rows=None, *, amends="", start="2026-01-01"):
    """A finished run under ``root`` with a passed record per test and, when given, a
    consolidated profile."""
    meta = RunMeta(run_id=run_id, backend="emu", amends=amends, start_time=start)
    writer = RunWriter(root / run_id, meta)
    for test_id in test_ids:
        writer.write(
            ResultRecord(run_id, nodeid=test_id, test_id=test_id, file="t.py", outcome="passed")
        )
    writer.close()
    if profile_rows is not None:
        profile = ProfileWriter(root / run_id)
        profile.write(profile_rows)
        profile.close()
    return root / run_id


def test_perf_prints_the_ranking_with_the_tests_that_spend_most(ops, tmp_path, device_rows):
    planted_run(tmp_path, "r1", [T1, T2], device_rows)
    code, out, _ = ops("perf", "r1", "--runs-root", str(tmp_path), "--top", "2", "--tests", "1")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == (
        "device time by op in run r1 (emu): 2 tests profiled, 0.140 ms in ATen ops; "
        "4 ops (top 2 shown)"
    )
    assert lines[2].split() == ["#", "op", "calls", "total", "ms", "mean", "us", "share"]
    assert lines[4].split() == ["1", "aten::mm", "3", "0.130", "43.3", "92.9%"]
    assert lines[5].split() == ["2", "aten::linear", "1", "0.090", "90.0", "64.3%"]
    assert "emu_kernel:mm" not in out  # beyond --top 2
    assert out.endswith(f"1. aten::mm\n    0.090 ms  {T2}\n2. aten::linear\n    0.090 ms  {T2}\n")


def test_perf_says_when_it_ranks_cpu_time(ops, tmp_path):
    planted_run(tmp_path, "r1", [T1], [row(T1, "aten::mm", 2, cpu=10, input_shapes=MM)])
    code, out, _ = ops("perf", str(tmp_path / "r1"), "--by", "op-shape", "--tests", "0")
    assert code == 0 and out.startswith("CPU time by op and input signature in run r1 (emu)")
    assert "note: the run has no device time (the device reports none to the profiler)" in out
    assert "tests that spend most" not in out
    assert [line.split()[:3] for line in out.splitlines() if "aten::mm" in line] == [
        ["1", "aten::mm", "[[4,"]
    ]


def test_perf_json(ops, tmp_path, device_rows):
    planted_run(tmp_path, "r1", [T1, T2], device_rows)
    code, out, _ = ops("perf", "r1", "--runs-root", str(tmp_path), "--json", "--top", "1")
    payload = json.loads(out)
    assert code == 0 and (payload["run_id"], payload["metric"], payload["aten_us"]) == (
        "r1",
        "device",
        140.0,
    )
    assert [op["op"] for op in payload["ops"]] == ["aten::mm"]
    assert payload["ops"][0]["tests"] == [{"test_id": T2, "us": 90.0}, {"test_id": T1, "us": 40.0}]


def test_perf_compare_ranks_what_got_slower(ops, tmp_path):
    planted_run(tmp_path, "old", [T1], [row(T1, "aten::mm", 10, cpu=1000), row(T1, "aten::x", 1)])
    planted_run(tmp_path, "new", [T1], [row(T1, "aten::mm", 10, cpu=2500), row(T1, "aten::y", 1)])
    root = ("--runs-root", str(tmp_path))
    code, out, _ = ops("perf", "new", "--compare", "old", *root)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == (
        "CPU time per call, run new (emu) against old (emu): 1 ops in both, "
        "1 slower and 0 faster (top 1 shown)"
    )
    assert lines[4].split() == ["1", "aten::mm", "10", "->", "10", "100.0", "250.0", "2.50x", "+150.0", "+1.500"]  # fmt: skip
    assert "only in the run (1):\n  aten::y: 1 calls, 0.000 ms" in out
    assert "only in the reference (1):\n  aten::x: 1 calls, 0.000 ms" in out
    code, out, _ = ops("perf", "new", "--compare", "old", "--json", *root)
    payload = json.loads(out)
    assert (payload["run_id"], payload["reference_run_id"]) == ("new", "old")
    assert payload["changes"][0]["ratio"] == 2.5


def test_perf_names_the_run_without_a_profile(ops, tmp_path):
    run = planted_run(tmp_path, "plain", [T1])
    code, _, err = ops("perf", str(run))
    assert code == 2
    assert f"{run}: no per-op profile (ops_profile.parquet): run it with --profile" in err
    planted_run(tmp_path, "new", [T1], [row(T1, "aten::mm", 1, cpu=1)])
    code, _, err = ops("perf", "new", "--compare", "plain", "--runs-root", str(tmp_path))
    assert code == 2 and f"{run}: no per-op profile" in err


def test_a_profiled_rerun_replaces_the_rows_of_the_tests_it_ran(ops, tmp_path):
    planted_run(
        tmp_path,
        "base",
        [T1, T2],
        [row(T1, "aten::mm", 1, cpu=100), row(T2, "aten::mm", 1, cpu=100)],
    )
    planted_run(
        tmp_path, "fix", [T2], [row(T2, "aten::mm", 1, cpu=300)], amends="base", start="2026-01-02"
    )
    # A rerun made without --profile leaves its tests' rows as they were.
    planted_run(tmp_path, "again", [T1], amends="base", start="2026-01-03")
    root = ("--runs-root", str(tmp_path))
    for rerun in ("fix", "again"):
        code, out, _ = ops("perf", rerun, *root, "--json")
        assert code == 0
        assert json.loads(out)["ops"][0]["tests"] == [
            {"test_id": T2, "us": 300.0},
            {"test_id": T1, "us": 100.0},
        ]
    code, out, _ = ops("perf", "fix", "--compare", "base", *root, "--json")
    assert json.loads(out)["changes"][0]["ratio"] == 2.0
