from __future__ import annotations

import pytest

from conformance.errors import ConfigError
from op_coverage.triage import blocked_tests, dtype_grid, triage

from .conftest import blocked, frame, record


def test_ranking_counts_distinct_tests_templates_and_opinfos(planted_rows):
    result = triage(frame(planted_rows))
    assert [(r.op, r.tests, r.templates, r.opinfos) for r in result.ranked] == [
        ("aten::random_.from", 3, 2, 2),
        ("aten::sin.out", 3, 2, 1),
        ("aten::cumsum.out", 1, 1, 1),
    ]
    assert result.ranked[0].headline() == (
        "lower aten::random_.from: 3 tests no longer blocked (in 2 templates / 2 OpInfos)"
    )
    assert (
        result.ranked[2].headline().endswith("1 test no longer blocked (in 1 template / 1 OpInfo)")
    )
    assert result.blocked_total == 7


def test_blocking_op_is_the_detail_not_the_op_under_test(planted_rows):
    sin = next(r for r in triage(frame(planted_rows)).ranked if r.op == "aten::sin.out")
    assert sin.test_ids == (
        "test_ops.py::TestCommon::test_noncontiguous_sin_float32",
        "test_ops.py::TestCommon::test_out_sin_float32",
        "test_ops.py::TestCommon::test_out_sin_float64",
    )
    assert sin.dtypes == ("float32", "float64")
    assert "aten::sin" not in [r.op for r in triage(frame(planted_rows)).ranked]


def test_passed_reruns_and_xpassed_are_not_blocked(planted_rows):
    rows = [*planted_rows, blocked("t.py::C::test_x", "aten::exp.out", outcome="xpassed")]
    ids = set(blocked_tests(frame(rows))["test_id"])
    assert "test_ops.py::TestCommon::test_out_exp_float32" not in ids
    assert "t.py::C::test_x" not in ids


def test_skiplist_skips_count_as_blocked(planted_rows):
    cumsum = next(r for r in triage(frame(planted_rows)).ranked if r.op == "aten::cumsum.out")
    assert cumsum.test_ids == ("test_ops.py::TestCommon::test_out_cumsum_float32",)


def test_details_naming_no_overload_are_listed_apart():
    rows = [blocked("t.py::C::test_a", "needs a kernel"), blocked("t.py::C::test_b", "")]
    result = triage(frame(rows))
    assert result.ranked == []
    assert result.unnamed == {"needs a kernel": 1, "": 1}


def test_ops_lowered_since_the_run_leave_the_ranking(planted_rows):
    statuses = {"aten::sin.out": ("native", True), "aten::random_.from": ("missing", False)}
    result = triage(frame(planted_rows), statuses)
    assert [r.op for r in result.ranked] == ["aten::random_.from", "aten::cumsum.out"]
    assert [(r.op, r.status) for r in result.resolved] == [("aten::sin.out", "native")]
    assert result.ranked[0].in_core is False


def test_dtype_grid_counts_blocked_tests_per_op_and_dtype(planted_rows):
    grid = dtype_grid(frame(planted_rows))
    assert list(grid.index) == ["aten::random_.from", "aten::sin.out", "aten::cumsum.out"]
    assert grid.loc["aten::sin.out", "float32"] == 2
    assert grid.loc["aten::sin.out", "float64"] == 1
    assert grid.loc["aten::random_.from", "int32"] == 2
    assert grid.loc["aten::cumsum.out", "int64"] == 0
    assert int(grid.to_numpy().sum()) == 7


def test_records_without_required_columns_are_refused():
    with pytest.raises(ConfigError, match="detail"):
        triage(frame([{"test_id": "a", "outcome": "failed", "category": "missing_lowering"}]))


def test_no_blocked_tests_gives_an_empty_ranking():
    result = triage(frame([record("t.py::C::test_a", outcome="passed")]))
    assert result.ranked == [] and result.blocked_total == 0
    assert dtype_grid(frame([record("t.py::C::test_a", outcome="passed")])).empty


def test_missing_fields_read_as_empty():
    rows = [blocked("t.py::C::test_a", "aten::sin.out"), blocked("t.py::C::test_b", None)]
    rows[0]["template"] = None
    result = triage(frame(rows))
    assert [(r.op, r.templates) for r in result.ranked] == [("aten::sin.out", 0)]
    assert result.unnamed == {"": 1}
