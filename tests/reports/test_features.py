"""The feature matrix: which tests each area holds and the status rule, on hand-made
records whose every outcome is known."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.embedded import TEMPLATES
from conformance.model import ResultRecord
from reports.build import build_model
from reports.features import (
    AREAS,
    STATUSES,
    SUPPORTED_RATE,
    build_features,
    memberships,
    rule_text,
    status_of,
)
from reports.machine import json_summary, markdown_summary
from reports.render import render_report
from reports.viewmodel import prepare
from tests.reports.conftest import frame_of, record

OPS = "embedded/test_ops.py::TestCommon::"


def op_test(name: str, outcome: str = "passed", category: str = "", **fields: object):
    """A test of the embedded suite's test_ops.py (``name`` after the class)."""
    fields.setdefault("template", name.rsplit("_", 2)[0])
    return record(OPS + name, outcome, category, **fields)


def matrix(records: list[ResultRecord], before: list[ResultRecord] | None = None):
    frame = prepare(frame_of(records))
    return build_features(
        frame,
        before=frame_of(before) if before is not None else None,
        before_run="earlier" if before is not None else "",
    )


def rows_of(records: list[ResultRecord]) -> dict[str, object]:
    return {row.key: row for row in matrix(records).rows}


def members(records: list[ResultRecord]) -> dict[str, set[str]]:
    """The test_ids each area holds (areas holding none left out)."""
    frame = frame_of(records)
    return {
        key: set(frame.loc[mask, "test_id"])
        for key, mask in memberships(frame).items()
        if mask.any()
    }


# -- The status rule ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("judged", "native", "refused", "status"),
    [
        (0, 0, 0, "not run"),
        (10, 10, 0, "supported"),
        (100, 95, 0, "supported"),  # the tolerance: 95% passing natively is enough
        (100, 94, 0, "partial"),
        (100, 99, 1, "partial"),  # one refusal keeps an area from supported
        (10, 0, 0, "unsupported"),  # none passed
        (10, 5, 5, "unsupported"),  # half refused
        (10, 6, 4, "partial"),
    ],
)
def test_status_rule(judged: int, native: int, refused: int, status: str) -> None:
    assert status_of(judged, native, refused) == status


def test_the_rule_in_words_names_the_threshold_and_every_status() -> None:
    text = rule_text()
    assert f"{SUPPORTED_RATE:.0%}" in text
    assert all(f"{status}:" in text for status in STATUSES)


def test_every_area_describes_its_rule() -> None:
    for area in AREAS:
        assert area.describe() and area.group in ("feature", "dtype"), area.key
    assert "test_ops.py" in next(a for a in AREAS if a.key == "eager_ops").describe()


# -- Which tests each area holds ----------------------------------------------------------------


def test_areas_hold_the_tests_their_rules_name() -> None:
    records = [
        op_test("test_out_add_float32", op="add", dtype="float32"),
        record(
            "embedded/test_ops_gradients.py::TestCompareCpuGradients::"
            "test_fn_grad_compare_cpu_add_float64",
            "passed",
            template="test_fn_grad_compare_cpu",
            op="add",
            dtype="float64",
        ),
        record(
            "test_ops_gradients.py::TestBwdGradients::test_fn_gradgrad_mul_float64",
            "passed",
            template="test_fn_gradgrad",
            op="mul",
            dtype="float64",
        ),
        record(
            "embedded/test_ops_gradients.py::TestFwdGradients::test_forward_mode_AD_add_float64",
            "passed",
            template="test_forward_mode_AD",
            op="add",
            dtype="float64",
        ),
        record(
            "test_ops_fwd_gradients.py::TestFwdGradients::test_fn_fwgrad_bwgrad_add_float64",
            "passed",
            template="test_fn_fwgrad_bwgrad",
            op="add",
            dtype="float64",
        ),
        record(
            "test_modules.py::TestModule::test_grad_nn_Linear_float64",
            "passed",
            template="test_grad",
            op="nn.Linear",
            dtype="float64",
        ),
        record(
            "embedded/test_autocast.py::TestAutocast::test_autocast_fp32_exp_bfloat16",
            "passed",
            template="test_autocast_fp32",
            op="exp",
            dtype="bfloat16",
        ),
        record(
            "embedded/test_profiler.py::TestProfiler::test_profiler_memory",
            "passed",
            template="test_profiler_memory",
        ),
        record(
            "embedded/test_distributed.py::TestDistributed::test_barrier",
            "passed",
            template="test_barrier",
        ),
        record(
            "distributed/test_c10d_gloo.py::ProcessGroupGlooTest::test_allreduce_basics",
            "passed",
            template="test_allreduce_basics",
        ),
        record(
            "test_accelerator.py::TestAccelerator::test_stream_sync",
            "passed",
            template="test_stream_sync",
        ),
        op_test("test_compare_cpu_to_sparse_float32", op="to_sparse", dtype="float32"),
        op_test("test_compare_cpu_nested_to_padded_float32", op="nested_to_padded"),
        op_test("test_compare_cpu_view_qint8", op="view", dtype="qint8"),
        op_test(
            "test_compare_cpu_nn_functional_scaled_dot_product_attention_float32",
            op="nn.functional.scaled_dot_product_attention",
            dtype="float32",
        ),
        op_test("test_conj_view_add_complex64", op="add", dtype="complex64", template="test_conj_view"),
        op_test("test_out_add_float32_int64", op="add", dtype="float32_int64", template="test_outx"),
        op_test("test_out_mul_float8_e4m3fn", op="mul", dtype="float8_e4m3fn", template="test_outy"),
        op_test("test_out_mul_bool", op="mul", dtype="bool", template="test_outz"),
        op_test("test_compare_cpu_narrow_dynamic_float32", op="narrow", template="test_dyn"),
    ]  # fmt: skip
    found = members(records)
    grads = {r.test_id for r in records if "grad" in r.template}
    assert found["autograd"] == grads - {records[4].test_id}
    assert found["forward_ad"] == {records[3].test_id, records[4].test_id}
    assert found["autocast"] == {records[6].test_id}
    assert found["profiler"] == {records[7].test_id}
    assert found["distributed"] == {records[8].test_id, records[9].test_id}
    assert found["runtime"] == {records[10].test_id}
    assert found["sparse"] == {records[11].test_id}
    assert found["nested"] == {records[12].test_id}
    assert found["quantization"] == {records[13].test_id}
    assert found["attention"] == {records[14].test_id}
    assert found["complex"] == {records[15].test_id}
    assert found["dynamic_shapes"] == {records[19].test_id}
    # Eager operators: the op tests that are not another feature's (and dense).
    assert records[0].test_id in found["eager_ops"]
    assert not found["eager_ops"] & (grads | found["autocast"] | found["sparse"])
    # A test of several dtypes counts in each of their families; layouts in their row only.
    assert records[16].test_id in found["dtype_floating"] & found["dtype_integer"]
    assert found["dtype_float8"] == {records[17].test_id}
    assert found["dtype_bool"] == {records[18].test_id}
    assert records[11].test_id not in found["dtype_floating"]
    assert "compile" not in found  # an eager run: no test in compile mode


def test_compile_mode_records_make_the_compile_row_not_eager_operators() -> None:
    rows = rows_of(
        [
            op_test("test_out_add_float32", op="add", dtype="float32", mode="compile"),
            op_test(
                "test_out_narrow_float32",
                "xfailed",
                "compile_error",
                op="narrow",
                dtype="float32",
                mode="compile",
                detail="dynamic_shapes",
                skip_entry="skiplists/data/emu/base.toml:3",
            ),
        ]
    )
    assert (rows["compile"].status, rows["compile"].judged, rows["compile"].native) == (
        "partial",
        2,
        1,
    )
    assert rows["eager_ops"].status == "not run"
    assert rows["dynamic_shapes"].status == "unsupported"  # its one test failed


def test_a_failure_refused_as_a_feature_joins_that_feature_row() -> None:
    refused = op_test(
        "test_compare_cpu_mm_float32",
        "failed",
        "unsupported_feature",
        op="mm",
        dtype="float32",
        detail="sparse",
    )
    rows = rows_of([refused, op_test("test_out_add_float32", op="add", dtype="float32")])
    assert rows["sparse"].status == "unsupported" and rows["sparse"].refused == 1
    assert rows["sparse"].refusals == [("unsupported_feature: sparse", 1)]
    # Out of the dense rows: eager operators and float32 pass on what is left.
    assert rows["eager_ops"].status == "supported" and rows["eager_ops"].judged == 1
    assert rows["dtype_floating"].status == "supported"


def test_the_embedded_layout_templates_land_in_their_rows_only() -> None:
    # The names in the embedded suite's template list place the tests: renaming one must
    # not move it out of its row (to read `not run`) or into a dense row.
    rows = {
        "test_sparse_coo": "sparse",
        "test_sparse_csr": "sparse",
        "test_nested_tensor_strided": "nested",
        "test_nested_tensor_jagged": "nested",
        "test_quantize_per_tensor": "quantization",
        "test_quantize_per_channel": "quantization",
    }
    assert set(TEMPLATES["test_layouts.py"]) == set(rows)
    layouts = "embedded/test_layouts.py::TestLayouts::"
    passing = [record(layouts + name, "passed", template=name) for name in rows]
    assert members(passing) == {
        area: {layouts + name for name, row in rows.items() if row == area}
        for area in ("sparse", "nested", "quantization")
    }
    # As emu ends them: refused, but for the jagged layout, which passes.
    entry = "skiplists/data/emu/base.toml:1"
    refused = [
        record(layouts + name, "xfailed", category, template=name, detail=detail, skip_entry=entry)
        for name, category, detail in (
            ("test_sparse_coo", "unsupported_feature", "sparse"),
            ("test_sparse_csr", "unsupported_feature", "sparse"),
            ("test_nested_tensor_strided", "unsupported_feature", "nested"),
            ("test_quantize_per_tensor", "missing_lowering", "aten::quantize_per_tensor"),
            ("test_quantize_per_channel", "unsupported_feature", "per_channel_quant"),
        )
    ]
    emu = rows_of([*refused, passing[3]])
    assert {key: (emu[key].status, emu[key].refused) for key in set(rows.values())} == {
        "sparse": ("unsupported", 2),
        "nested": ("unsupported", 1),
        "quantization": ("unsupported", 2),
    }
    assert all(row.status == "not run" for key, row in emu.items() if key not in rows.values())


# -- What counts -------------------------------------------------------------------------------


def test_skips_that_are_not_the_backends_are_left_out() -> None:
    rows = rows_of(
        [
            op_test("test_out_add_float32", "skipped", "not_applicable", op="add", detail="cuda"),
            op_test("test_out_sub_float32", "skipped", "upstream_skip", op="sub"),
            op_test("test_out_mul_float32", "skipped", "environment", op="mul", detail="scipy"),
            op_test("test_out_div_float32", "xfailed", "known_bug", op="div"),  # the test's own
        ]
    )
    row = rows["eager_ops"]
    assert row.status == "not run"
    assert (row.judged, row.not_applicable, row.not_counted, row.counts.total) == (0, 1, 3, 4)


def test_native_passes_fallbacks_and_known_failures() -> None:
    entry = "skiplists/data/emu/base.toml:7"
    rows = rows_of(
        [
            *(op_test(f"test_out_op{i}_float32", op=f"op{i}", dtype="float32") for i in range(16)),
            op_test("test_out_flaky_float32", "flaky", "flaky", op="f", detail="numerical_mismatch"),
            op_test("test_out_stale_float32", "xpassed", "known_bug", op="s", skip_entry=entry),
            op_test("test_out_fb_float32", "passed", op="fb", ops_fallback=["aten::fb.out"]),
            op_test("test_out_known_float32", "xfailed", "known_bug", op="k", skip_entry=entry),
        ]
    )  # fmt: skip
    row = rows["eager_ops"]
    # 18 native passes (flaky and an unexpected pass included) of 20: 90%.
    assert (row.judged, row.native, row.fallback, row.failing, row.refused) == (20, 18, 1, 1, 0)
    assert row.status == "partial" and row.rate == "90.0%"
    assert "passed via the CPU fallback (1)" in row.reasons(top=5)
    assert len(row.not_passed) == 2


def test_a_dtype_refused_only_by_a_dtype_refusal() -> None:
    rows = rows_of(
        [
            *(op_test(f"test_out_op{i}_float16", op=f"op{i}", dtype="float16") for i in range(30)),
            op_test("test_out_x_float16", "skipped", "unsupported_dtype", op="x", dtype="float16",
                    detail="float16"),
            *(op_test(f"test_out_op{i}_bfloat16", op=f"op{i}", dtype="bfloat16") for i in range(30)),
            record("embedded/test_distributed.py::TestDistributed::test_all_reduce_premul_bfloat16",
                   "skipped", "unsupported_feature", template="test_all_reduce", dtype="bfloat16",
                   detail="ReduceOp.PREMUL_SUM"),
        ]
    )  # fmt: skip
    reduced = rows["dtype_reduced"]
    assert reduced.status == "partial" and reduced.refused == 1
    assert reduced.refusals == [("unsupported_dtype: float16", 1)]
    assert reduced.not_counted == 1  # the feature refusal is the distributed row's
    assert rows["distributed"].status == "unsupported"  # its only test was refused


def test_a_missing_lowering_of_an_areas_own_op_is_a_refusal() -> None:
    rows = rows_of(
        [
            op_test("test_out_to_sparse_float32", "failed", "missing_lowering", op="to_sparse",
                    detail="aten::_to_sparse"),
            op_test("test_out_to_sparse_float64", op="to_sparse", dtype="float64"),
            op_test("test_out_add_float32", "failed", "missing_lowering", op="add",
                    detail="aten::add.out"),
            op_test("test_out_add_float64", op="add", dtype="float64"),
        ]
    )  # fmt: skip
    assert rows["sparse"].refused == 1 and rows["sparse"].status == "unsupported"
    # Elsewhere a missing lowering is a failure like any other.
    assert (rows["eager_ops"].refused, rows["eager_ops"].failing) == (0, 1)
    assert rows["eager_ops"].status == "partial"


# -- Between runs ------------------------------------------------------------------------------


def test_changes_against_an_earlier_run() -> None:
    before = [
        op_test("test_out_add_float32", "failed", "numerical_mismatch", op="add", dtype="float32"),
        op_test("test_out_add_float64", op="add", dtype="float64"),
    ]
    now = [
        op_test("test_out_add_float32", op="add", dtype="float32"),
        op_test("test_out_add_float64", op="add", dtype="float64"),
        op_test("test_out_add_complex64", "skipped", "unsupported_dtype", op="add",
                dtype="complex64", detail="complex64"),
    ]  # fmt: skip
    result = matrix(now, before)
    assert result.before_run == "earlier"
    changed = {row.key: row.change for row in result.changes}
    assert changed == {
        "dtype_floating": "partial -> supported",
        "dtype_complex": "not run -> unsupported",
        "complex": "not run -> unsupported",
    }
    # Partial before (a failure) and now (a refusal): no change to show.
    eager = next(row for row in result.rows if row.key == "eager_ops")
    assert (eager.before, eager.status, eager.change) == ("partial", "partial", "")


def test_reports_carry_the_matrix(tmp_path: Path) -> None:
    from tests.reports.conftest import make_runs_root

    root = make_runs_root(tmp_path)
    model = build_model(root / "run-b", compare_dir=root / "run-a")
    data = json_summary(model)["features"]
    areas = {area["key"]: area for area in data["areas"]}
    assert [a.key for a in AREAS] == list(areas)
    assert data["compare_run"] == "run-a" and data["rule"]["supported_rate"] == SUPPORTED_RATE
    sparse = areas["sparse"]
    assert (sparse["status"], sparse["before"], sparse["refused"]) == (
        "unsupported",
        "unsupported",
        1,
    )
    assert sparse["not_passed"] == ["test_torch.py::TestTorchDeviceType::test_sparse"]
    # float16's one test passed through the CPU fallback: no native pass.
    reduced = areas["dtype_reduced"]
    assert (reduced["status"], reduced["fallback"], reduced["native_pass_rate"]) == (
        "unsupported",
        1,
        0.0,
    )
    assert data["changes"] == [
        {"key": "dtype_integer", "title": "integers", "before": "supported", "now": "unsupported"}
    ]
    text = markdown_summary(model)
    assert "### Feature matrix" in text
    assert "| Sparse tensors | unsupported | unsupported | 0.0% | 1 | 1 | 0 |" in text
    assert "Changes since `run-a`: integers supported → unsupported." in text
    out = tmp_path / "report"
    render_report(model, out, ["html"])
    page = (out / "features.html").read_text()
    assert "Changes since run-a" in page and 'class="fstatus partial"' in page
    area = (out / "features" / "sparse.html").read_text()
    assert "test_torch.py::TestTorchDeviceType::test_sparse" in area
    assert "unsupported_feature: sparse" in area


def test_arrow_and_python_regular_expressions_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """A large run's test ids are searched with Arrow's engine, a small one's with Python's:
    the rules select the same tests with either."""
    import reports.features as features

    names = ["to_sparse", "nested_to_padded", "add", "nn.functional.scaled_dot_product_attention"]
    records = [
        op_test(
            f"test_compare_cpu_{names[i % 4]}_{i}_{dtype}",
            op=names[i % 4],
            dtype=dtype,
            template="test_compare_cpu",
            mode="" if i % 7 == 0 else "eager",  # a record with no mode is eager
        )
        for i, dtype in enumerate(
            ["float32", "qint8", "complex64", "bool", "float8_e5m2", "int64_float16"] * 200
        )
    ]
    frame = frame_of(records)
    assert features._arrow_strings(frame["test_id"])
    with_arrow = memberships(frame)
    monkeypatch.setattr(features, "_arrow_strings", lambda values: False)
    with_python = memberships(frame)
    for key, mask in with_arrow.items():
        assert (mask == with_python[key]).all(), key
    # Neither sparse nor nested (half the ops) nor quantized (qint8 among them), with a mode
    # or none.
    assert with_arrow["eager_ops"].sum() == 500
    assert with_arrow["dtype_float8"].sum() == 100  # half of them sparse


def test_names_that_only_look_like_a_feature_stay_out_of_it() -> None:
    found = members(
        [
            op_test("test_compare_cpu_quantile_float32", op="quantile", dtype="float32"),
            record(
                "embedded/test_autocast.py::TestAutocast::test_autocast_nested_float16",
                "passed",
                template="test_autocast_nested",
                dtype="float16",
            ),
            op_test("test_compare_cpu_masked_fill_float32", op="masked_fill", dtype="float32"),
        ]
    )
    assert {"quantization", "nested", "attention"}.isdisjoint(found)
    assert len(found["eager_ops"]) == 2 and len(found["autocast"]) == 1
