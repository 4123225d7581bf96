"""A loaded skiplist: layered entries and the indexes that match a test in constant time."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import compress
from pathlib import Path

from conformance.model import TestIdentity
from skiplists.entry import FIELD_NAMES, Selector, SkipEntry, specificity
from skiplists.errors import SkiplistError
from skiplists.loader import parse_file, torch_release

__all__ = ["DATA_DIR", "Override", "Skiplist", "common_paths", "default_paths", "load"]

#: Where the shipped skiplists live: ``common/`` for every backend, one folder per backend;
#: in each, ``base.toml`` for every torch release and ``torch-MAJOR.MINOR.toml`` overlays.
DATA_DIR = Path(__file__).resolve().parent / "data"

_ATTRS = tuple(attr for _key, attr in FIELD_NAMES)
_test_id = operator.attrgetter("test_id")
_file = operator.attrgetter("file")
_is_none = partial(operator.is_, None)


def default_paths(backend: str, torch_version: str, *, data_dir: Path = DATA_DIR) -> list[Path]:
    """The shipped files that apply, in layer order (later layers override earlier ones):
    common entries, common overlay for the torch release, the backend's entries (``base.toml``,
    and ``upstream.toml``, its list for PyTorch's own test files), the backend's overlay.
    Files that do not exist are left out."""
    release = torch_release(torch_version)
    backend_files = [
        data_dir / backend / "base.toml",
        data_dir / backend / "upstream.toml",
        data_dir / backend / f"torch-{release}.toml",
    ]
    common = [] if backend in NOT_PRIVATEUSE1 else common_paths(torch_version, data_dir=data_dir)
    return common + [path for path in backend_files if path.is_file()]


#: Devices the common layer does not describe: its entries are failures of PrivateUse1
#: devices (the CPU, the baseline every run is compared with, passes them).
NOT_PRIVATEUSE1 = frozenset({"cpu", "meta"})


def common_paths(torch_version: str, *, data_dir: Path = DATA_DIR) -> list[Path]:
    """The common layer, which every backend's run loads under its own files: failures that
    are torch's (category ``torch_limitation``), named once for every backend."""
    release = torch_release(torch_version)
    candidates = [data_dir / "common" / "base.toml", data_dir / "common" / f"torch-{release}.toml"]
    return [path for path in candidates if path.is_file()]


def load(
    paths: Sequence[Path], *, backend: str, torch_version: str, mode: str | None = None
) -> Skiplist:
    """Load and validate the files in layer order; with ``mode`` (a run's: ``eager`` or
    ``compile``), only the entries that apply in that mode (those naming no mode, or it).

    Raises SkiplistError (file, line, field) on any problem: syntax, unknown keys, bad
    values, and duplicate or conflicting selectors within one file. Across files, an entry
    with the same selector as an earlier file's entry replaces it (an overlay).
    """
    entries: list[SkipEntry] = []
    for layer, path in enumerate(paths):
        entries.extend(
            parse_file(Path(path), layer=layer, backend=backend, torch_version=torch_version)
        )
    if mode is not None:
        entries = [e for e in entries if e.selector.mode in ("", mode)]
    return Skiplist(entries)


@dataclass(frozen=True)
class Override:
    """An entry replaced by a later layer's entry with the same selector."""

    replaced: SkipEntry
    by: SkipEntry


class Skiplist:
    """Entries with their indexes. ``match`` returns the entry that applies to a test.

    Precedence when several entries select one test: an exact test_id beats structured
    fields, which beat a pattern; then more fields beat fewer; then the later layer, then
    the earlier line.
    """

    def __init__(self, entries: Iterable[SkipEntry]) -> None:
        self.overrides: list[Override] = []
        self.entries: tuple[SkipEntry, ...] = self._resolve(list(entries))
        self._exact: dict[str, SkipEntry] = {}
        # Structured entries grouped by which fields they set:
        # (getter of those fields from a TestIdentity, {values: [entries]}, field count).
        self._fields: list[
            tuple[Callable[[TestIdentity], object], dict[object, list[SkipEntry]], int]
        ] = []
        self._patterns_by_file: dict[str, _PatternBucket] = {}
        self._patterns_any = _PatternBucket()
        #: Cause entries by (category, detail), most specific first; and those that name
        #: test_ids, by test_id (a pass of a named test is a strict xpass).
        self._causes: dict[tuple[str, str], list[SkipEntry]] = {}
        #: The same, each with its selector's check, or None for an entry that narrows to
        #: nothing (most do): the run-time check of a failure is then a dict lookup.
        self._cause_checks: dict[
            tuple[str, str], list[tuple[SkipEntry, Callable[[TestIdentity], bool] | None]]
        ] = {}
        self._cause_named: dict[str, SkipEntry] = {}
        self._cause_entries = tuple(entry for entry in self.entries if entry.is_cause)
        self._build_indexes()

    def __len__(self) -> int:
        return len(self.entries)

    def _resolve(self, entries: list[SkipEntry]) -> tuple[SkipEntry, ...]:
        by_key: dict[object, SkipEntry] = {}
        for entry in entries:
            keys = _selection_keys(entry)
            for key in keys:
                earlier = by_key.get(key)
                if earlier is not None and earlier.layer == entry.layer:
                    _raise_duplicate(entry, earlier)
                if earlier is not None and not self._recorded(earlier, entry):
                    self.overrides.append(Override(earlier, entry))
                by_key[key] = entry
        # An entry survives if it still owns at least one of its keys.
        alive = {id(e) for e in by_key.values()}
        return tuple(e for e in entries if id(e) in alive)

    def _recorded(self, replaced: SkipEntry, by: SkipEntry) -> bool:
        # A test_id list or a dtypes list overrides key by key: record the pair once.
        last = self.overrides[-1] if self.overrides else None
        return last is not None and last.replaced is replaced and last.by is by

    def _build_indexes(self) -> None:
        groups: dict[tuple[str, ...], dict[object, list[SkipEntry]]] = {}
        for entry in self.entries:
            selector = entry.selector
            if entry.is_cause:
                self._causes.setdefault((entry.category, entry.detail), []).append(entry)
                for test_id in selector.test_ids:
                    current = self._cause_named.get(test_id)
                    if current is None or entry.rank > current.rank:
                        self._cause_named[test_id] = entry
            elif selector.test_ids:
                for test_id in selector.test_ids:
                    current = self._exact.get(test_id)
                    if current is None or entry.layer >= current.layer:
                        self._exact[test_id] = entry
            elif selector.pattern:
                file = selector.file or literal_file(selector.pattern)
                bucket = (
                    self._patterns_by_file.setdefault(file, _PatternBucket())
                    if file
                    else self._patterns_any
                )
                bucket.add(entry)
            else:
                values = selector.field_values()
                names = tuple(a for a in _ATTRS if a in values)
                index = groups.setdefault(names, {})
                dtypes = values.get("dtype", ("",))
                for dtype in dtypes:
                    key = tuple(dtype if a == "dtype" else values[a] for a in names)
                    index.setdefault(key if len(key) > 1 else key[0], []).append(entry)
        # Most specific groups first; a test's first group size that hits wins.
        for names in sorted(groups, key=specificity, reverse=True):
            self._fields.append((operator.attrgetter(*names), groups[names], specificity(names)))
        for bucket in (*self._patterns_by_file.values(), self._patterns_any):
            bucket.freeze()
        for key, candidates in self._causes.items():
            candidates.sort(key=lambda e: e.rank, reverse=True)
            self._cause_checks[key] = [
                (e, e.selector.matches if _narrows(e.selector) else None) for e in candidates
            ]

    @property
    def causes(self) -> tuple[SkipEntry, ...]:
        """The cause entries, in file order (built once: the agent asks per test)."""
        return self._cause_entries

    def match_cause(self, identity: TestIdentity, category: str, detail: str) -> SkipEntry | None:
        """The cause entry that explains a failure the classifier read as ``(category,
        detail)`` in the test, or None: the most specific of the entries naming that cause
        whose selector narrows to the test. Checked only for tests no entry selected at
        collection (those take precedence)."""
        for entry, check in self._cause_checks.get((category, detail), ()):
            if check is None or check(identity):
                return entry
        return None

    def named_cause(self, identity: TestIdentity) -> SkipEntry | None:
        """The cause entry that names this test by test_id (so that its pass is a strict
        xpass), or None."""
        return self._cause_named.get(identity.test_id)

    def causes_for(self, identity: TestIdentity) -> list[SkipEntry]:
        """Every cause entry whose selector narrows to the test, most specific first."""
        hits = [
            entry
            for candidates in self._causes.values()
            for entry in candidates
            if entry.selector.matches(identity)
        ]
        return sorted(hits, key=lambda e: e.rank, reverse=True)

    def match(self, identity: TestIdentity) -> SkipEntry | None:
        """The entry that applies to the test, or None."""
        return self.match_many([identity])[0]

    def match_many(self, identities: Sequence[TestIdentity]) -> list[SkipEntry | None]:
        """The entry that applies to each test, or None, batched for collection: each index
        is probed for all tests at once (``map`` runs the lookups at C speed), and Python code
        runs only for the tests an index hits."""
        test_ids = list(map(_test_id, identities))
        result: list[SkipEntry | None] = list(map(self._exact.get, test_ids))
        rows = list(compress(range(len(result)), map(_is_none, result)))
        if self._fields and rows:
            best_size: dict[int, int] = {}
            candidates = list(map(identities.__getitem__, rows))
            for getter, index, size in self._fields:
                hits = list(map(index.get, map(getter, candidates)))
                for position in compress(range(len(hits)), hits):
                    row = rows[position]
                    if size < best_size.get(row, size):
                        continue
                    for entry in hits[position]:
                        current = result[row]
                        if current is None or entry.rank > current.rank:
                            result[row] = entry
                            best_size[row] = size
            if best_size:
                rows = [row for row in rows if row not in best_size]
        if self._patterns_by_file and rows:
            self._match_patterns_by_file(identities, test_ids, rows, result)
        if self._patterns_any.entries:
            for row in rows:
                other = self._patterns_any.best(identities[row])
                current = result[row]
                if other is not None and (current is None or other.rank > current.rank):
                    result[row] = other
        return result

    def _match_patterns_by_file(
        self,
        identities: Sequence[TestIdentity],
        test_ids: list[str],
        rows: list[int],
        result: list[SkipEntry | None],
    ) -> None:
        buckets = self._patterns_by_file
        by_file: dict[str, list[int]] = {}
        for row, file in zip(rows, map(_file, map(identities.__getitem__, rows)), strict=True):
            if file in buckets:
                by_file.setdefault(file, []).append(row)
        for file, group in by_file.items():
            bucket = buckets[file]
            if bucket.prefilter is not None:
                tried = map(bucket.prefilter.fullmatch, map(test_ids.__getitem__, group))
                group = list(compress(group, tried))
            for row in group:
                result[row] = bucket.scan(identities[row])

    def match_all(self, identity: TestIdentity) -> list[SkipEntry]:
        """Every entry that selects the test, the applying one first."""
        hits: list[SkipEntry] = []
        exact = self._exact.get(identity.test_id)
        if exact is not None:
            hits.append(exact)
        for getter, index, _size in self._fields:
            hits.extend(index.get(getter(identity), ()))
        bucket = self._patterns_by_file.get(identity.file)
        if bucket is not None:
            hits.extend(bucket.all(identity))
        hits.extend(self._patterns_any.all(identity))
        hits.sort(key=lambda e: e.rank, reverse=True)
        return hits

    def by_where(self) -> dict[str, SkipEntry]:
        """Entries keyed by their ``where`` ("path:line"), as records name them."""
        return {entry.where: entry for entry in self.entries}


class _PatternBucket:
    """Pattern entries tried together: one combined regular expression rejects most tests
    in a single call, and only a hit is checked entry by entry, in precedence order.
    Buckets are per file (see literal_file), so a hit scans few entries."""

    def __init__(self) -> None:
        self.entries: list[SkipEntry] = []
        self.prefilter: re.Pattern[str] | None = None

    def add(self, entry: SkipEntry) -> None:
        self.entries.append(entry)

    def freeze(self) -> None:
        if not self.entries:
            return
        self.entries.sort(key=lambda e: e.rank, reverse=True)
        try:
            # Groups are renumbered inside the alternation, which breaks back-references.
            if not any(re.search(r"\\\d|\(\?P=", e.selector.pattern) for e in self.entries):
                joined = "|".join(f"(?:{e.selector.pattern})" for e in self.entries)
                self.prefilter = re.compile(joined)
        except (re.error, RecursionError, OverflowError):
            self.prefilter = None  # e.g. a group name used twice: try the entries one by one

    def best(self, identity: TestIdentity) -> SkipEntry | None:
        if not self.entries:
            return None
        if self.prefilter is not None and self.prefilter.fullmatch(identity.test_id) is None:
            return None
        return self.scan(identity)

    def scan(self, identity: TestIdentity) -> SkipEntry | None:
        """The first entry (in precedence order) that selects the test, without prefilter."""
        for entry in self.entries:
            if entry.selector.matches(identity):
                return entry
        return None

    def all(self, identity: TestIdentity) -> list[SkipEntry]:
        if not self.entries:
            return []
        if self.prefilter is not None and self.prefilter.fullmatch(identity.test_id) is None:
            return []
        return [e for e in self.entries if e.selector.matches(identity)]


def _narrows(selector: Selector) -> bool:
    """Whether a selector narrows at all (an empty one selects every test)."""
    return bool(selector.test_ids or selector.pattern or selector.field_values())


def _selection_keys(entry: SkipEntry) -> list[object]:
    """Keys two entries share exactly when they select some of the same tests by the same
    means: one per test_id, one per dtype of a structured selector."""
    selector = entry.selector
    # A cause entry competes only with the cause entries of the same cause.
    scope = ("cause", entry.cause) if entry.is_cause else ()
    if selector.test_ids:
        return [(*scope, "test_id", test_id) for test_id in selector.test_ids]
    base = selector.key()
    return [(*scope, *base[:6], dtype, *base[7:]) for dtype in selector.dtypes or ("",)]


def literal_file(pattern: str) -> str:
    """The file a pattern is confined to, when it starts with a literal ``file::``."""
    if _top_level_alternation(pattern):  # "a\\.py::x|b\\.py::y" may leave the file
        return ""
    literal = re.match(r"[\w\-/]+(?:\\?\.[\w\-/]+)*::", pattern)
    if literal is None:
        return ""
    file = literal.group(0)[:-2].replace("\\.", ".")
    # An unescaped "." is "any character": the file is literal only if every dot was escaped.
    if "." in literal.group(0).replace("\\.", ""):
        return ""
    return file


def _top_level_alternation(pattern: str) -> bool:
    depth = 0
    in_class = False
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            if pattern[index + 1 : index + 2] == "]":  # "[]...]": the first ] is literal
                index += 1
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth <= 0:
            return True
        index += 1
    return False


def _raise_duplicate(entry: SkipEntry, earlier: SkipEntry) -> None:
    selector = entry.selector
    if selector.test_ids:
        field = "test_id"
    elif selector.pattern:
        field = "pattern"
    else:
        field = next(iter(_present_keys(entry)), "cause")
    same = (earlier.tier, earlier.category) == (entry.tier, entry.category)
    problem = "duplicates" if same else f"conflicts with (tier {earlier.tier} vs {entry.tier})"
    described = " ".join(
        part
        for part in (f"cause={entry.cause}" if entry.is_cause else "", selector.describe())
        if part
    )
    raise SkiplistError(
        f"{described} {problem} the entry at line {earlier.line}",
        file=entry.path,
        line=entry.line_of(field),
        field=field,
    )


def _present_keys(entry: SkipEntry) -> list[str]:
    return [k for k, a in FIELD_NAMES if a in entry.selector.field_values()]
