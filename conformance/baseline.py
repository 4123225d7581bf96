"""Separating backend failures from failures the CPU has too.

A baseline is a second run of the same tests on another device (normally ``cpu``). Joined
by ``test_id`` (device-independent), each test of the device run gets the baseline's
outcome beside its own, and ``backend_only`` says whether its failure is the backend's:
it failed on the device and passed on the baseline.

By default the baseline is *on demand*: it runs after the device run, and only the tests
that did not pass there (:func:`needs_baseline`: failed, errored, crashed, timed out,
expected to fail, flaky, skipped, deselected or unexpectedly passed: every outcome the
join's classification reads the baseline's for), since a test that passed on the device
has nothing for the baseline to explain. Such a run's metadata names the runs it is the
baseline for (``baseline_for``). A full baseline runs the whole selection.

The join covers only the tests both runs recorded: :class:`JoinCoverage` counts them, the
tests only the device run has and those only the baseline has, and says when too few of the
run's tests are in the baseline for the backend-only count to speak for the run; for an
on-demand baseline, it counts the tests that needed the baseline and the passing tests not
re-run by design, and judges the coverage on the former alone. Every place that reports a
baseline (the terminal, ``baseline.json``, the reports) takes its numbers and its warning
from it.

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
    "coverage_of",
    "join_coverage",
    "needs_baseline",
    "read_baseline",
    "tests_needing_baseline",
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


def needs_baseline(outcome: str) -> bool:
    """Whether an on-demand baseline runs a test that ended so on the device: every
    outcome but a pass (the join classifies failures, expected failures and skips by the
    baseline's outcome, and a flaky or unexpectedly passing test is worth the comparison)."""
    return outcome != "passed"


def tests_needing_baseline(frame: pandas.DataFrame) -> list[str]:
    """The test_ids of a device run's records that an on-demand baseline runs (records of
    files that failed to collect stand for no test)."""
    from conformance.model import COLLECTION_ERROR

    collector = (frame["category"] == COLLECTION_ERROR) & (frame["template"] == "")
    chosen = frame.loc[(frame["outcome"] != "passed") & ~collector, "test_id"]
    return sorted(set(chosen))


@dataclass(frozen=True)
class JoinCoverage:
    """How much of two runs a join by ``test_id`` covers, counted in distinct test_ids.

    For an on-demand baseline (``on_demand``), ``needed`` counts the device run's tests that
    did not pass (the ones the baseline ran), ``only_here`` those of them the baseline did
    not record, and ``not_rerun`` the passing tests it did not run, by design."""

    in_both: int  # tests both runs recorded: the only ones the join can judge
    only_here: int  # tests of the device run the baseline did not record (and should have)
    only_baseline: int  # tests the baseline recorded that the device run did not
    not_rerun: int = 0  # passing tests of the device run an on-demand baseline did not run
    needed: int = 0  # tests of the device run that did not pass (on demand)
    on_demand: bool = False

    @property
    def here(self) -> int:
        """The device run's tests."""
        return self.in_both + self.only_here + self.not_rerun

    @property
    def judged(self) -> int:
        """The tests the coverage is judged on: the run's, or (on demand) those that did
        not pass."""
        return self.needed if self.on_demand else self.here

    @property
    def joined(self) -> int:
        """How many of :attr:`judged` the baseline recorded."""
        return self.needed - self.only_here if self.on_demand else self.in_both

    @property
    def low(self) -> bool:
        """True when fewer than LOW_COVERAGE of the judged tests are in the baseline."""
        return self.joined < LOW_COVERAGE * self.judged

    def describe(self, here: str = "", baseline: str = "") -> str:
        """``"4,272 tests in both runs, 0 only on emu, 12 only on cpu"``, with the devices
        named where they are given and differ; on demand, ``"baseline on demand: 12 of the
        12 tests that did not pass on emu joined (every one), 4,260 passing tests not re-run
        on cpu, 0 only on cpu"``."""
        if here and baseline and here != baseline:
            here, baseline = f"on {here}", f"on {baseline}"
        else:
            here, baseline = "in this run", "in the baseline"
        if self.on_demand:
            every = " (every one)" if not self.only_here else ""
            return (
                f"baseline on demand: {self.joined:,} of the {self.needed:,} tests that did "
                f"not pass {here} joined{every}, {self.not_rerun:,} passing tests not re-run "
                f"{baseline}, {self.only_baseline:,} only {baseline}"
            )
        return (
            f"{self.in_both:,} tests in both runs, {self.only_here:,} only {here}, "
            f"{self.only_baseline:,} only {baseline}"
        )

    def warning(self, baseline: str = "") -> str | None:
        """The warning to show beside the join's counts when its coverage is low, else
        None. It starts with ``warning:``. Passing tests an on-demand baseline did not re-run
        never make it low."""
        if not self.low:
            return None
        name = f"the {baseline} baseline" if baseline else "the baseline"
        which = "tests of this run that did not pass" if self.on_demand else "tests of this run"
        return (
            f"warning: only {self.joined:,} of the {self.judged:,} {which} "
            f"({_share(self.joined, self.judged)}) are in {name}; the backend-only count "
            f"covers only those {self.joined:,} tests"
        )

    def to_dict(self) -> dict[str, Any]:
        """The counts as ``baseline.json`` and the JSON summary state them."""
        return {
            "in_both": self.in_both,
            "only_here": self.only_here,
            "only_baseline": self.only_baseline,
            "on_demand": self.on_demand,
            "needed": self.needed,
            "not_rerun": self.not_rerun,
        }


def _share(numerator: int, denominator: int) -> str:
    # As reports.counts.percent: a partial share never reads 0 (the warning is never ~100%).
    value = 100.0 * numerator / denominator
    return "<0.1%" if 0 < value < 0.05 else f"{value:.1f}%"


def join_coverage(
    here: Iterable[str], baseline: Iterable[str], passed: Iterable[str] | None = None
) -> JoinCoverage:
    """The coverage of a join of a run's test_ids (``here``) with a baseline's. ``passed``
    (the run's tests that passed) makes it the coverage of an on-demand baseline, which ran
    only the others."""
    import pandas

    here_ids = pandas.Index(here).unique()
    baseline_ids = pandas.Index(baseline).unique()
    # A hashed lookup: Series.isin over 150K Arrow strings is seconds slower.
    found = baseline_ids.get_indexer(here_ids) != -1  # per test of the run: in the baseline
    in_both = int(found.sum())
    only_baseline = len(baseline_ids) - in_both
    if passed is None:
        return JoinCoverage(
            in_both=in_both, only_here=len(here_ids) - in_both, only_baseline=only_baseline
        )
    passing = pandas.Index(passed).unique()
    is_passing = passing.get_indexer(here_ids) != -1
    return JoinCoverage(
        in_both=in_both,
        only_here=int((~found & ~is_passing).sum()),
        only_baseline=only_baseline,
        not_rerun=int((~found & is_passing).sum()),
        needed=int((~is_passing).sum()),
        on_demand=True,
    )


def coverage_of(
    device: pandas.DataFrame, baseline: pandas.DataFrame, *, on_demand: bool
) -> JoinCoverage:
    """The coverage of the join of a device run's records with a baseline run's; an
    on-demand baseline (its metadata's ``baseline_for``) is judged on the tests that did not
    pass on the device."""
    passed = device.loc[device["outcome"] == "passed", "test_id"] if on_demand else None
    return join_coverage(device["test_id"], baseline["test_id"], passed)


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
        **coverage.to_dict(),
    }
    (run_dir / BASELINE_JSON).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return path


def read_baseline(run_dir: str | os.PathLike[str]) -> tuple[dict[str, Any], pandas.DataFrame]:
    """The baseline summary and join of a run; ConfigError when the run has none.

    A summary written before it stated the join's coverage gets ``in_both`` and
    ``only_here`` from the join itself, and ``only_baseline`` None: the join does not keep
    the tests only the baseline recorded. One written before baselines ran on demand reads
    as a full baseline's (``on_demand`` false, ``needed`` and ``not_rerun`` 0).
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
    for name, default in (("on_demand", False), ("needed", 0), ("not_rerun", 0)):
        summary.setdefault(name, default)
    return summary, joined
