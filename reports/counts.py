"""Outcome counts as a value type that adds up, and the one percentage rule.

Every table in every output (HTML, Markdown, JSON) is built from :class:`Counts` rows, so a
totals row is ``sum(rows)`` and the buckets (passed / failed / flaky / skipped) mean the same
thing everywhere.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from conformance.model import OUTCOMES

if TYPE_CHECKING:
    import pandas

__all__ = [
    "FAIL_OUTCOMES",
    "FLAKY_OUTCOMES",
    "PASS_OUTCOMES",
    "SKIP_OUTCOMES",
    "Counts",
    "bucket_of",
    "percent",
]

#: Outcomes counted as passed. A test that passed only through the CPU fallback is passed
#: (and counted again in ``Counts.fallback``).
PASS_OUTCOMES = ("passed",)
#: Outcomes counted as failed. ``xpassed`` is a failure: skiplist xfails are strict, so an
#: unexpected pass means the skiplist entry is stale and must go.
FAIL_OUTCOMES = ("failed", "error", "crashed", "timeout", "xpassed")
#: Outcomes counted as skipped: the test did not run to a verdict (``xfailed`` ran, but its
#: failure was expected by a skiplist entry, so it is reported with the skips).
SKIP_OUTCOMES = ("skipped", "xfailed", "deselected")
#: Outcomes counted as flaky: the test failed, then passed when retried in a fresh process.
#: Neither a pass nor a failure: a finding of its own, never a regression nor a fix.
FLAKY_OUTCOMES = ("flaky",)

_BUCKET = {
    **dict.fromkeys(PASS_OUTCOMES, "passed"),
    **dict.fromkeys(FAIL_OUTCOMES, "failed"),
    **dict.fromkeys(SKIP_OUTCOMES, "skipped"),
    **dict.fromkeys(FLAKY_OUTCOMES, "flaky"),
}
assert set(_BUCKET) == set(OUTCOMES), "every outcome belongs to exactly one bucket"
# Counts.n_* spell these tuples out; a change here must change them too.
assert PASS_OUTCOMES == ("passed",)
assert FAIL_OUTCOMES == ("failed", "error", "crashed", "timeout", "xpassed")
assert SKIP_OUTCOMES == ("skipped", "xfailed", "deselected")
assert FLAKY_OUTCOMES == ("flaky",)


def bucket_of(outcome: str) -> str:
    """``passed``, ``failed``, ``skipped`` or ``flaky`` for an outcome in OUTCOMES."""
    return _BUCKET[outcome]


@dataclass(frozen=True, slots=True)
class Counts:  # fields in OUTCOMES order, then fallback: Counts(*row) is positional
    """How many tests ended in each outcome; ``fallback`` counts passed tests that had ops
    fall back to the CPU. Adding two Counts adds every field."""

    passed: int = 0
    failed: int = 0
    error: int = 0
    skipped: int = 0
    xfailed: int = 0
    xpassed: int = 0
    crashed: int = 0
    timeout: int = 0
    deselected: int = 0
    flaky: int = 0
    fallback: int = 0

    def __add__(self, other: Counts) -> Counts:
        if not isinstance(other, Counts):
            return NotImplemented
        return Counts(*(a + b for a, b in zip(_values(self), _values(other), strict=True)))

    def __radd__(self, other: Any) -> Counts:
        # sum() starts from 0.
        if other == 0:
            return self
        return self.__add__(other)

    # The bucket sums are spelled out (no getattr loop): templates read them for every
    # row of every table, and a report has tables with 100K cells.
    @property
    def total(self) -> int:
        return self.n_passed + self.n_failed + self.n_skipped + self.flaky

    @property
    def n_passed(self) -> int:
        return self.passed

    @property
    def n_failed(self) -> int:
        return self.failed + self.error + self.crashed + self.timeout + self.xpassed

    @property
    def n_skipped(self) -> int:
        return self.skipped + self.xfailed + self.deselected

    @property
    def n_flaky(self) -> int:
        return self.flaky

    @property
    def ran(self) -> int:
        """Tests that ran to a verdict: passed, failed and flaky."""
        return self.n_passed + self.n_failed + self.flaky

    @property
    def pass_rate(self) -> str:
        """Passed out of all tests, as the one percentage rule prints it."""
        return percent(self.n_passed, self.total)

    @property
    def worst(self) -> str:
        """``failed`` if any test failed, else ``flaky`` if any was flaky, else ``skipped``
        if any was skipped, else ``passed`` (``none`` when empty): the colour of a grid cell."""
        if self.n_failed:
            return "failed"
        if self.flaky:
            return "flaky"
        if self.n_skipped:
            return "skipped" if not self.n_passed else "partial"
        return "passed" if self.n_passed else "none"

    def to_dict(self) -> dict[str, int]:
        """Every outcome field plus the buckets and the total, for machine outputs."""
        data = dataclasses.asdict(self)
        data.update(
            total=self.total,
            bucket_passed=self.n_passed,
            bucket_failed=self.n_failed,
            bucket_skipped=self.n_skipped,
            bucket_flaky=self.n_flaky,
        )
        return data

    @classmethod
    def from_series(cls, by_outcome: pandas.Series, fallback: int = 0) -> Counts:
        """Counts from a Series indexed by outcome (as ``value_counts`` returns)."""
        return cls(**{name: int(by_outcome.get(name, 0)) for name in OUTCOMES}, fallback=fallback)


assert tuple(f.name for f in dataclasses.fields(Counts)) == (*OUTCOMES, "fallback")


def _values(counts: Counts) -> tuple[int, ...]:
    return tuple(getattr(counts, f.name) for f in dataclasses.fields(counts))


def percent(numerator: int, denominator: int) -> str:
    """``numerator / denominator`` as a percentage with one decimal.

    A partial result is never shown as 0 or 100: 1 of 10,000 reads ``<0.1%`` and 9,999 of
    10,000 reads ``>99.9%``, so a dashboard never claims all or nothing when that is false.
    An empty denominator reads ``n/a``.
    """
    if denominator <= 0:
        return "n/a"
    value = 100.0 * numerator / denominator
    if 0 < numerator < denominator:
        if value < 0.05:
            return "<0.1%"
        if value >= 99.95:
            return ">99.9%"
    return f"{value:.1f}%"
