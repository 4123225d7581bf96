"""lint, update, explain, import and export, without pytest runs: runs are written with the
results store, skiplists as files."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

import pandas
import pytest

import skiplists
from conformance.errors import ConformanceError
from conformance.model import RECORD_COLUMNS, ResultRecord, RunMeta
from conformance.store import RunWriter
from skiplists.cli import register
from skiplists.lint import lint
from skiplists.runs import facts_from_frame
from skiplists.update import infer_category

TODAY = dt.date(2026, 11, 29)

SKIPLIST = """\
# Entries for the emu backend.
[skiplist]
backend = "emu"

# cumsum: the out= overload is missing.
[[skip]]
test_id = [
    "test_ops.py::TestCommon::test_out_cumsum_float32",  # the float case
    "test_ops.py::TestCommon::test_out_cumsum_float64",
]
tier = "xfail"
category = "missing_lowering"
detail = "aten::cumsum.out"
reason = "cumsum.out has no lowering yet"

# Half convolutions.
[[skip]]
op = "conv2d"
dtypes = ["float16"]
tier = "skip"
category = "unsupported_dtype"
detail = "float16"
reason = "half convolutions are not emulated"
review = 2026-01-01

[[skip]]
pattern = 'test_ops\\.py::TestCommon::test_noncontiguous_.*'
tier = "xfail"
category = "known_bug"
reason = "strides are copied wrongly"

[[skip]]
test_id = "test_nn.py::TestNN::test_gone"
tier = "deselect"
category = "crash"
reason = "used to abort"
# trailing comment of the file
"""


def record(
    name: str,
    outcome: str,
    *,
    op: str = "",
    dtype: str = "",
    entry: str = "",
    message: str = "",
    category: str = "",
    detail: str = "",
    template: str = "",
) -> ResultRecord:
    file, test_class, test = name.split("::")
    return ResultRecord(
        run_id="run-1",
        nodeid=f"{file}::{test_class}PRIVATEUSE1::{test}",
        test_id=name,
        file=file,
        test_class=test_class,
        template=template or test,
        op=op,
        dtype=dtype,
        device="emu",
        outcome=outcome,
        skip_entry=entry,
        message=message,
        category=category,
        detail=detail,
    )


RECORDS = [
    record("test_ops.py::TestCommon::test_out_cumsum_float32", "xfailed", entry="list.toml:6"),
    record(
        "test_ops.py::TestCommon::test_out_cumsum_float64",
        "xpassed",
        entry="list.toml:6",
        message="[XPASS(strict)] missing_lowering",
    ),
    record(
        "test_ops.py::TestCommon::test_conv_float16",
        "skipped",
        op="conv2d",
        dtype="float16",
        entry="list.toml:17",
    ),
    record(
        "test_ops.py::TestCommon::test_noncontiguous_add_float32", "xpassed", entry="list.toml:26"
    ),
    record(
        "test_ops.py::TestCommon::test_out_cummax_float32",
        "failed",
        template="test_out",
        message="NotImplementedError: Could not run 'aten::cummax.out' with arguments from "
        "the 'emu' backend.",
    ),
    record(
        "test_ops.py::TestCommon::test_out_cummax_float64",
        "failed",
        template="test_out",
        message="NotImplementedError: Could not run 'aten::cummax.out' with arguments from "
        "the 'emu' backend.",
    ),
    record("test_ops.py::TestCommon::test_sort_float32", "crashed", message="Fatal Python error"),
    record("test_ops.py::TestCommon::test_mul_float32", "passed"),
    record("test_nn.py::TestNN::test_linear", "passed"),
]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    """A skiplist file and a finished run on emu."""
    path = tmp_path / "list.toml"
    path.write_text(SKIPLIST, encoding="utf-8")
    run_dir = tmp_path / "run-1"
    writer = RunWriter(run_dir, RunMeta(run_id="run-1", backend="emu", torch_version="2.13.0+cpu"))
    for rec in RECORDS:
        writer.write(rec)
    writer.close(collected=len(RECORDS))
    return path, run_dir


def cli(*argv: str | Path) -> int:
    """Run ``conformance skiplist ...`` as the conformance CLI frame does."""
    parser = argparse.ArgumentParser(prog="conformance")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["skiplist", *map(str, argv)])
    try:
        return int(args.handler(args) or 0)
    except ConformanceError as exc:
        print(f"error: {exc}")
        return exc.exit_code


def test_lint_reports_dead_over_match_review_and_shadowed(
    files: tuple[Path, Path], monkeypatch
) -> None:
    path, _run_dir = files
    monkeypatch.chdir(path.parent)  # entries read "list.toml:LINE", as the records say
    skiplist = skiplists.load([path], backend="emu", torch_version="2.13")
    facts = facts_from_frame(RunMeta(run_id="run-1"), _frame(RECORDS))
    findings = lint(skiplist, facts.identities, passing=facts.passing_ids(), today=TODAY)
    got = {(f.kind, f.where) for f in findings}
    assert got == {
        ("review", "list.toml:17"),
        ("over-match", "list.toml:26"),
        ("dead", "list.toml:32"),  # test_nn.py::TestNN::test_gone: no such test
    }
    # A file that was not collected gives no verdict on its entries.
    only_ops = [i for i in facts.identities if i.file == "test_ops.py"]
    assert ("dead", "list.toml:32") not in {(f.kind, f.where) for f in lint(skiplist, only_ops)}


def test_lint_conflict_and_redundant_layers(tmp_path: Path) -> None:
    base = tmp_path / "base.toml"
    base.write_text(
        '[[skip]]\nop = "add"\ntier = "skip"\ncategory = "known_bug"\nreason = "wrong"\n\n'
        '[[skip]]\ndtypes = ["float16"]\ntier = "xfail"\ncategory = "known_bug"\nreason = "half"\n'
    )
    overlay = tmp_path / "torch-2.13.toml"
    overlay.write_text(
        '[[skip]]\nop = "add"\ntier = "skip"\ncategory = "known_bug"\nreason = "again"\n'
    )
    skiplist = skiplists.load([base, overlay], backend="emu", torch_version="2.13")
    from conformance.model import TestIdentity

    tests = [
        TestIdentity(
            "n", "a.py::T::test_add_float16", "a.py", "T", "test_add", "add", dtype="float16"
        )
    ]
    kinds = {f.kind for f in lint(skiplist, tests, today=TODAY)}
    # The overlay's op=add outranks dtypes=[float16] (same precedence, later layer), so
    # that entry never applies, and disagrees on the tier.
    assert kinds == {"conflict", "redundant", "shadowed"}


def test_cli_lint_exit_codes(files: tuple[Path, Path], capsys) -> None:
    path, run_dir = files
    assert cli("lint", "--skiplist", path, "--from", run_dir, "--today", "2026-11-29") == 1
    out = capsys.readouterr().out
    assert "review: review date 2026-01-01 has passed" in out
    assert "dead: no collected test has test_id test_nn.py::TestNN::test_gone" in out
    broken = path.with_name("broken.toml")
    broken.write_text(SKIPLIST.replace('tier = "skip"', 'tier = "sometimes"'))
    assert cli("lint", "--skiplist", broken, "--backend", "emu") == 2
    assert "broken.toml:20: field 'tier'" in capsys.readouterr().out


def test_update_adds_failures_and_marks_passes_keeping_comments(files: tuple[Path, Path]) -> None:
    path, run_dir = files
    assert cli("update", "--from", run_dir, "--skiplist", path, "--to", path) == 0
    text = path.read_text()
    assert text.startswith(SKIPLIST.split("[[skip]]")[0])  # header and comments kept
    assert "# the float case" in text and "# trailing comment of the file" in text
    assert "# passes: 1 of 2 selected tests passed in run run-1" in text
    skiplist = skiplists.load([path], backend="emu", torch_version="2.13")
    added = {e.selector.test_ids: e for e in skiplist.entries[4:]}
    # A missing lowering is one cause entry, whatever the number of tests it explains.
    (cummax,) = skiplist.causes
    assert (cummax.cause, cummax.tier, cummax.category, cummax.detail) == (
        "aten::cummax.out",
        "xfail",
        "missing_lowering",
        "aten::cummax.out",
    )
    assert cummax.selector.suite == "upstream" and not cummax.selector.test_ids
    assert "# 2 tests in 1 template in run run-1\n" in text
    assert cummax.reason == "aten::cummax.out has no lowering on emu"
    assert cummax.review is not None and cummax.review > dt.date.today()
    crash = added[("test_ops.py::TestCommon::test_sort_float32",)]
    assert (crash.tier, crash.category) == ("deselect", "crash")
    # Running it again adds nothing: the failures are covered now.
    before = path.read_text()
    assert cli("update", "--from", run_dir, "--skiplist", path, "--to", path) == 0
    assert path.read_text() == before


def test_update_prune_drops_passing_ids_and_entries(
    files: tuple[Path, Path], capsys, monkeypatch
) -> None:
    path, run_dir = files
    monkeypatch.chdir(path.parent)
    assert (
        cli("update", "--from", run_dir, "--skiplist", path, "--to", path, "--prune", "--dry-run")
        == 0
    )
    diff = capsys.readouterr().out
    assert path.read_text() == SKIPLIST  # dry run
    assert '-    "test_ops.py::TestCommon::test_out_cumsum_float64",' in diff
    assert "-pattern = 'test_ops\\.py::TestCommon::test_noncontiguous_.*'" in diff
    assert "+# added from run run-1" in diff
    # Paths relative to the working directory, as git apply and patch -p1 take them.
    assert diff.startswith(f"--- a/{path.name}\n+++ b/{path.name}\n")


@pytest.mark.slow  # parse_nodeid loads torch's op database
def test_explain_names_the_applying_entry(files: tuple[Path, Path], capsys) -> None:
    path, _run_dir = files
    assert (
        cli(
            "explain",
            "--skiplist",
            path,
            "--backend",
            "emu",
            "test_ops.py::TestCommonPRIVATEUSE1::test_out_cumsum_emu_float32",
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "test_id: test_ops.py::TestCommon::test_out_cumsum_float32" in out
    assert "APPLIES: " in out and "list.toml:6" in out and "cumsum.out has no lowering yet" in out
    assert (
        cli(
            "explain",
            "--skiplist",
            path,
            "--backend",
            "emu",
            "test_ops.py::TestCommon::test_mul_float32",
        )
        == 0
    )
    assert "no entry applies" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "Could not run 'aten::cumsum.out' with arguments from the 'PrivateUse1' backend",
            ("missing_lowering", "aten::cumsum.out"),
        ),
        ("\"addmm_impl_cpu_\" not implemented for 'Half'", ("unsupported_dtype", "Half")),
        ("Tensor-likes are not close!\nMismatched elements: 3 / 10", ("numerical_mismatch", "")),
        ("AssertionError: RuntimeError not raised", ("wrong_error", "")),
        ("sparse tensors are not supported", ("unsupported_feature", "sparse")),
        ("something else", ("other", "")),
    ],
)
def test_infer_category_from_message(message: str, expected: tuple[str, str]) -> None:
    assert infer_category({"outcome": "failed", "message": message, "category": ""}) == expected


def test_disabled_json_round_trip(files: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    path, run_dir = files
    assert cli("export", "--format", "disabled-json", "--skiplist", path, "--backend", "emu") == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported == {"test_gone_emu (__main__.TestNN)": ["", []]}
    source = tmp_path / "disabled.json"
    source.write_text(
        json.dumps(
            {
                "test_out_cumsum_emu_float32 (__main__.TestCommonPRIVATEUSE1)": [
                    "https://x.org/1",
                    [],
                ],
                "test_mul (__main__.TestCommonEMU)": ["https://x.org/2", ["linux"]],
                "test_win_only (__main__.TestNN)": ["https://x.org/3", ["win"]],
            }
        )
    )
    target = tmp_path / "imported.toml"
    assert (
        cli(
            "import",
            "--format",
            "disabled-json",
            source,
            "--from",
            run_dir,
            "--to",
            target,
            "--platform",
            "linux",
            "--backend",
            "emu",
        )
        == 0
    )
    imported = skiplists.load([target], backend="emu", torch_version="2.13")
    assert len(imported) == 2
    from conformance.model import TestIdentity

    exact = imported.match(
        TestIdentity("n", "test_ops.py::TestCommon::test_out_cumsum_float32", "test_ops.py")
    )
    assert exact is not None and exact.link == "https://x.org/1" and exact.tier == "skip"
    every_variant = imported.match(
        TestIdentity("n", "test_ops.py::TestCommon::test_mul_float32", "test_ops.py")
    )
    assert every_variant is not None and every_variant.selector.kind == "pattern"
    assert (
        imported.match(TestIdentity("n", "test_ops.py::TestCommon::test_mul_x", "test_ops.py"))
        is None
    )


@pytest.mark.slow  # imports torch's common_device_type
def test_test_configs_produce_and_consume(tmp_path: Path) -> None:
    from torch.testing._internal.common_device_type import DeviceTypeTestBase

    from skiplists import upstream

    text = (
        '[[skip]]\nop = "cumsum"\nclass = "TestCommon"\ntemplate = "test_out"\ndtypes = ["float32"]\n'
        'tier = "xfail"\ncategory = "missing_lowering"\ndetail = "aten::cumsum.out"\nreason = "no out"\n\n'
        '[[skip]]\nclass = "TestSparse"\ntier = "deselect"\ncategory = "unsupported_feature"\n'
        'detail = "sparse"\nreason = "no sparse layouts"\n'
    )
    path = tmp_path / "list.toml"
    path.write_text(text)
    skiplist = skiplists.load([path], backend="emu", torch_version="2.13")
    configs = upstream.to_test_configs(skiplist, "emu")
    assert configs["test_exclusions"] == {"TestSparse": "*"}
    [info] = configs["op_overrides"]["cumsum"]
    assert (info["tier"], info["class"], info["test"], info["dtypes"]) == (
        "xfail",
        "TestCommon",
        "test_out",
        ["float32"],
    )

    class Base(DeviceTypeTestBase):
        device_type = "emu"

    upstream.install_test_configs(configs, Base)
    [decorate] = Base.op_overrides["cumsum"]
    assert decorate.cls_name == "TestCommon" and decorate.test_name == "test_out"
    back = upstream.from_test_configs(
        op_overrides=Base.op_overrides,
        test_exclusions=Base.test_exclusions,
        op_allowlist=["cumsum"],
        all_ops=["cumsum", "add"],
    )
    assert [(e.get("op"), e.get("class", ""), e["tier"]) for e in back] == [
        ("cumsum", "TestCommon", "xfail"),
        (None, "TestSparse", "deselect"),
        ("add", "", "deselect"),
    ]
    assert back[0]["dtypes"] == ["float32"]


def _frame(records: list[ResultRecord]) -> pandas.DataFrame:
    return pandas.DataFrame.from_records(
        [r.to_dict() for r in records], columns=list(RECORD_COLUMNS)
    )


def test_update_turns_a_wholly_failing_template_into_one_entry(tmp_path: Path) -> None:
    from skiplists.update import plan_update

    # A failure without a machine-readable cause (one with a cause becomes a cause entry).
    message = "AssertionError: Tensor-likes are not close!"
    records = [
        record(
            f"test_grad.py::TestFwd::test_fwd_{op}_float64",
            "failed",
            template="test_fwd",
            message=message,
            category="numerical_mismatch",
            detail="values",
        )
        for op in ("add", "mul", "sub")
    ]
    facts = facts_from_frame(RunMeta(run_id="r", backend="emu"), _frame(records))
    plan = plan_update(skiplists.Skiplist([]), facts, today=TODAY)
    [added] = plan.additions
    assert {k: added[k] for k in ("file", "class", "template", "category", "detail")} == {
        "file": "test_grad.py",
        "class": "TestFwd",
        "template": "test_fwd",
        "category": "numerical_mismatch",
        "detail": "values",
    }
    assert "test_id" not in added and plan.failures == 3
    # One more test of the template that passes: the failures are listed one by one.
    facts = facts_from_frame(
        RunMeta(run_id="r", backend="emu"),
        _frame(
            [
                *records,
                record(
                    "test_grad.py::TestFwd::test_fwd_neg_float64", "passed", template="test_fwd"
                ),
            ]
        ),
    )
    [added] = plan_update(skiplists.Skiplist([]), facts, today=TODAY).additions
    assert len(added["test_id"]) == 3


def test_update_gives_failures_of_one_template_an_entry_per_message() -> None:
    from skiplists.update import plan_update

    def failure(op: str, message: str) -> ResultRecord:
        return record(
            f"test_ops.py::TestViews::test_view_{op}_float32",
            "failed",
            template="test_view",
            message=message,
            category="other",
            detail="RuntimeError",
        )

    split = "RuntimeError: tensor_split expected tensor_indices_or_sections to be on cpu"
    storage = "RuntimeError: setStorage: sizes [2, 2] are out of bounds for storage of size 40"
    records = [failure("tensor_split", split), failure("as_strided", storage)]
    records.append(failure("hsplit", split))
    facts = facts_from_frame(RunMeta(run_id="r", backend="emu"), _frame(records))
    added = plan_update(skiplists.Skiplist([]), facts, today=TODAY).additions
    by_reason = {a["reason"]: a["test_id"] for a in added}
    assert by_reason == {
        f"other on emu: {storage}": "test_ops.py::TestViews::test_view_as_strided_float32",
        f"other on emu: {split}": [
            "test_ops.py::TestViews::test_view_hsplit_float32",
            "test_ops.py::TestViews::test_view_tensor_split_float32",
        ],
    }
