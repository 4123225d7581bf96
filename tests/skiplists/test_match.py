"""The batched matcher used at collection picks the entry that ``match_all`` ranks first."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import skiplists
from conformance.model import TestIdentity
from skiplists import SkiplistError

FILES = ("test_ops.py", "test_nn.py")
CLASSES = ("TestCommon", "TestNN")
TEMPLATES = ("test_out", "test_variant_consistency", "test_conv")
OPS = ("add", "mul", "nn.functional.conv2d", "")
DTYPES = ("float32", "float16", "int64", "")
TIERS = ("xfail", "skip", "deselect")


@st.composite
def identities(draw: st.DrawFn) -> TestIdentity:
    file, test_class = draw(st.sampled_from(FILES)), draw(st.sampled_from(CLASSES))
    template, op = draw(st.sampled_from(TEMPLATES)), draw(st.sampled_from(OPS))
    dtype = draw(st.sampled_from(DTYPES))
    name = "_".join(part.replace(".", "_") for part in (template, op, dtype) if part)
    test_id = f"{file}::{test_class}::{name}"
    return TestIdentity(
        nodeid=test_id,
        test_id=test_id,
        file=file,
        test_class=test_class,
        template=template,
        op=op,
        dtype=dtype,
    )


@st.composite
def selectors(draw: st.DrawFn, tests: list[TestIdentity]) -> str:
    test = draw(st.sampled_from(tests))
    kind = draw(st.sampled_from(["test_id", "fields", "pattern", "loose pattern"]))
    if kind == "test_id":
        return f'test_id = "{test.test_id}"'
    if kind == "pattern":  # confined to one file by its literal prefix
        escaped = test.file.replace(".", "\\.")
        return f"pattern = '{escaped}::{test.test_class}::{test.template}.*'"
    if kind == "loose pattern":
        return f"pattern = '.*{draw(st.sampled_from(TEMPLATES))}.*'"
    lines = []
    for key, value in (
        ("file", test.file),
        ("class", test.test_class),
        ("template", test.template),
        ("op", test.op),
    ):
        if value and draw(st.booleans()):
            lines.append(f'{key} = "{value}"')
    if test.dtype and (draw(st.booleans()) or not lines):
        lines.append(f'dtypes = ["{test.dtype}"]')
    assume(lines)
    return "\n".join(lines)


@st.composite
def layered_lists(draw: st.DrawFn) -> tuple[list[str], list[TestIdentity]]:
    tests = draw(st.lists(identities(), min_size=1, max_size=30))
    layers = []
    for _ in range(draw(st.integers(1, 2))):
        blocks = []
        for index, selector in enumerate(draw(st.lists(selectors(tests), max_size=12))):
            tier = draw(st.sampled_from(TIERS))
            blocks.append(
                f'[[skip]]\n{selector}\ntier = "{tier}"\ncategory = "known_bug"\n'
                f'reason = "entry {index}"\n'
            )
        layers.append("\n".join(blocks))
    return layers, tests


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layered_lists())
def test_match_many_picks_what_match_all_ranks_first(
    case: tuple[list[str], list[TestIdentity]],
) -> None:
    layers, tests = case
    with tempfile.TemporaryDirectory() as scratch:
        paths = []
        for index, text in enumerate(layers):
            path = Path(scratch) / f"layer{index}.toml"
            path.write_text(text, encoding="utf-8")
            paths.append(path)
        try:
            skiplist = skiplists.load(paths, backend="emu", torch_version="2.13.0")
        except SkiplistError:
            assume(False)  # duplicates within a layer: the loader's business, tested elsewhere
    batched = skiplist.match_many(tests)
    assert [skiplist.match(test) for test in tests] == batched
    for test, entry in zip(tests, batched, strict=True):
        every = skiplist.match_all(test)
        assert (entry is None) == (not every)
        if entry is not None:
            assert entry.rank == every[0].rank
