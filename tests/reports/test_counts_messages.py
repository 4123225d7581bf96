"""Counts add up and the percentage rule never claims all or nothing; messages are shown
bounded and visible, and grouped by what they say rather than their numbers."""

from __future__ import annotations

import pytest

from conformance.model import OUTCOMES
from reports.counts import Counts, bucket_of, percent
from reports.messages import normalize_message, printable


def test_counts_add_field_by_field_and_sum_starts_from_zero() -> None:
    rows = [Counts(passed=2, failed=1, fallback=1), Counts(skipped=3, xfailed=1, crashed=2)]
    total = sum(rows)
    assert total == Counts(passed=2, failed=1, skipped=3, xfailed=1, crashed=2, fallback=1)
    assert (total.total, total.n_passed, total.n_failed, total.n_skipped) == (9, 2, 3, 4)


def test_every_outcome_is_in_one_bucket() -> None:
    for outcome in OUTCOMES:
        single = Counts(**{outcome: 1})
        assert single.n_passed + single.n_failed + single.n_skipped + single.n_flaky == 1
        assert single.total == 1
        assert bucket_of(outcome) in ("passed", "failed", "skipped", "flaky")
    assert bucket_of("xpassed") == "failed"  # strict xfail: a stale skiplist entry
    assert bucket_of("xfailed") == "skipped"
    # Failed, then passed on a retry: neither a pass nor a failure.
    assert bucket_of("flaky") == "flaky" and Counts(flaky=1).worst == "flaky"
    assert Counts(flaky=1).pass_rate == "0.0%" and Counts(flaky=1, failed=1).worst == "failed"


@pytest.mark.parametrize(
    ("numerator", "denominator", "shown"),
    [
        (0, 10, "0.0%"),
        (10, 10, "100.0%"),
        (1, 10000, "<0.1%"),
        (9999, 10000, ">99.9%"),
        (1, 3, "33.3%"),
        (0, 0, "n/a"),
    ],
)
def test_percent_never_rounds_a_partial_result_to_all_or_nothing(
    numerator: int, denominator: int, shown: str
) -> None:
    assert percent(numerator, denominator) == shown


def test_worst_colours_a_grid_cell() -> None:
    assert Counts(passed=1, failed=1).worst == "failed"
    assert Counts(passed=1, skipped=1).worst == "partial"
    assert Counts(skipped=2).worst == "skipped"
    assert Counts(passed=2).worst == "passed"
    assert Counts().worst == "none"


def test_printable_bounds_text_and_makes_control_characters_visible() -> None:
    shown = printable("a\x00b\x07c\x1b[31m\u202eevil" + "x" * 100, limit=20)
    assert "\x00" not in shown and "\x1b" not in shown and "\u202e" not in shown
    assert shown.startswith("a\\x00b\\x07c\\x1b[31m\\u202e")
    assert shown.endswith("(95 more characters not shown)")
    assert printable("line one\n\tline two") == "line one\n\tline two"


def test_normalize_groups_messages_that_differ_only_in_numbers_and_values() -> None:
    a = normalize_message(
        "Traceback...\nAssertionError: Tensor-likes are not close!\n\n"
        "Mismatched elements: 3 / 12 (25.0%)"
    )
    b = normalize_message("AssertionError: Tensor-likes are not close!\n\nMismatched 9 / 9")
    assert a == b == "AssertionError: Tensor-likes are not close!"
    assert normalize_message("RuntimeError: failed at 0x7f3a with 'emu:0' after 12 tries") == (
        "RuntimeError: failed at <addr> with '…' after N tries"
    )
    assert normalize_message("") == ""
    assert len(normalize_message("ValueError: " + "z" * 5000)) == 200
