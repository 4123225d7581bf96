"""Two runs side by side, joined by ``test_id``: a CPU baseline (what fails only on the
backend) and an earlier run (what changed, with upstream churn kept apart).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from conformance.baseline import JoinCoverage, coverage_of
from conformance.model import OUTCOMES, RunMeta
from reports.counts import Counts, bucket_of
from reports.tests_view import LIST_COLUMNS
from reports.viewmodel import collection_rows

if TYPE_CHECKING:
    import pandas

__all__ = [
    "DIFF_KINDS",
    "BaselineView",
    "DiffKind",
    "DiffView",
    "FileDrop",
    "build_baseline",
    "build_diff",
    "collection_errors_by_file",
    "fewer_tests",
    "file_drops",
    "tests_by_file",
]


_BUCKETS = {name: bucket_of(name) for name in OUTCOMES}


def _totals(frame: pandas.DataFrame) -> Counts:
    by_outcome = frame["outcome"].value_counts()
    return Counts.from_series(by_outcome)


@dataclass
class BaselineView:
    """The run against a baseline run (usually the CPU) of the same suite.

    The join judges only the tests both runs recorded: ``coverage_text`` states how many those
    are, and ``warning`` (empty when the coverage is not low) says so beside the counts.
    """

    meta: RunMeta
    counts: Counts  # the baseline run's own totals
    in_both: int  # tests present in both runs
    only_here: int  # tests the baseline did not record
    only_baseline: int  # tests the baseline recorded that this run did not
    coverage_text: str  # "12 tests in both runs, 0 only on emu, 0 only on cpu"
    warning: str  # the low-coverage warning, or ""
    coverage: JoinCoverage  # every count of the join's coverage (on demand or full)
    backend_only: pandas.DataFrame  # tests failed here that passed on the baseline
    both_failed: int  # failed here and on the baseline: upstream or test problems
    skipped_here_passed_there: int
    by_category: list[tuple[str, int]]  # backend-only failures per category
    outcomes: pandas.Series = field(repr=False)  # baseline outcome by test_id


def build_baseline(
    frame: pandas.DataFrame,
    baseline_meta: RunMeta,
    baseline: pandas.DataFrame,
    *,
    backend: str = "",
) -> BaselineView:
    """Join a prepared run (of ``backend``, named in the coverage) with a baseline run by
    test_id."""
    outcomes = baseline.set_index("test_id")["outcome"]
    there = frame["test_id"].map(outcomes)
    there_bucket = there.map(_BUCKETS)
    backend_only = frame.loc[(frame["bucket"] == "failed") & (there_bucket == "passed")]
    categories = backend_only["category"].replace("", "other").value_counts()
    # An on-demand baseline ran only the tests that did not pass here: its coverage is
    # judged on those, and the passing tests it did not re-run are counted apart.
    coverage = coverage_of(frame, baseline, on_demand=bool(baseline_meta.baseline_for))
    return BaselineView(
        meta=baseline_meta,
        counts=_totals(baseline),
        in_both=coverage.in_both,
        only_here=coverage.only_here,
        only_baseline=coverage.only_baseline,
        coverage_text=coverage.describe(backend, baseline_meta.backend),
        warning=coverage.warning(baseline_meta.backend) or "",
        coverage=coverage,
        backend_only=backend_only,
        both_failed=int(((frame["bucket"] == "failed") & (there_bucket == "failed")).sum()),
        skipped_here_passed_there=int(
            ((frame["bucket"] == "skipped") & (there_bucket == "passed")).sum()
        ),
        by_category=sorted(
            ((str(c), int(n)) for c, n in categories.items()), key=lambda item: (-item[1], item[0])
        ),
        outcomes=outcomes,
    )


#: Kinds of change between two runs, in the order shown: (key, title, what it means).
DIFF_KINDS = (
    ("new_failures", "New failures", "failed now; passed or was skipped before"),
    ("fixed", "Fixed", "passed now; failed before"),
    ("new_passes", "New passes", "passed now; was skipped before"),
    ("newly_skipped", "Newly skipped", "skipped now; passed or failed before"),
    (
        "newly_flaky",
        "Newly flaky",
        "failed, then passed on a retry now; passed, failed or was skipped before",
    ),
    ("added", "Added upstream", "tests in this run only: new or renamed upstream"),
    ("removed", "Removed upstream", "tests in the earlier run only: removed or renamed upstream"),
)
_TRANSITIONS = {
    "new_failures": (("passed", "skipped"), ("failed",)),
    "fixed": (("failed",), ("passed",)),
    "new_passes": (("skipped",), ("passed",)),
    "newly_skipped": (("passed", "failed"), ("skipped",)),
    # Flaky is neither a pass nor a failure: never a new failure, never a fix.
    "newly_flaky": (("passed", "failed", "skipped"), ("flaky",)),
}


@dataclass
class DiffKind:
    """One kind of change and the tests it holds (LIST_COLUMNS plus ``other``, the
    outcome in the earlier run)."""

    key: str
    title: str
    description: str
    rows: pandas.DataFrame

    @property
    def churn(self) -> bool:
        """True for tests added or removed upstream, not changed by the backend."""
        return self.key in ("added", "removed")


@dataclass(frozen=True, slots=True)
class FileDrop:
    """A file from which this run collected fewer tests than the run it is compared with:
    ``before`` and ``now`` count its tests (0 now for a file that vanished or failed to
    collect); ``error`` is the first line of its collection error in this run, or ""."""

    file: str
    before: int
    now: int
    error: str = ""

    def describe(self) -> str:
        """``test_x.py: 84 tests before, 0 now (failed to collect: SyntaxError: ...)``."""
        why = f" (failed to collect: {self.error})" if self.error else ""
        return f"{self.file}: {self.before:,} tests before, {self.now:,} now{why}"


def tests_by_file(frame: pandas.DataFrame) -> dict[str, int]:
    """How many tests a run collected from each file, counted from its records (every
    collected test has one, a deselected test too); a collection error's record is no test."""
    return {
        str(k): int(n) for k, n in frame.loc[~collection_rows(frame)].groupby("file").size().items()
    }


def collection_errors_by_file(frame: pandas.DataFrame, column: str = "message") -> dict[str, str]:
    """Each file's collection error in a run, the first line of its ``column`` (the message;
    ``detail``, the exception's type, where a large run is read without its messages)."""
    errors = frame.loc[collection_rows(frame)].drop_duplicates("file")
    return dict(zip(errors["file"], errors[column].str.split("\n").str[0], strict=True))


def file_drops(
    now: Mapping[str, int], before: Mapping[str, int], errors: Mapping[str, str]
) -> list[FileDrop]:
    """The files of ``before`` (tests per file) with fewer tests ``now``, by file name,
    each with its collection error from ``errors``."""
    return [
        FileDrop(file, count, now.get(file, 0), errors.get(file, ""))
        for file, count in sorted(before.items())
        if now.get(file, 0) < count
    ]


def fewer_tests(frame: pandas.DataFrame, before: pandas.DataFrame) -> list[FileDrop]:
    """The files of ``before`` from which ``frame`` (a later run) collected fewer tests."""
    return file_drops(tests_by_file(frame), tests_by_file(before), collection_errors_by_file(frame))


@dataclass
class DiffView:
    """What changed from an earlier run (``before``) to this one; ``fewer_tests`` lists the
    files this run collected fewer tests from."""

    before: RunMeta
    before_counts: Counts
    after_counts: Counts
    kinds: list[DiffKind]
    common: int
    fewer_tests: list[FileDrop] = field(default_factory=list)


def build_diff(frame: pandas.DataFrame, before_meta: RunMeta, before: pandas.DataFrame) -> DiffView:
    """Compare a prepared run with an earlier run by test_id. Upstream churn (tests that
    exist in only one run) is kept apart from changes of tests both runs recorded."""
    import pandas

    earlier = before.set_index("test_id")["outcome"]
    was = frame["test_id"].map(earlier)
    was_bucket = was.map(_BUCKETS)
    kinds = []
    for key, title, description in DIFF_KINDS:
        if key == "added":
            rows = frame.loc[was.isna(), list(LIST_COLUMNS)]
        elif key == "removed":
            # A hashed lookup: Series.isin over 150K Arrow strings is seconds slower.
            gone = pandas.Index(frame["test_id"]).get_indexer(before["test_id"]) == -1
            rows = _removed_rows(before.loc[gone])
        else:
            from_buckets, to_buckets = _TRANSITIONS[key]
            chosen = was_bucket.isin(from_buckets) & frame["bucket"].isin(to_buckets)
            rows = frame.loc[chosen, list(LIST_COLUMNS)]
        rows = rows.assign(other=rows["test_id"].map(earlier).fillna(""))
        kinds.append(DiffKind(key=key, title=title, description=description, rows=rows))
    return DiffView(
        before=before_meta,
        before_counts=_totals(before),
        after_counts=_totals(frame),
        kinds=kinds,
        common=int(was.notna().sum()),
        fewer_tests=fewer_tests(frame, before),
    )


def _removed_rows(removed: pandas.DataFrame) -> pandas.DataFrame:
    """Tests this run no longer has, in LIST_COLUMNS: no page to link to (``href`` is
    empty) and no outcome in this run."""
    import pandas

    removed = removed.sort_values("test_id")
    count = len(removed)
    return pandas.DataFrame(
        {
            "test_id": removed["test_id"].tolist(),
            "file": removed["file"].tolist(),
            "href": [""] * count,
            "index": [0] * count,
            **{name: [""] * count for name in ("outcome", "category", "detail", "message")},
            "duration_s": [0.0] * count,
            "skip_entry": [""] * count,
            "ops_fallback": [()] * count,
        },
        columns=list(LIST_COLUMNS),
    )
