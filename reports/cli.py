"""``conformance report``: render a run as a static dashboard and machine outputs."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reports.features import FeatureMatrix

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``report`` subcommand."""
    parser = subparsers.add_parser(
        "report",
        help="render a run as HTML, JSON, Markdown, JUnit XML and a HUD record",
        description=(
            "Render a run folder as a static HTML dashboard (opens from disk, no network) "
            "and machine outputs. Optional inputs: op_coverage.json in the run folder, a "
            "baseline run (usually the CPU) joined by test id, an earlier run to diff "
            "with, a runs root for trends, and the backend's claims to check the feature "
            "matrix against. Exit 0; 1 when --claims is given and a claim differs from the "
            "measured status; 2 for bad input."
        ),
    )
    parser.add_argument(
        "run", metavar="RUN", help="a run folder, a run id under --runs-root, or 'latest'"
    )
    parser.add_argument(
        "--out",
        default="report",
        metavar="DIR",
        help="output folder, replaced if it holds an earlier report (default: report)",
    )
    parser.add_argument(
        "--runs-root",
        default="runs",
        metavar="DIR",
        help="where run ids are looked up (default: runs)",
    )
    parser.add_argument(
        "--baseline",
        metavar="RUN",
        help="a baseline run (e.g. on cpu): show failures only this backend has",
    )
    parser.add_argument(
        "--compare",
        metavar="RUN",
        help="an earlier run: show new failures, fixes, new passes, new skips and upstream churn",
    )
    parser.add_argument(
        "--modes",
        metavar="RUN",
        help="a run of the same selection in the other mode (eager or compile): tests that "
        "fail in one mode only, by category and op",
    )
    parser.add_argument(
        "--history", metavar="RUNS_ROOT", help="a runs root: trends over its runs and releases"
    )
    parser.add_argument(
        "--format",
        default="html,json,md,junit,hud",
        metavar="LIST",
        help="comma-separated outputs among html, json, md, junit, hud (default: all)",
    )
    parser.add_argument(
        "--amend",
        action="append",
        default=[],
        metavar="RERUN",
        help="a rerun of some of the run's tests (repeatable): the report shows the latest "
        "outcome of each test",
    )
    parser.add_argument(
        "--claims",
        metavar="FILE",
        help="a TOML file of the statuses the backend claims per feature area "
        "(backend/features.toml for emu): each claimed area that ran agrees or differs; "
        "exit 1 when any differs",
    )
    parser.set_defaults(handler=run_report)


def run_report(args: argparse.Namespace) -> int:
    """Render the report; returns 0, or 1 when a claim of ``--claims`` differs from the
    measured matrix (bad input raises ConfigError, exit code 2)."""
    from conformance.store import resolve_run
    from reports.build import build_model
    from reports.claims import load_claims
    from reports.features import STATUSES
    from reports.render import parse_formats, render_report

    formats = parse_formats(args.format)
    claims = load_claims(args.claims) if args.claims else None
    started = time.perf_counter()

    def resolve(ref: str | None) -> str | None:
        return str(resolve_run(ref, args.runs_root)) if ref else None

    model = build_model(
        resolve(args.run),  # type: ignore[arg-type]
        baseline_dir=resolve(args.baseline),
        compare_dir=resolve(args.compare),
        history_root=args.history,
        amend=[resolve(ref) for ref in args.amend],  # type: ignore[misc]
        modes_dir=resolve(args.modes),
        claims=claims,
    )
    written = render_report(model, args.out, formats)
    t = model.summary.totals
    print(
        f"{model.meta.run_id}: {t.total:,} outcomes, {t.n_passed:,} passed ({t.pass_rate}), "
        f"{t.n_failed:,} failed, {t.n_skipped:,} skipped"
        + (f", {t.n_flaky:,} flaky" if t.n_flaky else "")
        + f" [{time.perf_counter() - started:.1f} s]"
    )
    # Tests that never ran are in no count above: name the files they were in.
    for row in model.collection_errors:
        expected = f", expected by {row.skip_entry}" if row.skip_entry else ""
        print(f"  failed to collect ({row.outcome}{expected}): {row.test_id}: {row.headline}")
    if model.features is not None:
        statuses = Counter(row.status for row in model.features.rows)
        print(
            "  feature matrix: "
            + ", ".join(f"{statuses[name]} {name}" for name in STATUSES)
            + (
                f"; {len(model.features.changes)} changed since {model.features.before_run}"
                if model.features.before_run
                else ""
            )
        )
        for row in model.features.changes:
            print(f"    {row.area.title}: {row.before} -> {row.status}")
    differ = _print_claims(model.features) if claims is not None else False
    if model.diff is not None:
        for drop in model.diff.fewer_tests:
            print(f"  fewer tests than {model.diff.before.run_id}: {drop.describe()}")
    point = model.trends.of_run(model.meta.run_id) if model.trends else None
    for drop in point.fewer_tests if point is not None else ():
        print(f"  fewer tests than {point.compared_with} (history): {drop.describe()}")
    for path in written:
        print(f"  {path}")
    sys.stdout.flush()
    return 1 if differ else 0


def _print_claims(matrix: FeatureMatrix | None) -> bool:
    """The claims' verdicts, counted, and a line per claim the run contradicts; whether
    any does."""
    from reports.claims import difference

    if matrix is None:
        return False
    counts = matrix.verdict_counts()
    print(
        f"  claims: {counts['agrees']} agree, {counts['differs']} differ, "
        f"{counts['not run']} not run ({matrix.claims_file}, {matrix.claims_mode} mode)"
    )
    for row in matrix.differences:
        print(f"    differs: {difference(row)}")
    return bool(matrix.differences)
