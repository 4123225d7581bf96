"""The difference between two coverage snapshots, backend progress apart from upstream churn.

*Backend progress* is measured on the ops both torch releases define: an op is gained when
its status rises (missing -> fallback -> native or composite) and lost when it falls.
*Upstream churn* is everything the backend did not do: ops torch added or removed between
the two releases, ops entering or leaving a denominator (core ATen, OpInfo), and, when the
two runs' records are given, tests added, removed or renamed upstream. Coverage deltas per
denominator are split the same way: ``progress`` counts only ops in the denominator on both
sides, ``churn`` is the rest of the change.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

import pandas

from op_coverage.triage import blocked_tests

__all__ = ["OpChange", "SnapshotDiff", "TestChurn", "diff_snapshots"]

_LEVEL = {"missing": 0, "fallback": 1, "composite": 2, "native": 2}
_MEMBERSHIP = {
    "aten_all": lambda row: True,
    "core_aten": lambda row: bool(row.get("in_core")),
    "opinfo": lambda row: bool(row.get("in_opinfo")),
    "suite_exercised": lambda row: bool(row.get("exercised")),
}
_IDENTITY = ("file", "test_class", "op", "variant", "dtype", "params")


@dataclass(frozen=True)
class OpChange:
    """One op's status on each side (``""`` where the side does not define the op)."""

    op: str
    before: str
    after: str
    kind_before: str = ""
    kind_after: str = ""
    tests_blocked_before: int = 0
    in_core: bool = False


@dataclass
class TestChurn:
    """Tests upstream added, removed and renamed, and blocking changes on tests in both runs."""

    __test__ = False

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)  # (before, after)
    unblocked: list[str] = field(default_factory=list)
    newly_blocked: list[str] = field(default_factory=list)


@dataclass
class SnapshotDiff:
    """What changed from snapshot ``a`` to snapshot ``b``."""

    meta_a: dict[str, Any]
    meta_b: dict[str, Any]
    gained: list[OpChange]
    lost: list[OpChange]
    changed_kind: list[OpChange]  # same level, other kind (composite -> native, python -> native)
    torch_added: list[OpChange]
    torch_removed: list[OpChange]
    core_added: list[str]
    core_removed: list[str]
    denominators: dict[str, dict[str, Any]]
    tests: TestChurn | None = None
    notes: list[str] = field(default_factory=list)  # what could not be compared, and why


def _change(op: str, a: dict[str, Any] | None, b: dict[str, Any] | None) -> OpChange:
    return OpChange(
        op,
        a["status"] if a else "",
        b["status"] if b else "",
        a.get("kind", "") if a else "",
        b.get("kind", "") if b else "",
        int(a.get("tests_blocked", 0)) if a else 0,
        bool((b or a or {}).get("in_core")),
    )


def _coverage(rows: dict[str, dict[str, Any]], member: Any) -> tuple[int, int]:
    inside = [row for row in rows.values() if member(row)]
    return len(inside), sum(1 for row in inside if _LEVEL.get(row["status"], 0) == 2)


def _denominators(
    a: dict[str, dict], b: dict[str, dict], names: list[str]
) -> dict[str, dict[str, Any]]:
    result = {}
    common = a.keys() & b.keys()
    for name in names:
        member = _MEMBERSHIP[name]
        count_a, covered_a = _coverage(a, member)
        count_b, covered_b = _coverage(b, member)
        both = [op for op in common if member(a[op]) and member(b[op])]
        progress = sum(
            (_LEVEL.get(b[op]["status"], 0) == 2) - (_LEVEL.get(a[op]["status"], 0) == 2)
            for op in both
        )
        result[name] = {
            "count_a": count_a,
            "covered_a": covered_a,
            "count_b": count_b,
            "covered_b": covered_b,
            "progress": progress,
            "churn": covered_b - covered_a - progress,
        }
    return result


def _renames(removed: set[str], added: set[str], ident: dict[str, tuple]) -> list[tuple[str, str]]:
    """Pair removed with added tests: first the same test name moved to another file or
    class, then, for OpInfo tests (``op`` set) within one file, class, op, variant, dtype and
    params, the closest name (a renamed template). Other tests are too alike to pair."""
    pairs: list[tuple[str, str]] = []
    by_name: dict[str, list[str]] = {}
    for test_id in added:
        by_name.setdefault(test_id.rsplit("::", 1)[-1], []).append(test_id)
    for test_id in sorted(removed):
        candidates = by_name.get(test_id.rsplit("::", 1)[-1], [])
        if len(candidates) == 1:
            pairs.append((test_id, candidates.pop()))
    paired_old = {old for old, _ in pairs}
    paired_new = {new for _, new in pairs}
    by_identity: dict[tuple, list[str]] = {}
    for test_id in added - paired_new:
        by_identity.setdefault(ident[test_id], []).append(test_id)
    for test_id in sorted(removed - paired_old):
        candidates = by_identity.get(ident[test_id], [])
        if not candidates or not ident[test_id][_IDENTITY.index("op")]:
            continue
        name = test_id.rsplit("::", 1)[-1]
        best = max(
            candidates,
            key=lambda c: difflib.SequenceMatcher(None, name, c.rsplit("::", 1)[-1]).ratio(),
        )
        if difflib.SequenceMatcher(None, name, best.rsplit("::", 1)[-1]).ratio() >= 0.75:
            pairs.append((test_id, best))
            candidates.remove(best)
    return sorted(pairs)


def _test_churn(records_a: pandas.DataFrame, records_b: pandas.DataFrame) -> TestChurn:
    last_a = records_a.drop_duplicates("test_id", keep="last")
    last_b = records_b.drop_duplicates("test_id", keep="last")
    ids_a, ids_b = set(last_a["test_id"]), set(last_b["test_id"])
    ident = {
        row[0]: tuple(row[1:])
        for frame in (last_a, last_b)
        for row in frame.reindex(columns=["test_id", *_IDENTITY], fill_value="").itertuples(
            index=False
        )
    }
    removed, added = ids_a - ids_b, ids_b - ids_a
    renamed = _renames(removed, added, ident)
    blocked_a = set(blocked_tests(records_a)["test_id"])
    blocked_b = set(blocked_tests(records_b)["test_id"])
    both = ids_a & ids_b
    return TestChurn(
        added=sorted(added - {new for _, new in renamed}),
        removed=sorted(removed - {old for old, _ in renamed}),
        renamed=renamed,
        unblocked=sorted(both & (blocked_a - blocked_b)),
        newly_blocked=sorted(both & (blocked_b - blocked_a)),
    )


def diff_snapshots(
    a: dict[str, Any],
    b: dict[str, Any],
    records_a: pandas.DataFrame | None = None,
    records_b: pandas.DataFrame | None = None,
) -> SnapshotDiff:
    """Compare snapshot ``a`` (before) with ``b`` (after); with both runs' records, also the
    tests upstream added, removed or renamed and the tests unblocked or newly blocked."""
    ops_a = {row["op"]: row for row in a["ops"]}
    ops_b = {row["op"]: row for row in b["ops"]}
    gained, lost, changed = [], [], []
    for op in sorted(ops_a.keys() & ops_b.keys()):
        before, after = ops_a[op], ops_b[op]
        level_a, level_b = _LEVEL.get(before["status"], 0), _LEVEL.get(after["status"], 0)
        if level_b > level_a:
            gained.append(_change(op, before, after))
        elif level_b < level_a:
            lost.append(_change(op, before, after))
        elif (before["status"], before.get("kind")) != (after["status"], after.get("kind")):
            changed.append(_change(op, before, after))
    names = [
        n for n in _MEMBERSHIP if n in a.get("denominators", {}) and n in b.get("denominators", {})
    ]
    notes = []
    traced_a = a.get("tests", {}).get("traced", False)
    traced_b = b.get("tests", {}).get("traced", False)
    if "suite_exercised" in names and traced_a != traced_b:
        # One side knows only the blocking ops: the change would be an artefact of tracing.
        names.remove("suite_exercised")
        notes.append(
            f"suite_exercised not compared: op tracing was {'on' if traced_a else 'off'} in A "
            f"and {'on' if traced_b else 'off'} in B"
        )
    common = ops_a.keys() & ops_b.keys()
    return SnapshotDiff(
        meta_a=a["meta"],
        meta_b=b["meta"],
        gained=gained,
        lost=lost,
        changed_kind=changed,
        torch_added=[_change(op, None, ops_b[op]) for op in sorted(ops_b.keys() - ops_a.keys())],
        torch_removed=[_change(op, ops_a[op], None) for op in sorted(ops_a.keys() - ops_b.keys())],
        core_added=sorted(
            op for op in common if ops_b[op].get("in_core") and not ops_a[op].get("in_core")
        ),
        core_removed=sorted(
            op for op in common if ops_a[op].get("in_core") and not ops_b[op].get("in_core")
        ),
        denominators=_denominators(ops_a, ops_b, names),
        tests=_test_churn(records_a, records_b)
        if records_a is not None and records_b is not None
        else None,
        notes=notes,
    )
