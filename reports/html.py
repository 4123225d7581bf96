"""The static HTML dashboard: pages rendered from a ReportModel with jinja2.

Templates (``reports/templates``) only loop and format; the helpers they use are passed in
as globals here. Pages open from disk with no network: styles and scripts are copied next
to them, charts are inline SVG, and the search index is a set of script files (``fetch``
of local files is blocked in browsers).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import jinja2
from markupsafe import Markup

from conformance.model import CATEGORIES, OUTCOMES
from reports import svg
from reports.build import ReportModel
from reports.counts import Counts, bucket_of, percent
from reports.features import STATUSES, FeatureRow, rule_text
from reports.loading import OP_STATUSES
from reports.tests_view import escape, grid_cell_html, rows_block, rows_html, search_records
from reports.viewmodel import PAGE_SIZE

if TYPE_CHECKING:
    import pandas

__all__ = ["SEARCH_CHUNK", "write_html"]

# Templates and static assets are package data beside this module (a path relative to the
# module works for wheels and for editable installs alike).
_PACKAGE = Path(__file__).resolve().parent
#: Tests per search data file: a few MB each, loaded one after another.
SEARCH_CHUNK = 25000
#: Rows of each kind of change shown on the diff page before linking to the full list.
DIFF_SHOWN = 100
#: Skiplist entries shown on the summary page before linking to the full list.
ENTRIES_SHOWN = 20
#: Flaky tests listed with their attempts on the summary page.
FLAKY_SHOWN = 50
#: Tests that did not pass natively listed on a feature area's page before linking to all.
FEATURE_SHOWN = 100
#: Tests that did not pass natively listed per feature area at most (a large run with many
#: failures would otherwise list most of its tests again for every area it is in).
FEATURE_LISTED = 2000
#: What each status of the feature matrix means, as its legend says.
FEATURE_LEGEND = (
    ("supported", "the area's tests pass natively on the device"),
    ("partial", "some pass, some fail or are refused"),
    ("unsupported", "none passes, or the backend refuses most of them"),
    ("not run", "no test of the area ran here"),
)
assert tuple(name for name, _ in FEATURE_LEGEND) == STATUSES


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_PACKAGE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=False,
    )
    env.globals.update(
        num=lambda n: f"{n:,}",
        percent=percent,
        bucket_of=bucket_of,
        outcomes=OUTCOMES,
        categories=CATEGORIES,
    )
    env.filters["ticks"] = _ticks
    return env


_TICKS = re.compile(r"`([^`]*)`")


def _ticks(text: str) -> Markup:
    """``text`` escaped, its Markdown code spans (rule descriptions use them) as <code>."""
    return Markup(_TICKS.sub(r"<code>\1</code>", str(Markup.escape(text))))


class _Writer:
    """Renders pages into one output folder with the context every page shares."""

    def __init__(self, model: ReportModel, out_dir: Path) -> None:
        self.model = model
        self.out_dir = out_dir
        self.env = _environment()
        # Flaky columns appear where there is something to show: in a run with flaky
        # tests, or among the runs its trends cover.
        self.env.globals["show_flaky"] = bool(model.summary.totals.flaky) or any(
            p.counts.flaky for p in (model.trends.runs if model.trends else ())
        )
        self.nav = self._nav()
        self.written: list[Path] = []

    def _nav(self) -> list[tuple[str, str]]:
        m = self.model
        nav = [
            ("index.html", "Summary"),
            ("features.html", "Features"),
            ("files.html", "Files"),
            ("categories.html", "Categories"),
            ("ops.html", "Operators"),
        ]
        if m.coverage:
            nav.append(("aten.html", "ATen overloads"))
        nav += [("triage.html", "Triage"), ("failures.html", "Failures"), ("search.html", "Search")]
        if m.diff:
            nav.append(("diff.html", "Diff"))
        if m.modes:
            nav.append(("modes.html", "Eager vs compile"))
        if m.trends:
            nav.append(("trends.html", "Trends"))
        return nav

    def page(self, template: str, path: str, title: str, **context: Any) -> None:
        """Render ``template`` to ``path`` (relative to the report root)."""
        depth = path.count("/")
        text = self.env.get_template(template).render(
            meta=self.model.meta,
            generated=self.model.generated,
            tool_version=self.model.tool_version,
            amended_by=self.model.amended_by,
            nav=self.nav,
            page=path,
            root="../" * depth,
            title=title,
            **context,
        )
        target = self.out_dir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8", errors="replace")
        self.written.append(target)

    def paged(
        self,
        prefix: str,
        title: str,
        rows: pandas.DataFrame,
        *,
        local: bool = False,
        messages: bool = False,
        other: pandas.Series | None = None,
        other_label: str = "",
        intro: str = "",
        rendered: list[str] | None = None,
    ) -> int:
        """List the tests of ``rows`` on pages ``<prefix>-<k>.html`` of PAGE_SIZE; returns
        the number of pages. ``other`` (by test_id) fills a column named ``other_label``;
        ``rendered`` gives the rows already formatted by rows_html."""
        pages = max(1, -(-len(rows) // PAGE_SIZE))
        name = prefix.rsplit("/", 1)[-1]
        root = "../" * prefix.count("/")
        html_rows = (
            rendered
            if rendered is not None
            else rows_html(rows, root=root, local=local, messages=messages, other=other)
        )
        for k in range(pages):
            suffix = f" (page {k + 1} of {pages})" if pages > 1 else ""
            self.page(
                "tests.html.j2",
                f"{prefix}-{k}.html",
                title + suffix,
                rows=rows_block(html_rows[k * PAGE_SIZE : (k + 1) * PAGE_SIZE]),
                count=len(html_rows[k * PAGE_SIZE : (k + 1) * PAGE_SIZE]),
                total=len(rows),
                pages=pages,
                current=k,
                prefix=name,
                first=k * PAGE_SIZE,
                with_messages=messages,
                other_label=other_label if other is not None else "",
                intro=intro,
            )
        return pages


def write_html(model: ReportModel, out_dir: Path) -> list[Path]:
    """Write every page of the dashboard into ``out_dir``; returns the files written."""
    w = _Writer(model, out_dir)
    total = sum((row.counts for row in model.files), Counts())
    w.page(
        "index.html.j2",
        "index.html",
        "Summary",
        s=model.summary,
        baseline=model.baseline,
        diff=model.diff,
        triage=model.triage,
        entries=model.entries,
        entries_shown=ENTRIES_SHOWN,
        collection_errors=model.collection_errors,
        flaky=model.flaky,
        flaky_shown=FLAKY_SHOWN,
        trend=model.trends.of_run(model.meta.run_id) if model.trends else None,
        features=model.features,
        feature_counts=_status_counts(model),
    )
    _write_features(w, model)
    w.page(
        "entries.html.j2",
        "entries.html",
        "Expected failures by skiplist entry",
        entries=model.entries,
        tests=sum(row.tests for row in model.entries),
    )
    w.page(
        "files.html.j2",
        "files.html",
        "By upstream file",
        files=model.files,
        total=total,
        page_size=PAGE_SIZE,
    )
    baseline = model.baseline.outcomes if model.baseline else None
    other_label = f"on {model.baseline.meta.backend or 'baseline'}" if model.baseline else ""
    for (file, slug), rows in model.frame.groupby(["file", "slug"], sort=True):
        w.paged(
            f"files/{slug}",
            str(file),
            rows,
            local=True,
            messages=True,
            other=baseline,
            other_label=other_label,
        )
    w.page(
        "categories.html.j2",
        "categories.html",
        "By category",
        categories=model.categories,
        total=sum((r.counts for r in model.categories), Counts()),
    )
    _write_ops(w, model)
    w.page(
        "triage.html.j2",
        "triage.html",
        "Triage: missing lowerings",
        triage=model.triage,
        coverage=model.coverage,
        op_slugs={row.op: row.slug for row in model.ops},
    )
    _write_failures(w, model)
    _write_search(w, model)
    if model.baseline:
        w.paged(
            "baseline",
            f"Fail only on {model.meta.backend or 'the backend'}",
            model.baseline.backend_only,
            messages=True,
            other=baseline,
            other_label=other_label,
            intro=f"Tests that failed in this run and passed in the baseline run "
            f"{model.baseline.meta.run_id}.",
        )
    if model.modes:
        w.page("modes.html.j2", "modes.html", "Eager against compile", modes=model.modes)
    if model.diff:
        shown = {
            kind.key: rows_block(rows_html(kind.rows.iloc[:DIFF_SHOWN], other=_other(kind.rows)))
            for kind in model.diff.kinds
        }
        w.page("diff.html.j2", "diff.html", "Diff", diff=model.diff, shown=shown, limit=DIFF_SHOWN)
        for kind in model.diff.kinds:
            if len(kind.rows) > DIFF_SHOWN:
                w.paged(
                    f"diff/{kind.key}",
                    kind.title,
                    kind.rows,
                    other=_other(kind.rows),
                    other_label="before",
                    intro=kind.description,
                )
    if model.trends:
        w.page(
            "trends.html.j2",
            "trends.html",
            "Trends",
            trends=model.trends,
            charts=_trend_charts(model),
        )
    _copy_static(out_dir)
    return w.written


def _status_counts(model: ReportModel) -> list[tuple[str, int]]:
    """How many rows of the feature matrix have each status, in STATUSES order."""
    rows = model.features.rows if model.features else []
    return [(name, sum(row.status == name for row in rows)) for name in STATUSES]


def _template_rows(row: FeatureRow, show_flaky: bool) -> Markup:
    """The rows of an area's by-template table, formatted here (as count_cells would): a
    large run's area has thousands of templates, and jinja2 macros cost ~0.5 ms a row."""

    def cell(value: int, css: str = "") -> str:
        return f'<td class="num{css}" data-value="{value}">{value:,}</td>'

    lines = []
    for file, cls, template, c in row.templates:
        flaky = cell(c.n_flaky, " flaky") if show_flaky else ""
        rate = c.n_passed / c.total if c.total else 0
        lines.append(
            f"<tr><td>{escape(file)}</td><td>{escape(cls)}</td>"
            f'<td><a href="../search.html?q={quote(template)}">{escape(template or "(none)")}'
            f"</a></td>{cell(c.total)}{cell(c.n_passed, ' passed')}{cell(c.n_failed, ' failed')}"
            f"{cell(c.n_skipped, ' skipped')}{flaky}{cell(c.fallback)}"
            f'<td class="num" data-value="{rate}">{c.pass_rate}</td></tr>'
        )
    return Markup("\n".join(lines))


def _write_features(w: _Writer, model: ReportModel) -> None:
    """The matrix page, and a page per area with the tests behind its cell: counts by
    template, and the tests that did not pass natively (the first FEATURE_LISTED of them
    listed, on pages of their own beyond FEATURE_SHOWN)."""
    matrix = model.features
    if matrix is None:
        return
    w.page(
        "features.html.j2",
        "features.html",
        "Feature matrix",
        matrix=matrix,
        legend=FEATURE_LEGEND,
        rule=rule_text(),
    )
    frame = model.frame
    # Rows are formatted once for every test listed in some area.
    wanted = sorted({i for row in matrix.rows for i in row.not_passed[:FEATURE_LISTED]})
    rendered = dict(zip(wanted, rows_html(frame.iloc[wanted], root="../"), strict=True))
    for row in matrix.rows:
        listed = row.not_passed[:FEATURE_LISTED]
        tests = [rendered[i] for i in listed]
        w.page(
            "feature.html.j2",
            f"features/{row.key}.html",
            f"{row.area.title}: {row.status}",
            row=row,
            template_rows=_template_rows(row, w.env.globals["show_flaky"]),
            before_run=matrix.before_run,
            shown=rows_block(tests[:FEATURE_SHOWN]),
            limit=FEATURE_SHOWN,
            listed=len(listed),
        )
        if len(tests) > FEATURE_SHOWN:
            cut = (
                f" Listed: the first {len(listed):,} of {len(row.not_passed):,}, in file order; "
                "the counts by template on the area's page cover them all."
                if len(listed) < len(row.not_passed)
                else ""
            )
            w.paged(
                f"features/{row.key}.tests",
                f"{row.area.title}: tests that did not pass natively",
                frame.iloc[listed],
                rendered=tests,
                intro=f"The tests of {row.area.title} that did not pass natively: "
                f"{row.why()}.{cut}",
            )


def _other(rows: pandas.DataFrame) -> pandas.Series:
    return rows.set_index("test_id")["other"]


def _write_ops(w: _Writer, model: ReportModel) -> None:
    frame = model.frame
    blocked = sum(row.blocked for row in model.ops)
    w.page(
        "ops.html.j2",
        "ops.html",
        "By operator",
        ops=model.ops,
        coverage=model.coverage,
        total=sum((row.counts for row in model.ops), Counts()),
        blocked=blocked,
    )
    w.page(
        "op_grid.html.j2",
        "op_grid.html",
        "Operator × dtype",  # noqa: RUF001
        ops=model.ops,
        dtypes=model.dtypes,
    )
    # Rows are formatted once for every test of an operator, then shared out per page.
    op_frame = frame.loc[frame["op"] != ""]
    op_rows = rows_html(op_frame, root="../")
    positions = op_frame.groupby("op", sort=False).indices
    for row in model.ops:
        dtypes = [d for d in model.dtypes if d in row.by_dtype]
        # Grid cells are formatted in Python: a run has ~100K (operator, test, dtype) cells.
        grid = [
            (template, Markup("".join(grid_cell_html(cells.get(d)) for d in dtypes)))
            for template, cells in row.grid
        ]
        # The op's tests are listed on pages of their own, so the grid page stays light.
        tests = positions[row.op]
        pages = w.paged(
            f"ops/{row.slug}.tests",
            f"Tests of operator {row.op}",
            op_frame.iloc[tests],
            rendered=[op_rows[i] for i in tests],
            intro=f"Every test of operator {row.op}; each links to its row on its file page.",
        )
        w.page(
            "op.html.j2",
            f"ops/{row.slug}.html",
            f"Operator {row.op}",
            op=row,
            modes=model.modes,
            dtypes=dtypes,
            grid=grid,
            test_pages=pages,
        )
    if model.coverage:
        statuses = sorted(
            model.coverage.ops.values(),
            key=lambda s: (OP_STATUSES.index(s.status), -s.tests_blocked, s.op),
        )
        counts = [(name, sum(1 for s in statuses if s.status == name)) for name in OP_STATUSES]
        w.page(
            "aten.html.j2",
            "aten.html",
            "ATen overloads",
            aten=statuses,
            status_counts=[(name, n) for name, n in counts if n],
            denominators=sorted(model.coverage.denominators.items()),
        )


def _write_failures(w: _Writer, model: ReportModel) -> None:
    frame = model.frame
    w.page(
        "failures.html.j2",
        "failures.html",
        "Failures by message",
        groups=model.failure_groups,
        failed=model.summary.totals.n_failed,
    )
    for group in model.failure_groups:
        w.paged(
            f"failures/{group.gid}",
            f"{group.category}: {group.key}",
            frame.loc[group.frame_index],
            messages=True,
            intro=f"{group.counts.total} failed tests.",
        )


def _write_search(w: _Writer, model: ReportModel) -> None:
    frame = model.frame
    files = [row.file for row in model.files]
    records = search_records(frame, files)
    chunks = -(-len(records) // SEARCH_CHUNK)
    folder = w.out_dir / "search"
    folder.mkdir(parents=True, exist_ok=True)
    index = {
        "total": len(records),
        "chunks": chunks,
        "pageSize": PAGE_SIZE,
        "files": [row.slug for row in model.files],
        "outcomes": list(OUTCOMES),
        "buckets": [bucket_of(o) for o in OUTCOMES],
        "categories": ["", *CATEGORIES],
    }
    # ASCII-only JSON: the files are scripts, and escapes keep every byte inert.
    (folder / "index.js").write_text(f"window.REPORT_SEARCH = {json.dumps(index)};\n", "ascii")
    w.written.append(folder / "index.js")
    for k in range(chunks):
        data = json.dumps(records[k * SEARCH_CHUNK : (k + 1) * SEARCH_CHUNK], separators=(",", ":"))
        path = folder / f"data-{k}.js"
        path.write_text(f"window.reportSearchChunk({k}, {data});\n", "ascii")
        w.written.append(path)
    w.page("search.html.j2", "search.html", "Search", total=len(records))


def _trend_charts(model: ReportModel) -> dict[str, Any]:
    trends = model.trends
    assert trends is not None
    runs = trends.runs
    labels = [p.label for p in runs]
    charts = {
        "runs_outcomes": svg.stacked_bars(
            labels,
            [
                ("passed", [p.counts.n_passed for p in runs], "passed"),
                ("failed", [p.counts.n_failed for p in runs], "failed"),
                ("skipped", [p.counts.n_skipped for p in runs], "skipped"),
                *(
                    [("flaky", [p.counts.n_flaky for p in runs], "flaky")]
                    if any(p.counts.flaky for p in runs)
                    else []
                ),
            ],
        ),
        "runs_rate": svg.line_chart(
            labels,
            [
                (
                    "pass rate",
                    [100.0 * p.counts.n_passed / max(1, p.counts.total) for p in runs],
                    "passed",
                ),
            ],
        ),
    }
    releases = trends.releases
    present = [c for c in CATEGORIES if any(p.skipped_by_category.get(c) for p in releases)]
    charts["releases_skips"] = svg.stacked_bars(
        [p.torch_version for p in releases],
        [
            (c, [p.skipped_by_category.get(c, 0) for p in releases], f"c{i % 8}")
            for i, c in enumerate(present)
        ],
    )
    return charts


def _copy_static(out_dir: Path) -> None:
    target = out_dir / "static"
    target.mkdir(parents=True, exist_ok=True)
    for entry in sorted((_PACKAGE / "static").iterdir()):
        # The folder is a package (so wheels carry its files): copy the assets only.
        if entry.is_file() and entry.suffix in (".css", ".js"):
            (target / entry.name).write_bytes(entry.read_bytes())
