"""Retrying failed tests once in a fresh process: a flaky test is a finding, not noise.

After a device run, ``conformance run`` runs the tests that failed (outcome failed, error,
crashed or timeout: never an expected failure, a skiplist xfail or a strict xpass) once more
in a new pytest process, and folds what the retry recorded into their records:

- a test that passes on its retry becomes ``flaky`` (outcome and category), its detail the
  category of its first attempt's failure;
- a test that does not pass again keeps its failure;

and either way ``rerun`` is 1 and ``attempts`` holds both attempts (outcome, category, detail,
message, duration). The other fields stay the first attempt's: the failure is what someone
looks into. A run retries at most a given number of tests (the cap); when more failed, the
tests whose category names a cause that does not come and go (a missing lowering, an
unsupported feature or dtype, ...) are the ones left out first, then by test_id, and the run
says how many were left out.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.model import ATTEMPT_FIELDS, is_collection_record
from conformance.outcome import STRICT_XPASS_PREFIX

__all__ = [
    "DEFAULT_RETRY_CAP",
    "RETRIED_OUTCOMES",
    "RetryPlan",
    "RetryResult",
    "fold_retries",
    "plan_retries",
    "retry_cap",
]

#: Outcomes whose tests are retried.
RETRIED_OUTCOMES = ("failed", "error", "crashed", "timeout")
#: Tests a run retries at most, unless told otherwise (``--retry-failures N``).
DEFAULT_RETRY_CAP = 50
#: Categories that name a cause that does not come and go: retried after every other
#: failure, when the cap leaves room.
STEADY_CATEGORIES = frozenset(
    {
        "missing_lowering",
        "unsupported_feature",
        "unsupported_dtype",
        "torch_limitation",
        "environment",
    }
)


@dataclass
class RetryPlan:
    """The tests a run retries, and how many failed tests the cap left out."""

    test_ids: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # their files, as test_ids name them
    left_out: int = 0


@dataclass
class RetryResult:
    """What folding a retry into a run's records found."""

    flaky: list[str] = field(default_factory=list)  # test_ids that passed on the retry
    failed_again: list[str] = field(default_factory=list)
    #: Retried tests the retry recorded no outcome for (their records are left as they were).
    unrecorded: list[str] = field(default_factory=list)


def retry_cap(text: str) -> int:
    """The argument type of ``--retry-failures N``: a whole number >= 0."""
    if text.strip().isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(
        f"expected a number of tests >= 0 (0: no retries), got {text!r}"
    )


def retryable(record: Mapping[str, Any]) -> bool:
    """Whether a record is a test's failure that a retry may tell from a flaky one: an
    unexpected failure, error, crash or timeout, of a test not retried yet (a file that
    failed to collect is not a test)."""
    return (
        record["outcome"] in RETRIED_OUTCOMES
        and not str(record.get("message") or "").startswith(STRICT_XPASS_PREFIX)
        and not is_collection_record(str(record.get("category") or ""), str(record["template"]))
        and not int(record.get("rerun") or 0)
    )


def plan_retries(records: Iterable[Mapping[str, Any]], cap: int) -> RetryPlan:
    """The failed tests of ``records`` to retry, at most ``cap`` of them."""
    if cap < 0:
        raise ValueError(f"the retry cap must be >= 0, got {cap}")
    failed = sorted(
        (r for r in records if retryable(r)),
        key=lambda r: (str(r.get("category") or "") in STEADY_CATEGORIES, r["test_id"]),
    )
    chosen = failed[:cap]
    return RetryPlan(
        test_ids=[r["test_id"] for r in chosen],
        files=sorted({str(r["file"]) for r in chosen}),
        left_out=len(failed) - len(chosen),
    )


def attempt_of(record: Mapping[str, Any]) -> dict[str, Any]:
    """One attempt as ``attempts`` holds it."""
    attempt: dict[str, Any] = {name: str(record.get(name) or "") for name in ATTEMPT_FIELDS}
    attempt["duration_s"] = float(record.get("duration_s") or 0.0)
    return attempt


def fold_retries(
    records: Sequence[dict[str, Any]],
    retried: Iterable[str],
    retry_records: Iterable[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], RetryResult]:
    """The run's ``records`` with the retry of the tests ``retried`` folded in (new dicts
    where they change), and what it found."""
    wanted = set(retried)
    again = {r["test_id"]: r for r in retry_records if r["test_id"] in wanted}
    result = RetryResult()
    folded = []
    for record in records:
        test_id = record["test_id"]
        if test_id not in wanted or not retryable(record):
            folded.append(record)
            continue
        retry = again.get(test_id)
        if retry is None:
            result.unrecorded.append(test_id)
            folded.append(record)
            continue
        record = {
            **record,
            "rerun": 1,
            "attempts": [attempt_of(record), attempt_of(retry)],
        }
        if retry["outcome"] == "passed":
            record.update(outcome="flaky", category="flaky", detail=record["category"] or "other")
            result.flaky.append(test_id)
        else:
            result.failed_again.append(test_id)
        folded.append(record)
    return folded, result
