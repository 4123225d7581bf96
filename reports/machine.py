"""Machine outputs: a versioned JSON summary, a Markdown summary for CI step summaries and
PR comments, JUnit XML, and the record PyTorch HUD's out-of-tree pages ingest.

All four are computed from the same :class:`~reports.build.ReportModel` rows as the HTML,
so their numbers agree with the dashboard.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reports.build import ReportModel
from reports.claims import difference
from reports.compare import FileDrop
from reports.counts import percent
from reports.features import SUPPORTED_RATE, FeatureMatrix, FeatureRow, rule_text
from reports.messages import printable
from reports.viewmodel import FlakyRow

if TYPE_CHECKING:
    import pandas

__all__ = [
    "JSON_FORMAT",
    "hud_record",
    "json_summary",
    "markdown_summary",
    "write_junit",
]

# Version of the JSON summary. Bump it when a field is added, removed or changes meaning:
#   1: first version.
#   2: ``baseline`` states the join's coverage: ``in_both`` (the same number as ``common``,
#      kept), ``only_here``, ``only_baseline``, and ``warning`` (the low-coverage warning,
#      or null).
#   3: ``expected_failures_by_entry`` lists the skiplist entries that expected tests to fail
#      (outcome xfailed), cause entries first: ``entry`` ("path:line"), ``category`` and
#      ``detail`` ("" when its records differ), ``tests``, ``templates``, and ``cause`` (its
#      records all read one missing lowering or unsupported feature); each row of
#      ``missing_lowerings`` gains ``xfailed`` (its blocked tests that were expected failures).
#   4: ``meta.amended_by`` lists the reruns whose outcomes the report shows; ``modes`` (or
#      null) joins the run with a run in the other mode: ``eager_run``, ``compile_run``,
#      ``common``, ``eager_passed``, ``compile_passed``, the test_ids that
#      ``fail_compiled_only`` and ``fail_eager_only``, and both counts ``by_category`` and
#      ``by_op``.
#   5: ``collection_errors`` lists the files, modules or classes that failed to collect:
#      ``test_id``, ``file``, ``outcome`` (``error``, or the outcome a skiplist entry
#      expected), ``detail`` (the exception's type), ``message`` and ``skip_entry``; ``diff``
#      gains ``fewer_tests``: the files this run collected fewer tests from than the run it
#      is compared with (``file``, ``before``, ``now``, ``error``: the first line of its
#      collection error, or ""); each run of ``trends.runs`` gains ``fewer_tests`` (the
#      same, against the run of the same selection before it, the error being the
#      exception's type) and ``compared_with`` (that run's id, or ""), empty in
#      ``trends.releases``.
#   6: the outcome ``flaky`` (failed, then passed on a retry in a fresh process): every
#      counts block gains ``flaky`` and ``bucket_flaky`` (a fourth bucket beside passed,
#      failed and skipped: ``total`` is their sum), and ``flaky`` lists the flaky tests:
#      ``test_id``, ``file``, ``detail`` (the first attempt's category) and ``attempts``
#      (``outcome``, ``category``, ``detail``, ``message``: its first line, ``duration_s``).
#   7: ``baseline`` says whether the baseline ran on demand (only the tests that did not pass
#      here): ``on_demand``, ``needed`` (this run's tests that did not pass) and
#      ``not_rerun`` (passing tests the baseline did not re-run; ``only_here`` then counts
#      the tests that needed it and are not in it); ``warning`` is judged on ``needed``.
#   8: ``features``, the feature matrix: ``rule`` (``supported_rate`` and the rule in words),
#      ``compare_run`` (the run the changes are against, or null), ``areas`` (per feature area
#      and dtype family: ``key``, ``title``, ``group`` (``feature`` or ``dtype``), ``status``
#      (``supported``, ``partial``, ``unsupported`` or ``not run``), ``before`` (the status in
#      the compare run, or null), ``native_pass_rate`` (of the judged tests, or null), the
#      counts ``judged``, ``native``, ``fallback``, ``refused``, ``failing``,
#      ``not_counted`` and ``not_applicable``, ``counts`` (every test of the area by outcome),
#      ``refusals`` and ``failures`` (``category: detail`` -> tests), ``not_passed`` (the
#      test_ids that did not pass natively, the first FEATURE_IDS_LIMIT),
#      ``not_passed_total``, and ``tests`` (the membership rule in words)), and ``changes``
#      (``key``, ``title``, ``before``, ``now``: the areas whose status changed).
#   9: ``features.claims_file`` (the ``--claims`` file, or null) and ``features.claims``
#      (null without one): per claimed area, ``area`` (its key), ``claimed``, ``measured``
#      (the status) and ``verdict`` (``agrees``, ``differs`` or ``not run``).
JSON_FORMAT = 9
#: Test ids listed per feature area in the JSON summary (the ones that did not pass).
FEATURE_IDS_LIMIT = 100
# HUD record versions: 1 first; 2 ``test_results.flaky`` and ``flaky_tests`` (capped too).
HUD_FORMAT = 2
#: Test ids listed in the HUD record: its ingest caps a record at 2 MB.
HUD_FAILED_LIMIT = 1000
#: GitHub caps a PR comment at 65,536 characters; stay under it.
MARKDOWN_LIMIT = 60000


def _meta_block(model: ReportModel) -> dict[str, Any]:
    return {
        "format": JSON_FORMAT,
        "tool": "torch-conformance",
        "version": model.tool_version,
        "generated": model.generated,
        "run": model.meta.to_dict(),
        "amended_by": list(model.amended_by),
        "baseline_run": model.baseline.meta.run_id if model.baseline else None,
        "compare_run": model.diff.before.run_id if model.diff else None,
        "op_coverage": bool(model.coverage),
    }


def json_summary(model: ReportModel) -> dict[str, Any]:
    """The run summary as a JSON-ready dict with a ``meta`` block."""
    summary = model.summary
    data: dict[str, Any] = {
        "meta": _meta_block(model),
        "totals": summary.totals.to_dict(),
        "pass_rate": summary.totals.pass_rate,
        "breakdown": {
            "skipped_by_category": dict(summary.skipped_by_category),
            "failed_by_category": dict(summary.failed_by_category),
            "missing_lowering_tests": summary.missing_lowering_tests,
            "missing_lowering_skipped": summary.missing_lowering_skipped,
            "other_device_skipped": summary.other_device_skipped,
            "missing_lowering_ops": summary.missing_lowering_ops,
            "passed_via_fallback": summary.fallback_passed,
            "fallback_ops": summary.fallback_ops,
        },
        "files": [{"file": r.file, **r.counts.to_dict()} for r in model.files],
        "collection_errors": [
            {
                "test_id": r.test_id,
                "file": r.file,
                "outcome": r.outcome,
                "detail": r.detail,
                "message": r.message,
                "skip_entry": r.skip_entry,
            }
            for r in model.collection_errors
        ],
        "flaky": [
            {
                "test_id": r.test_id,
                "file": r.file,
                "detail": r.detail,
                "attempts": [
                    {
                        "outcome": a.outcome,
                        "category": a.category,
                        "detail": a.detail,
                        "message": a.message,
                        "duration_s": a.duration_s,
                    }
                    for a in r.attempts
                ],
            }
            for r in model.flaky
        ],
        "categories": [
            {"category": r.category, **r.counts.to_dict(), "top_details": dict(r.details)}
            for r in model.categories
        ],
        "ops": [
            {"op": r.op, "status": r.status, "blocked": r.blocked, **r.counts.to_dict()}
            for r in model.ops
        ],
        "missing_lowerings": [
            {
                "overload": r.overload,
                "status": r.status,
                "skipped": r.skipped,
                "failed": r.failed,
                "xfailed": r.xfailed,
                "ops": r.ops,
            }
            for r in model.triage
        ],
        "expected_failures_by_entry": [
            {
                "entry": r.entry,
                "category": r.category,
                "detail": r.detail,
                "tests": r.tests,
                "templates": r.templates,
                "cause": r.cause,
            }
            for r in model.entries
        ],
        "failure_groups": [
            {
                "category": g.category,
                "message": g.key,
                "tests": g.counts.total,
                "files": dict(g.files),
            }
            for g in model.failure_groups
        ],
        "baseline": None,
        "diff": None,
        "modes": None,
        "trends": model.trends.to_dict() if model.trends else None,
        "features": _features_json(model) if model.features else None,
    }
    if model.baseline:
        b = model.baseline
        data["baseline"] = {
            "run_id": b.meta.run_id,
            "backend": b.meta.backend,
            "totals": b.counts.to_dict(),
            "common": b.in_both,
            **b.coverage.to_dict(),
            "warning": b.warning or None,
            "backend_only_failures": len(b.backend_only),
            "both_failed": b.both_failed,
            "skipped_here_passed_there": b.skipped_here_passed_there,
            "backend_only_by_category": dict(b.by_category),
            "backend_only_tests": b.backend_only["test_id"].tolist(),
        }
    if model.modes:
        v = model.modes
        data["modes"] = {
            "eager_run": v.eager.run_id,
            "compile_run": v.compiled.run_id,
            "common": v.common,
            "eager_passed": v.eager_passed,
            "compile_passed": v.compile_passed,
            "fail_compiled_only": [row["test_id"] for row in v.compile_only],
            "fail_eager_only": [row["test_id"] for row in v.eager_only],
            "by_category": {name: [a, b] for name, a, b in v.by_category},
            "by_op": {name: [a, b] for name, a, b in v.by_op},
        }
    if model.diff:
        data["diff"] = {
            "before_run": model.diff.before.run_id,
            "common": model.diff.common,
            **{k.key: k.rows["test_id"].tolist() for k in model.diff.kinds},
            "fewer_tests": [
                {"file": d.file, "before": d.before, "now": d.now, "error": d.error}
                for d in model.diff.fewer_tests
            ],
        }
    return data


def _features_json(model: ReportModel) -> dict[str, Any]:
    matrix = model.features
    assert matrix is not None
    test_ids = model.frame["test_id"].to_numpy()
    return {
        "rule": {"supported_rate": SUPPORTED_RATE, "text": rule_text()},
        "compare_run": matrix.before_run or None,
        "areas": [
            {
                "key": row.key,
                "title": row.area.title,
                "group": row.area.group,
                "status": row.status,
                "before": row.before,
                "native_pass_rate": round(row.native / row.judged, 4) if row.judged else None,
                "judged": row.judged,
                "native": row.native,
                "fallback": row.fallback,
                "refused": row.refused,
                "failing": row.failing,
                "not_counted": row.not_counted,
                "not_applicable": row.not_applicable,
                "counts": row.counts.to_dict(),
                "refusals": dict(row.refusals),
                "failures": dict(row.failures),
                "not_passed": [str(t) for t in test_ids[row.not_passed[:FEATURE_IDS_LIMIT]]],
                "not_passed_total": len(row.not_passed),
                "tests": row.area.describe(),
            }
            for row in matrix.rows
        ],
        "changes": [
            {"key": row.key, "title": row.area.title, "before": row.before, "now": row.status}
            for row in matrix.changes
        ],
        "claims_file": matrix.claims_file or None,
        "claims": _claims_json(matrix) if matrix.claims_file else None,
    }


def _claims_json(matrix: FeatureMatrix) -> list[dict[str, Any]]:
    return [
        {"area": row.key, "claimed": row.claimed, "measured": row.status, "verdict": row.verdict}
        for row in matrix.claimed
    ]


def _features_markdown(matrix: FeatureMatrix) -> list[str]:
    """The feature matrix as Markdown tables, features then dtype families."""
    lines = ["", "### Feature matrix", ""]
    if matrix.before_run:
        changes = ", ".join(f"{r.area.title} {r.before} → {r.status}" for r in matrix.changes)
        lines += [
            f"Changes since `{_code(matrix.before_run)}`: {changes or 'none'}.",
            "",
        ]
    claims = bool(matrix.claims_file)
    if claims:
        lines += _claims_markdown(matrix)
    for group, title in (("feature", "area"), ("dtype", "dtypes")):
        lines += _table(
            [
                title,
                "status",
                *(["claimed"] if claims else []),
                *(["before"] if matrix.before_run else []),
                "native pass",
                "judged",
                "refused",
                "did not pass",
                "most frequent reasons",
            ],
            [
                [
                    row.area.title,
                    f"**{row.status}**" if row.changed else row.status,
                    *([_claimed_cell(row)] if claims else []),
                    *([row.before or ""] if matrix.before_run else []),
                    row.rate,
                    row.judged,
                    row.refused,
                    row.failing + row.fallback,
                    row.reasons(),
                ]
                for row in matrix.group(group)
            ],
            align="ll" + "l" * (int(claims) + int(bool(matrix.before_run))) + "rrrrl",
        )
        lines.append("")
    lines.append(f"_{_line(rule_text())}_")
    return lines


def _claims_markdown(matrix: FeatureMatrix) -> list[str]:
    """The count of the claims' verdicts, and a line per claim the run contradicts."""
    counts = matrix.verdict_counts()
    differ = f"{counts['differs']} differ"
    if counts["differs"]:
        differ = f"**{differ}**"
    lines = [
        f"Claims of `{_code(matrix.claims_file)}` ({matrix.claims_mode} mode): "
        f"{counts['agrees']} agree, {differ}, {counts['not run']} not run (not checked).",
        "",
    ]
    if matrix.differences:
        lines += [f"- {_line(difference(row))}" for row in matrix.differences] + [""]
    return lines


def _claimed_cell(row: FeatureRow) -> str:
    """The claimed status in a row of the Markdown table: bold when the run differs."""
    if row.claimed is None:
        return ""
    return f"**{row.claimed}** (differs)" if row.verdict == "differs" else row.claimed


def _table(header: list[str], rows: list[list[Any]], align: str = "") -> list[str]:
    """A Markdown table; ``align`` has an ``l`` or ``r`` per column (default: the first
    column left, the others right)."""

    def cell(value: Any) -> str:
        text = f"{value:,}" if isinstance(value, int) else str(value)
        return text.replace("|", "\\|").replace("\n", " ")

    align = align or "l" + "r" * (len(header) - 1)
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if a == "l" else "--:" for a in align) + "|",
    ]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return lines


def _line(text: str) -> str:
    """``text`` on one line, for a Markdown list item."""
    return " ".join(text.split())


def _code(text: str) -> str:
    """``text`` fit for a Markdown code span (no backticks, one line)."""
    return _line(text).replace("`", "'")


def _amended(model: ReportModel) -> str:
    if not model.amended_by:
        return ""
    reruns = ", ".join(f"`{_code(run_id)}`" for run_id in model.amended_by)
    return f" amended by {'rerun' if len(model.amended_by) == 1 else 'reruns'} {reruns}"


def _fewer_tests(run_id: str, drops: list[FileDrop]) -> list[str]:
    """The lines that list the files a run collected fewer tests from than ``run_id``."""
    lines = ["", f"Files with fewer tests than `{_code(run_id)}`:", ""]
    return lines + [
        f"- `{_code(d.file)}`: {d.before:,} tests before, {d.now:,} now"
        + (f" (failed to collect: `{_code(d.error)}`)" if d.error else "")
        for d in drops
    ]


def markdown_summary(model: ReportModel, *, top: int = 10) -> str:
    """A GitHub-flavoured Markdown summary, under the PR comment size limit."""
    s, meta = model.summary, model.meta
    t = s.totals
    lines = [
        f"## Conformance: {meta.backend or 'backend'} on torch {meta.torch_version or '?'}",
        "",
        f"Run `{meta.run_id}`{_amended(model)} ({meta.suite or 'suite'}, {meta.mode}): "
        f"**{t.total:,}** outcomes, "
        f"**{t.n_passed:,}** passed ({t.pass_rate}), of which {s.fallback_passed:,} via CPU "
        f"fallback; **{t.n_failed:,}** failed; "
        + (f"**{t.n_flaky:,}** flaky (failed, then passed on a retry); " if t.n_flaky else "")
        + f"**{t.n_skipped:,}** skipped: "
        f"{s.other_device_skipped:,} written for another device type, "
        f"{t.n_skipped - s.other_device_skipped:,} for other reasons "
        f"({s.missing_lowering_skipped:,} for a missing lowering). "
        f"{s.missing_lowering_ops:,} missing lowerings block {s.missing_lowering_tests:,} tests.",
        "",
    ]
    lines += _table(
        ["outcome", "tests", "share"],
        [
            [name, getattr(t, name), percent(getattr(t, name), t.total)]
            for name in (
                "passed",
                "failed",
                "error",
                "crashed",
                "timeout",
                "xpassed",
                "flaky",
                "skipped",
                "xfailed",
                "deselected",
            )
            if getattr(t, name)
        ],
    )
    if model.features:
        lines += _features_markdown(model.features)
    if model.flaky:
        lines += ["", "### Flaky: failed, then passed on a retry in a fresh process", ""]
        lines += [
            f"- `{_code(r.test_id)}`: "
            + " → ".join(
                f"{a.outcome}" + (f" (`{_code(a.message)}`)" if a.message else "")
                for a in r.attempts
            )
            for r in model.flaky[:top]
        ]
        if len(model.flaky) > top:
            lines.append(f"- … and {len(model.flaky) - top:,} more")
    if model.collection_errors:
        lines += ["", "### Failed to collect", ""]
        lines += [
            f"- `{_code(r.test_id)}` ({r.outcome}"
            + (f", expected by `{_code(r.skip_entry)}`" if r.skip_entry else "")
            + f"): `{_code(r.headline)}`"
            for r in model.collection_errors
        ]
    lines += ["", "### Not passed, by category", ""]
    if t.n_flaky:
        lines += _table(
            ["category", "failed", "skipped", "flaky"],
            [
                [r.category, r.counts.n_failed, r.counts.n_skipped, r.counts.n_flaky]
                for r in model.categories
            ],
        )
    else:
        lines += _table(
            ["category", "failed", "skipped"],
            [[r.category, r.counts.n_failed, r.counts.n_skipped] for r in model.categories],
        )
    if model.baseline:
        b = model.baseline
        lines += [
            "",
            f"### Against the {b.meta.backend or 'baseline'} baseline (`{b.meta.run_id}`)",
            "",
            f"Coverage: {b.coverage_text}.",
            "",
        ]
        if b.warning:
            lines += [f"> **{b.warning}**", ""]
        lines += [
            f"{len(b.backend_only):,} tests fail only on {meta.backend or 'the backend'} "
            f"(pass on the baseline); {b.both_failed:,} fail on both; "
            f"{b.skipped_here_passed_there:,} are skipped here but pass there.",
        ]
    if model.modes:
        v = model.modes
        lines += [
            "",
            f"### Eager `{_code(v.eager.run_id)}` against compile `{_code(v.compiled.run_id)}`",
            "",
            f"{v.common:,} tests in both: {v.eager_passed:,} pass eager, {v.compile_passed:,} "
            f"compiled; {len(v.compile_only):,} pass eager and fail compiled, "
            f"{len(v.eager_only):,} fail eager and pass compiled.",
            "",
        ]
        lines += _table(
            ["category", "fail compiled only", "fail eager only"],
            [[name, a, b] for name, a, b in v.by_category[:top]],
        )
    if model.diff:
        lines += ["", f"### Changes since `{model.diff.before.run_id}`", ""]
        lines += _table(["change", "tests"], [[k.title, len(k.rows)] for k in model.diff.kinds])
        if model.diff.fewer_tests:
            lines += _fewer_tests(model.diff.before.run_id, model.diff.fewer_tests)
        new = next(k for k in model.diff.kinds if k.key == "new_failures")
        if len(new.rows):
            lines += ["", "New failures:", ""]
            lines += [
                f"- `{test_id}` ({was} → {now})"
                for test_id, was, now in zip(
                    new.rows["test_id"][:top],
                    new.rows["other"][:top],
                    new.rows["outcome"][:top],
                    strict=True,
                )
            ]
            if len(new.rows) > top:
                lines.append(f"- … and {len(new.rows) - top:,} more")
    point = model.trends.of_run(meta.run_id) if model.trends else None
    if point is not None and point.fewer_tests:
        lines += ["", f"### Against `{_code(point.compared_with)}`, the run before it"]
        lines += _fewer_tests(point.compared_with, point.fewer_tests)
    if model.triage:
        lines += ["", f"### Top {min(top, len(model.triage))} missing lowerings", ""]
        lines += _table(
            ["overload", "tests blocked", "expected to fail", "operators"],
            [
                [f"`{r.overload}`", r.blocked, r.xfailed, ", ".join(r.ops[:5])]
                for r in model.triage[:top]
            ],
        )
    if model.entries:
        lines += ["", "### Expected failures by skiplist entry", ""]
        lines += [
            f"- `{_code(r.entry)}` {_line(r.cause_text)}: {r.headline}" for r in model.entries[:top]
        ]
        if len(model.entries) > top:
            lines.append(f"- … and {len(model.entries) - top:,} more entries")
    if model.failure_groups:
        lines += ["", f"### Top {min(top, len(model.failure_groups))} failures by message", ""]
        lines += _table(
            ["tests", "category", "message"],
            [
                [g.counts.total, g.category, "`" + g.key.replace("`", "'") + "`"]
                for g in model.failure_groups[:top]
            ],
        )
    text = "\n".join(lines) + "\n"
    if len(text) > MARKDOWN_LIMIT:
        text = text[:MARKDOWN_LIMIT].rsplit("\n", 1)[0] + "\n\n… (summary cut to fit)\n"
    return text


def hud_record(model: ReportModel) -> dict[str, Any]:
    """One record in the shape HUD's out-of-tree ingest takes: ``test_results`` with
    passed / failed / skipped / total, plus the failed tests (capped)."""
    t = model.summary.totals
    failed = model.frame.loc[model.frame["bucket"] == "failed", "test_id"].tolist()
    flaky = [r.test_id for r in model.flaky]
    meta = model.meta
    return {
        "format_version": HUD_FORMAT,
        "run_id": meta.run_id,
        "backend": meta.backend,
        "backend_version": meta.backend_version,
        "torch_version": meta.torch_version,
        "torch_git": meta.torch_git,
        "suite": meta.suite,
        "status": "completed" if meta.complete else "in_progress",
        "conclusion": "failure" if t.n_failed else "success",
        "started_at": meta.start_time,
        "completed_at": meta.end_time,
        "test_results": {
            "passed": t.n_passed,
            "failed": t.n_failed,
            "skipped": t.n_skipped,
            "flaky": t.n_flaky,
            "total": t.total,
        },
        "failed_tests": failed[:HUD_FAILED_LIMIT],
        "failed_tests_truncated": len(failed) > HUD_FAILED_LIMIT,
        "flaky_tests": flaky[:HUD_FAILED_LIMIT],
    }


_JUNIT_KIND = {
    "failed": "failure",
    "xpassed": "failure",
    "error": "error",
    "crashed": "error",
    "timeout": "error",
    "skipped": "skipped",
    "xfailed": "skipped",
    "deselected": "skipped",
}


def _text(text: str) -> str:
    # Chained str.replace: several times faster than str.translate with a dict table.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _attr(text: str) -> str:
    """A quoted XML attribute value (line breaks kept as character references)."""
    escaped = _text(text).replace('"', "&quot;")
    if "\n" in escaped or "\r" in escaped or "\t" in escaped:
        escaped = escaped.replace("\n", "&#10;").replace("\r", "&#13;").replace("\t", "&#9;")
    return f'"{escaped}"'


def _attr_column(column: pandas.Series) -> list[str]:
    """``_attr`` over a whole column in vectorised passes (names of every test)."""
    column = column.astype("str")
    for char, entity in (
        ("&", "&amp;"),
        ("<", "&lt;"),
        (">", "&gt;"),
        ('"', "&quot;"),
        ("\n", "&#10;"),
        ("\r", "&#13;"),
        ("\t", "&#9;"),
    ):
        column = column.str.replace(char, entity, regex=False)
    return ('"' + column + '"').tolist()


def _junit_flaky(head: str, row: FlakyRow | None) -> str:
    """A flaky test as JUnit readers that know reruns (Maven Surefire's format, which
    Jenkins and others read) show it: a testcase that passed, with a ``flakyFailure`` (or
    ``flakyError``, for an error, crash or timeout) for each attempt that did not pass."""
    parts = [head + ">"]
    for attempt in row.attempts if row is not None else ():
        if attempt.outcome in ("passed", ""):
            continue
        kind = "flakyFailure" if attempt.outcome == "failed" else "flakyError"
        label = f"{attempt.outcome}: {attempt.category}" + (
            f" ({attempt.detail})" if attempt.detail else ""
        )
        parts.append(
            f"<{kind} type={_attr(printable(label, 300))} message={_attr(attempt.message)}/>"
        )
    return "".join(parts) + "</testcase>"


def write_junit(model: ReportModel, path: Path) -> None:
    """JUnit XML: one ``testsuite`` per upstream file, one ``testcase`` per test. Messages
    are bounded and stripped of characters XML cannot hold. A flaky test is a testcase
    with its failed attempts (``flakyFailure``/``flakyError``), counted as neither a
    failure nor an error."""
    frame = model.frame
    t = model.summary.totals
    lines = [
        '<?xml version="1.0" encoding="utf-8"?>',
        f'<testsuites name={_attr(model.meta.run_id)} tests="{t.total}" '
        f'failures="{t.failed + t.xpassed}" errors="{t.error + t.crashed + t.timeout}" '
        f'skipped="{t.n_skipped}">',
    ]
    by_file = {row.file: row for row in model.files}
    # The prepared frame is sorted by file: one pass writes the suites in order.
    sum_by_file = frame.groupby("file")["duration_s"].sum().to_dict()
    names = _attr_column(frame["test_id"].str.rsplit("::", n=1).str[-1])
    classes = _attr_column(
        frame["file"].where(frame["test_class"] == "", frame["file"] + "::" + frame["test_class"])
    )
    columns = [
        frame[name].tolist()
        for name in ("test_id", "file", "outcome", "category", "detail", "message", "duration_s")
    ]
    flaky = {r.test_id: r for r in model.flaky}
    current = None
    for name, classname, test_id, file, outcome, category, detail, message, duration in zip(
        names, classes, *columns, strict=True
    ):
        if file != current:
            if current is not None:
                lines.append("</testsuite>")
            current = file
            c = by_file[file].counts
            seconds = sum_by_file[file]
            lines.append(
                f'<testsuite name={_attr(file)} tests="{c.total}" '
                f'failures="{c.failed + c.xpassed}" '
                f'errors="{c.error + c.crashed + c.timeout}" skipped="{c.n_skipped}" '
                f'time="{seconds:.3f}">'
            )
        head = f'<testcase classname={classname} name={name} time="{duration:.3f}"'
        if outcome == "flaky":
            lines.append(_junit_flaky(head, flaky.get(test_id)))
            continue
        kind = _JUNIT_KIND.get(outcome)
        if kind is None:
            lines.append(head + "/>")
            continue
        label = f"{outcome}: {category}" + (f" ({detail})" if detail else "")
        short = printable(message.split("\n", 1)[0], 500) if message else ""
        open_tag = f"><{kind} type={_attr(printable(label, 300))} message={_attr(short)}"
        if kind == "skipped" or not message:
            lines.append(f"{head}{open_tag}/></testcase>")
        else:
            lines.append(f"{head}{open_tag}>{_text(printable(message))}</{kind}></testcase>")
    if current is not None:
        lines.append("</testsuite>")
    lines.append("</testsuites>")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_json(data: dict[str, Any], path: Path) -> None:
    """Write ``data`` as indented, key-sorted JSON (stable for diffs and gold files)."""
    path.write_text(
        json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
    )
