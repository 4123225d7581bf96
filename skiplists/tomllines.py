"""Line numbers for TOML tables and keys, which TOML parsers do not report, and the small
helpers every strict TOML reader of the project shares to name where a value went wrong.

The scanner walks the text once and follows string state (basic, literal and both
multi-line forms), so a ``[[skip]]`` written inside a multi-line string is not taken for a
header. It never raises: the parser proper reports syntax errors, this only locates.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["Section", "at", "did_you_mean", "error_line", "scan"]

_HEADER = re.compile(r"\s*(\[\[?)\s*([^\]]*?)\s*\]\]?")
_KEY = re.compile(r"""\s*("(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)\s*[.=]""")


@dataclass
class Section:
    """A table header (``name`` is "" for the top level) and the lines of its keys."""

    name: str
    array: bool
    line: int
    end_line: int = 0  # last line that belongs to the section
    keys: dict[str, int] = field(default_factory=dict)


def scan(text: str) -> list[Section]:
    """The sections of a TOML text in order; the first is the top level (line 1)."""
    sections = [Section(name="", array=False, line=1)]
    in_multiline: str | None = None  # the closing delimiter while inside a multi-line string
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        start = 0
        if in_multiline is not None:
            close = _find_close(line, 0, in_multiline)
            if close < 0:
                continue
            in_multiline, start = None, close
        elif (header := _HEADER.match(line)) is not None:
            sections[-1].end_line = number - 1
            sections.append(Section(_unquote(header.group(2)), header.group(1) == "[[", number))
            start = header.end()
        elif (key := _KEY.match(line)) is not None:
            sections[-1].keys.setdefault(_unquote(key.group(1)), number)
            start = key.end()
        in_multiline = _trailing_multiline(line, start)
    sections[-1].end_line = len(lines)
    return sections


def _unquote(name: str) -> str:
    if len(name) >= 2 and name[0] == name[-1] and name[0] in "\"'":
        return name[1:-1]
    return name


def _find_close(line: str, start: int, delimiter: str) -> int:
    """The index just past the closing delimiter, or -1 when the string goes on."""
    index = start
    while True:
        found = line.find(delimiter, index)
        if found < 0:
            return -1
        if delimiter == '"""' and _escaped(line, found):
            index = found + 1
            continue
        return found + 3


def _escaped(line: str, index: int) -> bool:
    backslashes = 0
    while index - backslashes - 1 >= 0 and line[index - backslashes - 1] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def _trailing_multiline(line: str, start: int) -> str | None:
    """The delimiter of a multi-line string opened but not closed on this line, if any."""
    index = start
    while index < len(line):
        char = line[index]
        if char == "#":
            return None
        if char in "\"'":
            triple = char * 3
            if line.startswith(triple, index):
                close = _find_close(line, index + 3, triple)
                if close < 0:
                    return triple
                index = close
                continue
            index = _skip_string(line, index + 1, char)
            continue
        index += 1
    return None


def _skip_string(line: str, index: int, quote: str) -> int:
    while index < len(line):
        char = line[index]
        if quote == '"' and char == "\\":
            index += 2
            continue
        if char == quote:
            return index + 1
        index += 1
    return index


def at(path: object, line: int) -> str:
    """``path:line``, or the path alone when the line is not known (0)."""
    return f"{path}:{line}" if line else str(path)


def error_line(exc: Exception) -> int:
    """The line a TOML parser's error names (tomllib's ``lineno``, tomlkit's ``line``, or
    ``line N`` in its message), 0 when it names none."""
    line = getattr(exc, "lineno", None) or getattr(exc, "line", None)
    if isinstance(line, int):
        return line
    found = re.search(r"line (\d+)", str(exc))
    return int(found.group(1)) if found else 0


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, "" when none is close."""
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
