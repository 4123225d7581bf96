"""Per-test views: the rows of the paged test listings, failures grouped by message, and
the compact records the search page loads.

Test rows are the bulk of a report (one per test), so they are built straight from the
prepared frame's columns, without a per-row DataFrame lookup or row objects.
"""

from __future__ import annotations

import functools
import html
from dataclasses import dataclass
from typing import TYPE_CHECKING

from markupsafe import Markup

from conformance.model import CATEGORIES, OUTCOMES
from reports.counts import Counts, bucket_of
from reports.messages import normalize_message, printable

if TYPE_CHECKING:
    import pandas

__all__ = [
    "LIST_COLUMNS",
    "FailureGroup",
    "build_failure_groups",
    "escape",
    "grid_cell_html",
    "rows_block",
    "rows_html",
    "search_records",
]


def escape(text: str) -> str:
    """``text`` with the HTML special characters escaped (quotes included)."""
    return html.escape(text)


def _escaped(column: pandas.Series) -> list[str]:
    # One vectorised pass per column (Arrow string kernels) instead of a call per cell:
    # rows_html escapes several columns of every test of the run.
    column = column.astype("str")
    for char, entity in (
        ("&", "&amp;"),
        ("<", "&lt;"),
        (">", "&gt;"),
        ('"', "&quot;"),
        ("'", "&#x27;"),
    ):
        column = column.str.replace(char, entity, regex=False)
    return column.tolist()


@functools.lru_cache(maxsize=4096)
def grid_cell_html(counts: Counts | None) -> str:
    """One cell of an op x dtype grid: passed/total, coloured by the worst outcome.
    (Cached: most of a grid's ~100K cells hold one of a few hundred distinct counts.)"""
    if counts is None:
        return '<td class="cell none"></td>'
    return (
        f'<td class="cell {counts.worst}" title="{counts.n_passed} passed, '
        f'{counts.n_failed} failed, {counts.n_skipped} skipped">'
        f"{counts.n_passed}/{counts.total}</td>"
    )


#: Columns a frame needs to be listed with :func:`rows_html` (a prepared frame has them).
LIST_COLUMNS = (
    "test_id",
    "file",
    "href",
    "index",
    "outcome",
    "category",
    "detail",
    "message",
    "duration_s",
    "skip_entry",
    "ops_fallback",
)


def rows_html(
    frame: pandas.DataFrame,
    *,
    root: str = "",
    local: bool = False,
    messages: bool = False,
    other: pandas.Series | None = None,
) -> list[str]:
    """One ``<tr>`` per test of ``frame``, in frame order, every value escaped.

    This is the one place HTML is built outside a template: a report lists every test at
    least once (150K rows and more), and formatting rows here is ~20x faster than looping
    over row objects in jinja2, which keeps a report within its time budget. The columns
    match the header of ``tests.html.j2``; :func:`rows_block` joins rows for a template.

    ``local`` rows are on their own file page (anchored, named without the file);
    otherwise the test links to that row, ``root`` being the path back to the report root
    (tests with an empty ``href`` are not linked). ``other`` (indexed by test_id) adds a
    column with the outcome another run recorded for the test.
    """
    import pandas

    others = frame["test_id"].map(other).fillna("").tolist() if other is not None else None
    out: list[str] = []
    if frame.empty:
        return out
    # Messages and details are bounded (and control characters made visible) first; then
    # every free-text column is escaped in one vectorised pass.
    bounded_messages = frame["message"].map(printable) if messages else frame["message"]
    bounded_details = frame["detail"].map(lambda d: printable(d, 300) if d else "")
    fallbacks = frame["ops_fallback"].map(lambda ops: ", ".join(ops) if len(ops) else "")
    names = (
        [
            test_id[len(file) + 2 :] if test_id.startswith(file + "::") else test_id
            for test_id, file in zip(frame["test_id"].tolist(), frame["file"].tolist(), strict=True)
        ]
        if local
        else frame["test_id"].tolist()
    )
    columns = (
        _escaped(pandas.Series(names, index=frame.index, dtype="str")),
        frame["href"].tolist(),
        frame["index"].tolist(),
        frame["outcome"].tolist(),
        frame["category"].tolist(),  # a CATEGORIES value: nothing to escape
        _escaped(bounded_details),
        _escaped(bounded_messages) if messages else frame["message"].tolist(),
        frame["duration_s"].tolist(),
        _escaped(frame["skip_entry"]),
        _escaped(fallbacks),
    )
    for i, (
        name,
        href,
        index,
        outcome,
        category,
        detail,
        message,
        duration,
        entry,
        fallback,
    ) in enumerate(zip(*columns, strict=True)):
        if local:
            cells = [f'<tr id="t{index}"><td class="test"><a href="#t{index}">{name}</a></td>']
        elif href:
            cells = [f'<tr><td class="test"><a href="{root}{escape(href)}">{name}</a></td>']
        else:
            cells = [f'<tr><td class="test">{name}</td>']
        if others is not None:
            was = others[i]
            badge = bucket_of(was) if was else "none"
            cells.append(f'<td><span class="badge {badge}">{escape(was or "absent")}</span></td>')
        if outcome:
            cells.append(f'<td><span class="badge {bucket_of(outcome)}">{outcome}</span></td>')
        else:
            cells.append("<td></td>")
        cells.append(f"<td>{category}</td><td>{detail}")
        if fallback:
            cells.append(f'<div class="note">fell back: {fallback}</div>')
        if entry:
            cells.append(f'<div class="note">skiplist: {entry}</div>')
        cells.append("</td>")
        if messages:
            text = f'<pre class="msg">{message}</pre>' if message else ""
            cells.append(f'<td class="num">{duration:.2f}</td><td>{text}</td>')
        cells.append("</tr>")
        out.append("".join(cells))
    return out


def rows_block(rows: list[str]) -> Markup:
    """Rows from :func:`rows_html` as one block of markup for a template to print."""
    return Markup("\n".join(rows))


@dataclass
class FailureGroup:
    """Failed tests sharing a category and a normalised message."""

    gid: str
    category: str
    key: str
    counts: Counts
    example: str  # one full message of the group, bounded
    files: list[tuple[str, int]]
    frame_index: list[int]  # rows of the prepared frame, in frame order


def build_failure_groups(frame: pandas.DataFrame) -> list[FailureGroup]:
    """Failed tests grouped by (category, normalised message), largest group first."""
    failed = frame.loc[frame["bucket"] == "failed", ["category", "message", "outcome", "file"]]
    keys = failed["message"].map(normalize_message)
    groups = []
    for (category, key), group in failed.assign(key=keys).groupby(["category", "key"], sort=True):
        outcomes = group["outcome"].value_counts()
        files = group["file"].value_counts()
        groups.append(
            FailureGroup(
                gid="",
                category=str(category),
                key=str(key),
                counts=Counts(**{name: int(outcomes.get(name, 0)) for name in OUTCOMES}),
                example=printable(group["message"].iloc[0]),
                files=sorted(
                    ((str(f), int(n)) for f, n in files.items()), key=lambda i: (-i[1], i[0])
                ),
                frame_index=group.index.tolist(),
            )
        )
    groups.sort(key=lambda g: (-g.counts.total, g.category, g.key))
    for number, group in enumerate(groups):
        group.gid = f"g{number}"
    return groups


def search_records(frame: pandas.DataFrame, files: list[str]) -> list[list[object]]:
    """One compact record per test for the search page:
    ``[test_id, outcome code, category code, detail, file code, index in file]``, with
    codes indexing OUTCOMES, ("",) + CATEGORIES and ``files``."""
    outcome_code = {name: code for code, name in enumerate(OUTCOMES)}
    category_code = {name: code for code, name in enumerate(("", *CATEGORIES))}
    file_code = {name: code for code, name in enumerate(files)}
    return [
        [
            test_id,
            outcome_code[outcome],
            category_code[category],
            detail[:200],
            file_code[file],
            index,
        ]
        for test_id, outcome, category, detail, file, index in zip(
            frame["test_id"].tolist(),
            frame["outcome"].tolist(),
            frame["category"].tolist(),
            frame["detail"].tolist(),
            frame["file"].tolist(),
            frame["index"].tolist(),
            strict=True,
        )
    ]
