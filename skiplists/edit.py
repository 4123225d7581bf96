"""Rewriting a skiplist file while keeping every comment and the layout of untouched entries.

Edits work on the text, one entry block at a time: a block is an entry's ``[[skip]]``
header, its keys, and the comment lines directly above the header (a comment belongs to
the entry below it). Inside a block, values are rewritten with tomlkit, which keeps the
block's own comments; new entries are rendered with tomlkit too. Every result is parsed
again before it is returned, so a tool never writes a file the loader would reject.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import tomlkit

from skiplists.errors import SkiplistError
from skiplists.loader import parse_text
from skiplists.tomllines import scan

__all__ = ["COMMENT", "SkiplistText", "render_entries", "unified_diff"]

MARK_PREFIX = "# passes:"
#: The key of an entry to render whose value is a comment line, not a TOML key.
COMMENT = "#"


class SkiplistText:
    """One file's text and its entry blocks, with edits addressed by entry index."""

    def __init__(self, text: str, path: Path) -> None:
        self.path = path
        self.lines = text.splitlines()
        self.trailing_newline = text.endswith("\n") or not text
        self._blocks = self._find_blocks()
        self._removed: set[int] = set()
        self._replaced: dict[int, list[str]] = {}
        self._marks: dict[int, str] = {}
        self._appended: list[str] = []

    @classmethod
    def read(cls, path: Path) -> SkiplistText:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        return cls(text, path)

    def _find_blocks(self) -> list[tuple[int, int, int]]:
        """(first line, header line, last line), 0-based, for every [[skip]] block."""
        blocks = []
        for section in scan("\n".join(self.lines)):
            if section.name != "skip" or not section.array:
                continue
            header = section.line - 1
            first = header
            while first > 0 and self.lines[first - 1].lstrip().startswith("#"):
                first -= 1
            last = section.end_line - 1
            # Comments and blank lines at the end belong to whatever follows.
            while last > header and (
                not self.lines[last].strip() or self.lines[last].lstrip().startswith("#")
            ):
                last -= 1
            blocks.append((first, header, last))
        return blocks

    def remove(self, index: int) -> None:
        """Remove entry ``index`` with its leading comments."""
        self._removed.add(index)

    def mark(self, index: int, note: str) -> None:
        """Put ``# passes: note`` above entry ``index``, replacing an earlier such mark."""
        self._marks[index] = f"{MARK_PREFIX} {note}"

    def drop_test_ids(self, index: int, test_ids: Iterable[str]) -> None:
        """Remove test_ids from entry ``index``'s list; the entry goes when none is left."""
        _first, header, last = self._blocks[index]
        block = tomlkit.parse("\n".join(self.lines[header : last + 1]))
        table = block["skip"][0]
        drop = set(test_ids)
        current = table["test_id"]
        kept = [t for t in ([current] if isinstance(current, str) else current) if t not in drop]
        if not kept:
            self.remove(index)
            return
        if isinstance(current, str):
            return
        for position in reversed(range(len(current))):
            if current[position] in drop:
                del current[position]
        self._replaced[index] = tomlkit.dumps(block).rstrip("\n").splitlines()

    def append(self, entries: Sequence[Mapping[str, Any]], comment: str) -> None:
        """Add entries at the end under a ``# comment`` line."""
        if entries:
            self._appended.extend(["", f"# {comment}", *render_entries(entries).splitlines()])

    def text(self) -> str:
        """The edited text, checked by the loader."""
        out: list[str] = []
        position = 0
        for index, (first, header, last) in enumerate(self._blocks):
            out.extend(self.lines[position:first])
            position = last + 1
            if index in self._removed:
                # Also drop one blank separator line so removals leave no gaps.
                if position < len(self.lines) and not self.lines[position].strip():
                    position += 1
                continue
            leading = self.lines[first:header]
            if index in self._marks:
                leading = [line for line in leading if not line.startswith(MARK_PREFIX)]
                leading.append(self._marks[index])
            out.extend(leading)
            out.extend(self._replaced.get(index, self.lines[header : last + 1]))
        out.extend(self.lines[position:])
        if self._appended:
            while out and not out[-1].strip():
                out.pop()
            out.extend(self._appended if out else self._appended[1:])
        text = "\n".join(out) + ("\n" if out and (self.trailing_newline or self._appended) else "")
        try:
            parse_text(text, self.path)
        except SkiplistError as exc:  # a bug in an edit, never the user's input
            raise SkiplistError(f"edit would break the file: {exc}", file=self.path) from None
        return text


def render_entries(entries: Sequence[Mapping[str, Any]]) -> str:
    """TOML text for entries as ``[[skip]]`` tables, keys in the order given; a key
    ``COMMENT`` puts its text as a comment line first in the table."""
    document = tomlkit.document()
    tables = tomlkit.aot()
    for entry in entries:
        table = tomlkit.table()
        for key, value in entry.items():
            if value in ("", None, [], ()):
                continue
            if key == COMMENT:
                table.add(tomlkit.comment(str(value)))
                continue
            if isinstance(value, (list, tuple)) and len(value) > 1:
                array = tomlkit.array()
                array.extend(value)
                table.add(key, array.multiline(True))  # one test_id a line: diffs stay small
            else:
                table.add(key, list(value) if isinstance(value, tuple) else value)
        tables.append(table)
    document.add("skip", tables)
    return tomlkit.dumps(document)


def unified_diff(old: str, new: str, path: Path) -> str:
    """A unified diff between two versions of a file, "" when they are equal.

    Paths are relative to the working directory when the file is under it (so
    ``git apply`` and ``patch -p1`` take the diff as it is)."""
    try:
        name = path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        name = path.as_posix().lstrip("/")
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"a/{name}",
            tofile=f"b/{name}",
        )
    )
