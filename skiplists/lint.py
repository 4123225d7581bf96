"""Lint a loaded skiplist against the collected tests (and, when known, their outcomes).

Findings, each located at the entry:

* ``dead``: an entry (or one test_id of its list) selects no collected test;
* ``shadowed``: it selects tests, but a more specific entry applies to every one;
* ``over-match``: a pattern or structured entry selects tests that passed in the run;
* ``conflict``: two entries of equal precedence select a test with different tiers;
* ``redundant``: a later layer repeats an earlier entry's tier and category;
* ``review``: the review date has passed;
* ``preempted``: an xfail entry's tests skip themselves, so the entry is never exercised.

Cause entries (checked at run time, not at collection) have findings of their own:

* ``dead``: it narrows to no collected test;
* ``shadowed``: an exact or structured entry applies to every test it narrows to;
* ``unknown-op``: its overload does not exist in the installed torch;
* ``lowered``: the backend's static op table says its overload is lowered now.

Entries confined to files the collection did not include are not judged dead.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from conformance.model import TestIdentity
from skiplists.entry import SkipEntry, specificity
from skiplists.skiplist import Skiplist, literal_file

__all__ = ["Finding", "lint"]


@dataclass(frozen=True)
class Finding:
    kind: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.kind}: {self.message}"


def lint(
    skiplist: Skiplist,
    identities: Iterable[TestIdentity],
    *,
    passing: set[str] | None = None,
    skipped_by_entry: Mapping[str, int] | None = None,
    today: dt.date | None = None,
    known_ops: Collection[str] | None = None,
    lowered: Mapping[str, str] | None = None,
) -> list[Finding]:
    """Findings for the skiplist; ``passing`` holds the test_ids known to pass (from a run),
    ``skipped_by_entry`` counts, per entry ``where``, tests that skipped themselves while an
    xfail entry applied; ``known_ops`` are the installed torch's ATen overloads and
    ``lowered`` the overloads the backend lowers now (what lowering), for cause entries."""
    today = today or dt.date.today()
    selected: dict[int, int] = defaultdict(int)
    applied: dict[int, int] = defaultdict(int)
    passed: dict[int, list[str]] = defaultdict(list)
    conflicts: dict[tuple[int, int], str] = {}
    seen_ids: set[str] = set()
    files: set[str] = set()
    # Cause entries: how many tests each narrows to, and how many of those no other entry
    # selects. Most name a cause alone (at most a suite): those are counted per suite.
    broad = [c for c in skiplist.causes if _suite_wide(c)]
    narrow = [c for c in skiplist.causes if not _suite_wide(c)]
    narrowed: dict[int, int] = defaultdict(int)
    free: dict[int, int] = defaultdict(int)
    per_suite: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for identity in identities:
        seen_ids.add(identity.test_id)
        files.add(identity.file)
        hits = skiplist.match_all(identity)
        counts = per_suite[identity.suite]
        counts[0] += 1
        counts[1] += not hits
        for cause in narrow:
            if cause.selector.matches(identity):
                narrowed[id(cause)] += 1
                free[id(cause)] += not hits
        if not hits:
            continue
        first = hits[0]
        applied[id(first)] += 1
        for entry in hits:
            selected[id(entry)] += 1
        for other in hits[1:]:
            if other.rank[:2] != first.rank[:2]:
                break
            if other.tier != first.tier:
                conflicts.setdefault((id(first), id(other)), identity.test_id)
        if passing is not None and identity.test_id in passing and first.selector.kind != "test_id":
            passed[id(first)].append(identity.test_id)
    for cause in broad:
        for suite, (total, unselected) in per_suite.items():
            if cause.selector.suite in ("", suite):
                narrowed[id(cause)] += total
                free[id(cause)] += unselected

    findings: list[Finding] = []
    by_id = {id(e): e for e in skiplist.entries}
    for entry in skiplist.entries:
        if entry.is_cause:
            findings.extend(_cause_findings(entry, narrowed, free, files, known_ops, lowered))
        else:
            findings.extend(_entry_findings(entry, selected, applied, passed, seen_ids, files))
        if entry.review is not None and entry.review < today:
            findings.append(
                Finding("review", entry.where, f"review date {entry.review} has passed")
            )
        count = (skipped_by_entry or {}).get(entry.where, 0)
        if entry.tier == "xfail" and count:
            findings.append(
                Finding(
                    "preempted",
                    entry.where,
                    f"{count} test(s) skip themselves before the xfail applies; "
                    "use tier skip or fix the upstream condition",
                )
            )
    for (first_id, other_id), test_id in conflicts.items():
        first, other = by_id[first_id], by_id[other_id]
        findings.append(
            Finding(
                "conflict",
                first.where,
                f"tier {first.tier} vs {other.tier} at {other.where}, both select {test_id}",
            )
        )
    for override in skiplist.overrides:
        replaced, by = override.replaced, override.by
        if (replaced.tier, replaced.category) == (by.tier, by.category):
            findings.append(
                Finding("redundant", by.where, f"repeats {replaced.where} (same tier and category)")
            )
    return sorted(findings, key=lambda f: (f.where.rsplit(":", 1)[0], _line(f.where), f.kind))


def _entry_findings(
    entry: SkipEntry,
    selected: Mapping[int, int],
    applied: Mapping[int, int],
    passed: Mapping[int, list[str]],
    seen_ids: set[str],
    files: set[str],
) -> list[Finding]:
    selector = entry.selector
    if selector.test_ids:
        missing = [
            t for t in selector.test_ids if t not in seen_ids and t.split("::", 1)[0] in files
        ]
        if missing and len(missing) == len(selector.test_ids):
            return [
                Finding(
                    "dead",
                    entry.where,
                    f"no collected test has test_id {missing[0]}"
                    + (f" (nor {len(missing) - 1} more)" if len(missing) > 1 else ""),
                )
            ]
        return [Finding("dead", entry.where, f"no collected test has test_id {t}") for t in missing]
    file = selector.file or _pattern_file(entry)
    if file and file not in files:
        return []  # its file was not collected: no verdict
    if not selected.get(id(entry)):
        return [Finding("dead", entry.where, f"{selector.describe()} selects no collected test")]
    if not applied.get(id(entry)):
        return [
            Finding("shadowed", entry.where, "more specific entries apply to every test it selects")
        ]
    hits = passed.get(id(entry), [])
    if hits:
        kind = "pattern" if selector.pattern else "fields"
        return [
            Finding(
                "over-match",
                entry.where,
                f"{kind} selects {len(hits)} test(s) that pass, e.g. {hits[0]}",
            )
        ]
    return []


def _cause_findings(
    entry: SkipEntry,
    narrowed: Mapping[int, int],
    free: Mapping[int, int],
    files: set[str],
    known_ops: Collection[str] | None,
    lowered: Mapping[str, str] | None,
) -> list[Finding]:
    findings = []
    overload = entry.detail if entry.category == "missing_lowering" else ""
    if overload and known_ops is not None and overload not in known_ops:
        findings.append(
            Finding("unknown-op", entry.where, f"{overload} is not an overload of this torch")
        )
    if overload and lowered and overload in lowered:
        findings.append(
            Finding(
                "lowered",
                entry.where,
                f"{overload} has a lowering now ({lowered[overload]}): remove the entry",
            )
        )
    selector = entry.selector
    file = selector.file or _pattern_file(entry)
    confined = bool(file) or bool(selector.test_ids)
    if files and (not confined or file in files or _ids_collected(selector.test_ids, files)):
        if not narrowed.get(id(entry)):
            findings.append(
                Finding("dead", entry.where, f"cause {entry.cause}: narrows to no collected test")
            )
        elif not free.get(id(entry)):
            findings.append(
                Finding(
                    "shadowed",
                    entry.where,
                    f"cause {entry.cause}: exact or structured entries apply to every test "
                    "it narrows to, so it never applies",
                )
            )
    return findings


def _suite_wide(entry: SkipEntry) -> bool:
    """A cause entry that narrows to no more than a suite."""
    selector = entry.selector
    return not (selector.test_ids or selector.pattern or specificity(selector.field_values()))


def _ids_collected(test_ids: Iterable[str], files: set[str]) -> bool:
    return any(test_id.split("::", 1)[0] in files for test_id in test_ids)


def _pattern_file(entry: SkipEntry) -> str:
    return literal_file(entry.selector.pattern) if entry.selector.pattern else ""


def _line(where: str) -> int:
    tail = where.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0
