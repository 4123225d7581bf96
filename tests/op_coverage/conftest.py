"""Planted runs for the op coverage tests: records built from a few keyword fields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas
import pytest

from conformance.model import ResultRecord, RunMeta


def record(test_id: str, **fields: Any) -> dict[str, Any]:
    """A full ResultRecord dict; ``nodeid`` and ``file`` follow from ``test_id``."""
    base = ResultRecord(run_id="r1", nodeid=test_id, test_id=test_id, file=test_id.split("::")[0])
    data = base.to_dict()
    data.update(fields)
    return data


def frame(rows: list[dict[str, Any]]) -> pandas.DataFrame:
    return pandas.DataFrame.from_records(rows)


def write_run(
    folder: Path, rows: list[dict[str, Any]], backend: str = "cpu", run_id: str = "r1"
) -> Path:
    """A run folder as the store lays it out: meta.json plus outcomes.jsonl."""
    folder.mkdir(parents=True, exist_ok=True)
    meta = RunMeta(run_id=run_id, backend=backend, torch_version="2.13.0", complete=False)
    (folder / "meta.json").write_text(json.dumps(meta.to_dict()), encoding="utf-8")
    with open(folder / "outcomes.jsonl", "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps({**row, "run_id": run_id}) + "\n")
    return folder


def blocked(test_id: str, op_detail: str, **fields: Any) -> dict[str, Any]:
    """A test that failed on a missing lowering."""
    fields.setdefault("outcome", "failed")
    return record(test_id, category="missing_lowering", detail=op_detail, **fields)


@pytest.fixture
def planted_rows() -> list[dict[str, Any]]:
    """Ten tests: sin blocked on sin.out (3 dtypes), integer inputs blocked on random_.from
    in two templates, one skiplist-skipped on cumsum.out, passes, and a rerun."""
    f = "test_ops.py::TestCommon::"
    return [
        blocked(
            f + "test_out_sin_float32",
            "aten::sin.out",
            template="test_out",
            op="sin",
            dtype="float32",
        ),
        blocked(
            f + "test_out_sin_float64",
            "aten::sin.out",
            template="test_out",
            op="sin",
            dtype="float64",
        ),
        blocked(
            f + "test_noncontiguous_sin_float32",
            "aten::sin.out",
            template="test_noncontiguous",
            op="sin",
            dtype="float32",
        ),
        blocked(
            f + "test_out_abs_int64",
            "aten::random_.from",
            template="test_out",
            op="abs",
            dtype="int64",
        ),
        blocked(
            f + "test_out_neg_int32",
            "aten::random_.from",
            template="test_out",
            op="neg",
            dtype="int32",
        ),
        blocked(
            f + "test_noncontiguous_neg_int32",
            "random_.from",
            template="test_noncontiguous",
            op="neg",
            dtype="int32",
        ),
        blocked(
            f + "test_out_cumsum_float32",
            "aten::cumsum.out",
            template="test_out",
            op="cumsum",
            dtype="float32",
            outcome="skipped",
            skip_entry="skiplists/emu.toml:3",
        ),
        record(
            f + "test_out_add_float32",
            template="test_out",
            op="add",
            dtype="float32",
            outcome="passed",
            ops_dispatched=["aten::add.out", "aten::empty.memory_format"],
        ),
        record(
            f + "test_out_mul_float32",
            template="test_out",
            op="mul",
            dtype="float32",
            outcome="passed",
            ops_dispatched=["aten::mul.out"],
            ops_fallback=["aten::mul.out"],
        ),
        # A rerun that passed: the last record wins, so this test is not blocked.
        blocked(
            f + "test_out_exp_float32",
            "aten::exp.out",
            template="test_out",
            op="exp",
            dtype="float32",
        ),
        record(
            f + "test_out_exp_float32",
            template="test_out",
            op="exp",
            dtype="float32",
            outcome="passed",
            rerun=1,
        ),
    ]
