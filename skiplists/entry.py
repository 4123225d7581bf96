"""Skiplist entries: what one entry selects, and what happens to the tests it selects."""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from conformance.model import TestIdentity

__all__ = ["FIELD_NAMES", "SCOPE_FIELD", "TIERS", "Selector", "SkipEntry", "display_path"]

#: ``deselect``: never run (crashes, hangs). ``xfail``: runs, expected to fail (strict by
#: default, so a fix shows up). ``skip``: not run but reported (not applicable, unsupported).
TIERS = ("deselect", "xfail", "skip")

#: Structured selector fields, in the order they are compared: the entry key in the
#: file, then the TestIdentity attribute it is compared with.
FIELD_NAMES = (
    ("file", "file"),
    ("class", "test_class"),
    ("template", "template"),
    ("op", "op"),
    ("variant", "variant"),
    ("dtypes", "dtype"),
    ("suite", "suite"),
)

#: The field that scopes an entry to a suite without making it more specific: it does not
#: count in the precedence between entries (see SkipEntry.rank).
SCOPE_FIELD = "suite"

# Which kind of selector wins when several entries select the same test: an exact
# test_id beats structured fields, which beat an explicit pattern.
_KIND_RANK = {"test_id": 3, "fields": 2, "pattern": 1}

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def display_path(path: Path) -> str:
    """The path as shown in ``where``: relative to the project or the working directory when
    it lies inside one, so records read the same on every machine."""
    resolved = path.resolve()
    for root in (_PACKAGE_ROOT, Path.cwd().resolve()):
        if resolved.is_relative_to(root):
            return resolved.relative_to(root).as_posix()
    return str(path)


def specificity(attrs: Iterable[str]) -> int:
    """How many of the fields (TestIdentity attributes) narrow the tests selected: the
    suite scope does not count."""
    names = list(attrs)
    return len(names) - (SCOPE_FIELD in names)


@dataclass(frozen=True)
class Selector:
    """Which tests an entry applies to.

    Exactly one kind: ``test_ids`` (exact, device-independent test_ids), structured fields
    (every field that is set must equal the test's field; ``dtypes`` is a set of
    alternatives), or ``pattern`` (a regular expression that must match the whole test_id,
    optionally narrowed by structured fields). ``suite`` (``embedded`` or ``upstream``)
    scopes structured fields and patterns to one suite's tests.
    """

    test_ids: tuple[str, ...] = ()
    file: str = ""
    test_class: str = ""
    template: str = ""
    op: str = ""
    variant: str = ""
    dtypes: tuple[str, ...] = ()
    pattern: str = ""
    suite: str = ""
    #: ``eager`` or ``compile``: the entry applies only in runs of that mode ("" : every
    #: mode). Runs filter on it when they load the list (a test has no mode, a run has).
    mode: str = ""
    _compiled: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    @property
    def kind(self) -> str:
        if self.test_ids:
            return "test_id"
        return "pattern" if self.pattern else "fields"

    def field_values(self) -> dict[str, str | tuple[str, ...]]:
        """The structured fields that are set, keyed by TestIdentity attribute."""
        return self._field_values

    @functools.cached_property
    def _field_values(self) -> dict[str, str | tuple[str, ...]]:
        values: dict[str, str | tuple[str, ...]] = {}
        for _key, attr in FIELD_NAMES:
            value = self.dtypes if attr == "dtype" else getattr(self, attr)
            if value:
                values[attr] = value
        return values

    def key(self) -> tuple[object, ...]:
        """Identity of the selector: two entries with equal keys select the same tests."""
        return (
            tuple(sorted(self.test_ids)),
            self.file,
            self.test_class,
            self.template,
            self.op,
            self.variant,
            tuple(sorted(self.dtypes)),
            self.pattern,
            self.suite,
            self.mode,
        )

    def matches(self, identity: TestIdentity) -> bool:
        """Whether this selector selects the test (the slow, direct check)."""
        if self.test_ids:
            return identity.test_id in self.test_ids
        for attr, value in self.field_values().items():
            actual = getattr(identity, attr)
            if attr == "dtype":
                if actual not in value:
                    return False
            elif actual != value:
                return False
        if self.pattern:
            compiled = self._compiled or re.compile(self.pattern)
            return compiled.fullmatch(identity.test_id) is not None
        return True

    def describe(self) -> str:
        """A short human description, e.g. ``op=add dtypes=[float16]``."""
        if self.test_ids:
            return " ".join((*self.test_ids, *([f"mode={self.mode}"] if self.mode else [])))
        parts = []
        for key, attr in FIELD_NAMES:
            value = self.dtypes if attr == "dtype" else getattr(self, attr)
            if value:
                shown = "[" + ", ".join(value) + "]" if isinstance(value, tuple) else value
                parts.append(f"{key}={shown}")
        if self.pattern:
            parts.append(f"pattern={self.pattern!r}")
        if self.mode:
            parts.append(f"mode={self.mode}")
        return " ".join(parts)


@dataclass(frozen=True)
class SkipEntry:
    """One skiplist entry, with where it was written (``where`` is ``"path:line"``).

    An entry selects tests at collection (``selector``) and gives them its tier; or, a
    *cause entry*, names a ``cause`` and applies at run time: a test its selector narrows
    to (every test when the selector is empty) that fails because of that cause, as the
    classifier reads the failure, is an expected failure (tier ``xfail``).
    """

    selector: Selector
    tier: str
    category: str
    reason: str
    detail: str = ""
    link: str = ""
    owner: str = ""
    review: dt.date | None = None
    strict: bool = True  # xfail only: an unexpected pass fails the test
    #: A cause entry's cause: the ATen overload whose missing lowering (category
    #: missing_lowering) or the feature whose absence (unsupported_feature) makes the
    #: selected tests fail. Empty for entries that select tests at collection.
    cause: str = ""
    path: Path = Path()
    line: int = 0
    index: int = 0  # position among the file's [[skip]] tables
    layer: int = 0  # position of the file in the load order; later layers win ties
    field_lines: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    display: str = field(default="", compare=False, repr=False)  # display_path(path), once per file

    @functools.cached_property
    def where(self) -> str:
        return f"{self.display or display_path(self.path)}:{self.line}"

    @property
    def review_date(self) -> dt.date | None:
        return self.review

    @functools.cached_property
    def rank(self) -> tuple[int, int, int, int]:
        """Precedence among entries selecting the same test: higher wins."""
        selector = self.selector
        fields = specificity(selector.field_values())
        return (_KIND_RANK[selector.kind], fields, self.layer, -self.line)

    @functools.cache  # noqa: B019 - entries live as long as their skiplist
    def mark_reason(self) -> str:
        """The text shown by pytest for a skip or xfail from this entry."""
        detail = f"[{self.detail}]" if self.detail else ""
        return f"{self.category}{detail}: {self.reason} ({self.where})"

    @property
    def is_cause(self) -> bool:
        """Whether the entry names a cause, applied at run time to the failures it explains."""
        return bool(self.cause)

    def line_of(self, key: str) -> int:
        """The line of one of the entry's keys, or the entry's header line."""
        return self.field_lines.get(key, self.line)
