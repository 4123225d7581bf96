"""The view model: every table's totals row is the sum of its rows, and the numbers match
what a user counts by hand on the small run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.errors import ConfigError
from reports.build import build_model, model_from_frame
from reports.counts import Counts
from reports.loading import load_op_coverage, load_run
from reports.synthetic import synthetic_op_coverage, synthetic_run
from tests.reports.conftest import frame_of, record, small_meta, small_records, write_small_run


def test_summary_is_the_breakdown_a_user_counts_by_hand(tmp_path: Path) -> None:
    model = build_model(write_small_run(tmp_path))
    s = model.summary
    assert (s.totals.total, s.totals.n_passed, s.totals.n_failed, s.totals.n_skipped) == (
        12,
        3,
        6,
        3,
    )
    assert s.fallback_passed == 1
    assert s.missing_lowering_tests == 2 and s.missing_lowering_ops == 1
    assert dict(s.skipped_by_category) == {
        "missing_lowering": 1,
        "unsupported_feature": 1,
        "known_bug": 1,
    }
    assert dict(s.failed_by_category) == {
        "missing_lowering": 1,
        "numerical_mismatch": 2,
        "timeout": 1,
        "other": 2,
    }


def test_totals_are_the_sum_of_the_rows_on_a_synthetic_run() -> None:
    meta, frame = synthetic_run(3000, seed=3)
    model = model_from_frame(meta, frame)
    assert sum(row.counts for row in model.files) == model.summary.totals
    assert sum(row.counts for row in model.categories).total == int((frame.category != "").sum())
    op_tests = model.frame.loc[model.frame["op"] != ""]
    assert sum(row.counts for row in model.ops).total == len(op_tests)
    for row in model.ops[:5]:
        assert sum(row.by_dtype.values(), Counts()) == row.counts
        assert sum((c for _, cells in row.grid for c in cells.values()), Counts()) == row.counts
    assert sum(g.counts.total for g in model.failure_groups) == model.summary.totals.n_failed


def test_ops_take_their_status_from_op_coverage(tmp_path: Path) -> None:
    model = build_model(write_small_run(tmp_path))
    ops = {row.op: row for row in model.ops}
    assert ops["add"].status == "fallback"  # worst of native .out and fallback .Tensor
    assert ops["add"].overloads == [("aten::add.Tensor", "fallback"), ("aten::add.out", "native")]
    assert ops["cumsum"].status == "missing" and ops["cumsum"].blocked == 2
    assert ops["cumsum"].by_dtype["float64"].n_failed == 1
    assert set(model.dtypes) == {"float32", "float16", "float64", "int64", "bool"}
    model = build_model(write_small_run(tmp_path / "bare", coverage=False))
    assert {row.status for row in model.ops} == {""}


def test_triage_ranks_missing_lowerings_by_tests_blocked(tmp_path: Path) -> None:
    model = build_model(write_small_run(tmp_path))
    first, second = model.triage
    # aten::nonzero is named only by op coverage (7 tests), ahead of cumsum's 2 records.
    assert (first.overload, first.blocked, first.status) == ("aten::nonzero", 7, "missing")
    assert (second.overload, second.skipped, second.failed, second.ops) == (
        "aten::cumsum.out",
        1,
        1,
        ["cumsum"],
    )


def test_failures_group_by_category_and_normalised_message(tmp_path: Path) -> None:
    model = build_model(write_small_run(tmp_path))
    groups = {(g.category, g.key): g.counts.total for g in model.failure_groups}
    assert groups[("numerical_mismatch", "AssertionError: Tensor-likes are not close!")] == 2
    assert model.failure_groups[0].counts.total == 2  # largest first


def test_bad_records_are_refused_with_the_test_named(tmp_path: Path) -> None:
    bad = small_records()
    bad[3].outcome = "exploded"
    write_small_run(tmp_path, records=bad)
    with pytest.raises(ConfigError, match=r"test_out_cumsum_float32.*'exploded'"):
        load_run(tmp_path / "run-b")
    twice = [*small_records(), record("test_torch.py::TestTorchDeviceType::test_sparse", "passed")]
    write_small_run(tmp_path, "dup", records=twice)
    with pytest.raises(ConfigError, match="recorded more than once"):
        load_run(tmp_path / "dup")
    other = [*small_records()[:2], record("a.py::C::t", "passed", category="made_up")]
    write_small_run(tmp_path, "cat", records=other)
    with pytest.raises(ConfigError, match="category 'made_up'"):
        load_run(tmp_path / "cat")


def test_bad_op_coverage_is_refused_naming_the_entry(tmp_path: Path) -> None:
    run_dir = write_small_run(tmp_path, coverage=False)
    (run_dir / "op_coverage.json").write_text(
        json.dumps(
            {
                "ops": [
                    {"op": "aten::add.out", "status": "native"},
                    {"op": "aten::mul.out", "status": "done"},
                ]
            }
        )
    )
    with pytest.raises(ConfigError, match=r"op_coverage.json: ops\[1\]: .*'done'"):
        load_op_coverage(run_dir)
    (run_dir / "op_coverage.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_op_coverage(run_dir)


def test_synthetic_run_has_the_realistic_mix() -> None:
    _, frame = synthetic_run(20000, seed=1)
    shares = frame["outcome"].value_counts(normalize=True)
    assert 0.40 < shares["passed"] < 0.50 and 0.40 < shares["skipped"] < 0.52
    skipped = frame.loc[frame["outcome"] == "skipped", "category"].value_counts(normalize=True)
    assert 0.25 < skipped["missing_lowering"] < 0.42
    assert {"crashed", "timeout", "failed", "error"} <= set(frame["outcome"])
    assert frame["test_id"].is_unique
    coverage = synthetic_op_coverage(frame)
    assert {op["status"] for op in coverage["ops"]} >= {"missing", "fallback", "native"}


def test_model_from_frame_accepts_an_in_memory_run() -> None:
    model = model_from_frame(small_meta(), frame_of(small_records()), generated="T")
    assert model.generated == "T" and model.summary.totals.total == 12


def test_opinfo_names_find_their_aten_overloads() -> None:
    from reports.loading import OpCoverage, OpStatus

    coverage = OpCoverage(
        ops={
            name: OpStatus(op=name, status=status)
            for name, status in (
                ("aten::div.Tensor", "native"),
                ("aten::linalg_norm", "missing"),
                ("aten::conv2d", "composite"),
                ("aten::norm.Scalar", "native"),
            )
        }
    )
    records = [
        record(f"test_ops.py::TestCommon::test_out_{op}_float32", "passed", op=op, dtype="float32")
        for op in ("div.no_rounding_mode", "linalg.norm", "nn.functional.conv2d", "erf")
    ]
    model = model_from_frame(small_meta(), frame_of(records), coverage=coverage)
    assert {row.op: row.status for row in model.ops} == {
        "div.no_rounding_mode": "native",
        "linalg.norm": "missing",
        "nn.functional.conv2d": "composite",
        "erf": "",
    }


def test_a_failure_the_run_left_unclassified_counts_as_other() -> None:
    records = [record("a.py::C::t1", "xpassed"), record("a.py::C::t2", "passed")]
    model = model_from_frame(small_meta(), frame_of(records))
    assert dict(model.summary.failed_by_category) == {"other": 1}
    assert [(row.category, row.counts.n_failed) for row in model.categories] == [("other", 1)]
    assert [g.category for g in model.failure_groups] == ["other"]


def test_skips_for_another_device_type_are_told_apart_from_the_backends() -> None:
    from reports.machine import markdown_summary

    records = [
        *small_records(),
        record("test_x.py::TestX::test_cuda_only", "skipped", "not_applicable", detail="cuda"),
        record("test_x.py::TestX::test_native", "skipped", "not_applicable", detail="onlyNative"),
        record("test_x.py::TestX::test_eager", "skipped", "not_applicable", detail="eager_only"),
        record("test_x.py::TestX::test_scipy", "skipped", "environment", detail="scipy"),
    ]
    model = model_from_frame(small_meta(), frame_of(records), generated="T")
    assert model.summary.totals.n_skipped == 7
    assert model.summary.other_device_skipped == 2  # compile mode's eager-only is not one
    assert "7** skipped: 2 written for another device type, 5 for other reasons" in (
        markdown_summary(model)
    )
