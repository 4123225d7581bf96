"""Cause entries: one entry per missing lowering or unsupported feature, applied at run time
to the failures the classifier reads as that cause."""

from __future__ import annotations

from pathlib import Path

import pandas  # noqa: F401 (loaded before pytester, whose module snapshot would drop it)
import pyarrow.parquet  # noqa: F401
import pytest
import torch  # noqa: F401

import skiplists
from conformance.model import TestIdentity
from conformance.store import read_run
from skiplists import SkiplistError

FIXTURE = """
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestCause(TestCase):
    @dtypes(torch.float32, torch.float64)
    def test_thing(self, device, dtype):
        if dtype == torch.float32:  # a kernel this device does not have
            torch.ops.aten._cslt_compress(torch.ones(4, 4, device=device, dtype=dtype))
        self.assertEqual(torch.ones(2, device=device), torch.zeros(2, device=device))

    def test_other_missing(self, device):
        torch.ops.aten._cslt_compress(torch.ones(4, 4, device=device))

    def test_fixed(self, device):
        self.assertEqual(torch.ones(2, device=device).sum().item(), 2.0)

    def test_listed(self, device):
        torch.ops.aten._cslt_compress(torch.ones(4, 4, device=device))


instantiate_device_type_tests(TestCause, globals())
"""

CAUSES = """\
[[skip]]
cause = "aten::_cslt_compress"
template = "test_thing"
reason = "no compress kernel"

[[skip]]
cause = "aten::_cslt_compress"
test_id = "test_cause.py::TestCause::test_fixed"
reason = "was missing compress"

[[skip]]
test_id = "test_cause.py::TestCause::test_listed"
tier = "xfail"
category = "known_bug"
reason = "an exact entry wins over any cause"
"""

ID = "test_cause.py::TestCause::"


@pytest.mark.parametrize("workers", [[], ["-n", "1"]])
def test_a_cause_entry_expects_only_the_failures_it_explains(pytester: pytest.Pytester, workers):
    pytester.makepyfile(test_cause=FIXTURE)
    (pytester.path / "causes.toml").write_text(CAUSES)
    result = pytester.runpytest_subprocess(
        "test_cause.py", "--device", "cpu", "--run-dir", "run", "--skiplist", "causes.toml",
        "-p", "no:cacheprovider", *workers,
    )  # fmt: skip
    assert result.ret == 1
    _, frame = read_run(pytester.path / "run")
    rows = {
        r.test_id.removeprefix(ID): (r.outcome, r.category, r.detail, Path(r.skip_entry).name)
        for r in frame.itertuples()
    }
    assert rows == {
        # the missing overload the entry names, in the template it narrows to: expected
        "test_thing_float32": ("xfailed", "missing_lowering", "aten::_cslt_compress", "causes.toml:1"),
        # the same template failing for another reason: still a failure
        "test_thing_float64": ("failed", "numerical_mismatch", "values", ""),
        # the same cause outside the entry's narrowing: a failure
        "test_other_missing": ("failed", "missing_lowering", "aten::_cslt_compress", ""),
        # a test the entry names that passes: a strict xpass, so the fix shows
        "test_fixed": ("xpassed", "missing_lowering", "aten::_cslt_compress", "causes.toml:6"),
        # an exact entry takes precedence
        "test_listed": ("xfailed", "known_bug", "", "causes.toml:11"),
    }  # fmt: skip
    message = frame.set_index("test_id").loc[ID + "test_fixed", "message"]
    assert message.startswith("[XPASS(strict)] missing_lowering[aten::_cslt_compress]")


def load_text(tmp_path: Path, text: str) -> skiplists.Skiplist:
    path = tmp_path / "list.toml"
    path.write_text(text)
    return skiplists.load([path], backend="emu", torch_version="2.13.0")


def identity(template: str, op: str = "", suite: str = "embedded") -> TestIdentity:
    file = "embedded/test_ops.py" if suite == "embedded" else "test_ops.py"
    test_id = f"{file}::TestCommon::{template}_{op}_float32"
    return TestIdentity(
        nodeid=test_id, test_id=test_id, file=file, test_class="TestCommon",
        template=template, op=op, dtype="float32", suite=suite,
    )  # fmt: skip


def test_cause_entries_load_with_their_category_and_detail_from_the_cause(tmp_path: Path):
    skiplist = load_text(
        tmp_path,
        '[skiplist]\nsuite = "embedded"\n\n'
        '[[skip]]\ncause = "aten::lgamma.out"\nreason = "no lgamma"\n\n'
        '[[skip]]\ncause = "aten::lgamma.out"\ntemplate = "test_out"\nreason = "narrower"\n\n'
        '[[skip]]\ncause = "forward_ad"\ntier = "xfail"\ncategory = "unsupported_feature"\n'
        'reason = "no dual tensors"\n',
    )
    broad, narrow, feature = skiplist.causes
    assert (broad.tier, broad.category, broad.detail) == (
        "xfail",
        "missing_lowering",
        "aten::lgamma.out",
    )
    assert (feature.category, feature.detail) == ("unsupported_feature", "forward_ad")
    out, other = identity("test_out", "lgamma"), identity("test_compare_cpu", "lgamma")
    assert skiplist.match(out) is None  # nothing applies at collection
    assert skiplist.match_cause(out, "missing_lowering", "aten::lgamma.out") is narrow
    assert skiplist.match_cause(other, "missing_lowering", "aten::lgamma.out") is broad
    assert skiplist.match_cause(other, "missing_lowering", "aten::lgamma") is None
    assert skiplist.match_cause(other, "numerical_mismatch", "") is None
    assert skiplist.match_cause(other, "unsupported_feature", "forward_ad") is feature
    # The file is for the embedded suite: an upstream test is not explained by it.
    upstream = identity("test_out", "lgamma", suite="upstream")
    assert skiplist.match_cause(upstream, "missing_lowering", "aten::lgamma.out") is None
    assert skiplist.causes_for(out) == [narrow, broad, feature]  # fmt: skip


@pytest.mark.parametrize(
    ("entry", "field", "message"),
    [
        ('cause = "lgamma.out"', "cause", "neither an operator overload"),
        ('cause = "forward-ad"', "cause", "did you mean 'forward_ad'"),
        ('cause = "aten::x.out"\ntier = "skip"', "tier", "its tier is xfail, not 'skip'"),
        ('cause = "aten::x.out"\ncategory = "known_bug"', "category", "is a missing_lowering"),
        ('cause = "aten::x.out"\ndetail = "aten::y.out"', "detail", "the cause names the detail"),
    ],
)
def test_bad_cause_entries_are_named(tmp_path: Path, entry: str, field: str, message: str):
    with pytest.raises(SkiplistError) as caught:
        load_text(tmp_path, f'[[skip]]\n{entry}\nreason = "r"\n')
    assert message in str(caught.value) and field in str(caught.value)


def test_two_cause_entries_for_one_cause_and_narrowing_are_duplicates(tmp_path: Path):
    text = '[[skip]]\ncause = "aten::x.out"\nreason = "r"\n'
    with pytest.raises(SkiplistError, match=r"cause=aten::x\.out duplicates the entry at line 1"):
        load_text(tmp_path, text + "\n" + text)
    # The same narrowing with another cause, or an exact entry, is no duplicate.
    other = '[[skip]]\ncause = "aten::y.out"\nreason = "r"\n'
    assert len(load_text(tmp_path, text + "\n" + other)) == 2
