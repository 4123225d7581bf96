from __future__ import annotations

import json

import pytest

from conformance.errors import ConfigError
from op_coverage.denominators import opinfo_overloads
from op_coverage.snapshot import SNAPSHOT_NAME, read_snapshot, write_snapshot
from op_coverage.static import StaticTable, static_table

from .conftest import write_run


@pytest.fixture(scope="module")
def cpu_table() -> StaticTable:
    return static_table("cpu")


def _planted_table(cpu_table: StaticTable) -> StaticTable:
    """The cpu table with two ops marked missing, as a backend without them would be."""
    ops = dict(cpu_table.ops)
    for op in ("aten::sin.out", "aten::random_.from"):
        ops[op] = type(ops[op])(op, "missing", in_core=ops[op].in_core)
    return StaticTable("cpu", "CPU", ops)


def test_snapshot_is_written_into_the_run_folder(tmp_path, planted_rows, cpu_table):
    run = write_run(tmp_path / "run", planted_rows)
    path = write_snapshot(run, static=_planted_table(cpu_table), opinfo=False)
    assert path == run / SNAPSHOT_NAME
    data = read_snapshot(run)
    meta = data["meta"]
    assert meta["format_version"] == 1 and meta["backend"] == "cpu" and meta["run_id"] == "r1"
    assert meta["torch_version"] and meta["harness_version"]
    ops = {row["op"]: row for row in data["ops"]}
    assert len(ops) == len(cpu_table.ops)
    assert ops["aten::sin.out"]["status"] == "missing"
    assert ops["aten::sin.out"]["tests_blocked"] == 3
    assert ops["aten::sin.out"]["templates_blocked"] == 2
    assert ops["aten::random_.from"]["opinfos_blocked"] == 2
    assert ops["aten::add.out"]["tests_dispatched"] == 1
    assert ops["aten::mul.out"]["tests_fallback"] == 1
    assert ops["aten::add.Tensor"]["in_core"] is True
    assert data["tests"] == {"total": 10, "blocked": 7, "traced": True}


def test_denominators_are_named_versioned_and_add_up(tmp_path, planted_rows, cpu_table):
    run = write_run(tmp_path / "run", planted_rows)
    data = read_snapshot(write_snapshot(run, static=_planted_table(cpu_table), opinfo=False))
    denominators = data["denominators"]
    assert set(denominators) == {"aten_all", "core_aten", "suite_exercised"}
    assert denominators["aten_all"]["version"].startswith("torch 2.")
    assert denominators["suite_exercised"]["version"] == "run r1"
    for d in denominators.values():
        assert (
            d["native"] + d["composite"] + d["fallback"] + d["missing"] + d["unknown"] == d["count"]
        )
    exercised = denominators["suite_exercised"]
    # dispatched: add.out, empty.memory_format, mul.out; blocked on: sin.out, random_.from,
    # cumsum.out (the rerun's exp.out passed, so it does not count)
    assert exercised["count"] == 6
    assert exercised["missing"] == 2


def test_unreadable_snapshots_are_named(tmp_path):
    with pytest.raises(ConfigError, match="no coverage snapshot"):
        read_snapshot(tmp_path)
    bad = tmp_path / SNAPSHOT_NAME
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(ConfigError, match="not JSON"):
        read_snapshot(bad)
    bad.write_text(json.dumps({"meta": {"format_version": 99}, "ops": []}), encoding="utf-8")
    with pytest.raises(ConfigError, match="format 99"):
        read_snapshot(tmp_path)
    bad.write_text(json.dumps({"ops": []}), encoding="utf-8")
    with pytest.raises(ConfigError, match="'meta'"):
        read_snapshot(bad)


@pytest.mark.slow
def test_opinfo_denominator_maps_entries_to_their_overloads():
    ops = opinfo_overloads(
        ["aten::add.Tensor", "aten::add_.Tensor", "aten::add.out", "aten::_foobar"]
    )
    assert ops == {"aten::add.Tensor", "aten::add_.Tensor", "aten::add.out"}
