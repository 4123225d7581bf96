"""The located error every skiplist problem raises."""

from __future__ import annotations

from pathlib import Path

from conformance.errors import ConfigError

__all__ = ["SkiplistError"]


class SkiplistError(ConfigError):
    """A skiplist file is wrong: the message names the file, the line and the field.

    ``file`` is the path as given, ``line`` is 1-based (0 when the problem is not on a
    line, such as a missing file), ``field`` is the entry key at fault ("" for syntax).
    """

    def __init__(self, message: str, *, file: str | Path, line: int = 0, field: str = "") -> None:
        self.file = str(file)
        self.line = line
        self.field = field
        where = f"{self.file}:{line}" if line else self.file
        if field:
            message = f"field {field!r}: {message}"
        super().__init__(message, where=where)
