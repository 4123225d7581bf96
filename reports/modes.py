"""Eager against compile: a run joined with a run of the same selection in the other mode.

Joined by test_id (a test's identity does not depend on the mode), like a baseline: which
tests pass eager and fail compiled (a decomposition that is wrong on the device, a graph
break, an op the backend's compiler lacks), and the reverse (an op with no eager lowering
whose decomposition is lowered), counted by category of the failing side and by op.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from conformance.errors import ConfigError
from conformance.model import RunMeta

if TYPE_CHECKING:
    import pandas

__all__ = ["ModesView", "build_modes"]

#: Outcomes that count as failing in one mode: what a run reports as not passing and ran.
FAILING = ("failed", "error", "crashed", "timeout", "xfailed")


@dataclass
class ModesView:
    """The eager run and the compile run of one selection, joined by test_id."""

    eager: RunMeta
    compiled: RunMeta
    common: int  # tests in both runs
    eager_passed: int  # of the common tests
    compile_passed: int
    compile_only: list[dict[str, str]] = field(default_factory=list)  # pass eager, fail compiled
    eager_only: list[dict[str, str]] = field(default_factory=list)  # fail eager, pass compiled
    #: (category of the failing side, failing compiled only, failing eager only)
    by_category: list[tuple[str, int, int]] = field(default_factory=list)
    #: (op, failing compiled only, failing eager only), most differences first
    by_op: list[tuple[str, int, int]] = field(default_factory=list)

    def op_counts(self, op: str) -> tuple[int, int] | None:
        """(failing compiled only, failing eager only) for ``op``, None when none differ."""
        for name, compile_only, eager_only in self.by_op:
            if name == op:
                return compile_only, eager_only
        return None


def build_modes(
    frame: pandas.DataFrame, meta: RunMeta, other: pandas.DataFrame, other_meta: RunMeta
) -> ModesView:
    """Join this run (``frame``) with a run in the other mode; ConfigError when both runs
    are of one mode."""
    modes = {meta.mode or "eager", other_meta.mode or "eager"}
    if modes != {"eager", "compile"}:
        raise ConfigError(
            f"{other_meta.run_id} ran in {other_meta.mode or 'eager'} mode, like this run: "
            "join an eager run with a compile run",
            where="--modes",
        )
    if (meta.mode or "eager") == "eager":
        (eager_meta, eager), (compile_meta, compiled) = (meta, frame), (other_meta, other)
    else:
        (eager_meta, eager), (compile_meta, compiled) = (other_meta, other), (meta, frame)
    columns = ["test_id", "op", "template", "outcome", "category", "detail"]
    joined = eager[columns].merge(
        compiled[columns], on="test_id", suffixes=("_eager", "_compile"), how="inner"
    )
    passed_eager = joined["outcome_eager"] == "passed"
    passed_compile = joined["outcome_compile"] == "passed"
    compile_only = joined[passed_eager & joined["outcome_compile"].isin(FAILING)]
    eager_only = joined[passed_compile & joined["outcome_eager"].isin(FAILING)]

    def rows(chosen: pandas.DataFrame, side: str) -> list[dict[str, str]]:
        return [
            {
                "test_id": row.test_id,
                "op": row.op_eager or "",
                "outcome": getattr(row, f"outcome_{side}"),
                "category": getattr(row, f"category_{side}"),
                "detail": getattr(row, f"detail_{side}"),
            }
            for row in chosen.sort_values("test_id").itertuples()
        ]

    view = ModesView(
        eager=eager_meta,
        compiled=compile_meta,
        common=len(joined),
        eager_passed=int(passed_eager.sum()),
        compile_passed=int(passed_compile.sum()),
        compile_only=rows(compile_only, "compile"),
        eager_only=rows(eager_only, "eager"),
    )
    categories: dict[str, list[int]] = {}
    ops: dict[str, list[int]] = {}
    for position, listed in enumerate((view.compile_only, view.eager_only)):
        for row in listed:
            categories.setdefault(row["category"] or "(none)", [0, 0])[position] += 1
            if row["op"]:
                ops.setdefault(row["op"], [0, 0])[position] += 1
    view.by_category = sorted(
        ((name, a, b) for name, (a, b) in categories.items()), key=lambda r: (-r[1] - r[2], r[0])
    )
    view.by_op = sorted(
        ((name, a, b) for name, (a, b) in ops.items()), key=lambda r: (-r[1] - r[2], r[0])
    )
    return view
