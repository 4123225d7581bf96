"""Plain-text rendering of the op tables for the terminal; no computation happens here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas

from op_coverage.diff import OpChange, SnapshotDiff
from op_coverage.perf import PerfComparison, PerfRanking
from op_coverage.static import StaticTable
from op_coverage.triage import Triage

__all__ = [
    "format_diff",
    "format_grid",
    "format_perf",
    "format_perf_comparison",
    "format_snapshot",
    "format_static",
    "format_table",
    "format_triage",
]


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[str] = ()
) -> str:
    """Left-aligned text columns; numbers, and the columns named in ``right`` (numbers
    formatted as text), right-aligned."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [
        headers[i] in right
        or (all(isinstance(row[i], (int, float)) for row in rows) and bool(rows))
        for i in range(len(headers))
    ]
    lines = []
    for row in cells:
        parts = [
            cell.rjust(w) if num else cell.ljust(w)
            for cell, w, num in zip(row, widths, numeric, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_static(table: StaticTable, statuses: Sequence[str] = (), core_only: bool = False) -> str:
    """Counts by status, the rows of the chosen statuses, and any registry disagreements."""
    counts = table.counts()
    source = "lowering registry + dispatcher" if table.has_registry else "dispatcher"
    lines = [
        f"{table.device} (dispatch key {table.dispatch_key}; from the {source}): "
        + ", ".join(f"{n} {s}" for s, n in counts.items())
        + f" of {len(table.ops)} ATen overloads"
    ]
    rows = [
        (r.op, r.status, r.kind, "yes" if r.in_core else "", r.source)
        for r in table.ops.values()
        if (not statuses or r.status in statuses) and (r.in_core or not core_only)
    ]
    if statuses or core_only:
        lines += ["", format_table(("op", "status", "kind", "core", "source"), rows)]
    if table.disagreements:
        lines += [
            "",
            f"{len(table.disagreements)} disagreement(s) between registry and dispatcher:",
        ]
        lines += [
            f"  {d.op}: {d.problem} (registry: {d.registry}; dispatcher: {d.dispatcher})"
            for d in table.disagreements
        ]
    return "\n".join(lines)


def format_triage(result: Triage, top: int, tests: int = 0) -> str:
    """The top ``top`` ops as headlines plus a table; ``tests`` test ids listed under each."""
    ranked = result.ranked[:top]
    lines = [
        f"{result.blocked_total} tests blocked by a missing lowering; "
        f"{len(result.ranked)} ops to lower (top {len(ranked)} shown)"
    ]
    if ranked:
        rows = [
            (
                i,
                r.op,
                r.tests,
                r.templates,
                r.opinfos,
                r.status or "?",
                {True: "yes", False: "", None: "?"}[r.in_core],
                ",".join(r.dtypes),
            )
            for i, r in enumerate(ranked, 1)
        ]
        lines += [
            "",
            format_table(
                ("#", "op", "tests", "templates", "opinfos", "status", "core", "dtypes"), rows
            ),
        ]
        lines.append("")
        for r in ranked:
            lines.append(r.headline())
            shown = r.test_ids[:tests]
            lines += [f"    {test_id}" for test_id in shown]
            if tests and len(r.test_ids) > len(shown):
                lines.append(f"    ... {len(r.test_ids) - len(shown)} more")
    if result.resolved:
        lines += ["", "lowered since the run (their tests are no longer blocked):"]
        lines += [f"  {r.op} ({r.status}): {r.tests} tests" for r in result.resolved]
    if result.unnamed:
        lines += ["", "missing_lowering records whose detail names no overload:"]
        lines += [
            f"  {detail or '(empty)'}: {n} tests" for detail, n in sorted(result.unnamed.items())
        ]
    return "\n".join(lines)


def format_grid(grid: pandas.DataFrame) -> str:
    """The op x dtype grid of blocked tests; empty cells shown as ``.``."""
    if grid.empty:
        return "no blocked tests"
    rows = [(op, *[(int(v) if v else ".") for v in grid.loc[op]]) for op in grid.index]
    return format_table(("op", *grid.columns), rows)


def format_snapshot(data: dict[str, Any]) -> str:
    """Denominators with coverage, and the snapshot's provenance."""
    meta = data["meta"]
    lines = [
        f"coverage of {meta['backend']} on torch {meta['torch_version']}"
        + (f", run {meta['run_id']}" if meta.get("run_id") else "")
    ]
    rows = [
        (
            name,
            d["version"],
            d["count"],
            d["native"],
            d["composite"],
            d["fallback"],
            d["missing"],
            f"{d['covered_pct']:.1f}%",
        )
        for name, d in data["denominators"].items()
    ]
    lines += [
        "",
        format_table(
            (
                "denominator",
                "version",
                "ops",
                "native",
                "composite",
                "fallback",
                "missing",
                "covered",
            ),
            rows,
        ),
    ]
    tests = data.get("tests", {})
    if tests.get("total"):
        lines.append(
            f"\n{tests['blocked']} of {tests['total']} tests blocked by a missing lowering"
            + ("" if tests.get("traced") else " (op tracing was off)")
        )
    if data.get("disagreements"):
        lines.append(f"{len(data['disagreements'])} registry/dispatcher disagreement(s)")
    return "\n".join(lines)


def _changes(title: str, changes: list[OpChange], limit: int) -> list[str]:
    if not changes:
        return []
    lines = [f"{title} ({len(changes)}):"]
    for c in changes[:limit]:
        arrow = f"{c.before or '-'} -> {c.after or '-'}"
        extra = f", blocked {c.tests_blocked_before} tests" if c.tests_blocked_before else ""
        lines.append(f"  {c.op}: {arrow}{' [core]' if c.in_core else ''}{extra}")
    if len(changes) > limit:
        lines.append(f"  ... {len(changes) - limit} more")
    return lines


def format_diff(diff: SnapshotDiff, limit: int = 20) -> str:
    """Backend progress first, then upstream churn, each list capped at ``limit``."""
    a, b = diff.meta_a, diff.meta_b
    lines = [
        f"{a.get('backend')} {a.get('run_id') or '?'} (torch {a.get('torch_version')}) -> "
        f"{b.get('backend')} {b.get('run_id') or '?'} (torch {b.get('torch_version')})",
        "",
    ]
    rows = [
        (
            name,
            f"{d['covered_a']}/{d['count_a']}",
            f"{d['covered_b']}/{d['count_b']}",
            f"{d['progress']:+d}",
            f"{d['churn']:+d}",
        )
        for name, d in diff.denominators.items()
    ]
    lines += [
        format_table(
            (
                "denominator",
                "covered before",
                "covered after",
                "backend progress",
                "upstream churn",
            ),
            rows,
        ),
        *[f"note: {note}" for note in diff.notes],
        "",
        "Backend progress",
    ]
    body = (
        _changes("ops gained", diff.gained, limit)
        + _changes("ops lost", diff.lost, limit)
        + _changes("ops that changed kind", diff.changed_kind, limit)
    )
    lines += body or ["  no op changed status"]
    if diff.tests is not None:
        lines += [
            f"tests unblocked: {len(diff.tests.unblocked)}",
            f"tests newly blocked: {len(diff.tests.newly_blocked)}",
        ]
    lines += ["", "Upstream churn"]
    churn = _changes("ops added in torch", diff.torch_added, limit) + _changes(
        "ops removed from torch", diff.torch_removed, limit
    )
    if diff.core_added or diff.core_removed:
        churn.append(
            f"core ATen: {len(diff.core_added)} ops entered, {len(diff.core_removed)} left"
        )
    if diff.tests is not None:
        t = diff.tests
        churn.append(
            f"tests added: {len(t.added)}, removed: {len(t.removed)}, renamed: {len(t.renamed)}"
        )
        churn += [f"  renamed {old} -> {new}" for old, new in t.renamed[:limit]]
    else:
        churn.append("tests: not compared (pass run folders, not snapshot files, to compare tests)")
    lines += churn or ["  none"]
    return "\n".join(lines)


_METRIC_NAMES = {"device": "device time", "cpu": "CPU time"}


def _ms(us: float) -> str:
    return f"{us / 1000:,.3f}"


def _signature(by: str, row: Any) -> tuple[str, ...]:
    return (row.input_shapes, row.input_dtypes) if by == "op-shape" else ()


def format_perf(ranking: PerfRanking, title: str, top: int, tests: int = 3, note: str = "") -> str:
    """The ``top`` ops (0: all) with calls, total, mean per call and share; under each, its
    ``tests`` heaviest tests; ``note`` said under the headline."""
    metric = _METRIC_NAMES[ranking.metric]
    shown = ranking.ops[:top] if top else ranking.ops
    lines = [
        f"{metric} by {'op and input signature' if ranking.by == 'op-shape' else 'op'} in "
        f"{title}: {ranking.tests:,} tests profiled, {_ms(ranking.aten_us)} ms in ATen ops; "
        f"{len(ranking.ops):,} ops (top {len(shown)} shown)"
    ]
    if note:
        lines.append(f"note: {note}")
    if not shown:
        return "\n".join(lines)
    signature = ("input shapes", "input dtypes") if ranking.by == "op-shape" else ()
    rows = [
        (
            i,
            t.op,
            *_signature(ranking.by, t),
            t.calls,
            _ms(t.total_us),
            f"{t.mean_us:,.1f}",
            f"{t.share:.1%}",
        )
        for i, t in enumerate(shown, 1)
    ]
    headers = ("#", "op", *signature, "calls", "total ms", "mean us", "share")
    lines += ["", format_table(headers, rows, right=headers[-4:])]
    if tests:
        lines += ["", "tests that spend most in each:"]
        for i, t in enumerate(shown, 1):
            lines.append(f"{i}. {t.op} {' '.join(_signature(ranking.by, t))}".rstrip())
            lines += [f"    {_ms(us)} ms  {test_id}" for test_id, us in t.tests[:tests]]
    return "\n".join(lines)


def format_perf_comparison(comparison: PerfComparison, title: str, top: int) -> str:
    """The ``top`` ops in both runs (0: all) by mean time per call, the largest slowdown
    first, then the ops of one run only."""
    changes = comparison.changes[:top] if top else comparison.changes
    slower = sum(d.ratio > 1 for d in comparison.changes)
    faster = sum(d.ratio < 1 for d in comparison.changes)
    lines = [
        f"{_METRIC_NAMES[comparison.metric]} per call, {title}: {len(comparison.changes):,} ops "
        f"in both, {slower:,} slower and {faster:,} faster (top {len(changes)} shown)"
    ]
    if comparison.note:
        lines.append(f"note: {comparison.note}")
    signature = ("input shapes", "input dtypes") if comparison.by == "op-shape" else ()
    rows = [
        (
            i,
            d.op,
            *_signature(comparison.by, d),
            f"{d.reference_calls:,} -> {d.calls:,}",
            f"{d.reference_mean_us:,.1f}",
            f"{d.mean_us:,.1f}",
            "inf" if d.ratio == float("inf") else f"{d.ratio:.2f}x",
            f"{d.diff_us:+,.1f}",
            f"{d.total_diff_us / 1000:+,.3f}",
        )
        for i, d in enumerate(changes, 1)
    ]
    headers = ("#", "op", *signature, "calls", "ref us", "run us", "ratio", "diff us", "total ms")
    if rows:
        lines += ["", format_table(headers, rows, right=headers[-6:])]
    for label, ops in (
        ("only in the run", comparison.only_run),
        ("only in the reference", comparison.only_reference),
    ):
        if not ops:
            continue
        lines += ["", f"{label} ({len(ops)}):"]
        for t in ops[:top] if top else ops:
            extra = " ".join(_signature(comparison.by, t))
            lines.append(
                f"  {t.op}{' ' + extra if extra else ''}: {t.calls:,} calls, {_ms(t.total_us)} ms"
            )
        if top and len(ops) > top:
            lines.append(f"  ... {len(ops) - top} more")
    return "\n".join(lines)
