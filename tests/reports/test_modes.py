"""The eager/compile join at a nightly's size, keyed on test_id."""

from __future__ import annotations

import dataclasses

import pytest

from conformance.errors import ConfigError
from reports.modes import build_modes
from reports.synthetic import synthetic_run


def test_modes_join_154k_records_by_test_id_whatever_their_order():
    eager_meta, eager = synthetic_run(154_000, seed=3, run_id="eager")
    compile_meta = dataclasses.replace(eager_meta, run_id="compile", mode="compile")
    # The compile run recorded the tests in another order (other workers, other shards).
    compiled = eager.sample(frac=1.0, random_state=7).reset_index(drop=True).copy()
    passed = compiled.index[compiled["outcome"] == "passed"][:300]
    failed = compiled.index[compiled["outcome"] == "failed"][:200]
    compiled.loc[passed, ["outcome", "category", "detail"]] = [
        "failed",
        "compile_error",
        "graph_break",
    ]
    compiled.loc[failed, ["outcome", "category", "detail"]] = ["passed", "", ""]

    view = build_modes(compiled, compile_meta, eager, eager_meta)
    assert (view.eager.run_id, view.compiled.run_id, view.common) == ("eager", "compile", 154_000)
    assert {row["test_id"] for row in view.compile_only} == set(compiled.loc[passed, "test_id"])
    assert {row["test_id"] for row in view.eager_only} == set(compiled.loc[failed, "test_id"])
    assert dict((name, a) for name, a, _ in view.by_category)["compile_error"] == 300
    assert sum(a for _, a, _ in view.by_op) + sum(b for _, _, b in view.by_op) <= 500
    # The same join seen from the eager run.
    other_side = build_modes(eager, eager_meta, compiled, compile_meta)
    assert other_side.compile_only == view.compile_only and other_side.eager_only == view.eager_only


def test_two_runs_of_one_mode_do_not_join():
    meta, frame = synthetic_run(50, run_id="a")
    with pytest.raises(ConfigError, match="b ran in eager mode, like this run"):
        build_modes(frame, meta, frame, dataclasses.replace(meta, run_id="b"))
