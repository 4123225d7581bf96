"""Separating backend failures from failures the CPU has too.

A baseline is a second run of the same selection on another device (normally ``cpu``).
Joined by ``test_id`` (device-independent), each test of the device run gets the baseline's
outcome beside its own, and ``backend_only`` says whether its failure is the backend's:
it failed on the device and passed on the baseline.

The join covers only the tests both runs recorded: :class:`JoinCoverage` counts them, the
tests only the device run has and those only the baseline has, and says when too few of the
run's tests are in the baseline for the backend-only count to speak for the run. Every
place that reports a baseline (the terminal, ``baseline.json``, the reports) takes its
numbers and its warning from it.

The join is written next to the device run as ``baseline.parquet``, with
``baseline.json`` naming the baseline run and summarizing the join and its coverage.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance.errors import ConfigError

if TYPE_CHECKING:
    import pandas

__all__ = [
    "BASELINE_JSON",
    "BASELINE_PARQUET",
    "FAILED_OUTCOMES",
    "LOW_COVERAGE",
    "JoinCoverage",
    "compare",
    "join_coverage",
    "read_baseline",
    "write_baseline",
]

BASELINE_PARQUET = "baseline.parquet"
BASELINE_JSON = "baseline.json"

#: Outcomes that count as "the test does not work here" (a known failure included).
FAILED_OUTCOMES = ("failed", "error", "crashed", "timeout", "xfailed")
_PASSED_OUTCOMES = ("passed", "xpassed")

#: Below this share of the run's tests in the baseline, the join's counts come with a warning.
LOW_COVERAGE = 0.9

_KEEP = ("test_id", "nodeid", "file", "test_class", "template", "op", "variant", "dtype")
_SIDE = ("outcome", "category", "detail")


@dataclass(frozen=True)
class JoinCoverage:
    """How much of two runs a join by ``test_id`` covers, counted in distinct test_ids."""

    in_both: int  # tests both runs recorded: the only ones the join can judge
    only_here: int  # tests of the device run the baseline did not record
    only_baseline: int  # tests the baseline recorded that the device run did not

    @property
    def here(self) -> int:
        """The device run's tests."""
        return self.in_both + self.only_here

    @property
    def low(self) -> bool:
        """True when fewer than LOW_COVERAGE of the run's tests are in the baseline."""
        return self.in_both < LOW_COVERAGE * self.here

    def describe(self, here: str = "", baseline: str = "") -> str:
        """``"4,272 tests in both runs, 0 only on emu, 12 only on cpu"``, with the devices
        named where they are given and differ."""
        if here and baseline and here != baseline:
            here, baseline = f"on {here}", f"on {baseline}"
        else:
            here, baseline = "in this run", "in the baseline"
        return (
            f"{self.in_both:,} tests in both runs, {self.only_here:,} only {here}, "
            f"{self.only_baseline:,} only {baseline}"
        )

    def warning(self, baseline: str = "") -> str | None:
        """The warning to show beside the join's counts when its coverage is low, else
        None. It starts with ``warning:``."""
        if not self.low:
            return None
        name = f"the {baseline} baseline" if baseline else "the baseline"
        return (
            f"warning: only {self.in_both:,} of the {self.here:,} tests of this run "
            f"({_share(self.in_both, self.here)}) are in {name}; the backend-only count "
            f"covers only those {self.in_both:,} tests"
        )


def _share(numerator: int, denominator: int) -> str:
    # As reports.counts.percent: a partial share never reads 0 (the warning is never ~100%).
    value = 100.0 * numerator / denominator
    return "<0.1%" if 0 < value < 0.05 else f"{value:.1f}%"


def join_coverage(here: Iterable[str], baseline: Iterable[str]) -> JoinCoverage:
    """The coverage of a join of a run's test_ids (``here``) with a baseline's."""
    import pandas

    here_ids = pandas.Index(here).unique()
    baseline_ids = pandas.Index(baseline).unique()
    # A hashed lookup: Series.isin over 150K Arrow strings is seconds slower.
    in_both = int((here_ids.get_indexer(baseline_ids) != -1).sum())
    return JoinCoverage(
        in_both=in_both,
        only_here=len(here_ids) - in_both,
        only_baseline=len(baseline_ids) - in_both,
    )


def compare(device: pandas.DataFrame, baseline: pandas.DataFrame) -> pandas.DataFrame:
    """One row per test of the device run, with the baseline's outcome beside it.

    Columns: the identity fields, ``outcome``/``category``/``detail`` on the device,
    ``baseline_outcome``/``baseline_category``/``baseline_detail`` (empty where the
    baseline has no such test), ``backend_only`` (failed on the device, passed on the
    baseline) and ``failure_scope``: ``backend``, ``both`` (failed on the baseline too),
    ``unknown`` (baseline skipped or missing the test) or empty when the device did not fail.
    """
    left = device.loc[:, [*_KEEP, *_SIDE]]
    right = baseline.loc[:, ["test_id", *_SIDE]].drop_duplicates("test_id", keep="last")
    right = right.rename(columns={name: f"baseline_{name}" for name in _SIDE})
    joined = left.merge(right, on="test_id", how="left", validate="many_to_one")
    for name in _SIDE:
        joined[f"baseline_{name}"] = joined[f"baseline_{name}"].fillna("")
    failed = joined["outcome"].isin(FAILED_OUTCOMES)
    base_passed = joined["baseline_outcome"].isin(_PASSED_OUTCOMES)
    base_failed = joined["baseline_outcome"].isin(FAILED_OUTCOMES)
    joined["backend_only"] = failed & base_passed
    joined["failure_scope"] = ""
    joined.loc[failed & base_passed, "failure_scope"] = "backend"
    joined.loc[failed & base_failed, "failure_scope"] = "both"
    joined.loc[failed & ~base_passed & ~base_failed, "failure_scope"] = "unknown"
    return joined.reset_index(drop=True)


def write_baseline(
    run_dir: str | os.PathLike[str],
    joined: pandas.DataFrame,
    *,
    baseline_run: str,
    baseline_device: str,
    coverage: JoinCoverage,
) -> Path:
    """Write the join beside the device run, with its summary and ``coverage`` (the
    :func:`join_coverage` of the two runs); return the Parquet file's path."""
    run_dir = Path(run_dir)
    path = run_dir / BASELINE_PARQUET
    joined.to_parquet(path, index=False)
    summary = {
        "baseline_run_id": baseline_run,
        "baseline_device": baseline_device,
        "backend_only": int(joined["backend_only"].sum()),
        "both": int((joined["failure_scope"] == "both").sum()),
        "in_both": coverage.in_both,
        "only_here": coverage.only_here,
        "only_baseline": coverage.only_baseline,
    }
    (run_dir / BASELINE_JSON).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return path


def read_baseline(run_dir: str | os.PathLike[str]) -> tuple[dict[str, Any], pandas.DataFrame]:
    """The baseline summary and join of a run; ConfigError when the run has none.

    A summary written before it stated the join's coverage gets ``in_both`` and
    ``only_here`` from the join itself, and ``only_baseline`` None: the join does not keep
    the tests only the baseline recorded.
    """
    import pandas

    run_dir = Path(run_dir)
    try:
        summary = json.loads((run_dir / BASELINE_JSON).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("the run has no baseline", where=str(run_dir)) from None
    joined = pandas.read_parquet(run_dir / BASELINE_PARQUET)
    if "in_both" not in summary:
        # compare() leaves baseline_outcome empty where the baseline has no such test.
        found = joined["baseline_outcome"] != ""
        in_both = joined.loc[found, "test_id"].nunique()
        summary["in_both"] = in_both
        summary["only_here"] = joined["test_id"].nunique() - in_both
        summary["only_baseline"] = None
    return summary, joined
