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
from reports.messages import DISPLAY_LIMIT, normalize_message, printable

if TYPE_CHECKING:
    import pandas

__all__ = [
    "LIST_COLUMNS",
    "FailureGroup",
    "build_failure_groups",
    "escape",
    "grid_cell_html",
    "join_columns",
    "rows_block",
    "rows_html",
    "search_records",
    "shown_column",
]


def escape(text: str) -> str:
    """``text`` with the HTML special characters escaped (quotes included)."""
    return html.escape(text)


@functools.lru_cache(maxsize=4096)
def grid_cell_html(counts: Counts | None) -> str:
    """One cell of an op x dtype grid: passed/total, coloured by the worst outcome.
    (Cached: most of a grid's ~100K cells hold one of a few hundred distinct counts.)"""
    if counts is None:
        return '<td class="cell none"></td>'
    return (
        f'<td class="cell {counts.worst}" title="{counts.n_passed} passed, '
        f"{counts.n_failed} failed, {counts.n_skipped} skipped"
        f'{f", {counts.n_flaky} flaky" if counts.n_flaky else ""}">'
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

    if frame.empty:
        return []
    # Every piece is a whole column (or a constant), joined once per row by Arrow's string
    # kernel: no Python work per row except bounding messages (printable).
    index = frame["index"].astype("str")
    parts: list[object] = []
    if local:
        parts += [
            '<tr id="t',
            index,
            '"><td class="test"><a href="#t',
            index,
            '">',
            _escape_column(_local_names(frame)),
            "</a></td>",
        ]
    else:
        name = _escape_column(frame["test_id"])
        linked = frame["href"] != ""
        parts += [
            linked.map({True: '<tr><td class="test"><a href="' + root, False: ""}),
            _escape_column(frame["href"]),
            linked.map({True: '">', False: '<tr><td class="test">'}),
            name,
            linked.map({True: "</a></td>", False: "</td>"}),
        ]
    if other is not None:
        was = frame["test_id"].map(other).fillna("").astype("str")
        parts.append(was.map(_OTHER_CELLS).fillna(_OTHER_CELLS[""]))
    parts += [
        frame["outcome"].map(_OUTCOME_CELLS).astype("str"),
        "<td>",
        frame["category"],
        "</td><td>",
        _escape_column(shown_column(frame, "detail")),
    ]
    fallbacks = _escape_column(shown_column(frame, "ops_fallback"))
    entries = _escape_column(frame["skip_entry"])
    parts += [
        _wrap('<div class="note">fell back: ', fallbacks, "</div>"),
        _wrap('<div class="note">skiplist: ', entries, "</div>"),
        "</td>",
    ]
    if messages:
        text = _escape_column(shown_column(frame, "message"))
        seconds = frame["duration_s"].map("{:.2f}".format)
        parts += [
            '<td class="num">',
            seconds,
            "</td><td>",
            _wrap('<pre class="msg">', text, "</pre>"),
            "</td>",
        ]
    parts.append("</tr>")
    return join_columns(parts, len(frame))


def shown_column(frame: pandas.DataFrame, name: str) -> pandas.Series:
    """A column as a page shows it: messages and details bounded by printable(), the ops
    that fell back joined with commas. Prepared frames carry these as ``<name>_shown``
    (computed once per report; a test is listed on several pages)."""
    if f"{name}_shown" in frame.columns:
        return frame[f"{name}_shown"]
    column = frame[name]
    if name == "ops_fallback":
        return column.map(lambda ops: ", ".join(ops) if len(ops) else "")
    limit = 300 if name == "detail" else DISPLAY_LIMIT
    return column.map(lambda text: printable(text, limit) if text else "")


def _local_names(frame: pandas.DataFrame) -> pandas.Series:
    """Test ids without their file (the file is the page's title)."""
    files = frame["file"].unique()
    if len(files) == 1:
        prefix = f"{files[0]}::"
        ids = frame["test_id"]
        return ids.str.slice(len(prefix)).where(ids.str.startswith(prefix), ids)
    names = [
        test_id[len(file) + 2 :] if test_id.startswith(file + "::") else test_id
        for test_id, file in zip(frame["test_id"].tolist(), frame["file"].tolist(), strict=True)
    ]
    return _column(names, frame)


def _wrap(before: str, column: pandas.Series, after: str) -> pandas.Series:
    """``before + value + after`` where the value is not empty, else empty."""
    return (before + column + after).where(column != "", "")


def join_columns(parts: list[object], length: int) -> list[str]:
    """Concatenate columns and constants row by row, in one Arrow pass."""
    import pyarrow
    import pyarrow.compute

    text = pyarrow.large_string()
    arrays = [
        pyarrow.scalar(part, text)
        if isinstance(part, str)
        else pyarrow.array(part.astype("str"), text)
        for part in parts
    ]
    # Constants broadcast; a frame of constants only would not know its length.
    arrays.append(pyarrow.array([""] * length, text))
    joined = pyarrow.compute.binary_join_element_wise(*arrays, pyarrow.scalar("", text))
    return joined.to_pylist()


def _column(values: list[str], frame: pandas.DataFrame) -> pandas.Series:
    import pandas

    return pandas.Series(values, index=frame.index, dtype="str")


def _escape_column(column: pandas.Series) -> pandas.Series:
    """HTML-escape a whole column (quotes included) in vectorised passes."""
    column = column.astype("str")
    for char, entity in _ENTITIES:
        column = column.str.replace(char, entity, regex=False)
    return column


_ENTITIES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"), ("'", "&#x27;"))
# The outcome cells are the same few strings over and over: made once.
_OUTCOME_CELLS = {
    name: f'<td><span class="badge {bucket_of(name)}">{name}</span></td>' for name in OUTCOMES
} | {"": "<td></td>"}
_OTHER_CELLS = {
    name: f'<td><span class="badge {bucket_of(name)}">{name}</span></td>' for name in OUTCOMES
} | {"": '<td><span class="badge none">absent</span></td>'}


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
