"""Strict loading of skiplist files: every problem is a SkiplistError naming file, line, field.

A file holds an optional ``[skiplist]`` header and ``[[skip]]`` entries::

    [skiplist]
    backend = "emu"      # optional: the file only applies to this backend
    torch = "2.13"       # optional: the file only applies to this torch release
    suite = "embedded"   # optional: every entry is for this suite's tests

    [[skip]]
    test_id = "embedded/test_ops.py::TestCommon::test_out_cumsum_float32"
    tier = "xfail"
    category = "missing_lowering"
    detail = "aten::cumsum.out"
    reason = "cumsum.out has no lowering yet"

    [[skip]]
    cause = "aten::lgamma.out"   # a cause entry: applies at run time to the failures it explains
    template = "test_out"        # optional narrowing
    reason = "lgamma has no lowering yet"
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from conformance.model import (
    CATEGORIES,
    FEATURES,
    MODES,
    SUITES,
    TORCH_LIMITATIONS,
    suite_of_file,
)
from skiplists.entry import (
    FIELD_NAMES,
    SCOPE_FIELD,
    TIERS,
    Selector,
    SkipEntry,
    display_path,
    specificity,
)
from skiplists.errors import SkiplistError
from skiplists.tomllines import Section, did_you_mean, error_line, scan

try:  # the C-speed parser where the standard library has one (3.11+)
    import tomllib as _toml

    _TomlError: type[Exception] = _toml.TOMLDecodeError
except ImportError:  # pragma: no cover - Python 3.10
    import tomlkit as _toml  # type: ignore[no-redef]
    from tomlkit.exceptions import TOMLKitError as _TomlError

__all__ = ["ENTRY_KEYS", "HEADER_KEYS", "parse_file", "parse_text", "torch_release"]

HEADER_KEYS = ("backend", "torch", "suite", "mode", "description")
_SELECTOR_KEYS = ("test_id", *(key for key, _attr in FIELD_NAMES), "pattern")
ENTRY_KEYS = (
    *_SELECTOR_KEYS,
    "mode",
    "cause",
    "tier",
    "category",
    "detail",
    "reason",
    "link",
    "owner",
    "review",
    "strict",
)
_PLACEHOLDER_REASONS = {"todo", "tbd", "fixme", "xxx", "?", "-", "n/a", "none", "unknown"}
# A test's (file::Class::name), or a test file's alone: the test_id of a file that failed
# to collect (conformance.model.COLLECTION_ERROR).
_TEST_ID = re.compile(r"[^\s:]+(::[^\s:]+)+|[^\s:]+\.py")
_DEVICE_TOKEN = re.compile(r"PRIVATEUSE1|privateuse1")
_LOOSE_TEXT = re.compile(r"[^\s]+")
_LINK = re.compile(r"https?://\S+")
_OVERLOAD = re.compile(r"\w+::[\w.]+")
# torch dtype names as they appear in test names; a test parametrized over several
# dtypes joins them with "_" (test_foo_float32_int64), so a dtype value is a run of these.
_DTYPE_NAMES = (
    "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu",
    "float4_e2m1fn_x2", "bfloat16", "float16", "float32", "float64", "complex32",
    "complex64", "complex128", "int8", "int16", "int32", "int64", "uint8", "uint16",
    "uint32", "uint64", "bool", "quint8", "qint8", "qint32", "quint4x2", "quint2x4",
    "half", "float", "double", "cfloat", "cdouble", "chalf", "long", "int", "short",
    "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2",
)  # fmt: skip
DTYPE_PATTERN = re.compile(f"(?:{'|'.join(_DTYPE_NAMES)})(?:_(?:{'|'.join(_DTYPE_NAMES)}))*")


def torch_release(torch_version: str) -> str:
    """``"2.13.0+cpu"`` -> ``"2.13"``; raises SkiplistError on anything else."""
    found = re.match(r"(\d+)\.(\d+)", torch_version.strip())
    if found is None:
        raise SkiplistError(
            f"torch version {torch_version!r} is not MAJOR.MINOR[.PATCH]", file="<torch>"
        )
    return f"{found.group(1)}.{found.group(2)}"


def parse_file(path: Path, *, layer: int, backend: str, torch_version: str) -> list[SkipEntry]:
    """Every entry of one file, validated; the file's header must fit backend and torch."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SkiplistError("no such skiplist file", file=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SkiplistError(f"cannot read: {exc}", file=path) from None
    return parse_text(text, path, layer=layer, backend=backend, torch_version=torch_version)


def parse_text(
    text: str, path: Path, *, layer: int = 0, backend: str = "", torch_version: str = ""
) -> list[SkipEntry]:
    """Parse and validate one file's text (``path`` is only used to locate errors)."""
    try:
        document = _toml.loads(text)
        if not isinstance(document, dict):  # tomlkit's document on the fallback path
            document = document.unwrap()
    except _TomlError as exc:
        raise SkiplistError(f"TOML syntax error: {exc}", file=path, line=error_line(exc)) from None
    except (ValueError, RecursionError) as exc:  # the parser's own limits
        raise SkiplistError(f"TOML syntax error: {exc}", file=path, line=0) from None
    sections = scan(text)
    top = sections[0]
    for key in document:
        if key not in ("skiplist", "skip"):
            _unknown(key, ("skiplist", "skip"), path, _top_line(sections, key), "a top-level key")
    header = document.get("skiplist", {})
    _check_header(header, sections, path, backend, torch_version)
    suite = header.get("suite", "")
    mode = header.get("mode", "")
    tables = document.get("skip", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise SkiplistError(
            "must be an array of tables ([[skip]])",
            file=path,
            line=_top_line(sections, "skip"),
            field="skip",
        )
    located = [s for s in sections if s.name == "skip" and s.array]
    if len(located) != len(tables):  # written as an inline array: point at its key
        line = top.keys.get("skip", 1)
        located = [Section("skip", True, line, line) for _ in tables]
    display = display_path(path)  # resolving a path touches the file system: once per file
    return [
        _entry(table, section, path, index, layer, display, suite, mode)
        for index, (table, section) in enumerate(zip(tables, located, strict=True))
    ]


def _check_header(
    header: Any, sections: list[Section], path: Path, backend: str, torch_version: str
) -> None:
    line = _section_line(sections, "skiplist")
    if not isinstance(header, dict):
        raise SkiplistError("must be a table", file=path, line=line, field="skiplist")
    where = next((s for s in sections if s.name == "skiplist" and not s.array), None)
    keys = where.keys if where else {}
    for key, value in header.items():
        key_line = keys.get(key, line)
        if key not in HEADER_KEYS:
            _unknown(key, HEADER_KEYS, path, key_line, "a [skiplist] key")
        if not isinstance(value, str):
            raise SkiplistError("must be a string", file=path, line=key_line, field=key)
    wanted = header.get("backend", "")
    if wanted not in ("", "*") and backend and wanted != backend:
        raise SkiplistError(
            f"this file is for backend {wanted!r}, not {backend!r}",
            file=path,
            line=keys.get("backend", line),
            field="backend",
        )
    release = header.get("torch", "")
    if release and not re.fullmatch(r"\d+\.\d+", release):
        raise SkiplistError(
            f"{release!r} is not a torch release (MAJOR.MINOR)",
            file=path,
            line=keys.get("torch", line),
            field="torch",
        )
    for key, allowed in (("mode", MODES), ("suite", SUITES)):
        value = header.get(key, "")
        if value and value not in allowed:
            raise SkiplistError(
                f"{value!r} is not a {key}; use one of {', '.join(allowed)}",
                file=path,
                line=keys.get(key, line),
                field=key,
            )
    if release and torch_version and release != torch_release(torch_version):
        raise SkiplistError(
            f"this file is for torch {release}, not {torch_version}",
            file=path,
            line=keys.get("torch", line),
            field="torch",
        )


def _entry(
    table: Mapping[str, Any],
    section: Section,
    path: Path,
    index: int,
    layer: int,
    display: str,
    file_suite: str = "",
    file_mode: str = "",
) -> SkipEntry:
    def fail(message: str, key: str) -> SkiplistError:
        return SkiplistError(
            message, file=path, line=section.keys.get(key, section.line), field=key
        )

    for key in table:
        if key not in ENTRY_KEYS:
            _unknown(key, ENTRY_KEYS, path, section.keys.get(key, section.line), "an entry key")

    def text(key: str, *, required: bool = False) -> str:
        value = table.get(key, "")
        if not isinstance(value, str):
            raise fail(f"must be a string, not {type(value).__name__}", key)
        if required and not value.strip():
            raise fail("is required" if key not in table else "must not be empty", key)
        if value and value != value.strip():
            raise fail("has leading or trailing spaces", key)
        return value

    cause, cause_category = _cause(table, fail, text)
    selector = _scoped(_selector(table, fail, text, cause=bool(cause)), table, fail, file_suite)
    mode = text("mode") or file_mode
    if mode and mode not in MODES:
        raise fail(f"{mode!r} is not a mode; use one of {', '.join(MODES)}", "mode")
    selector = dataclasses.replace(selector, mode=mode)
    tier = text("tier", required=not cause) or ("xfail" if cause else "")
    if tier not in TIERS:
        raise fail(f"{tier!r} is not a tier; use one of {', '.join(TIERS)}", "tier")
    if cause and tier != "xfail":
        raise fail(
            f"a cause entry applies to tests that failed, so its tier is xfail, not {tier!r}",
            "tier",
        )
    category = text("category", required=not cause) or cause_category
    if cause and category != cause_category:
        raise fail(
            f"cause {cause!r} is a {cause_category}, not {category!r} (leave category out)",
            "category",
        )
    if category not in CATEGORIES:
        hint = did_you_mean(category, CATEGORIES)
        raise fail(
            f"{category!r} is not a category{hint}; see conformance.model.CATEGORIES", "category"
        )
    reason = text("reason", required=True)
    if reason.lower().strip(" .") in _PLACEHOLDER_REASONS:
        raise fail(
            f"{reason!r} is a placeholder, not a reason: say why the test cannot pass", "reason"
        )
    detail = text("detail")
    if cause and detail and detail != cause:
        raise fail(f"the cause names the detail: {cause!r}, not {detail!r}", "detail")
    detail = detail or cause
    if category == "missing_lowering" and detail and not _OVERLOAD.fullmatch(detail):
        raise fail(f"{detail!r} is not an operator overload like 'aten::cumsum.out'", "detail")
    link = text("link")
    if link and not _LINK.fullmatch(link):
        raise fail(f"{link!r} is not an http(s) URL", "link")
    strict = table.get("strict", True)
    if not isinstance(strict, bool):
        raise fail("must be true or false", "strict")
    if "strict" in table and tier != "xfail":
        raise fail("only applies to tier 'xfail'", "strict")
    return SkipEntry(
        selector=selector,
        tier=tier,
        category=category,
        reason=reason,
        detail=detail,
        link=link,
        owner=text("owner"),
        review=_review(table, fail),
        strict=strict,
        cause=cause,
        path=path,
        line=section.line,
        index=index,
        layer=layer,
        field_lines=dict(section.keys),
        display=display,
    )


def _cause(table: Mapping[str, Any], fail: Any, text: Any) -> tuple[str, str]:
    """(cause, its category) of a cause entry, ("", "") for other entries."""
    if "cause" not in table:
        return "", ""
    cause = text("cause", required=True)
    if "::" in cause:
        if not _OVERLOAD.fullmatch(cause):
            raise fail(f"{cause!r} is not an operator overload like 'aten::cumsum.out'", "cause")
        return cause, "missing_lowering"
    if cause in FEATURES:
        return cause, "unsupported_feature"
    if cause in TORCH_LIMITATIONS:
        return cause, "torch_limitation"
    hint = did_you_mean(cause, (*FEATURES, *TORCH_LIMITATIONS))
    raise fail(
        f"{cause!r} is neither an operator overload ('aten::cumsum.out'), a feature "
        f"({', '.join(FEATURES)}) nor a torch limitation ({', '.join(TORCH_LIMITATIONS)}){hint}",
        "cause",
    )


def _selector(table: Mapping[str, Any], fail: Any, text: Any, *, cause: bool = False) -> Selector:
    present = [key for key in _SELECTOR_KEYS if key in table and key != SCOPE_FIELD]
    if not present and cause:
        return Selector()  # a cause alone: every test that fails because of it
    if not present:
        key = SCOPE_FIELD if SCOPE_FIELD in table else "test_id"
        raise fail("an entry needs a selector: test_id, structured fields or pattern", key)
    if "test_id" in table:
        if len(present) > 1:
            raise fail(f"test_id cannot be combined with {present[1]!r}", present[1])
        raw = table["test_id"]
        test_ids = [raw] if isinstance(raw, str) else raw
        if not isinstance(test_ids, list) or not test_ids:
            raise fail("must be a test_id or a non-empty list of test_ids", "test_id")
        for test_id in test_ids:
            if not isinstance(test_id, str) or not _TEST_ID.fullmatch(test_id):
                raise fail(
                    f"{test_id!r} is not a test_id (file::Class::test_name, or a file.py "
                    "that failed to collect)",
                    "test_id",
                )
            if _DEVICE_TOKEN.search(test_id):
                raise fail(
                    f"{test_id!r} names a device; test_ids are device-independent", "test_id"
                )
        if len(set(test_ids)) != len(test_ids):
            raise fail("lists the same test_id twice", "test_id")
        return Selector(test_ids=tuple(test_ids))
    values = {}
    for key, attr in FIELD_NAMES:
        if key == "dtypes":
            continue
        value = text(key)
        if value and not _LOOSE_TEXT.fullmatch(value):
            raise fail(f"{value!r} contains spaces", key)
        values[attr] = value
    dtypes = table.get("dtypes", [])
    if not isinstance(dtypes, list) or ("dtypes" in table and not dtypes):
        raise fail('must be a non-empty list of dtype names, e.g. ["float16"]', "dtypes")
    for dtype in dtypes:
        if not isinstance(dtype, str) or not DTYPE_PATTERN.fullmatch(dtype):
            raise fail(f"{dtype!r} is not a torch dtype name (float32, bfloat16, ...)", "dtypes")
    if len(set(dtypes)) != len(dtypes):
        raise fail("lists the same dtype twice", "dtypes")
    pattern = text("pattern")
    compiled = None
    if "pattern" in table:
        if not pattern:
            raise fail("must not be empty", "pattern")
        try:
            compiled = re.compile(pattern)
        except (re.error, RecursionError, OverflowError) as exc:
            raise fail(f"invalid regular expression: {exc}", "pattern") from None
        if compiled.fullmatch("") is not None:
            raise fail(f"{pattern!r} matches the empty string, so it selects anything", "pattern")
    return Selector(dtypes=tuple(dtypes), pattern=pattern, _compiled=compiled, **values)


def _scoped(selector: Selector, table: Mapping[str, Any], fail: Any, file_suite: str) -> Selector:
    """The selector with its suite: the entry's own ``suite``, else the file's. A test_id or
    file names its suite itself (``embedded/...`` or not), which must agree."""
    own = table.get("suite", "")
    if "suite" in table and own not in SUITES:
        raise fail(f"{own!r} is not a suite; use one of {', '.join(SUITES)}", "suite")
    suite = own or file_suite
    key = "suite" if own else "test_id"
    named = [(tid, tid.split("::", 1)[0]) for tid in selector.test_ids]
    if selector.file:
        named.append((selector.file, selector.file))
        key = "suite" if own else "file"
    for what, file in named:
        if suite and suite_of_file(file) != suite:
            raise fail(
                f"{what!r} is a test of the {suite_of_file(file)} suite, but the "
                f"{'entry' if own else 'file'} is for the {suite} suite "
                "(tests of the embedded suite are named embedded/FILE)",
                key,
            )
    if selector.test_ids or selector.file or not suite:
        return dataclasses.replace(selector, suite="")  # the name already says the suite
    if not (selector.pattern or specificity(selector.field_values()) or "cause" in table):
        raise fail("a suite alone selects nothing: add structured fields or a pattern", "suite")
    return dataclasses.replace(selector, suite=suite)


def _review(table: Mapping[str, Any], fail: Any) -> dt.date | None:
    value = table.get("review")
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            pass
    raise fail(f"{value!r} is not a date (write review = 2026-12-31)", "review")


def _unknown(key: str, allowed: Sequence[str], path: Path, line: int, what: str) -> None:
    hint = did_you_mean(key, allowed)
    raise SkiplistError(
        f"{key!r} is not {what}{hint}; allowed: {', '.join(allowed)}",
        file=path,
        line=line,
        field=key,
    )


def _top_line(sections: list[Section], key: str) -> int:
    return sections[0].keys.get(key) or _section_line(sections, key)


def _section_line(sections: list[Section], name: str) -> int:
    return next((s.line for s in sections if s.name == name), 1)
