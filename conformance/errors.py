"""The one exception base every part raises for bad input or configuration."""

from __future__ import annotations

__all__ = ["ConfigError", "ConformanceError"]


class ConformanceError(Exception):
    """A problem the user can fix. The CLI prints the message and exits with ``exit_code``."""

    exit_code = 2


class ConfigError(ConformanceError):
    """Bad input: names what is wrong and where (file, line, field or option)."""

    def __init__(self, message: str, *, where: str = "") -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)
