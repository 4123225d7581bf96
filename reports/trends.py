"""Trends over the runs of a runs root: one point per run, one row per release.

Reading a root of many large runs must stay bounded, so each run is reduced to its counts,
a sorted array of test-id hashes (enough to count tests added and removed) and its tests
per file (enough to say which files it collected fewer tests from than the run before it
of the same selection) before the next is read.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance.model import CATEGORIES, RunMeta
from reports.compare import FileDrop, collection_errors_by_file, file_drops, tests_by_file
from reports.counts import SKIP_OUTCOMES, Counts
from reports.loading import load_run, run_dirs

if TYPE_CHECKING:
    import numpy
    import pandas

__all__ = ["TrendPoint", "Trends", "build_trends"]


@dataclass
class TrendPoint:
    """One run, reduced."""

    run_id: str
    start_time: str
    torch_version: str
    backend: str
    counts: Counts
    skipped_by_category: dict[str, int]
    added: int = 0  # tests not in the previous point (upstream churn)
    removed: int = 0
    #: Files this run collected fewer tests from than the last earlier run of the same
    #: selection (``compared_with``); empty for a release row.
    fewer_tests: list[FileDrop] = field(default_factory=list)
    compared_with: str = ""
    ids: numpy.ndarray | None = field(default=None, repr=False)
    #: Tests per file, and what a run must share with another to be compared file by
    #: file (suite, shard, filters; None for a rerun): only needed while building.
    files: dict[str, int] | None = field(default=None, repr=False)
    selection: tuple[object, ...] | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        return self.start_time[:10] or self.run_id

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "start_time": self.start_time,
            "torch_version": self.torch_version,
            "backend": self.backend,
            "counts": self.counts.to_dict(),
            "skipped_by_category": self.skipped_by_category,
            "added": self.added,
            "removed": self.removed,
            "compared_with": self.compared_with,
            "fewer_tests": [
                {"file": d.file, "before": d.before, "now": d.now, "error": d.error}
                for d in self.fewer_tests
            ],
        }


@dataclass
class Trends:
    """Points per run (oldest first) and per release (the last run of each torch version,
    with churn counted against the previous release)."""

    runs: list[TrendPoint]
    releases: list[TrendPoint]

    def of_run(self, run_id: str) -> TrendPoint | None:
        """The point of one run, or None when the root does not hold it."""
        return next((p for p in reversed(self.runs) if p.run_id == run_id), None)

    @property
    def with_fewer_tests(self) -> list[TrendPoint]:
        """The runs that collected fewer tests from some file than the run before them."""
        return [p for p in self.runs if p.fewer_tests]

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": [p.to_dict() for p in self.runs],
            "releases": [p.to_dict() for p in self.releases],
        }


def _hashes(test_ids: Any) -> numpy.ndarray:
    import numpy

    return numpy.unique(
        numpy.fromiter(
            (zlib.crc32(t.encode()) for t in test_ids), dtype=numpy.uint64, count=len(test_ids)
        )
    )


def _churn(point: TrendPoint, previous: TrendPoint | None) -> tuple[int, int]:
    import numpy

    if previous is None or point.ids is None or previous.ids is None:
        return 0, 0
    added = len(numpy.setdiff1d(point.ids, previous.ids, assume_unique=True))
    removed = len(numpy.setdiff1d(previous.ids, point.ids, assume_unique=True))
    return added, removed


def build_trends(
    runs_root: str | Path,
    *,
    backend: str | None = None,
    mode: str | None = None,
    loaded: dict[Path, tuple[RunMeta, pandas.DataFrame]] | None = None,
) -> Trends:
    """Trend points for every run under ``runs_root`` (only ``backend``'s runs, when
    given, so a CPU baseline stored beside the backend's runs is not mixed in; only runs
    of ``mode``, when given, so compile runs do not interleave with eager ones).
    ``loaded`` maps resolved run folders already read (the report's own run, the run it is
    compared with) to their contents, so they are not read twice."""
    loaded = loaded or {}
    points: list[TrendPoint] = []
    for run_dir in run_dirs(runs_root):
        if run_dir.resolve() in loaded:
            meta, frame = loaded[run_dir.resolve()]
        else:
            # Only the columns a trend point needs: a root may hold many large runs.
            meta, frame = load_run(run_dir, columns=["ops_fallback", "file", "template", "detail"])
        if backend is not None and meta.backend and meta.backend != backend:
            continue
        if mode is not None and (meta.mode or "eager") != mode:
            continue
        skipped = frame.loc[frame["outcome"].isin(SKIP_OUTCOMES), "category"]
        by_category = skipped.replace("", "other").value_counts()
        fallback = int(
            ((frame["outcome"] == "passed") & (frame["ops_fallback"].map(len) > 0)).sum()
        )
        point = TrendPoint(
            run_id=meta.run_id,
            start_time=meta.start_time,
            torch_version=meta.torch_version,
            backend=meta.backend,
            counts=Counts.from_series(frame["outcome"].value_counts(), fallback=fallback),
            skipped_by_category={
                c: int(by_category[c]) for c in CATEGORIES if by_category.get(c, 0)
            },
            ids=_hashes(frame["test_id"].tolist()),
            files=tests_by_file(frame),
            selection=None if meta.amends else (meta.suite, meta.shard, tuple(meta.filters)),
        )
        point.added, point.removed = _churn(point, points[-1] if points else None)
        # The exception's type names a collection error: messages are the bulk of a run.
        _compare_files(point, points, collection_errors_by_file(frame, "detail"))
        points.append(point)
        del frame
    releases: dict[str, TrendPoint] = {}
    for point in points:
        releases[point.torch_version or "unknown"] = point  # the last run of each release
    release_points = []
    for version, point in releases.items():
        copy = TrendPoint(
            **{**point.__dict__, "torch_version": version, "fewer_tests": [], "compared_with": ""}
        )
        copy.added, copy.removed = _churn(copy, release_points[-1] if release_points else None)
        release_points.append(copy)
    for point in (*points, *release_points):
        point.ids = None  # only needed to count churn
        point.files = point.selection = None
    return Trends(runs=points, releases=release_points)


def _compare_files(point: TrendPoint, earlier: list[TrendPoint], errors: dict[str, str]) -> None:
    """Set ``point.fewer_tests`` against the last earlier run of the same selection (a
    rerun, or a run of other files, says nothing of what a file should hold)."""
    if point.selection is None or point.files is None:
        return
    for previous in reversed(earlier):
        if previous.selection == point.selection and previous.files is not None:
            point.compared_with = previous.run_id
            point.fewer_tests = file_drops(point.files, previous.files, errors)
            return
