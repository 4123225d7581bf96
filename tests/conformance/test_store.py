"""The results store: append, consolidate, read back, survive a kill, resume."""

from __future__ import annotations

import json

import pytest

from conformance.errors import ConfigError, ConformanceError
from conformance.model import RECORD_COLUMNS, ResultRecord, RunMeta
from conformance.store import (
    JSONL_NAME,
    META_NAME,
    PARQUET_NAME,
    RunWriter,
    list_runs,
    new_run_id,
    read_run,
    resolve_run,
)


def record(nodeid: str, outcome: str = "passed", **fields) -> ResultRecord:
    return ResultRecord(
        run_id="r1", nodeid=nodeid, test_id=nodeid, file="test_x.py", outcome=outcome, **fields
    )


def test_records_are_readable_while_the_run_goes_on_and_after_it_ends(tmp_path):
    writer = RunWriter(tmp_path / "r1", RunMeta(run_id="r1", backend="cpu", start_time="t0"))
    writer.write(record("a"))
    writer.write(
        record(
            "b",
            "failed",
            category="missing_lowering",
            detail="aten::add.out",
            ops_fallback=["aten::sin.out"],
            duration_s=0.5,
        )
    )
    meta, frame = read_run(tmp_path / "r1")  # before the end: from the JSON lines
    assert not meta.complete
    assert list(frame["nodeid"]) == ["a", "b"]

    writer.close(collected=2)
    assert (tmp_path / "r1" / PARQUET_NAME).exists()
    meta, frame = read_run(tmp_path / "r1")
    assert meta.complete and meta.collected == 2 and meta.end_time
    assert list(frame.columns) == list(RECORD_COLUMNS)
    row = frame.set_index("nodeid").loc["b"]
    assert (row.outcome, row.category, row.detail) == (
        "failed",
        "missing_lowering",
        "aten::add.out",
    )
    assert row.ops_fallback == ["aten::sin.out"] and row.ops_dispatched == []
    assert row.duration_s == 0.5
    assert (tmp_path / "latest").resolve() == (tmp_path / "r1").resolve()


def test_a_torn_last_line_is_ignored_and_repaired_on_resume(tmp_path):
    run_dir = tmp_path / "r1"
    writer = RunWriter(run_dir, RunMeta(run_id="r1", backend="cpu"))
    writer.write(record("a"))
    writer.write(record("b"))
    with open(run_dir / JSONL_NAME, "a") as handle:  # a kill in the middle of a write
        handle.write('{"run_id": "r1", "nodeid": "c", "outc')
    _, frame = read_run(run_dir)
    assert list(frame["nodeid"]) == ["a", "b"]

    resumed = RunWriter(run_dir, RunMeta.from_dict(json.loads((run_dir / META_NAME).read_text())))
    assert resumed.recorded == {"a", "b"}
    assert not resumed.write(record("a"))  # already recorded: never twice
    assert resumed.write(record("c"))
    resumed.close()
    _, frame = read_run(run_dir)
    assert list(frame["nodeid"]) == ["a", "b", "c"]


def test_a_corrupt_line_inside_the_file_is_an_error_naming_file_and_line(tmp_path):
    run_dir = tmp_path / "r1"
    RunWriter(run_dir, RunMeta(run_id="r1")).write(record("a"))
    with open(run_dir / JSONL_NAME, "a") as handle:
        handle.write("not json\n")
        handle.write(json.dumps(record("b").to_dict()) + "\n")
    with pytest.raises(ConformanceError, match=rf"{JSONL_NAME}:2: corrupt record"):
        read_run(run_dir)


def test_missing_and_foreign_folders_are_named(tmp_path):
    with pytest.raises(ConfigError, match="no such run folder"):
        read_run(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"empty: not a run folder"):
        read_run(tmp_path / "empty")
    (tmp_path / "empty" / META_NAME).write_text("{")
    with pytest.raises(ConfigError, match=r"meta.json: unreadable run metadata"):
        read_run(tmp_path / "empty")


def test_runs_are_listed_oldest_first_and_resolved_by_id_path_or_latest(tmp_path):
    for run_id, start in (("b", "2026-01-02"), ("a", "2026-01-03")):
        RunWriter(tmp_path / run_id, RunMeta(run_id=run_id, start_time=start)).close()
    assert [m.run_id for m in list_runs(tmp_path)] == ["b", "a"]
    assert resolve_run("latest", tmp_path).resolve() == (tmp_path / "a").resolve()
    assert resolve_run("b", tmp_path) == tmp_path / "b"
    assert resolve_run(tmp_path / "b") == tmp_path / "b"
    with pytest.raises(ConfigError, match="no run named 'zzz'"):
        resolve_run("zzz", tmp_path)
    assert new_run_id("emu").split("-")[2] == "emu"


def test_an_interrupted_session_is_consolidated_but_not_complete(tmp_path):
    writer = RunWriter(tmp_path / "r1", RunMeta(run_id="r1"))
    writer.write(record("a"))
    writer.close(complete=False, collected=3)
    meta, frame = read_run(tmp_path / "r1")
    assert (meta.complete, meta.collected, len(frame)) == (False, 3, 1)


V1_RECORD = {
    "run_id": "old", "nodeid": "test_ops.py::TestCommonEMU::test_out_add_emu_float32",
    "test_id": "test_ops.py::TestCommon::test_out_add_float32", "file": "test_ops.py",
    "test_class": "TestCommon", "template": "test_out", "op": "add", "variant": "",
    "dtype": "float32", "params": "", "device": "emu", "outcome": "failed",
    "category": "missing_lowering", "detail": "aten::add.out", "message": "m",
    "duration_s": 0.5, "skip_entry": "", "ops_dispatched": ["aten::add.out"],
    "ops_fallback": [], "worker": "gw0", "shard": "", "rerun": 0,
}  # fmt: skip


@pytest.mark.parametrize("consolidated", [False, True])
@pytest.mark.parametrize(
    ("suite", "expected_suite", "prefix"),
    [("embedded:smoke", "embedded", "embedded/"), ("upstream:v2.13.0", "upstream", "")],
)
def test_runs_of_format_1_read_as_format_2(tmp_path, consolidated, suite, expected_suite, prefix):
    import pyarrow as pa
    import pyarrow.parquet as pq

    run_dir = tmp_path / "old"
    run_dir.mkdir()
    meta = {"run_id": "old", "format_version": 1, "backend": "emu", "suite": suite}
    (run_dir / META_NAME).write_text(json.dumps(meta))
    if consolidated:
        pq.write_table(pa.Table.from_pylist([V1_RECORD]), run_dir / PARQUET_NAME)
    else:
        (run_dir / JSONL_NAME).write_text(json.dumps(V1_RECORD) + "\n")
    _, frame = read_run(run_dir)
    row = frame.iloc[0]
    assert row.suite == expected_suite
    assert row.test_id == prefix + "test_ops.py::TestCommon::test_out_add_float32"
    assert row.file == prefix + "test_ops.py"
    assert row.ops_dispatched == ["aten::add.out"] and row.duration_s == 0.5
    assert list(frame.columns) == list(RECORD_COLUMNS)
    _, some = read_run(run_dir, ["test_id", "outcome"])
    assert list(some.columns) == ["test_id", "outcome"] and some.iloc[0].test_id == row.test_id


def test_an_untraced_rerun_keeps_the_ops_its_tests_dispatched_in_the_base(tmp_path):
    from conformance.store import read_amended

    base = RunWriter(tmp_path / "base", RunMeta(run_id="base", backend="emu", start_time="t0"))
    base.write(record("a", "failed", ops_dispatched=["aten::lgamma.out"]))
    base.write(record("b", "passed", ops_dispatched=["aten::add.Tensor"]))
    base.close(collected=2)
    for run_id, traced, ops in (("plain", False, []), ("traced", True, ["aten::exp"])):
        command = ["conformance", "run", "--rerun", "base"] + (["--trace-ops"] if traced else [])
        meta = RunMeta(run_id=run_id, backend="emu", start_time="t1", amends="base")
        meta.command = command
        rerun = RunWriter(tmp_path / run_id, meta)
        rerun.write(record("a", "passed", ops_dispatched=ops))
        rerun.close(collected=1)
        _, frame = read_amended(tmp_path / "base", [tmp_path / run_id])
        got = frame.set_index("test_id")
        assert got.loc["a", "outcome"] == "passed"
        # Untraced, the rerun recorded no ops: the base's stay. Traced, the rerun's win.
        assert got.loc["a", "ops_dispatched"] == (ops or ["aten::lgamma.out"])
        assert got.loc["b", "ops_dispatched"] == ["aten::add.Tensor"]
