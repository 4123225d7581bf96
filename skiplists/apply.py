"""Applying a skiplist to collected pytest items, in one pass at collection.

The facts travel as ``item.user_properties`` (``skip_entry``, ``skip_category``,
``skip_detail``) because those reach the controller from xdist workers with each report.

Two unittest behaviours need a correction after the test ran, done by
:class:`UnittestQuirks`, which ``apply_to_items`` registers once per session:

* a ``SkipTest`` raised inside a test body wins over an xfail mark: the test is reported
  skipped, and ``skip_preempted`` records that the entry was not exercised;
* an upstream ``@expectedFailure`` that passes on a more capable device is reported by
  pytest as a plain failure ("Unexpected success"); it becomes an XPASS with
  ``upstream_xfail = "unexpected_success"``, strict (a failure) only when our own xfail
  entry is strict.
"""

from __future__ import annotations

import gc
import operator
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import compress
from typing import Any

import pytest
from _pytest.unittest import TestCaseFunction

from conformance.model import TestIdentity
from skiplists.entry import SkipEntry
from skiplists.skiplist import Skiplist

__all__ = ["UnittestQuirks", "apply_to_items"]

_QUIRKS_PLUGIN = "skiplists-unittest-quirks"
_nodeid = operator.attrgetter("nodeid")


def apply_to_items(
    items: Sequence[Any], skiplist: Skiplist, identities: Mapping[str, TestIdentity]
) -> list[Any]:
    """Mark the items the skiplist selects and return those to deselect.

    ``identities`` maps nodeid to TestIdentity; items without one are left alone. Tier
    ``skip`` adds a skip mark, tier ``xfail`` an xfail mark (strict unless the entry says
    ``strict = false``); tier ``deselect`` items are returned for the caller to remove and
    record. Every selected item gets the entry's facts in ``user_properties``.
    """
    with _gc_paused():
        found = list(map(identities.get, map(_nodeid, items)))
        known = list(compress(items, found))
        entries = skiplist.match_many(list(compress(found, found)))
        deselected, xfails = _mark(list(compress(known, entries)), list(compress(entries, entries)))
    config = getattr(items[0], "config", None) if items else None
    if config is not None:
        _quirks(config).xfail_entries.update(xfails)
    return deselected


def _mark(items: list[Any], entries: list[SkipEntry]) -> tuple[list[Any], dict[str, SkipEntry]]:
    """Give each item its entry's facts and mark; return the deselected items and the
    xfail entries by nodeid."""
    deselected: list[Any] = []
    xfails: dict[str, SkipEntry] = {}
    # One set of properties and one mark per entry, shared by its items (both immutable).
    plans: dict[int, tuple[tuple[tuple[str, str], ...], Any]] = {}
    for item, entry in zip(items, entries, strict=True):
        plan = plans.get(id(entry))
        if plan is None:
            plan = plans[id(entry)] = _plan(entry)
        props, mark = plan
        item.user_properties.extend(props)
        if mark is None:
            deselected.append(item)
            continue
        item.add_marker(mark)
        if entry.tier == "xfail":
            xfails[item.nodeid] = entry
    return deselected, xfails


def _plan(entry: SkipEntry) -> tuple[tuple[tuple[str, str], ...], Any]:
    """The properties an entry gives its items, and its mark (None for ``deselect``)."""
    props = (
        ("skip_entry", entry.where),
        ("skip_category", entry.category),
        ("skip_detail", entry.detail),
    )
    if entry.tier == "deselect":
        return props, None
    if entry.tier == "skip":
        return props, pytest.mark.skip(reason=entry.mark_reason())
    return props, pytest.mark.xfail(strict=entry.strict, reason=entry.mark_reason())


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for one pass that makes no cycles: with 150k
    collected items alive, each collection it triggers walks all of them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _quirks(config: pytest.Config) -> UnittestQuirks:
    plugin = config.pluginmanager.get_plugin(_QUIRKS_PLUGIN)
    if plugin is None:
        plugin = UnittestQuirks()
        config.pluginmanager.register(plugin, _QUIRKS_PLUGIN)
    return plugin


class UnittestQuirks:
    """Corrects the reports of unittest tests where a skiplist mark meets unittest rules."""

    def __init__(self) -> None:
        self.xfail_entries: dict[str, SkipEntry] = {}

    # Outermost wrapper: it must see the report after pytest's own xfail handling.
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        if call.when != "call":
            return report
        entry = self.xfail_entries.get(item.nodeid)
        if isinstance(item, TestCaseFunction) and _unexpected_success(call):
            _note(item, report, ("upstream_xfail", "unexpected_success"))
            note = "upstream expectedFailure passed on this device (unexpected success)"
            if entry is not None and entry.strict:
                report.outcome = "failed"
                report.longrepr = f"[XPASS(strict)] {entry.mark_reason()}; {note}"
                if hasattr(report, "wasxfail"):
                    del report.wasxfail
            else:
                report.outcome = "passed"
                report.longrepr = None
                report.wasxfail = entry.mark_reason() if entry is not None else note
        elif entry is not None and report.skipped and not hasattr(report, "wasxfail"):
            _note(
                item,
                report,
                ("skip_preempted", "the test skipped itself before the xfail entry applied"),
            )
        return report


def _note(item: pytest.Item, report: pytest.TestReport, prop: tuple[str, str]) -> None:
    # The call report already holds a copy of item.user_properties; later reports (the
    # teardown one, which junitxml reads) copy the item's list again.
    report.user_properties.append(prop)
    item.user_properties.append(prop)


def _unexpected_success(call: pytest.CallInfo[None]) -> bool:
    excinfo = call.excinfo
    if excinfo is None or not isinstance(excinfo.value, pytest.fail.Exception):
        return False
    return str(excinfo.value.msg or "").startswith("Unexpected success")
