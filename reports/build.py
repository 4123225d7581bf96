"""Assemble everything a report shows from a run folder and the optional inputs beside it.

This is the one place that reads inputs; renderers (HTML, JSON, Markdown, JUnit, HUD) take
the :class:`ReportModel` and never read a run themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from conformance import __version__
from conformance.model import RunMeta
from conformance.store import read_meta
from reports.claims import Claims, apply_claims
from reports.compare import BaselineView, DiffView, build_baseline, build_diff
from reports.entries import EntryRow, build_entries
from reports.features import FeatureMatrix, build_features
from reports.loading import OpCoverage, load_op_coverage, load_run
from reports.modes import ModesView, build_modes
from reports.tests_view import FailureGroup, build_failure_groups
from reports.trends import Trends, build_trends
from reports.viewmodel import (
    CategoryRow,
    CollectionErrorRow,
    FileRow,
    FlakyRow,
    OpRow,
    Summary,
    TriageRow,
    build_categories,
    build_collection_errors,
    build_files,
    build_flaky,
    build_ops,
    build_summary,
    build_triage,
    prepare,
)

if TYPE_CHECKING:
    import pandas

__all__ = ["ReportModel", "build_model", "model_from_frame"]


@dataclass
class ReportModel:
    """A run and every view of it the outputs need."""

    meta: RunMeta
    frame: pandas.DataFrame  # prepared: sorted, with bucket/slug/index/page/href columns
    generated: str  # ISO 8601 UTC; scrubbed by gold tests
    tool_version: str
    summary: Summary
    files: list[FileRow]
    categories: list[CategoryRow]
    ops: list[OpRow]
    dtypes: list[str]
    coverage: OpCoverage | None
    triage: list[TriageRow]
    failure_groups: list[FailureGroup]
    entries: list[EntryRow]  # expected failures by skiplist entry, cause entries first
    baseline: BaselineView | None = None
    diff: DiffView | None = None
    trends: Trends | None = None
    amended_by: list[str] = field(default_factory=list)  # reruns whose outcomes it shows
    modes: ModesView | None = None  # joined with a run of the other mode (eager, compile)
    #: Files, modules or classes that failed to collect (each one record of the run).
    collection_errors: list[CollectionErrorRow] = field(default_factory=list)
    #: Tests that failed, then passed when retried in a fresh process.
    flaky: list[FlakyRow] = field(default_factory=list)
    #: Per feature area and dtype family: supported, partial, unsupported or not run (with
    #: the status in the run compared with, when there is one).
    features: FeatureMatrix | None = None


def model_from_frame(
    meta: RunMeta,
    frame: pandas.DataFrame,
    *,
    coverage: OpCoverage | None = None,
    baseline: tuple[RunMeta, pandas.DataFrame] | None = None,
    before: tuple[RunMeta, pandas.DataFrame] | None = None,
    trends: Trends | None = None,
    generated: str | None = None,
) -> ReportModel:
    """The model of a run given as a RunMeta and a DataFrame of RECORD_COLUMNS."""
    frame = prepare(frame)
    ops, dtypes = build_ops(frame, coverage)
    return ReportModel(
        meta=meta,
        frame=frame,
        generated=generated or datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        tool_version=__version__,
        summary=build_summary(meta, frame),
        files=build_files(frame),
        categories=build_categories(frame),
        ops=ops,
        dtypes=dtypes,
        coverage=coverage,
        triage=build_triage(frame, coverage),
        failure_groups=build_failure_groups(frame),
        entries=build_entries(frame),
        baseline=build_baseline(frame, *baseline, backend=meta.backend) if baseline else None,
        diff=build_diff(frame, *before) if before else None,
        trends=trends,
        collection_errors=build_collection_errors(frame),
        flaky=build_flaky(frame),
        features=build_features(
            frame,
            before=before[1] if before else None,
            before_run=before[0].run_id if before else "",
        ),
    )


def build_model(
    run_dir: str | Path,
    *,
    baseline_dir: str | Path | None = None,
    compare_dir: str | Path | None = None,
    history_root: str | Path | None = None,
    amend: Sequence[str | Path] = (),
    modes_dir: str | Path | None = None,
    claims: Claims | None = None,
) -> ReportModel:
    """Read a run folder (with its ``op_coverage.json`` when present) amended by its
    reruns ``amend``, an optional baseline run, an earlier run to compare with, and a
    runs root for trends; with ``claims``, the feature matrix's rows carry the backend's
    claims for the run's mode."""
    meta, frame = load_run(run_dir, amend=amend)
    baseline = load_run(baseline_dir) if baseline_dir else None
    before = load_run(compare_dir) if compare_dir else None
    loaded = {Path(run_dir).resolve(): (meta, frame)}
    if before is not None:
        loaded[Path(compare_dir).resolve()] = before  # type: ignore[arg-type]
    trends = (
        build_trends(
            history_root, backend=meta.backend or None, mode=meta.mode or "eager", loaded=loaded
        )
        if history_root
        else None
    )
    # A rerun's snapshot counts the base run amended by it: the latest rerun that has one
    # describes the amended view; the base run's own describes the run before them.
    coverage = next(
        (c for c in map(load_op_coverage, reversed(amend)) if c is not None), None
    ) or load_op_coverage(run_dir)
    model = model_from_frame(
        meta, frame, coverage=coverage, baseline=baseline, before=before, trends=trends
    )
    model.amended_by = [read_meta(rerun).run_id for rerun in amend]
    if modes_dir:
        other_meta, other = load_run(modes_dir)
        model.modes = build_modes(frame, meta, other, other_meta)
    if claims is not None and model.features is not None:
        apply_claims(model.features, claims, meta.mode)
    return model
