"""Diffs between runs (with upstream churn kept apart), the CPU baseline join, and trends
over a runs root."""

from __future__ import annotations

from pathlib import Path

from reports.build import build_model
from reports.machine import json_summary, markdown_summary
from reports.render import render_report
from reports.trends import build_trends
from tests.reports.conftest import record, small_records, write_small_run

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
        "newly_flaky": [],
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
    assert (b.in_both, b.only_here, b.only_baseline) == (12, 0, 0)
    assert b.coverage_text == "12 tests in both runs, 0 only on emu, 0 only on cpu"
    assert b.warning == ""


PARTIAL_COVERAGE = "3 tests in both runs, 9 only on emu, 2 only on cpu"
PARTIAL_WARNING = (
    "warning: only 3 of the 12 tests of this run (25.0%) are in the cpu baseline; "
    "the backend-only count covers only those 3 tests"
)


def partial_baseline(root: Path) -> Path:
    """A CPU baseline that recorded 3 of run-b's 12 tests (all passed) and 2 of its own."""
    shared = [record(r.test_id, "passed", run_id="cpu") for r in small_records("cpu")[:3]]
    own = [record(OPS + f"test_out_cpu_only_{i}", "passed", run_id="cpu") for i in (1, 2)]
    return write_small_run(root, "cpu", [*shared, *own], coverage=False, backend="cpu")


def test_a_baseline_that_covers_part_of_the_run_says_so(runs_root: Path, tmp_path: Path) -> None:
    baseline = partial_baseline(tmp_path / "partial")
    model = build_model(runs_root / "run-b", baseline_dir=baseline)
    b = model.baseline
    assert (b.in_both, b.only_here, b.only_baseline) == (3, 9, 2)
    assert b.coverage_text == PARTIAL_COVERAGE
    assert b.warning == PARTIAL_WARNING
    # Only the shared int64 add can be told backend-only; the other failures are not joined.
    assert b.backend_only["test_id"].tolist() == [OPS + "test_out_add_int64"]

    data = json_summary(model)["baseline"]
    assert (data["in_both"], data["only_here"], data["only_baseline"]) == (3, 9, 2)
    assert data["common"] == 3 and data["warning"] == PARTIAL_WARNING

    text = markdown_summary(model)
    section = text.split("### Against the cpu baseline (`cpu`)", 1)[1].split("###", 1)[0]
    assert f"Coverage: {PARTIAL_COVERAGE}." in section
    assert f"> **{PARTIAL_WARNING}**" in section
    assert section.index(PARTIAL_WARNING) < section.index("tests fail only on emu")

    render_report(model, tmp_path / "report", ["html"])
    index = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    assert f'Coverage: <span class="coverage">{PARTIAL_COVERAGE}</span>.' in index
    assert f'<p class="warning">{PARTIAL_WARNING}</p>' in index


def test_a_baseline_that_covers_the_run_gives_no_warning(runs_root: Path, tmp_path: Path) -> None:
    model = build_model(runs_root / "run-b", baseline_dir=runs_root.parent / "baseline" / "cpu")
    assert json_summary(model)["baseline"]["warning"] is None
    text = markdown_summary(model)
    assert "Coverage: 12 tests in both runs, 0 only on emu, 0 only on cpu." in text
    assert "warning" not in text
    render_report(model, tmp_path / "report", ["html"])
    index = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    assert "12 tests in both runs, 0 only on emu, 0 only on cpu" in index
    assert 'class="warning"' not in index


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
