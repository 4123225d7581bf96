from __future__ import annotations

from op_coverage.diff import diff_snapshots
from op_coverage.render import format_diff

from .conftest import blocked, frame, record


def snap(torch_version: str, run_id: str, **ops: tuple) -> dict:
    """A snapshot from op -> (status, in_core[, tests_blocked])."""
    rows = []
    for name, spec in ops.items():
        status, in_core, *rest = spec
        rows.append(
            {
                "op": f"aten::{name}",
                "status": status,
                "kind": "",
                "in_core": in_core,
                "in_opinfo": False,
                "exercised": False,
                "tests_blocked": rest[0] if rest else 0,
            }
        )
    meta = {"format_version": 1, "backend": "emu", "torch_version": torch_version, "run_id": run_id}
    return {"meta": meta, "ops": rows, "denominators": {"aten_all": {}, "core_aten": {}}}


A = snap(
    "2.12.0",
    "a",
    sin=("missing", True, 5),
    cos=("native", True),
    tan=("fallback", False),
    gone=("missing", False),
    leaving_core=("native", True),
    matmul=("composite", False),
)
B = snap(
    "2.13.0",
    "b",
    sin=("native", True),
    cos=("missing", True),
    tan=("native", False),
    new_op=("native", True),
    leaving_core=("native", False),
    matmul=("native", False),
)


def test_backend_progress_counts_only_ops_both_releases_define():
    diff = diff_snapshots(A, B)
    assert [(c.op, c.before, c.after) for c in diff.gained] == [
        ("aten::sin", "missing", "native"),
        ("aten::tan", "fallback", "native"),
    ]
    assert diff.gained[0].tests_blocked_before == 5
    assert [(c.op, c.before, c.after) for c in diff.lost] == [("aten::cos", "native", "missing")]
    assert [c.op for c in diff.changed_kind] == ["aten::matmul"]


def test_upstream_churn_is_shown_apart():
    diff = diff_snapshots(A, B)
    assert [c.op for c in diff.torch_added] == ["aten::new_op"]
    assert [c.op for c in diff.torch_removed] == ["aten::gone"]
    assert diff.core_removed == ["aten::leaving_core"] and diff.core_added == []


def test_denominator_change_splits_into_progress_and_churn():
    core = diff_snapshots(A, B).denominators["core_aten"]
    # core before: sin (missing), cos, leaving_core: 2 of 3 covered; after: sin, cos (missing),
    # new_op: 2 of 3. Progress on ops in core both times (sin, cos): +1 -1 = 0; churn:
    # leaving_core left (-1), new_op entered (+1).
    assert (core["covered_a"], core["count_a"], core["covered_b"], core["count_b"]) == (2, 3, 2, 3)
    assert (core["progress"], core["churn"]) == (0, 0)
    everything = diff_snapshots(A, B).denominators["aten_all"]
    assert everything["progress"] == 1  # sin and tan gained, cos lost
    assert (
        everything["covered_b"] - everything["covered_a"]
        == everything["progress"] + everything["churn"]
    )


def test_tests_added_removed_renamed_and_unblocked():
    f = "test_ops.py::TestCommon::"
    before = frame(
        [
            blocked(
                f + "test_out_sin_float32",
                "aten::sin.out",
                template="test_out",
                op="sin",
                dtype="float32",
            ),
            record(f + "test_old_only", template="test_old_only", outcome="passed"),
            record(
                f + "test_variant_consistency_eager_abs_float32",
                template="test_variant_consistency_eager",
                op="abs",
                dtype="float32",
                outcome="passed",
            ),
            record("test_ops.py::TestMoved::test_moved", outcome="passed"),
            record(
                f + "test_stays_blocked",
                outcome="failed",
                category="missing_lowering",
                detail="aten::cos",
            ),
        ]
    )
    after = frame(
        [
            record(
                f + "test_out_sin_float32",
                template="test_out",
                op="sin",
                dtype="float32",
                outcome="passed",
            ),
            record(f + "test_new_only", outcome="passed"),
            record(
                f + "test_variant_consistency_eager_abs_float32_v2",
                template="test_variant_consistency_eager",
                op="abs",
                dtype="float32",
                outcome="passed",
            ),
            record("test_ops_moved.py::TestMoved::test_moved", outcome="passed"),
            record(
                f + "test_stays_blocked",
                outcome="failed",
                category="missing_lowering",
                detail="aten::cos",
            ),
            blocked(f + "test_now_blocked_new", "aten::tan"),
        ]
    )
    tests = diff_snapshots(A, B, before, after).tests
    assert tests.unblocked == [f + "test_out_sin_float32"]
    assert tests.newly_blocked == []  # the new blocked test is upstream churn, not a regression
    assert tests.renamed == [
        (
            f + "test_variant_consistency_eager_abs_float32",
            f + "test_variant_consistency_eager_abs_float32_v2",
        ),
        ("test_ops.py::TestMoved::test_moved", "test_ops_moved.py::TestMoved::test_moved"),
    ]
    assert tests.added == [f + "test_new_only", f + "test_now_blocked_new"]
    assert tests.removed == [f + "test_old_only"]


def test_rendered_diff_puts_progress_before_churn():
    text = format_diff(diff_snapshots(A, B))
    assert (
        text.index("Backend progress") < text.index("ops gained (2)") < text.index("Upstream churn")
    )
    assert text.index("Upstream churn") < text.index("ops added in torch (1)")
    assert "aten::sin: missing -> native [core], blocked 5 tests" in text
    assert "tests: not compared" in text


def test_exercised_ops_are_not_compared_when_only_one_run_traced():
    traced = {**B, "denominators": {"suite_exercised": {}}, "tests": {"traced": True}}
    untraced = {**A, "denominators": {"suite_exercised": {}}, "tests": {"traced": False}}
    diff = diff_snapshots(untraced, traced)
    assert "suite_exercised" not in diff.denominators
    assert diff.notes == ["suite_exercised not compared: op tracing was off in A and on in B"]
    assert "note: suite_exercised not compared" in format_diff(diff)
