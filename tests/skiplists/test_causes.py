"""Cause entries: one entry per missing lowering or unsupported feature, applied at run time
to the failures the classifier reads as that cause."""

from __future__ import annotations

import sys
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
        '[[skip]]\ncause = "aten::_cslt_compress"\nreason = "no cslt_compress"\n\n'
        '[[skip]]\ncause = "aten::_cslt_compress"\ntemplate = "test_out"\nreason = "narrower"\n\n'
        '[[skip]]\ncause = "forward_ad"\ntier = "xfail"\ncategory = "unsupported_feature"\n'
        'reason = "no dual tensors"\n\n'
        '[[skip]]\ncause = "cuda_call"\nreason = "torch calls torch.cuda"\n',
    )
    broad, narrow, feature, torch_limit = skiplist.causes
    assert (broad.tier, broad.category, broad.detail) == (
        "xfail",
        "missing_lowering",
        "aten::_cslt_compress",
    )
    assert (feature.category, feature.detail) == ("unsupported_feature", "forward_ad")
    assert (torch_limit.category, torch_limit.detail) == ("torch_limitation", "cuda_call")
    out, other = (
        identity("test_out", "_cslt_compress"),
        identity("test_compare_cpu", "_cslt_compress"),
    )
    assert skiplist.match(out) is None  # nothing applies at collection
    assert skiplist.match_cause(out, "missing_lowering", "aten::_cslt_compress") is narrow
    assert skiplist.match_cause(other, "missing_lowering", "aten::_cslt_compress") is broad
    assert skiplist.match_cause(other, "missing_lowering", "aten::_cslt") is None
    assert skiplist.match_cause(other, "numerical_mismatch", "") is None
    assert skiplist.match_cause(other, "unsupported_feature", "forward_ad") is feature
    # The file is for the embedded suite: an upstream test is not explained by it.
    upstream = identity("test_out", "_cslt_compress", suite="upstream")
    assert skiplist.match_cause(upstream, "missing_lowering", "aten::_cslt_compress") is None
    assert skiplist.match_cause(other, "torch_limitation", "cuda_call") is torch_limit
    assert skiplist.causes_for(out) == [narrow, broad, feature, torch_limit]  # fmt: skip


@pytest.mark.parametrize(
    ("entry", "field", "message"),
    [
        ('cause = "cslt_compress"', "cause", "neither an operator overload"),
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


def write_run(run_dir: Path, rows: list[tuple[str, str, str, str]], suite: str = "embedded"):
    """A finished emu run: rows of (test_id, outcome, category, detail)."""
    from conformance.model import ResultRecord, RunMeta
    from conformance.store import RunWriter

    writer = RunWriter(run_dir, RunMeta(run_id=run_dir.name, backend="emu", suite=suite))
    for test_id, outcome, category, detail, *entry in rows:
        file, test_class, name = test_id.split("::")
        template = "test_" + name.split("_")[1]
        writer.write(
            ResultRecord(
                run_id=run_dir.name, nodeid=test_id, test_id=test_id, file=file,
                test_class=test_class, template=template, suite=suite, device="emu",
                outcome=outcome, category=category, detail=detail, message=f"{detail} failed",
                skip_entry=entry[0] if entry else "",
            )
        )  # fmt: skip
    writer.close()


OPS = "embedded/test_ops.py::TestCommon::"
GRAD = "embedded/test_ops_gradients.py::TestFwdGradients::"
ROWS = [
    *((OPS + f"test_out_cslt_compress{i}_float32", "failed", "missing_lowering", "aten::_cslt_compress") for i in range(4)),
    (OPS + "test_compare_cslt_compress_float32", "failed", "missing_lowering", "aten::_cslt_compress"),
    *((GRAD + f"test_forward_op{i}_float64", "failed", "unsupported_feature", "forward_ad") for i in range(3)),
    (OPS + "test_compare_sin_float32", "failed", "numerical_mismatch", "values"),
    (OPS + "test_compare_cos_float32", "failed", "numerical_mismatch", "values"),
    (OPS + "test_out_sin_float32", "crashed", "crash", ""),
    (OPS + "test_out_add_float32", "passed", "", ""),
]  # fmt: skip


def skiplist_cli(*argv: str | Path) -> int:
    from conformance.cli import main

    return main(["skiplist", *map(str, argv)])


def test_update_writes_one_entry_per_cause_and_exact_entries_for_the_rest(tmp_path: Path, capsys):
    write_run(tmp_path / "run", ROWS)
    target = tmp_path / "emu.toml"
    target.write_text('[skiplist]\nbackend = "emu"\nsuite = "embedded"\n')
    common = ("--backend", "emu", "--skiplist", target, "--to", target)
    assert skiplist_cli("update", "--from", tmp_path / "run", *common) == 0
    text = target.read_text()
    skiplist = skiplists.load([target], backend="emu", torch_version="2.13.0")
    causes = skiplist.causes
    assert [c.cause for c in causes] == ["aten::_cslt_compress", "forward_ad"]  # most tests first
    assert "# 5 tests in 2 templates in run run" in text and "# 3 tests in 1 template in" in text
    assert 'suite = "embedded"' not in text.split("[[skip]]", 1)[1]  # the file says it
    others = [e for e in skiplist.entries if not e.is_cause]
    # at most distinct overloads + features + groups without a cause
    assert len(skiplist.entries) == 2 + 2
    assert {(e.tier, e.category) for e in others} == {
        ("xfail", "numerical_mismatch"),
        ("deselect", "crash"),
    }
    assert "stale" in capsys.readouterr().err
    # The same run again: every failure is explained now, nothing is added or marked.
    before = target.read_text()
    assert skiplist_cli("update", "--from", tmp_path / "run", *common) == 0
    assert target.read_text() == before


def test_update_prunes_a_cause_entry_that_explained_no_failure(tmp_path: Path, capsys):
    write_run(tmp_path / "run", ROWS)
    target = tmp_path / "emu.toml"
    target.write_text(
        '[skiplist]\nsuite = "embedded"\n\n'
        '[[skip]]\ncause = "aten::_cslt_compress"\nreason = "explains five"\n\n'
        '[[skip]]\ncause = "aten::_cslt_sparse_mm"\nreason = "explains none"\n\n'
        '[[skip]]\ncause = "aten::_cslt_sparse_mm"\nfile = "embedded/test_linalg.py"\nreason = "not run"\n\n'
        '[[skip]]\ncause = "cuda_call"\nreason = "torch\'s, never reached here"\n'
    )
    common = ("--backend", "emu", "--skiplist", target, "--to", target)
    assert skiplist_cli("update", "--from", tmp_path / "run", *common, "--dry-run") == 0
    out = capsys.readouterr()
    assert "emu.toml:8: cause aten::_cslt_sparse_mm: explained no failure in run run" in out.err
    assert "test_linalg" not in out.err  # the run holds none of its tests: no verdict
    assert "cuda_call" not in out.err  # a torch limitation is not stale for its absence
    # Without --prune it is only said: a run of part of the suite says little of an entry.
    assert "explained no failure" not in out.out
    assert skiplist_cli("update", "--from", tmp_path / "run", *common, "--prune") == 0
    kept = skiplists.load([target], backend="emu", torch_version="2.13.0")
    reasons = [e.reason for e in kept.causes]
    assert reasons[:3] == ["explains five", "not run", "torch's, never reached here"]
    assert "explains none" not in reasons
    assert [e.cause for e in kept.causes][3:] == ["forward_ad"]  # the run's new cause, added


def test_lint_knows_causes(tmp_path: Path, capsys):
    write_run(tmp_path / "run", ROWS)
    target = tmp_path / "emu.toml"
    target.write_text(
        '[skiplist]\nsuite = "embedded"\n\n'
        '[[skip]]\ncause = "aten::_cslt_compress"\nreason = "fine"\n\n'
        '[[skip]]\ncause = "aten::no_such_op.out"\nreason = "a typo"\n\n'
        '[[skip]]\ncause = "forward_ad"\nfile = "embedded/test_ops_gradients.py"\nreason = "covered"\n\n'
        '[[skip]]\nfile = "embedded/test_ops_gradients.py"\ntier = "xfail"\n'
        'category = "known_bug"\nreason = "the whole file"\n\n'
        '[[skip]]\ncause = "forward_ad"\nfile = "embedded/test_modules.py"\nreason = "modules not run"\n'
    )
    assert skiplist_cli("lint", "--from", tmp_path / "run", "--skiplist", target) == 1
    out = capsys.readouterr().out
    assert "emu.toml:8: unknown-op: aten::no_such_op.out is not an overload of this torch" in out
    assert "emu.toml:12: shadowed: cause forward_ad: exact or structured entries apply" in out
    assert "emu.toml:4:" not in out  # _cslt_compress: a real overload, free tests, not lowered
    assert "emu.toml:23" not in out  # its file was not collected: no verdict


LOWERED = """
import sys
import torch_emu
from torch_emu.lowering.registry import lower
from conformance.cli import main

lower("aten::_cslt_compress")  # the contributor lowers the op the entry names
sys.exit(main(["skiplist", *sys.argv[1:]]))
"""


@pytest.mark.slow
def test_a_cause_whose_op_gets_lowered_is_reported_by_lint_and_pruned_by_update(tmp_path: Path):
    import subprocess
    import sys

    pytest.importorskip("torch_emu")
    write_run(tmp_path / "run", ROWS)
    target = tmp_path / "emu.toml"
    target.write_text(
        '[skiplist]\nsuite = "embedded"\n\n'
        '[[skip]]\ncause = "aten::_cslt_compress"\nreason = "no cslt_compress"\n\n'
        '[[skip]]\ncause = "forward_ad"\nreason = "no dual tensors"\n'
    )

    def skiplist_with_cslt_compress_lowered(*argv: str | Path) -> subprocess.CompletedProcess:
        command = [sys.executable, "-c", LOWERED, *map(str, argv)]
        return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)

    lint = skiplist_with_cslt_compress_lowered("lint", "--backend", "emu", "--skiplist", target)
    assert lint.returncode == 1, lint.stderr
    assert (
        "emu.toml:4: lowered: aten::_cslt_compress has a lowering now (native python)"
        in lint.stdout
    )
    assert "forward_ad" not in lint.stdout
    common = ("--from", tmp_path / "run", "--skiplist", target, "--to", target, "--prune")
    update = skiplist_with_cslt_compress_lowered("update", *common)
    assert update.returncode == 0, update.stderr
    assert "cause aten::_cslt_compress: aten::_cslt_compress has a lowering now" in update.stderr
    kept = skiplists.load([target], backend="emu", torch_version="2.13.0")
    assert [e.cause for e in kept.causes] == ["forward_ad"]


@pytest.mark.slow  # parse_nodeid loads torch's op database
def test_explain_says_which_cause_entry_applied_and_what_the_classifier_read(
    tmp_path: Path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "emu.toml"
    target.write_text('[[skip]]\ncause = "aten::_cslt_compress"\nreason = "no cslt_compress"\n')
    xfailed = (
        OPS + "test_out_cslt_compress0_float32",
        "xfailed",
        "missing_lowering",
        "aten::_cslt_compress",
        "emu.toml:1",
    )
    write_run(tmp_path / "run", [xfailed, *ROWS[5:]])  # fmt: skip
    common = ("--skiplist", target, "--from", tmp_path / "run")
    assert skiplist_cli("explain", OPS + "test_out_cslt_compress0_float32", *common) == 0
    out = capsys.readouterr().out
    assert "no entry applies at collection" in out
    assert "emu.toml:1  cause aten::_cslt_compress: no cslt_compress" in out
    assert "in run run: xfailed (missing_lowering aten::_cslt_compress)" in out
    assert "cause entry emu.toml:1 applied: the classifier read missing_lowering" in out
    assert "aten::_cslt_compress from the failure: aten::_cslt_compress failed" in out
    assert skiplist_cli("explain", OPS + "test_compare_sin_float32", *common) == 0
    out = capsys.readouterr().out
    assert "the classifier read numerical_mismatch values (no cause)" in out


@pytest.mark.slow
def test_sweep_reruns_what_a_cause_entry_explained_and_proposes_it_for_removal_once_fixed(
    pytester: pytest.Pytester,
):
    pytester.makepyfile(test_cause=FIXTURE)
    (pytester.path / "causes.toml").write_text(CAUSES)
    common = ("--device", "cpu", "--skiplist", "causes.toml", "-p", "no:cacheprovider")
    pytester.runpytest_subprocess("test_cause.py", "--run-dir", "run", *common)
    # The kernel "lands": the test no longer hits the missing op.
    fixed = FIXTURE.replace(
        "torch.ops.aten._cslt_compress(torch.ones(4, 4, device=device, dtype=dtype))", "pass"
    ).replace(
        "self.assertEqual(torch.ones(2, device=device), torch.zeros(2, device=device))",
        "self.assertEqual(torch.ones(2, device=device), torch.ones(2, device=device))",
    )
    (pytester.path / "test_cause.py").write_text(fixed)
    sweep = pytester.run(
        sys.executable, "-m", "conformance", "skiplist", "sweep", "--from", "run",
        "--skiplist", "causes.toml", "--rootdir", str(pytester.path),
    )  # fmt: skip
    assert sweep.ret == 0, sweep.stderr.str()
    out = sweep.stdout.str()
    assert '-cause = "aten::_cslt_compress"' in out and '-template = "test_thing"' in out
    # and the entry naming test_fixed, which passed (a strict xpass) in the run already
    assert '-test_id = "test_cause.py::TestCause::test_fixed"' in out
    assert "2 cause entr(y/ies) whose tests no longer fail of it" in sweep.stderr.str()


def test_update_takes_runs_that_together_cover_the_suite(tmp_path: Path, capsys):
    # a: the _cslt_compress failures, and a mismatch test that passes with a's fewer samples
    write_run(tmp_path / "a", [*ROWS[:5], (OPS + "test_compare_sin_float32", "passed", "", "")])
    write_run(tmp_path / "b", ROWS[5:])  # the others
    target = tmp_path / "emu.toml"
    target.write_text('[skiplist]\nsuite = "embedded"\n')
    runs = ("--from", tmp_path / "a", "--from", tmp_path / "b")
    common = ("--backend", "emu", "--skiplist", target, "--to", target)
    assert skiplist_cli("update", *runs, *common) == 0
    text = target.read_text()
    assert "# 5 tests in 2 templates in runs a, b" in text and "# added from runs a, b on" in text
    skiplist = skiplists.load([target], backend="emu", torch_version="2.13.0")
    assert [c.cause for c in skiplist.causes] == ["aten::_cslt_compress", "forward_ad"]
    exact = {e.selector.test_ids: e for e in skiplist.entries if e.selector.test_ids}
    sin, cos = (exact[(OPS + f"test_compare_{op}_float32",)] for op in ("sin", "cos"))
    assert not sin.strict and sin.reason.endswith("(passes in another of the runs)")
    assert cos.strict  # failed wherever it ran
