"""The report's view model: pandas in, plain dataclasses out.

Everything a page shows is computed here, once; templates only loop and format. Each row
carries a :class:`~reports.counts.Counts`, so a totals row is ``sum(rows)``. Where a test
is shown outside its file page, it links to its row there (``href``), so every test has
exactly one canonical place.
"""

from __future__ import annotations

import itertools
import re
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from conformance.model import CATEGORIES, COLLECTION_ERROR, OUTCOMES, RunMeta
from reports.counts import FAIL_OUTCOMES, SKIP_OUTCOMES, Counts, bucket_of
from reports.loading import OP_STATUSES, OpCoverage
from reports.messages import printable
from reports.tests_view import shown_column

if TYPE_CHECKING:
    import numpy
    import pandas

__all__ = [
    "PAGE_SIZE",
    "CategoryRow",
    "CollectionErrorRow",
    "FileRow",
    "FlakyRow",
    "OpRow",
    "Summary",
    "TriageRow",
    "build_categories",
    "build_collection_errors",
    "build_files",
    "build_flaky",
    "build_ops",
    "build_summary",
    "build_triage",
    "collection_rows",
    "counts_by",
    "prepare",
    "slugs_for",
]

#: Tests per paged list page: small enough to open at once, large enough to browse.
PAGE_SIZE = 500


def prepare(frame: pandas.DataFrame) -> pandas.DataFrame:
    """The run's records sorted by (file, test_id), with the derived columns every view
    uses: ``outcome_code``, ``bucket``, ``via_fallback``, ``slug`` (of the file), ``index``
    (position in the file), ``page`` and ``href`` (the test's row in its paged file
    listing), and the ``<name>_shown`` text of messages, details and fallback ops."""
    frame = frame.sort_values(["file", "test_id"], kind="stable").reset_index(drop=True)
    frame["outcome_code"] = _outcome_codes(frame)
    frame["bucket"] = frame["outcome"].map(bucket_of)
    # A test that did not pass always has a category in the report: one the run left
    # empty (an unexpected pass of a strict xfail, say) is counted as "other".
    unclassified = (frame["bucket"] != "passed") & (frame["category"] == "")
    if unclassified.any():
        frame.loc[unclassified, "category"] = "other"
    frame["via_fallback"] = (frame["outcome"] == "passed") & (frame["ops_fallback"].map(len) > 0)
    files = frame["file"].unique().tolist()
    slugs = slugs_for(files)
    frame["slug"] = frame["file"].map(slugs)
    frame["index"] = frame.groupby("file", sort=False).cumcount()
    frame["page"] = frame["index"] // PAGE_SIZE
    for name in ("message", "detail", "ops_fallback"):
        frame[f"{name}_shown"] = shown_column(frame, name)
    frame["href"] = (
        "files/"
        + frame["slug"]
        + "-"
        + frame["page"].astype(str)
        + ".html#t"
        + frame["index"].astype(str)
    )
    return frame


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def slugs_for(names: list[str]) -> dict[str, str]:
    """A file-name-safe, unique slug per name (stable: the same name gets the same slug
    in every report, so links into a report stay valid from run to run)."""
    slugs: dict[str, str] = {}
    taken: set[str] = set()
    for name in sorted(names):
        base = _UNSAFE.sub("_", name).strip("._")[:80] or "unnamed"
        slug = base
        if slug.lower() in taken:
            slug = f"{base}-{zlib.crc32(name.encode()):08x}"
        taken.add(slug.lower())
        slugs[name] = slug
    return slugs


def counts_by(frame: pandas.DataFrame, keys: list[str]) -> dict[object, Counts]:
    """Counts per distinct value of ``keys`` (a tuple key when several).

    Done on integer codes with numpy rather than a pandas groupby over strings: the op x
    template x dtype grid alone has ~100K groups in a large run.
    """
    import numpy
    import pandas

    if frame.empty:
        return {}
    codes, uniques, dims = [], [], []
    for key in keys:
        code, unique = pandas.factorize(frame[key], sort=False)
        codes.append(code)
        uniques.append(unique.tolist())
        dims.append(max(1, len(unique)))
    group = numpy.ravel_multi_index(codes, dims) if len(keys) > 1 else codes[0]
    outcome = (
        frame["outcome_code"].to_numpy()
        if "outcome_code" in frame.columns
        else _outcome_codes(frame)
    )
    present, inverse = numpy.unique(group, return_inverse=True)
    # One row per group: a column per outcome (OUTCOMES order) and one for fallback.
    table = numpy.zeros((len(present), len(OUTCOMES) + 1), dtype=numpy.int64)
    numpy.add.at(table, (inverse, outcome), 1)
    numpy.add.at(table, (inverse, len(OUTCOMES)), frame["via_fallback"].to_numpy(dtype=int))
    parts = numpy.unravel_index(present, dims) if len(keys) > 1 else (present,)
    labels = [
        [unique[i] for i in part.tolist()] for unique, part in zip(uniques, parts, strict=True)
    ]
    names = list(zip(*labels, strict=True)) if len(keys) > 1 else labels[0]
    return dict(zip(names, itertools.starmap(Counts, table.tolist()), strict=True))


def _outcome_codes(frame: pandas.DataFrame) -> numpy.ndarray:
    """Each record's outcome as its index in OUTCOMES."""
    import pandas

    return pandas.Categorical(frame["outcome"], categories=OUTCOMES).codes


@dataclass(frozen=True, slots=True)
class CategoryRow:
    """One category: its counts and its most common details."""

    category: str
    counts: Counts
    details: list[tuple[str, int]] = field(default_factory=list)
    details_more: int = 0  # distinct details not listed


@dataclass
class Summary:
    """The TorchNeuron-style breakdown of one run."""

    meta: RunMeta
    totals: Counts
    skipped_by_category: list[tuple[str, int]]
    failed_by_category: list[tuple[str, int]]
    missing_lowering_tests: int  # skipped or failed for a missing lowering
    missing_lowering_skipped: int
    #: Skipped because the test is written for another device type (``Only runs on cuda``,
    #: ``onlyNativeDeviceTypes``): not the backend's to pass; every other skip is.
    other_device_skipped: int
    missing_lowering_ops: int
    fallback_passed: int
    fallback_ops: int
    files: int
    ops: int


def build_summary(meta: RunMeta, frame: pandas.DataFrame) -> Summary:
    """The headline numbers of a prepared run."""
    totals = sum(counts_by(frame.assign(all=0), ["all"]).values(), Counts())
    skipped = frame.loc[frame["outcome"].isin(SKIP_OUTCOMES), "category"]
    failed = frame.loc[frame["outcome"].isin(FAIL_OUTCOMES), "category"]
    missing = frame.loc[frame["category"] == "missing_lowering", "detail"]
    fallback_ops = {
        name for names in frame.loc[frame["via_fallback"], "ops_fallback"] for name in names
    }
    return Summary(
        meta=meta,
        totals=totals,
        skipped_by_category=_ordered_counts(skipped),
        failed_by_category=_ordered_counts(failed),
        missing_lowering_tests=len(missing),
        missing_lowering_skipped=int(
            ((frame["category"] == "missing_lowering") & (frame["bucket"] == "skipped")).sum()
        ),
        other_device_skipped=int(
            (
                (frame["bucket"] == "skipped")
                & (frame["category"] == "not_applicable")
                & (frame["detail"] != "eager_only")
            ).sum()
        ),
        missing_lowering_ops=int(missing[missing != ""].nunique()),
        fallback_passed=int(frame["via_fallback"].sum()),
        fallback_ops=len(fallback_ops),
        files=int(frame["file"].nunique()),
        ops=int(frame.loc[frame["op"] != "", "op"].nunique()),
    )


def _ordered_counts(categories: pandas.Series) -> list[tuple[str, int]]:
    counts = categories.replace("", "other").value_counts()
    return [(name, int(counts[name])) for name in CATEGORIES if counts.get(name, 0)]


@dataclass(frozen=True, slots=True)
class FileRow:
    """One upstream test file: counts and how many listing pages its tests fill. The counts
    include the record of the file (or a class of it) if it failed to collect, and
    ``collection_error`` then holds the exception's first line."""

    file: str
    slug: str
    counts: Counts
    pages: int
    collection_error: str = ""


def build_files(frame: pandas.DataFrame) -> list[FileRow]:
    """One row per upstream file, sorted by file name."""
    counts = counts_by(frame, ["file"])
    slugs = frame.groupby("file", sort=True)["slug"].first()
    broken = {row.file: row.headline for row in reversed(build_collection_errors(frame))}
    return [
        FileRow(
            file=name,
            slug=slug,
            counts=counts[name],
            pages=max(1, -(-counts[name].total // PAGE_SIZE)),
            collection_error=broken.get(name, ""),
        )
        for name, slug in slugs.items()
    ]


def collection_rows(frame: pandas.DataFrame) -> pandas.Series:
    """Which records of a run stand for a file, module or class that failed to collect
    (conformance.model.is_collection_record, over a whole frame; a frame read without the
    template column is taken to hold tests only)."""
    import pandas

    if "template" not in frame.columns:
        return pandas.Series(False, index=frame.index)
    return (frame["category"] == COLLECTION_ERROR) & (frame["template"] == "")


@dataclass(frozen=True, slots=True)
class CollectionErrorRow:
    """A file, module or class of the run that failed to collect, so that none of its tests
    ran: ``test_id`` names it (its file, then its class), ``outcome`` is ``error`` unless a
    skiplist entry (``skip_entry``) expected it, ``detail`` the exception's type and
    ``message`` the exception, bounded for display; ``href`` is its row on its file page."""

    test_id: str
    file: str
    outcome: str
    detail: str
    message: str
    skip_entry: str
    href: str

    @property
    def headline(self) -> str:
        """The exception's first line."""
        return self.message.split("\n", 1)[0]


def build_collection_errors(frame: pandas.DataFrame) -> list[CollectionErrorRow]:
    """The collection errors of a prepared run, in file order."""
    rows = frame.loc[collection_rows(frame)]
    return [
        CollectionErrorRow(
            test_id=str(row.test_id),
            file=str(row.file),
            outcome=str(row.outcome),
            detail=str(row.detail),
            message=printable(row.message),
            skip_entry=str(row.skip_entry),
            href=str(row.href),
        )
        for row in rows.itertuples(index=False)
    ]


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt of a retried test, bounded for display."""

    outcome: str
    category: str
    detail: str
    message: str  # its first line
    duration_s: float


@dataclass(frozen=True, slots=True)
class FlakyRow:
    """A flaky test: it failed, then passed when retried in a fresh process. ``detail`` is
    its first attempt's category; ``href`` its row on its file page."""

    test_id: str
    file: str
    detail: str
    href: str
    attempts: list[Attempt]


def build_flaky(frame: pandas.DataFrame) -> list[FlakyRow]:
    """The flaky tests of a prepared run, in file order, with each attempt."""
    rows = frame.loc[frame["outcome"] == "flaky"]
    has_attempts = "attempts" in frame.columns
    return [
        FlakyRow(
            test_id=str(row.test_id),
            file=str(row.file),
            detail=str(row.detail),
            href=str(row.href),
            attempts=[
                Attempt(
                    outcome=str(a.get("outcome") or ""),
                    category=str(a.get("category") or ""),
                    detail=str(a.get("detail") or ""),
                    message=printable(str(a.get("message") or "").split("\n", 1)[0], 300),
                    duration_s=float(a.get("duration_s") or 0.0),
                )
                for a in (row.attempts if has_attempts else ())
            ],
        )
        for row in rows.itertuples(index=False)
    ]


def build_categories(frame: pandas.DataFrame, top: int = 15) -> list[CategoryRow]:
    """One row per category present (tests that did not pass), in the model's order, with
    the ``top`` most frequent details."""
    relevant = frame.loc[frame["category"] != ""]
    counts = counts_by(relevant, ["category"])
    rows = []
    for name in CATEGORIES:
        if name not in counts:
            continue
        details = relevant.loc[relevant["category"] == name, "detail"]
        details = details[details != ""].value_counts()
        ranked = sorted(details.items(), key=lambda item: (-item[1], item[0]))
        rows.append(
            CategoryRow(
                category=name,
                counts=counts[name],
                details=[(str(d), int(n)) for d, n in ranked[:top]],
                details_more=max(0, len(ranked) - top),
            )
        )
    return rows


@dataclass
class OpRow:
    """One operator as tests name it (the OpInfo name) with its status, counts, the tests
    it blocks, and an op x dtype grid."""

    op: str
    slug: str
    status: str  # worst status of its ATen overloads, or "" without op coverage
    overloads: list[tuple[str, str]]  # (overload, status)
    counts: Counts
    blocked: int  # tests skipped or failed for a missing lowering
    by_dtype: dict[str, Counts]
    grid: list[tuple[str, dict[str, Counts]]] = field(default_factory=list)  # template rows


def build_ops(
    frame: pandas.DataFrame, coverage: OpCoverage | None, *, with_grid: bool = True
) -> tuple[list[OpRow], list[str]]:
    """One row per operator named by tests (sorted by name) and the dtypes seen, in a
    fixed order. ``with_grid`` adds the per-op template x dtype grid."""
    op_frame = frame.loc[frame["op"] != ""]
    counts = counts_by(op_frame, ["op"])
    by_dtype = counts_by(op_frame, ["op", "dtype"])
    grid = counts_by(op_frame, ["op", "template", "dtype"]) if with_grid else {}
    blocked = op_frame.loc[op_frame["category"] == "missing_lowering"].groupby("op").size()
    dtypes = sorted({dtype for _, dtype in by_dtype}, key=_dtype_order)
    slugs = slugs_for(list(counts))
    packets = coverage.by_packet() if coverage else {}
    grid_rows: dict[str, dict[str, dict[str, Counts]]] = {}
    for (op, template, dtype), value in grid.items():  # type: ignore[misc]
        grid_rows.setdefault(op, {}).setdefault(template, {})[dtype] = value
    dtype_rows: dict[str, dict[str, Counts]] = {}
    for (op, dtype), value in by_dtype.items():  # type: ignore[misc]
        dtype_rows.setdefault(op, {})[dtype] = value
    rows = []
    for op in sorted(counts):
        statuses = sorted((s.op, s.status) for s in _packet_statuses(op, packets))
        worst = max((OP_STATUSES.index(s) for _, s in statuses), default=None)
        rows.append(
            OpRow(
                op=op,
                slug=slugs[op],
                status=OP_STATUSES[worst] if worst is not None else "",
                overloads=statuses,
                counts=counts[op],
                blocked=int(blocked.get(op, 0)),
                by_dtype=dtype_rows.get(op, {}),
                grid=sorted(grid_rows.get(op, {}).items()),
            )
        )
    return rows, dtypes


def _packet_statuses(op: str, packets: dict[str, list]) -> list:
    """The ATen overloads an OpInfo name stands for: ``linalg.norm`` -> ``linalg_norm``,
    ``nn.functional.conv2d`` -> ``conv2d``, ``div.no_rounding_mode`` (a variant) -> ``div``:
    the name with underscores for dots, else its parts from the last to the first."""
    parts = op.split(".")
    for candidate in ("_".join(parts), *reversed(parts)):
        if candidate in packets:
            return packets[candidate]
    return []


_DTYPE_ORDER = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "complex128",
    "complex64",
    "complex32",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
)


def _dtype_order(dtype: str) -> tuple[int, str]:
    return (_DTYPE_ORDER.index(dtype) if dtype in _DTYPE_ORDER else len(_DTYPE_ORDER), dtype)


@dataclass(frozen=True, slots=True)
class TriageRow:
    """One missing lowering: the overload, what op coverage says of it, and the tests it
    keeps from running (skipped) or passing (failed); ``xfailed`` counts those of its
    skipped tests that ran and failed as a skiplist entry expected."""

    overload: str
    status: str
    source: str
    in_core: bool
    skipped: int
    failed: int
    xfailed: int
    ops: list[str]  # operators (OpInfo names) whose tests it blocks
    files: int

    @property
    def blocked(self) -> int:
        return self.skipped + self.failed


def build_triage(frame: pandas.DataFrame, coverage: OpCoverage | None) -> list[TriageRow]:
    """Missing lowerings ranked by the tests they block, most first. Overloads that op
    coverage lists as missing with blocked tests but that no record names are included
    with the op coverage count."""
    missing = frame.loc[(frame["category"] == "missing_lowering") & (frame["detail"] != "")]
    xfailed = missing.loc[missing["outcome"] == "xfailed"].groupby("detail").size()
    rows: dict[str, TriageRow] = {}
    for overload, group in missing.groupby("detail", sort=True):
        status = coverage.ops.get(overload) if coverage else None
        ops = sorted(set(group["op"]) - {""})
        rows[overload] = TriageRow(
            overload=str(overload),
            status=status.status if status else "",
            source=status.source if status else "",
            in_core=status.in_core if status else False,
            skipped=int((group["bucket"] == "skipped").sum()),
            failed=int((group["bucket"] == "failed").sum()),
            xfailed=int(xfailed.get(overload, 0)),
            ops=ops,
            files=int(group["file"].nunique()),
        )
    for status in coverage.ops.values() if coverage else ():
        if status.status == "missing" and status.tests_blocked and status.op not in rows:
            rows[status.op] = TriageRow(
                overload=status.op,
                status=status.status,
                source=status.source,
                in_core=status.in_core,
                skipped=status.tests_blocked,
                failed=0,
                xfailed=0,
                ops=[],
                files=0,
            )
    return sorted(rows.values(), key=lambda row: (-row.blocked, row.overload))
