"""Fixtures for the report tests: small hand-written runs whose every number is known,
written in the results store layout, and a way to run ``conformance report``."""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

import pandas
import pytest

from conformance.errors import ConformanceError
from conformance.model import RECORD_COLUMNS, ResultRecord, RunMeta
from reports.synthetic import write_run

HOSTILE_SCRIPT = '<script>window.__hostile = 1; alert("xss")</script>'
HOSTILE_IMG = '</pre></td></tr></table><img src=x onerror="window.__hostile=2">'
CONTROL = "bell\x07 nul\x00 escape\x1b[31m red\x1b[0m del\x7f"
MEGABYTE = "M" * (1 << 20)


def record(test_id: str, outcome: str, category: str = "", **fields: object) -> ResultRecord:
    """A ResultRecord for ``file::Class::name`` with the structured fields filled in."""
    file, cls, name = test_id.split("::")
    return ResultRecord(
        run_id=str(fields.pop("run_id", "run")),
        nodeid=f"{file}::{cls}PRIVATEUSE1::{name}_emu",
        test_id=test_id,
        file=file,
        test_class=cls,
        template=str(fields.pop("template", name.split("_float")[0])),
        outcome=outcome,
        category=category,
        device="emu",
        **fields,  # type: ignore[arg-type]
    )


def frame_of(records: list[ResultRecord]) -> pandas.DataFrame:
    return pandas.DataFrame([r.to_dict() for r in records], columns=list(RECORD_COLUMNS))


def small_records(run_id: str = "run-b") -> list[ResultRecord]:
    """Twelve tests over two files and two operators; every outcome bucket, a missing
    lowering, a fallback pass and hostile messages."""
    ops = "test_ops.py::TestCommon::"
    torch = "test_torch.py::TestTorchDeviceType::"
    return [
        record(
            ops + "test_out_add_float32",
            "passed",
            op="add",
            dtype="float32",
            ops_dispatched=["aten::add.out"],
            duration_s=0.5,
            run_id=run_id,
        ),
        record(
            ops + "test_out_add_float16",
            "passed",
            op="add",
            dtype="float16",
            ops_fallback=["aten::add.out"],
            run_id=run_id,
        ),
        record(
            ops + "test_out_add_int64",
            "failed",
            "numerical_mismatch",
            op="add",
            dtype="int64",
            message="AssertionError: Tensor-likes are not close!\n\n"
            "Mismatched elements: 3 / 12 (25.0%)",
            run_id=run_id,
        ),
        record(
            ops + "test_out_cumsum_float32",
            "skipped",
            "missing_lowering",
            op="cumsum",
            dtype="float32",
            detail="aten::cumsum.out",
            skip_entry="skiplists/emu.toml:4",
            message="Could not run 'aten::cumsum.out' with arguments from the "
            "'PrivateUse1' backend.",
            run_id=run_id,
        ),
        record(
            ops + "test_out_cumsum_float64",
            "failed",
            "missing_lowering",
            op="cumsum",
            dtype="float64",
            detail="aten::cumsum.out",
            message="NotImplementedError: Could not run 'aten::cumsum.out' with arguments "
            "from the 'PrivateUse1' backend.",
            run_id=run_id,
        ),
        record(
            ops + "test_out_cumsum_int64",
            "failed",
            "numerical_mismatch",
            op="cumsum",
            dtype="int64",
            message="AssertionError: Tensor-likes are not close!\n\n"
            "Mismatched elements: 5 / 12 (41.7%)",
            run_id=run_id,
        ),
        record(
            ops + "test_out_cumsum_bool",
            "xfailed",
            "known_bug",
            op="cumsum",
            dtype="bool",
            skip_entry="skiplists/emu.toml:9",
            message="known bug",
            run_id=run_id,
        ),
        record(
            torch + "test_hostile_script",
            "error",
            "other",
            message=f"RuntimeError: {HOSTILE_SCRIPT}\n{HOSTILE_IMG}",
            run_id=run_id,
        ),
        record(
            torch + "test_hostile_megabyte",
            "failed",
            "other",
            message=f"RuntimeError: {CONTROL}\n{MEGABYTE}",
            run_id=run_id,
        ),
        record(torch + "test_name_<b>bold</b>", "passed", run_id=run_id),
        record(
            torch + "test_sparse",
            "skipped",
            "unsupported_feature",
            detail="sparse",
            message="sparse tensors are not supported on emu",
            run_id=run_id,
        ),
        record(
            torch + "test_hang",
            "timeout",
            "timeout",
            duration_s=300.0,
            message="Timeout (>300.0s) from pytest-timeout.",
            run_id=run_id,
        ),
    ]


#: Skiplist entries of cause_records: a cause entry, an exact xfail entry, and an entry that
#: applied to tests without expecting them to fail.
CAUSE = "skiplists/data/emu/base.toml:12"
EXACT = "skiplists/data/emu/base.toml:40"
LISTED = "skiplists/data/emu/torch-2.13.toml:7"


def cause_records(run_id: str = "run-c") -> list[ResultRecord]:
    """A cause entry that explained 3 tests over 2 templates (a fourth test failed on the
    same overload with no entry, and an entry skipped a fifth), an exact entry that expected
    4 tests of one template to fail, and tests an entry applied to without expecting them
    to fail (skipped, deselected, xpassed), which count for no entry."""

    def test(outcome: str, template: str, op: str, dtype: str, **fields: object) -> ResultRecord:
        test_id = f"embedded/test_ops.py::TestCommon::{template}_{op}_{dtype}"
        return record(
            test_id, outcome, template=template, op=op, dtype=dtype, run_id=run_id, **fields
        )

    lgamma = {"category": "missing_lowering", "detail": "aten::lgamma.out"}
    return [
        test("xfailed", "test_out", "lgamma", "float32", skip_entry=CAUSE, **lgamma),
        test("xfailed", "test_out", "lgamma", "float64", skip_entry=CAUSE, **lgamma),
        test("xfailed", "test_noncontiguous_samples", "lgamma", "float32", skip_entry=CAUSE,
             **lgamma),
        test("failed", "test_variant_consistency_eager", "lgamma", "float32", **lgamma),
        test("skipped", "test_out", "lgamma", "bfloat16", skip_entry=LISTED, **lgamma),
        *(
            test("xfailed", "test_compare_cpu", "erf", dtype, category="known_bug",
                 skip_entry=EXACT)
            for dtype in ("float16", "float32", "float64", "bfloat16")
        ),
        test("skipped", "test_out", "sin", "float32", category="unsupported_dtype",
             skip_entry=LISTED),
        test("deselected", "test_out", "cos", "float32", category="crash", skip_entry=LISTED),
        test("xpassed", "test_out", "tan", "float32", category="known_bug", skip_entry=LISTED),
        test("passed", "test_out", "add", "float32"),
    ]  # fmt: skip


def small_meta(run_id: str = "run-b", **fields: object) -> RunMeta:
    defaults: dict[str, object] = dict(
        start_time="2026-11-02T01:00:00+00:00",
        end_time="2026-11-02T02:00:00+00:00",
        torch_version="2.13.0",
        backend="emu",
        backend_version="0.1.0",
        harness_version="0.1.0",
        suite="embedded:smoke",
        host="ci",
        collected=12,
        expected=12,
        complete=True,
        command=["conformance", "run"],
    )
    defaults.update(fields)
    return RunMeta(run_id=run_id, **defaults)  # type: ignore[arg-type]


OP_COVERAGE = {
    "meta": {"format_version": 1, "backend": "emu"},
    "denominators": {
        "core_aten": {
            "description": "core ATen operators",
            "version": "2.13",
            "count": 4,
            "native": 1,
            "composite": 0,
            "fallback": 1,
            "missing": 2,
            "unknown": 0,
            "covered_pct": 25.0,
        },
    },
    "ops": [
        {
            "op": "aten::add.out",
            "status": "native",
            "source": "emu/ops.py:10",
            "in_core": True,
            "tests_blocked": 0,
        },
        {
            "op": "aten::add.Tensor",
            "status": "fallback",
            "source": "",
            "in_core": True,
            "tests_blocked": 0,
        },
        {
            "op": "aten::cumsum.out",
            "status": "missing",
            "source": "",
            "in_core": True,
            "tests_blocked": 2,
        },
        {
            "op": "aten::nonzero",
            "status": "missing",
            "source": "",
            "in_core": False,
            "tests_blocked": 7,
        },
    ],
}


def write_small_run(
    root: Path,
    run_id: str = "run-b",
    records: list[ResultRecord] | None = None,
    coverage: bool = True,
    **meta: object,
) -> Path:
    run_dir = write_run(
        root / run_id,
        small_meta(run_id, **meta),
        frame_of(records if records is not None else small_records(run_id)),
    )
    if coverage:
        (run_dir / "op_coverage.json").write_text(json.dumps(OP_COVERAGE), encoding="utf-8")
    return run_dir


def earlier_records(run_id: str = "run-a") -> list[ResultRecord]:
    """The run before small_records: the fallback pass was skipped, the int64 add passed,
    the cumsum float32 test did not exist yet, and a test since removed upstream passed."""
    rows = []
    for r in small_records(run_id):
        if r.test_id.endswith("test_out_cumsum_float32"):
            continue
        if r.test_id.endswith("test_out_add_float16"):
            r.outcome, r.category, r.ops_fallback = "skipped", "unsupported_dtype", []
        elif r.test_id.endswith(("test_out_add_int64", "test_out_cumsum_int64")):
            r.outcome, r.category, r.message = "passed", "", ""
        elif r.test_id.endswith("test_hang"):
            r.outcome, r.category, r.message = "failed", "other", "RuntimeError: boom"
        rows.append(r)
    rows.append(
        record(
            "test_ops.py::TestCommon::test_out_removed_float32",
            "passed",
            op="removed",
            dtype="float32",
            run_id=run_id,
        )
    )
    return rows


def make_runs_root(base: Path) -> Path:
    """A runs root under ``base`` with an earlier run (torch 2.12), the run under test
    (2.13, with op coverage), and a CPU baseline stored apart in ``base/baseline``."""
    root = base / "runs"
    write_small_run(
        root,
        "run-a",
        earlier_records(),
        coverage=False,
        torch_version="2.12.0",
        start_time="2026-10-01T01:00:00+00:00",
    )
    write_small_run(root, "run-b")
    cpu = [
        record(
            r.test_id,
            "passed" if "hostile" not in r.test_id else "failed",
            "" if "hostile" not in r.test_id else "other",
            run_id="cpu",
        )
        for r in small_records("cpu")
    ]
    write_small_run(base / "baseline", "cpu", cpu, coverage=False, backend="cpu")
    return root


@pytest.fixture
def runs_root(tmp_path: Path) -> Path:
    """See make_runs_root."""
    return make_runs_root(tmp_path)


def run_report(argv: list[str]) -> int:
    """``conformance report ARGS`` through the subcommand's own registration, with the
    CLI frame's error handling (ConformanceError -> message and exit code 2)."""
    from reports.cli import register

    parser = argparse.ArgumentParser(prog="conformance")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["report", *argv])
    try:
        return int(args.handler(args) or 0)
    except ConformanceError as exc:
        print(f"conformance report: error: {exc}")
        return exc.exit_code


def find_chromium() -> str | None:
    """The Chromium binary the browser tests (and the scale benchmark) drive: ``$CHROMIUM``,
    else ``chromium`` or ``chromium-browser`` on PATH; None when there is none."""
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return shutil.which(explicit)
    return shutil.which("chromium") or shutil.which("chromium-browser")
