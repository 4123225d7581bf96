"""Test messages: the key failures are grouped by, and the text every output shows.

Messages are raw text from the test run and may hold anything: markup, control
characters, megabytes of output. Every output goes through :func:`printable` (a bounded,
visible rendering); HTML escaping is the template engine's job (autoescape is on).
"""

from __future__ import annotations

import re

__all__ = ["DISPLAY_LIMIT", "normalize_message", "printable"]

#: Characters of one message shown in a page; the rest is counted, not shown.
DISPLAY_LIMIT = 4000

# C0 controls except tab and newline, DEL, C1 controls, and the bidi overrides that can
# make text read differently from what it is.
_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]"
)
_ERROR_LINE = re.compile(r"^\s*(?:[\w.]+\.)?(\w*(?:Error|Exception|Warning|Failure)\b.*)$", re.M)
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_NUMBER = re.compile(r"(?<![A-Za-z_])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_QUOTED = re.compile(r"'[^'\n]{0,200}'|\"[^\"\n]{0,200}\"")
_OVERLOAD = re.compile(r"aten::[\w.]+")
_SPACE = re.compile(r"\s+")
_KEY_LIMIT = 200


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, limit: int = DISPLAY_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, control characters shown as ``\\xNN``
    escapes, and a note saying how much was cut. Safe to put in HTML once escaped, and
    in XML as is (after XML escaping)."""
    if text is None:
        return ""
    text = str(text)
    cut = len(text) - limit
    if cut > 0:
        text = text[:limit]
    text = _CONTROL.sub(_visible, text)
    if cut > 0:
        text += f"\n… ({cut:,} more characters not shown)"
    return text


def normalize_message(text: str) -> str:
    """The key failures are grouped by: the exception line of a message (the first line
    that names an error, else the first line), with numbers, addresses, quoted values
    and overload names replaced, so failures that differ only in those group together."""
    if not text:
        return ""
    head = text[:20000]
    match = _ERROR_LINE.search(head)
    line = match.group(1) if match else head.strip().split("\n", 1)[0]
    line = _OVERLOAD.sub("aten::<op>", line)
    line = _QUOTED.sub("'…'", line)
    line = _HEX.sub("<addr>", line)
    line = _NUMBER.sub("N", line)
    line = _SPACE.sub(" ", _CONTROL.sub("", line)).strip()
    return line[:_KEY_LIMIT]
