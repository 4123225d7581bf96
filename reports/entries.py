"""Expected failures by skiplist entry: how many tests each entry that applied in the run
expected to fail, counted as ``conformance skiplist update`` counts them in the comment it
writes above a cause entry (``# 30 tests in 4 templates in run RUN``).

A report never loads skiplist files: everything here is read from the run's records, which
name the entry that applied (``skip_entry``, its ``path:line``) and the category and detail
the run recorded. So an entry's kind is not known either: an entry whose expected failures
all read one missing lowering or one unsupported feature is counted as a cause entry (an
exact entry of that category and detail reads the same), and those come first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas

__all__ = ["CAUSE_CATEGORIES", "EntryRow", "build_entries"]

#: The categories a cause entry names: a missing ATen overload or an unsupported feature.
CAUSE_CATEGORIES = ("missing_lowering", "unsupported_feature")


@dataclass(frozen=True, slots=True)
class EntryRow:
    """One skiplist entry and the tests it expected to fail (outcome ``xfailed``)."""

    entry: str  # "path:line"
    category: str  # shared by all its records, or "" when they differ
    detail: str  # shared by all its records, or "" when they differ
    tests: int  # distinct test_ids
    templates: int  # distinct (file, class, template), as skiplist update counts them
    cause: bool  # one category of CAUSE_CATEGORIES and one detail: read as a cause entry

    @property
    def cause_text(self) -> str:
        """What its tests were expected to fail for: ``missing_lowering aten::lgamma.out``."""
        if not self.category and not self.detail:
            return "several causes"
        return " ".join(
            part for part in (self.category or "several categories", self.detail) if part
        )

    @property
    def headline(self) -> str:
        """``30 tests expected to fail (4 templates)``."""
        return (
            f"{self.tests:,} test{'s' if self.tests != 1 else ''} expected to fail "
            f"({self.templates:,} template{'s' if self.templates != 1 else ''})"
        )


def build_entries(frame: pandas.DataFrame) -> list[EntryRow]:
    """One row per skiplist entry named by an expected failure (outcome ``xfailed`` with a
    ``skip_entry``): cause entries first, then by tests and templates, most first, then by name."""
    xfailed = frame.loc[
        (frame["outcome"] == "xfailed") & frame["skip_entry"].notna() & (frame["skip_entry"] != ""),
        ["skip_entry", "test_id", "file", "test_class", "template", "category", "detail"],
    ]
    if xfailed.empty:
        return []
    xfailed = xfailed.fillna("")
    grouped = xfailed.groupby("skip_entry", sort=False)
    table = grouped.agg(
        tests=("test_id", "nunique"),
        categories=("category", "nunique"),
        details=("detail", "nunique"),
        category=("category", "first"),
        detail=("detail", "first"),
    )
    table["templates"] = (
        xfailed.drop_duplicates(["skip_entry", "file", "test_class", "template"])
        .groupby("skip_entry", sort=False)
        .size()
    )
    table["category"] = table["category"].where(table["categories"] == 1, "")
    table["detail"] = table["detail"].where(table["details"] == 1, "")
    table["cause"] = (
        (table["categories"] == 1)
        & (table["details"] == 1)
        & table["category"].isin(CAUSE_CATEGORIES)
        & (table["detail"] != "")
    )
    table = table.rename_axis("entry").reset_index()
    table = table.sort_values(
        ["cause", "tests", "templates", "entry"],
        ascending=[False, False, False, True],
        kind="stable",
    )
    columns = table[["entry", "category", "detail", "tests", "templates", "cause"]]
    return [
        EntryRow(str(entry), str(category), str(detail), int(tests), int(templates), bool(cause))
        for entry, category, detail, tests, templates, cause in columns.itertuples(index=False)
    ]
