"""The loader, fuzzed: whatever the text, it loads or raises SkiplistError, nothing else."""

from __future__ import annotations

import contextlib
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skiplists import SkiplistError
from skiplists.loader import ENTRY_KEYS, HEADER_KEYS, parse_text
from skiplists.skiplist import Skiplist
from skiplists.tomllines import scan

PATH = Path("fuzz.toml")

KEYS = st.sampled_from([*ENTRY_KEYS, *HEADER_KEYS, "tiers", "skip", "class ", '"class"', "a.b"])
VALUES = st.one_of(
    st.sampled_from(
        [
            '"xfail"',
            '"skip"',
            '"deselect"',
            '"known_bug"',
            '"crash"',
            '"a.py::T::t"',
            "true",
            '["float16"]',
            '["a.py::T::t", "a.py::T::t"]',
            "2026-01-01",
            '"2026-13-01"',
            "1",
            "'(unclosed'",
            "'.*'",
            "'a\\\\1'",
            '"""multi\n[[skip]]\nline"""',
            "{ x = 1 }",
            "[]",
            '"aten::add.Tensor"',
            '"https://x.org"',
            '"  padded "',
            '"PRIVATEUSE1"',
        ]
    ),
    st.text(max_size=12).map(lambda s: '"' + s.replace("\\", "").replace('"', "") + '"'),
)
HEADERS = st.sampled_from(["[[skip]]", "[skiplist]", "[skip]", "[[skip.sub]]", "[other]", ""])


@st.composite
def skiplist_texts(draw: st.DrawFn) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 5))):
        lines.append(draw(HEADERS))
        for _ in range(draw(st.integers(0, 7))):
            lines.append(f"{draw(KEYS)} = {draw(VALUES)}")
    text = "\n".join(lines)
    if draw(st.booleans()):  # and some raw damage
        position = draw(st.integers(0, len(text)))
        text = text[:position] + draw(st.text(max_size=6)) + text[position:]
    return text


def load_text(text: str) -> None:
    entries = parse_text(text, PATH, backend="emu", torch_version="2.13.0")
    Skiplist(entries)  # duplicates and conflicts are found here


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(skiplist_texts())
def test_structured_garbage_only_raises_skiplist_error(text: str) -> None:
    try:
        load_text(text)
    except SkiplistError as exc:
        assert exc.file == "fuzz.toml"
        assert 0 <= exc.line <= max(1, text.count("\n") + 2)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_only_raises_skiplist_error(text: str) -> None:
    with contextlib.suppress(SkiplistError):
        load_text(text)
    scan(text)  # the line scanner never raises either
