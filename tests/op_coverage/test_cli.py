"""``conformance ops ...`` end to end on planted run folders."""

from __future__ import annotations

import json

import pytest

import conformance.cli
from op_coverage.snapshot import SNAPSHOT_NAME

from .conftest import record, write_run


@pytest.fixture
def ops(monkeypatch, capsys):
    # Only this part's commands: the test does not depend on the other parts' modules.
    monkeypatch.setattr(conformance.cli, "PART_MODULES", ("op_coverage.cli",))

    def run(*argv: str) -> tuple[int, str, str]:
        code = conformance.cli.main(["ops", *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_triage_prints_the_ranking_with_tests(ops, tmp_path, planted_rows):
    run = write_run(tmp_path / "run", planted_rows)
    code, out, _ = ops("triage", str(run), "--top", "2", "--tests", "2")
    assert code == 0
    assert "7 tests blocked by a missing lowering; 3 ops to lower (top 2 shown)" in out
    assert "lower aten::random_.from: 3 tests no longer blocked (in 2 templates / 2 OpInfos)" in out
    assert "    test_ops.py::TestCommon::test_noncontiguous_neg_int32" in out
    assert "    ... 1 more" in out
    assert "aten::cumsum.out" not in out  # third: beyond --top 2


def test_triage_grid_and_json(ops, tmp_path, planted_rows):
    run = write_run(tmp_path / "run", planted_rows)
    code, out, _ = ops("triage", str(run), "--grid")
    assert code == 0 and "blocked tests by op and dtype" in out
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("op ") and "float32" in line)
    assert header.split() == ["op", "float32", "int32", "float64", "int64"]  # by total, then name
    sin = [line for line in lines if line.startswith("aten::sin.out ")][-1]
    assert sin.split()[1:] == ["2", ".", "1", "."]
    code, out, _ = ops("triage", str(run), "--json", "--grid", "--top", "1")
    payload = json.loads(out)
    assert payload["ranked"][0]["op"] == "aten::random_.from"
    assert (
        payload["ranked"][0]["test_ids"][0]
        == "test_ops.py::TestCommon::test_noncontiguous_neg_int32"
    )
    assert payload["grid"] == {"aten::random_.from": {"int32": 2, "int64": 1}}


def test_snapshot_then_triage_uses_the_static_status(ops, tmp_path, planted_rows):
    run = write_run(tmp_path / "run", planted_rows, backend="cpu")
    code, out, _ = ops("snapshot", str(run), "--no-opinfo")
    assert code == 0 and (run / SNAPSHOT_NAME).is_file()
    assert "core_aten" in out and "suite_exercised" in out
    # Every op the planted tests were blocked on has a CPU kernel: all lowered "since the run".
    code, out, _ = ops("triage", str(run))
    assert "0 ops to lower" in out
    assert "aten::sin.out (native): 3 tests" in out


def test_diff_of_two_runs_compares_tests(ops, tmp_path, planted_rows):
    a = write_run(tmp_path / "a", planted_rows, run_id="a")
    b = write_run(
        tmp_path / "b",
        [*planted_rows[:-2], record("t.py::C::test_new", outcome="passed")],
        run_id="b",
    )
    for run in (a, b):
        assert ops("snapshot", str(run), "--no-opinfo")[0] == 0
    code, out, _ = ops("diff", str(a), str(b))
    assert code == 0
    assert "no op changed status" in out
    assert "tests added: 1, removed: 1, renamed: 0" in out
    code, out, _ = ops("diff", str(a / SNAPSHOT_NAME), str(b / SNAPSHOT_NAME), "--json")
    assert json.loads(out)["tests"] is None


def test_static_table_json(ops):
    code, out, _ = ops("table", "--device", "cpu", "--status", "missing", "--core", "--json")
    payload = json.loads(out)
    assert code == 0 and payload["dispatch_key"] == "CPU" and payload["registry"] is False
    assert sum(payload["counts"].values()) > 2000
    assert all(row["status"] == "missing" and row["in_core"] for row in payload["ops"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("triage", "no-such-run"), "no run named 'no-such-run'"),
        (("diff", "nowhere", "nowhere"), "no run named 'nowhere'"),
        (("table", "--device", "nosuchdevice"), "unknown device 'nosuchdevice'"),
    ],
)
def test_bad_input_exits_2_naming_it(ops, tmp_path, argv, message):
    code, _, err = ops(*argv)
    assert code == 2 and message in err


def test_diff_without_a_snapshot_says_how_to_make_one(ops, tmp_path, planted_rows):
    run = write_run(tmp_path / "run", planted_rows)
    code, _, err = ops("diff", str(run), str(run))
    assert code == 2 and "conformance ops snapshot" in err


def test_release_snapshot_without_a_run_and_its_diff(ops, tmp_path, planted_rows):
    release = tmp_path / "release-cpu.json"
    code, out, _ = ops("snapshot", "--device", "cpu", "--out", str(release), "--no-opinfo")
    assert code == 0 and release.is_file() and "aten_all" in out
    run = write_run(tmp_path / "run", planted_rows)
    assert ops("snapshot", str(run), "--no-opinfo", "--out", str(tmp_path / "run.json"))[0] == 0
    assert not (run / SNAPSHOT_NAME).exists()
    code, out, _ = ops("diff", str(release), str(tmp_path / "run.json"))
    assert code == 0 and "no op changed status" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("snapshot",), "give a run folder, or --device"),
        (("snapshot", "--device", "cpu"), "needs --out"),
    ],
)
def test_snapshot_needs_a_run_or_a_device_with_out(ops, argv, message):
    code, _, err = ops(*argv)
    assert code == 2 and message in err
