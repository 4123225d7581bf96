"""``update --from RUN``: add a run's unexpected failures, mark (or prune) entries that pass.

Failures with a machine-readable cause become cause entries first: one per missing ATen
overload and one per unsupported feature, whatever the number of tests they explain (a
comment says how many, in how many templates). The other failures (numerical mismatch,
wrong error, crash, other) get an inferred category and detail (the record's
classification when the run made one, else inferred here from the message), a reason in
words, a review date, and exact test_ids, grouped by test template so one entry covers a
template's variants that fail the same way.

Entries whose tests pass are marked (or pruned); so are cause entries that explained no
failure of the runs, and those whose overload has a lowering now.

A flaky test (it failed, then passed on a retry in a fresh process) gets no entry: a strict
xfail would fail the next run that it passes in, and it is not known to fail. The plan
lists it, and a test that fails in one of the runs and is flaky in another gets a
non-strict entry, as one that passes in another does.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.model import FEATURES
from skiplists.edit import COMMENT, SkiplistText
from skiplists.entry import SkipEntry
from skiplists.runs import RunFacts, passes
from skiplists.skiplist import Skiplist

__all__ = [
    "PassingEntry",
    "StaleCause",
    "UpdatePlan",
    "apply_plan",
    "has_cause",
    "infer_category",
    "plan_update",
]

_FAILING = frozenset({"failed", "error", "crashed", "timeout"})
# A group of failures this large that covers every test of its template becomes one
# structured entry for the template rather than a list of test_ids.
_WHOLE_TEMPLATE = 3

# (pattern on the failure message, category, how to get the detail from the match)
_RULES: tuple[tuple[re.Pattern[str], str, int | str], ...] = (
    (re.compile(r"Could not run '(\w+::[\w.]+)' with arguments from the '\w+' backend"), "missing_lowering", 1),
    (re.compile(r"(?:NotImplementedError|not implemented)\W.*?'?(aten::[\w.]+)"), "missing_lowering", 1),
    (re.compile(r"\"?\w+\"? not implemented for '(\w+)'"), "unsupported_dtype", 1),
    (re.compile(r"(?i)\bsparse\b"), "unsupported_feature", "sparse"),
    (re.compile(r"(?i)nested ?tensor"), "unsupported_feature", "nested"),
    (re.compile(r"(?i)forward[- ]?(?:mode )?AD|fwAD"), "unsupported_feature", "forward_ad"),
    (re.compile(r"(?i)dynamic shape|SymInt"), "unsupported_feature", "dynamic_shapes"),
    (re.compile(r"not close|Mismatched elements|Scalars are not (?:equal|close)"), "numerical_mismatch", ""),
    (re.compile(r"not raised|Regex(?: pattern)? did not match|didn't match"), "wrong_error", ""),
)  # fmt: skip


def infer_category(record: Mapping[str, Any]) -> tuple[str, str]:
    """(category, detail) of a failed record: the run's own classification when it has one."""
    if record.get("category"):
        return str(record["category"]), str(record.get("detail") or "")
    if record["outcome"] == "crashed":
        return "crash", ""
    if record["outcome"] == "timeout":
        return "timeout", ""
    message = str(record.get("message") or "")
    for pattern, category, detail in _RULES:
        found = pattern.search(message)
        if found is not None:
            return category, found.group(detail) if isinstance(detail, int) else detail
    return "other", ""


def has_cause(category: str, detail: str) -> bool:
    """Whether a classification names a cause an entry can hold: an ATen overload that has
    no lowering, or an unsupported feature."""
    if category == "missing_lowering":
        return _OVERLOAD.fullmatch(detail) is not None
    return category == "unsupported_feature" and detail in FEATURES


_OVERLOAD = re.compile(r"\w+::[\w.]+")


def _reason(category: str, detail: str, record: Mapping[str, Any], backend: str) -> str:
    first_line = next(
        (ln.strip() for ln in str(record.get("message") or "").splitlines() if ln.strip()), ""
    )
    seen = (first_line if len(first_line) <= 160 else first_line[:157] + "...") or (
        f"outcome {record['outcome']}"
    )
    if category == "missing_lowering" and detail:
        return f"{detail} has no lowering on {backend}"
    if category == "unsupported_dtype" and detail:
        return f"{backend} does not support {detail} here: {seen}"
    if category == "unsupported_feature" and detail:
        return f"{backend} does not support {detail}: {seen}"
    if category == "crash":
        return f"crashes the worker on {backend}: {seen}"
    if category == "timeout":
        return f"hangs on {backend} past the per-test time limit"
    return f"{category.replace('_', ' ')} on {backend}: {seen}"


@dataclass
class PassingEntry:
    entry: SkipEntry
    passing: list[str]  # test_ids that passed
    selected: int  # tests the entry selected in the run


@dataclass
class StaleCause:
    """A cause entry to remove: it explained no failure, or its overload is lowered now.
    ``lowered`` tells the two apart: a lowering is marked in the file (or pruned); an entry
    that merely explained nothing in the runs given is only pruned, never marked, since
    runs that cover part of the suite say little about it."""

    entry: SkipEntry
    why: str
    lowered: bool = False


@dataclass
class UpdatePlan:
    run_id: str
    additions: list[dict[str, Any]] = field(default_factory=list)
    failures: int = 0  # failing tests the additions cover
    passing: list[PassingEntry] = field(default_factory=list)
    stale: list[StaleCause] = field(default_factory=list)
    #: Tests each cause entry explained in the runs (failures, or xfails it applied to).
    explained: dict[str, int] = field(default_factory=dict)
    #: Flaky tests no entry selects: listed, never written (they are not known to fail).
    flaky: list[str] = field(default_factory=list)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _runs(run_ids: str) -> str:
    """``run X`` for one run, ``runs X, Y`` for runs merged into one set of facts."""
    return f"{'runs' if ', ' in run_ids else 'run'} {run_ids}"


def _file_suite(path: Path) -> str:
    """The suite a skiplist file's header scopes its entries to ("" when none)."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        header = tomlkit.parse(path.read_text(encoding="utf-8")).get("skiplist", {})
    except (OSError, TOMLKitError):
        return ""
    return str(header.get("suite", "")) if isinstance(header, dict) else ""


def plan_update(
    skiplist: Skiplist,
    facts: RunFacts,
    *,
    today: dt.date,
    review_days: int = 90,
    lowered: Mapping[str, str] | None = None,
) -> UpdatePlan:
    """What a run says about the skiplist: failures no entry covers (by cause first),
    entries whose tests pass, and cause entries gone stale. ``lowered`` maps the overloads
    the backend lowers now (its static op table) to their status."""
    backend = facts.meta.backend or "the backend"
    plan = UpdatePlan(run_id=facts.meta.run_id)
    groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = defaultdict(list)
    causes: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    stats: dict[str, PassingEntry] = {}
    explained: dict[str, int] = defaultdict(int)
    by_where = skiplist.by_where()
    identities = {identity.test_id: identity for identity in facts.identities}
    passed_somewhere = facts.passing_ids()
    flaky_somewhere = {r["test_id"] for r in facts.records if r["outcome"] == "flaky"}
    for record in facts.records:
        identity = identities[record["test_id"]]
        entry = skiplist.match(identity)
        applied = by_where.get(str(record.get("skip_entry") or ""))
        if entry is None and applied is not None and applied.is_cause:
            entry = applied  # the cause entry that applied when the run was made
        if entry is not None:
            stat = stats.setdefault(entry.where, PassingEntry(entry, [], 0))
            stat.selected += 1
            if passes(record):
                stat.passing.append(record["test_id"])
            elif entry.is_cause and record["outcome"] != "flaky":
                explained[entry.where] += 1
        elif record["outcome"] == "flaky":
            plan.flaky.append(record["test_id"])
        elif record["outcome"] in _FAILING:
            category, detail = infer_category(record)
            cause = skiplist.match_cause(identity, category, detail)
            if cause is not None:  # a run made without the skiplist: the entry explains it
                explained[cause.where] += 1
            elif has_cause(category, detail):
                causes[(category, detail)].append(record)
                plan.failures += 1
            else:
                tier = "deselect" if category in ("crash", "timeout") else "xfail"
                where = (record["file"], record["test_class"], record["template"])
                # A test that passed in another of the runs (a smaller selection with fewer
                # samples, say), or was flaky there, gets a non-strict xfail: its pass there
                # is no fix.
                mixed = tier == "xfail" and (
                    record["test_id"] in passed_somewhere or record["test_id"] in flaky_somewhere
                )
                # One entry per reason: failures of one template with different messages
                # get entries that each say what they saw.
                reason = _reason(category, detail, record, backend)
                groups[(tier, category, detail, *where, mixed, reason)].append(record)
                plan.failures += 1
    plan.explained = dict(explained)
    plan.flaky = sorted(set(plan.flaky))
    plan.stale = _stale_causes(skiplist, facts, explained, lowered or {})
    review = today + dt.timedelta(days=review_days) if review_days > 0 else None
    for (category, detail), records in sorted(causes.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        tests = {r["test_id"] for r in records}
        templates = {(r["file"], r["test_class"], r["template"]) for r in records}
        suites = {str(r.get("suite") or "") for r in records} - {""}
        plan.additions.append(
            {
                COMMENT: f"{_count(len(tests), 'test')} in {_count(len(templates), 'template')} "
                f"in {_runs(plan.run_id)}",
                "cause": detail,
                "suite": suites.pop() if len(suites) == 1 else "",
                "reason": _reason(category, detail, records[0], backend),
                "review": review,
            }
        )
    per_template: dict[tuple[str, str, str], int] = defaultdict(int)
    for identity in facts.identities:
        per_template[(identity.file, identity.test_class, identity.template)] += 1
    for (tier, category, detail, *where, mixed, reason), records in sorted(groups.items()):
        test_ids = sorted({r["test_id"] for r in records})
        file, test_class, template = where
        selector: dict[str, Any]
        if (
            not mixed
            and template
            and len(test_ids) >= _WHOLE_TEMPLATE
            and len(test_ids) == per_template[(file, test_class, template)]
        ):
            # Every test of the template failed the same way: the template is what fails.
            selector = {"file": file, "class": test_class, "template": template}
        else:
            selector = {"test_id": test_ids[0] if len(test_ids) == 1 else test_ids}
        plan.additions.append(
            {
                **selector,
                "tier": tier,
                "category": category,
                "detail": detail,
                "reason": reason + (" (passes in another of the runs)" if mixed else ""),
                "review": review,
                **({"strict": False} if mixed else {}),
            }
        )
    # A run in one mode says nothing of whether an entry for every mode can go: only
    # entries scoped to a compile run's mode are marked or pruned by it.
    mode = facts.meta.mode or "eager"
    plan.passing = [
        s
        for s in stats.values()
        if s.passing and (s.entry.selector.mode == mode or mode == "eager")
    ]
    if mode != "eager":
        for addition in plan.additions:
            addition["mode"] = mode
    return plan


def _stale_causes(
    skiplist: Skiplist,
    facts: RunFacts,
    explained: Mapping[str, int],
    lowered: Mapping[str, str],
) -> list[StaleCause]:
    """Cause entries whose overload has a lowering now, and those that explained no failure
    of the runs although the runs hold tests they narrow to (a run of other files says
    nothing about an entry). A torch limitation is never stale for its absence: it names
    what the torch release gets wrong for every backend, and a run that never reached it
    (no multi-process test, say) says nothing about the release."""
    stale = []
    for entry in skiplist.causes:
        status = lowered.get(entry.detail) if entry.category == "missing_lowering" else None
        if status:
            stale.append(
                StaleCause(entry, f"{entry.detail} has a lowering now ({status})", lowered=True)
            )
        elif (
            entry.category != "torch_limitation"
            and not explained.get(entry.where)
            and any(entry.selector.matches(identity) for identity in facts.identities)
        ):
            stale.append(StaleCause(entry, f"explained no failure in {_runs(facts.meta.run_id)}"))
    return stale


def apply_plan(
    plan: UpdatePlan, target: Path | None, *, prune: bool, today: dt.date
) -> dict[Path, tuple[str, str]]:
    """Edit the files: additions go to ``target`` (None: none are written); passing entries are marked, or with
    ``prune`` removed (test_id lists lose their passing ids; other entries go only when
    every test they selected passed). Returns ``{path: (old text, new text)}``."""
    files: dict[Path, SkiplistText] = {}

    def text_of(path: Path) -> SkiplistText:
        key = path.resolve()
        if key not in files:
            files[key] = SkiplistText.read(path)
        return files[key]

    for stale in plan.stale:
        if prune:
            text_of(stale.entry.path).remove(stale.entry.index)
        elif stale.lowered:
            text_of(stale.entry.path).mark(stale.entry.index, f"{stale.why} ({today})")
    for stat in plan.passing:
        entry = stat.entry
        editor = text_of(entry.path)
        if prune and entry.selector.test_ids:
            editor.drop_test_ids(entry.index, stat.passing)
        elif prune and len(stat.passing) == stat.selected:
            editor.remove(entry.index)
        else:
            editor.mark(
                entry.index,
                f"{len(stat.passing)} of {stat.selected} selected tests passed in run "
                f"{plan.run_id} ({today}), e.g. {stat.passing[0]}",
            )
    if target is not None and plan.additions:
        editor = text_of(target)
        scope = _file_suite(target)
        additions = [
            {k: v for k, v in entry.items() if not (k == "suite" and v == scope)}
            for entry in plan.additions
        ]
        editor.append(additions, f"added from {_runs(plan.run_id)} on {today}")
    result = {}
    for path, editor in files.items():
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        new = editor.text()
        if new != old:
            result[editor.path] = (old, new)
    return result
