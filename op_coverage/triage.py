"""Which missing lowering blocks which tests, ranked by the tests a lowering would unblock.

A test is *blocked* by an op when its record has category ``missing_lowering`` and names an
ATen overload in ``detail``: the first overload the dispatcher could not run, which is often
not the op under test (``sin`` fails on ``aten::sin.out``, an integer ``make_tensor`` on
``aten::random_.from``). That holds whether the test failed at run time or a skiplist entry
skipped, xfailed or deselected it; a test that passed (or xpassed) is never blocked.

Counts are of distinct ``test_id`` values, so reruns and merged shards count once; when a
test has several records the last one wins. Everything here takes a DataFrame with the
columns of ``conformance.model.RECORD_COLUMNS`` and never touches torch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import pandas

from conformance.errors import ConfigError
from op_coverage.names import normalize_overload

__all__ = ["BlockingOp", "Triage", "blocked_tests", "dtype_grid", "triage"]

_NOT_BLOCKED = ("passed", "xpassed")
_BARE = re.compile(r"^[A-Za-z_]\w*(\.\w+)?$")
_REQUIRED = ("test_id", "template", "op", "dtype", "outcome", "category", "detail")


@dataclass(frozen=True)
class BlockingOp:
    """One missing lowering and the tests it blocks."""

    op: str  # "aten::cumsum.out"
    tests: int  # distinct test_ids blocked first on this op
    templates: int  # distinct test templates among them
    opinfos: int  # distinct OpInfo entries among them
    dtypes: tuple[str, ...]
    test_ids: tuple[str, ...]  # sorted
    status: str = ""  # static status, where a static table was given
    in_core: bool | None = None

    def headline(self) -> str:
        """The sentence a contributor reads: what to lower and what it buys."""
        return (
            f"lower {self.op}: {self.tests} test{'s' if self.tests != 1 else ''} no longer blocked "
            f"(in {self.templates} template{'s' if self.templates != 1 else ''} / "
            f"{self.opinfos} OpInfo{'s' if self.opinfos != 1 else ''})"
        )


@dataclass(frozen=True)
class Triage:
    """The ranking, best first, plus what could not be ranked."""

    ranked: list[BlockingOp]
    #: Ops that block tests in the run but have a lowering now (static status native,
    #: composite or fallback): lowered since the run, so their tests are no longer blocked.
    resolved: list[BlockingOp]
    #: missing_lowering records whose detail names no overload: detail -> test count.
    unnamed: dict[str, int]
    blocked_total: int  # distinct blocked tests, all ops together


def _blocking_name(detail: str) -> str | None:
    text = detail.strip()
    if "::" not in text and _BARE.match(text):
        text = f"aten::{text}"  # a bare overload from a skiplist entry ("cumsum.out")
    try:
        return normalize_overload(text)
    except ConfigError:
        return None


def _check_columns(records: pandas.DataFrame) -> None:
    missing = [name for name in _REQUIRED if name not in records.columns]
    if missing:
        raise ConfigError(f"records lack column(s) {', '.join(missing)}", where="triage")


def blocked_tests(records: pandas.DataFrame) -> pandas.DataFrame:
    """One row per blocked test (last record per test_id): test_id, template, op, dtype and
    ``blocking_op`` (normalized overload, or None when detail names none) plus ``detail``."""
    _check_columns(records)
    last = records.drop_duplicates("test_id", keep="last")
    mask = (last["category"] == "missing_lowering") & ~last["outcome"].isin(_NOT_BLOCKED)
    columns = ["test_id", "template", "op", "dtype", "detail"]
    # Missing values (a hand-made frame, an older store) read as empty fields.
    blocked = last.loc[mask, columns].fillna("").astype(str)
    names = {detail: _blocking_name(detail) for detail in blocked["detail"].unique()}
    blocked["blocking_op"] = blocked["detail"].map(names)
    return blocked.reset_index(drop=True)


def triage(
    records: pandas.DataFrame,
    statuses: Mapping[str, tuple[str, bool]] | None = None,
) -> Triage:
    """Rank missing lowerings by the distinct tests each blocks (then templates, then name).

    ``statuses`` maps overload -> (static status, in core ATen), from a static table or a
    snapshot; with it, ops that have a lowering now move from ``ranked`` to ``resolved``.
    """
    blocked = blocked_tests(records)
    named = blocked[blocked["blocking_op"].notna()]
    unnamed = blocked[blocked["blocking_op"].isna()]
    rows: list[BlockingOp] = []
    if len(named):
        # Built-in aggregations only (no per-group Python lambdas): 154,000 records in < 1 s.
        named = named.assign(
            template=named["template"].replace("", None), op=named["op"].replace("", None)
        )
        grouped = named.groupby("blocking_op", sort=False)
        counts = grouped[["test_id", "template", "op"]].nunique()
        dtypes = grouped["dtype"].unique()
        ids = grouped["test_id"].unique()
        for name, tests, templates, opinfos in counts.itertuples():
            status, in_core = (statuses or {}).get(str(name), ("", None))
            rows.append(
                BlockingOp(
                    str(name),
                    int(tests),
                    int(templates),
                    int(opinfos),
                    tuple(sorted(set(dtypes[name]) - {""})),
                    tuple(sorted(ids[name])),
                    status,
                    in_core,
                )
            )
    rows.sort(key=lambda r: (-r.tests, -r.templates, r.op))
    still = [r for r in rows if r.status in ("", "missing")]
    resolved = [r for r in rows if r.status not in ("", "missing")]
    return Triage(
        ranked=still,
        resolved=resolved,
        unnamed={str(k): int(v) for k, v in unnamed.groupby("detail")["test_id"].nunique().items()},
        blocked_total=int(blocked["test_id"].nunique()),
    )


def dtype_grid(records: pandas.DataFrame, ops: list[str] | None = None) -> pandas.DataFrame:
    """Blocked tests per (blocking op, dtype): rows are ops (``ops`` in that order, default
    every blocking op by total), columns dtypes by total, ``""`` shown as ``(none)``."""
    blocked = blocked_tests(records)
    blocked = blocked[blocked["blocking_op"].notna()]
    blocked = blocked.assign(dtype=blocked["dtype"].replace("", "(none)"))
    grid = pandas.crosstab(blocked["blocking_op"], blocked["dtype"])
    if grid.empty:
        return grid
    order = (
        list(ops)
        if ops is not None
        else list(grid.sum(axis=1).sort_values(ascending=False, kind="stable").index)
    )
    grid = grid.reindex([op for op in order if op in grid.index])
    columns = grid.sum(axis=0).sort_values(ascending=False, kind="stable").index
    grid = grid[columns]
    grid.index.name, grid.columns.name = "op", "dtype"
    return grid
