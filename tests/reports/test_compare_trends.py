"""Diffs between runs (with upstream churn kept apart), the CPU baseline join, and trends
over a runs root."""

from __future__ import annotations

from pathlib import Path

from reports.build import build_model
from reports.trends import build_trends
from tests.reports.conftest import write_small_run

OPS = "test_ops.py::TestCommon::"
TORCH = "test_torch.py::TestTorchDeviceType::"


def test_diff_sorts_changes_into_kinds_and_keeps_churn_apart(runs_root: Path) -> None:
    model = build_model(runs_root / "run-b", compare_dir=runs_root / "run-a")
    kinds = {k.key: k.rows["test_id"].tolist() for k in model.diff.kinds}
    assert kinds == {
        "new_failures": [OPS + "test_out_add_int64", OPS + "test_out_cumsum_int64"],
        "fixed": [],
        "new_passes": [OPS + "test_out_add_float16"],
        "newly_skipped": [],
        "added": [OPS + "test_out_cumsum_float32"],
        "removed": [OPS + "test_out_removed_float32"],
    }
    new = next(k for k in model.diff.kinds if k.key == "new_failures")
    assert new.rows["other"].tolist() == ["passed", "passed"]
    assert model.diff.common == 11
    # A failure that turned into a timeout is still failing: not a change of kind.
    assert all(TORCH + "test_hang" not in ids for ids in kinds.values())


def test_baseline_shows_failures_only_the_backend_has(runs_root: Path) -> None:
    model = build_model(runs_root / "run-b", baseline_dir=runs_root.parent / "baseline" / "cpu")
    b = model.baseline
    assert sorted(b.backend_only["test_id"]) == [
        OPS + "test_out_add_int64",
        OPS + "test_out_cumsum_float64",
        OPS + "test_out_cumsum_int64",
        TORCH + "test_hang",
    ]
    assert b.both_failed == 2  # the hostile tests fail on the CPU too
    assert b.skipped_here_passed_there == 3
    assert b.common == 12 and b.only_here == 0


def test_trends_have_a_point_per_run_and_a_row_per_release(runs_root: Path) -> None:
    write_small_run(runs_root, "run-c", start_time="2026-11-03T01:00:00+00:00")
    # A CPU run under the same root is not part of the backend's trend.
    write_small_run(runs_root, "cpu-run", backend="cpu", start_time="2026-11-04T00:00:00+00:00")
    trends = build_trends(runs_root, backend="emu")
    assert [p.run_id for p in trends.runs] == ["run-a", "run-b", "run-c"]
    assert [(p.added, p.removed) for p in trends.runs] == [(0, 0), (1, 1), (0, 0)]
    assert [(p.torch_version, p.run_id) for p in trends.releases] == [
        ("2.12.0", "run-a"),
        ("2.13.0", "run-c"),
    ]
    assert (trends.releases[1].added, trends.releases[1].removed) == (1, 1)
    assert trends.runs[1].counts.total == 12
    assert trends.runs[1].skipped_by_category == {
        "missing_lowering": 1,
        "unsupported_feature": 1,
        "known_bug": 1,
    }
    assert len(build_trends(runs_root).runs) == 4
