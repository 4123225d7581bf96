"""The upstream test files the default selection leaves out, and why, read from a data file.

``conformance/data/upstream_exclusions.toml`` (reviewed like code) holds one entry per
excluded file or glob::

    [[exclude]]
    file = "test_cuda*.py"      # a path under test/, or a glob (* within a folder, ** across)
    reason = "needs CUDA"

Loading is strict: a syntax error, an unknown key, a missing or empty field, an unsafe path or
a file listed twice is a ConfigError naming the file, the line, the entry and the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.errors import ConfigError
from skiplists.tomllines import Section, at, did_you_mean, error_line, scan

try:  # the standard library's parser where there is one (3.11+)
    import tomllib as _toml

    _TomlError: type[Exception] = _toml.TOMLDecodeError
except ImportError:  # pragma: no cover - Python 3.10
    import tomlkit as _toml  # type: ignore[no-redef]
    from tomlkit.exceptions import TOMLKitError as _TomlError

__all__ = ["DEFAULT_EXCLUSIONS", "ENTRY_KEYS", "Exclusion", "load_exclusions", "parse_exclusions"]

#: The exclusion list that ships with the harness.
DEFAULT_EXCLUSIONS = Path(__file__).resolve().parent / "data" / "upstream_exclusions.toml"
#: The keys of an ``[[exclude]]`` entry, all required.
ENTRY_KEYS = ("file", "reason")

_TABLE = "exclude"


@dataclass(frozen=True)
class Exclusion:
    """One entry: ``file`` (a path relative to test/, or a glob of one), why, and where."""

    file: str
    reason: str
    line: int = 0


def load_exclusions(path: Path = DEFAULT_EXCLUSIONS) -> tuple[Exclusion, ...]:
    """Every entry of an exclusion file, validated (ConfigError naming file, line, field)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the exclusion list: {exc}", where=str(path)) from None
    return parse_exclusions(text, path)


def parse_exclusions(text: str, path: Path | str = "<exclusions>") -> tuple[Exclusion, ...]:
    """Parse and validate the text of an exclusion file (``path`` only locates errors)."""
    try:
        document: Any = _toml.loads(text)
        if not isinstance(document, dict):  # tomlkit's document on the fallback path
            document = document.unwrap()
    except (_TomlError, ValueError) as exc:
        raise ConfigError(f"TOML syntax error: {exc}", where=at(path, error_line(exc))) from None
    sections = scan(text)
    for key in document:
        if key != _TABLE:
            header = next((s.line for s in sections if s.name == key), 0)
            line = header or sections[0].keys.get(key, 0)
            raise ConfigError(
                f"unknown top-level key {key!r}; the file holds only [[{_TABLE}]] entries",
                where=at(path, line),
            )
    tables = document.get(_TABLE, [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(f"{_TABLE!r} must be an array of tables ([[{_TABLE}]])", where=str(path))
    located = [s for s in sections if s.name == _TABLE and s.array]
    if len(located) != len(tables):  # written as an inline array: point at its key
        line = sections[0].keys.get(_TABLE, 0)
        located = [Section(_TABLE, True, line) for _ in tables]
    seen: dict[str, int] = {}
    entries = []
    for index, (table, section) in enumerate(zip(tables, located, strict=True), start=1):
        entry = _entry(table, index, section, path)
        if entry.file in seen:
            raise ConfigError(
                f"[[{_TABLE}]] entry {index}, field 'file': {entry.file!r} is already excluded "
                f"by entry {seen[entry.file]}",
                where=at(path, entry.line),
            )
        seen[entry.file] = index
        entries.append(entry)
    return tuple(entries)


def _entry(table: dict[str, Any], index: int, section: Section, path: Path | str) -> Exclusion:
    def fail(field: str, message: str) -> ConfigError:
        where = at(path, section.keys.get(field, section.line))
        return ConfigError(f"[[{_TABLE}]] entry {index}, field {field!r}: {message}", where=where)

    for key in table:
        if key not in ENTRY_KEYS:
            hint = did_you_mean(key, ENTRY_KEYS)
            raise fail(key, f"unknown key{hint}; allowed: {', '.join(ENTRY_KEYS)}")
    values = {}
    for key in ENTRY_KEYS:
        if key not in table:
            raise fail(key, "missing; every excluded file needs a file and a reason")
        value = table[key]
        if not isinstance(value, str) or not value.strip():
            raise fail(key, "must be a non-empty string")
        values[key] = value.strip()
    file = values["file"]
    parts = file.split("/")
    if file.startswith("/") or "\\" in file or ".." in parts or "" in parts:
        raise fail("file", f"{file!r} is not a relative path under test/ (a/b/test_x.py)")
    return Exclusion(
        file=file, reason=values["reason"], line=section.keys.get("file", section.line)
    )
