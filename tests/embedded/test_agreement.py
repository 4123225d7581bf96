"""The embedded suite's agreement with upstream: verdicts, the join, counts and the CLI."""

from __future__ import annotations

import json

import pytest

from conformance.agreement import MESSAGE_CHARS, agreement, format_report, verdict
from conformance.cli import main
from conformance.errors import ConfigError
from conformance.model import ResultRecord, RunMeta
from conformance.store import RunWriter, read_run

_FILES = {
    ("embedded", "TestCommon"): "embedded/test_ops.py",
    ("embedded", "TestCompareCpuGradients"): "embedded/test_ops_gradients.py",
    ("embedded", "TestFwdGradients"): "embedded/test_ops_gradients.py",
    ("embedded", "TestModule"): "embedded/test_modules.py",
    ("embedded", "TestOptimRenewed"): "embedded/test_optim.py",
    ("upstream", "TestCommon"): "test_ops.py",
    ("upstream", "TestBwdGradients"): "test_ops_gradients.py",
    ("upstream", "TestFwdGradients"): "test_ops_fwd_gradients.py",
    ("upstream", "TestModule"): "test_modules.py",
}


def rec(
    suite: str,
    cls: str,
    template: str,
    op: str,
    dtype: str,
    outcome: str = "passed",
    *,
    params: str = "",
    **fields,
) -> ResultRecord:
    """A record named as the harness names it: ``embedded/test_ops.py::TestCommon::...``."""
    file = _FILES[(suite, cls)]
    name = "_".join(p for p in (template, op.replace(".", "_"), params, dtype) if p)
    test_id = f"{file}::{cls}::{name}"
    return ResultRecord(
        run_id="r",
        nodeid=test_id,
        test_id=test_id,
        file=file,
        test_class=cls,
        template=template,
        op=op,
        dtype=dtype,
        params=params,
        suite=suite,
        outcome=outcome,
        **fields,
    )


def emb(*args, **kwargs) -> ResultRecord:
    return rec("embedded", *args, **kwargs)


def up(*args, **kwargs) -> ResultRecord:
    return rec("upstream", *args, **kwargs)


def write_run(root, run_id: str, records, *, suite: str, backend: str = "emu", **meta):
    writer = RunWriter(root / run_id, RunMeta(run_id=run_id, backend=backend, suite=suite, **meta))
    for record in records:
        writer.write(record)
    writer.close(collected=len(records))
    return root / run_id


def frame_of(tmp_path, records, name: str = "run"):
    suite = records[0].suite if records else "embedded"
    return read_run(write_run(tmp_path, name, records, suite=suite))[1]


@pytest.mark.parametrize(
    ("outcome", "skip_entry", "expected"),
    [
        ("passed", "", "pass"),
        ("xpassed", "", "pass"),
        ("xpassed", "emu.toml:3", "pass"),
        ("failed", "", "fail"),
        ("error", "", "fail"),
        ("crashed", "emu.toml:3", "fail"),
        ("timeout", "", "fail"),
        ("xfailed", "emu.toml:3", "fail"),  # a skiplist xfail: a known failure of the backend
        ("xfailed", "", "xfail-opinfo"),  # the OpInfo's own expected failure
        ("skipped", "", "skip"),
        ("skipped", "emu.toml:3", "skip"),
        ("deselected", "emu.toml:3", "skip"),
    ],
)
def test_verdicts(outcome, skip_entry, expected):
    assert verdict(outcome, skip_entry) == expected


def test_unknown_outcome_is_an_error():
    with pytest.raises(ConfigError, match="unknown outcome 'weird'"):
        verdict("weird")


# One record per kind of pair, in TestCommon.test_out, plus keys on one side only.
EMBEDDED = [
    emb("TestCommon", "test_out", "add", "float32"),
    emb("TestCommon", "test_out", "mul", "float32", "failed", category="numerical_mismatch"),
    emb("TestCommon", "test_out", "sub", "float32"),  # miss
    emb(
        "TestCommon",
        "test_out",
        "div.no_rounding_mode",
        "float32",
        "failed",
        category="missing_lowering",
        detail="aten::div.out",
        message="NotImplementedError: aten::div.out\n" + "x" * 1000,
    ),  # false failure
    emb("TestCommon", "test_out", "sin", "float32", "xfailed"),  # both OpInfo xfails
    emb("TestCommon", "test_out", "cos", "float32"),  # xfail on upstream only
    emb("TestCommon", "test_out", "tan", "float32", "skipped", category="upstream_skip"),
    emb("TestCommon", "test_out", "exp", "float32", "skipped"),
    emb("TestCommon", "test_out", "log", "float32"),  # embedded only
    emb("TestCommon", "test_out", "add", "float64", "xfailed", skip_entry="emu.toml:7"),
    emb("TestOptimRenewed", "test_step_matches_cpu", "SGD", "float32"),  # no upstream namesake
    ResultRecord(  # a file that failed to collect: not a test, left out
        run_id="r",
        nodeid="embedded/test_broken.py",
        test_id="embedded/test_broken.py",
        file="embedded/test_broken.py",
        suite="embedded",
        outcome="error",
        category="collection_error",
    ),
]
UPSTREAM = [
    up("TestCommon", "test_out", "add", "float32"),
    up("TestCommon", "test_out", "mul", "float32", "failed"),
    up(
        "TestCommon",
        "test_out",
        "sub",
        "float32",
        "failed",
        category="wrong_error",
        message="AssertionError: RuntimeError not raised",
    ),
    up("TestCommon", "test_out", "div.no_rounding_mode", "float32"),
    up("TestCommon", "test_out", "sin", "float32", "xfailed"),
    up("TestCommon", "test_out", "cos", "float32", "xfailed"),
    up("TestCommon", "test_out", "tan", "float32"),
    up("TestCommon", "test_out", "exp", "float32", "skipped"),
    up("TestCommon", "test_out", "atan", "float32"),  # upstream only
    up("TestCommon", "test_out", "add", "float64", "failed", skip_entry="emu.toml:9"),
    up("TestCommon", "test_numpy_ref", "add", "float64"),  # no embedded counterpart
]


def test_the_join_counts_each_kind_of_pair(tmp_path):
    report = agreement(frame_of(tmp_path, EMBEDDED, "e"), frame_of(tmp_path, UPSTREAM, "u"))
    assert [t.name for t in report.templates] == ["TestCommon.test_out"]
    out = report.templates[0]
    assert out.counts == {
        "both_pass": 1,
        "both_fail": 2,  # mul float32; add float64, xfailed by a skiplist on both sides
        "both_xfail": 1,
        "miss": 1,
        "false_failure": 1,
        "xfail_differs": 1,
        "one_skipped": 1,
        "both_skipped": 1,
    }
    assert (out.pairs, out.ran, out.agreed) == (9, 7, 4)
    assert out.rate == pytest.approx(4 / 7)
    assert (out.only_embedded, out.only_upstream) == (1, 1)
    assert report.embedded_only == {"TestOptimRenewed.test_step_matches_cpu": 1}
    assert report.upstream_only == {"TestCommon.test_numpy_ref": 1}
    assert report.embedded_records == 11  # the collection error is not a test
    assert report.upstream_records == 11


def test_disagreements_list_misses_first_with_both_sides(tmp_path):
    report = agreement(frame_of(tmp_path, EMBEDDED, "e"), frame_of(tmp_path, UPSTREAM, "u"))
    out = report.templates[0]
    assert [(d.kind, d.op) for d in out.disagreements] == [
        ("miss", "sub"),
        ("false_failure", "div.no_rounding_mode"),
        ("xfail_differs", "cos"),
    ]
    miss = out.disagreements[0]
    assert (miss.embedded.verdict, miss.upstream.verdict) == ("pass", "fail")
    assert miss.upstream.category == "wrong_error"
    assert miss.upstream.message == "AssertionError: RuntimeError not raised"
    assert miss.embedded.test_id == "embedded/test_ops.py::TestCommon::test_out_sub_float32"
    false = out.disagreements[1]
    assert (false.embedded.category, false.embedded.detail) == ("missing_lowering", "aten::div.out")
    assert len(false.embedded.message) == MESSAGE_CHARS
    assert false.embedded.describe().startswith(
        "failed missing_lowering/aten::div.out: NotImplementedError: aten::div.out"
    )
    assert [(d.op, d.embedded.verdict, d.upstream.verdict) for d in out.one_skipped] == [
        ("tan", "skip", "pass")
    ]


def test_the_renamed_gradient_template_joins_upstreams_test_fn_grad(tmp_path):
    embedded = [
        emb("TestCompareCpuGradients", "test_fn_grad_compare_cpu", "sin", "float64"),
        emb("TestCompareCpuGradients", "test_fn_grad_compare_cpu", "cos", "float64"),
        emb("TestFwdGradients", "test_forward_mode_AD", "sin", "float64", "failed"),
    ]
    upstream = [
        up("TestBwdGradients", "test_fn_grad", "sin", "float64"),
        up("TestBwdGradients", "test_fn_grad", "cos", "float64", "failed"),
        # upstream's forward AD is in another file (test_ops_fwd_gradients.py): no matter
        up("TestFwdGradients", "test_forward_mode_AD", "sin", "float64", "failed"),
    ]
    report = agreement(frame_of(tmp_path, embedded, "e"), frame_of(tmp_path, upstream, "u"))
    by_name = {t.name: t for t in report.templates}
    assert set(by_name) == {
        "TestBwdGradients.test_fn_grad (embedded test_fn_grad_compare_cpu)",
        "TestFwdGradients.test_forward_mode_AD",
    }
    grad = by_name["TestBwdGradients.test_fn_grad (embedded test_fn_grad_compare_cpu)"]
    assert (grad.counts["both_pass"], grad.counts["miss"]) == (1, 1)
    assert grad.embedded_template == "test_fn_grad_compare_cpu"
    assert by_name["TestFwdGradients.test_forward_mode_AD"].counts["both_fail"] == 1
    assert not report.embedded_only and not report.upstream_only
    # --template takes either name, bare or with the class.
    for name in (
        "test_fn_grad",
        "TestBwdGradients.test_fn_grad",
        "test_fn_grad_compare_cpu",
        "TestCompareCpuGradients.test_fn_grad_compare_cpu",
    ):
        picked = agreement(
            frame_of(tmp_path, embedded, "e"), frame_of(tmp_path, upstream, "u"), name
        )
        assert [t.template for t in picked.templates] == ["test_fn_grad"]


def test_shards_join_as_one_run_and_a_later_record_of_a_test_wins(tmp_path):
    shard1 = frame_of(tmp_path, [emb("TestCommon", "test_out", "add", "float32", "failed")], "e1")
    shard2 = frame_of(tmp_path, [emb("TestCommon", "test_out", "mul", "float32")], "e2")
    rerun = frame_of(tmp_path, [emb("TestCommon", "test_out", "add", "float32")], "e3")
    upstream = [
        frame_of(tmp_path, [up("TestCommon", "test_out", "add", "float32")], "u1"),
        frame_of(tmp_path, [up("TestCommon", "test_out", "mul", "float32")], "u2"),
    ]
    report = agreement([shard1, shard2, rerun], upstream)
    assert report.templates[0].counts["both_pass"] == 2
    assert report.templates[0].rate == 1.0


def test_a_template_upstream_runs_without_dtype_joins_by_op(tmp_path):
    embedded = [
        emb("TestCommon", "test_out_warning", "add", "float32"),
        emb("TestCommon", "test_out_warning", "mul", "float32"),
        emb("TestCommon", "test_out_warning", "mul", "int64", "failed"),  # the worst speaks
    ]
    upstream = [
        up("TestCommon", "test_out_warning", "add", ""),
        up("TestCommon", "test_out_warning", "mul", ""),
    ]
    report = agreement(frame_of(tmp_path, embedded, "e"), frame_of(tmp_path, upstream, "u"))
    item = report.templates[0]
    assert item.by_op_only
    assert (item.pairs, item.counts["both_pass"], item.counts["false_failure"]) == (2, 1, 1)
    assert item.disagreements[0].embedded.test_id.endswith("test_out_warning_mul_int64")
    assert "[by op]" in format_report(report)


def test_module_tests_join_on_their_params_too(tmp_path):
    embedded = [
        emb("TestModule", "test_forward", "nn.Dropout", "float32", params="training=True"),
        emb(
            "TestModule", "test_forward", "nn.Dropout", "float32", "failed", params="training=False"
        ),
    ]
    upstream = [
        up("TestModule", "test_forward", "nn.Dropout", "float32", params="training=True"),
        up("TestModule", "test_forward", "nn.Dropout", "float32", params="training=False"),
    ]
    report = agreement(frame_of(tmp_path, embedded, "e"), frame_of(tmp_path, upstream, "u"))
    item = report.templates[0]
    assert (item.counts["both_pass"], item.counts["false_failure"]) == (1, 1)
    assert item.disagreements[0].params == "training=False"


def test_runs_of_different_modes_do_not_pair(tmp_path):
    embedded = [emb("TestCommon", "test_out", "add", "float32", mode="compile")]
    upstream = [up("TestCommon", "test_out", "add", "float32")]
    report = agreement(frame_of(tmp_path, embedded, "e"), frame_of(tmp_path, upstream, "u"))
    item = report.templates[0]
    assert (item.pairs, item.only_embedded, item.only_upstream) == (0, 1, 1)
    assert item.rate is None


def test_bad_input_names_what_is_wrong(tmp_path):
    embedded = frame_of(tmp_path, [emb("TestCommon", "test_out", "add", "float32")], "e")
    upstream = frame_of(tmp_path, [up("TestCommon", "test_out", "add", "float32")], "u")
    with pytest.raises(ConfigError, match="embedded runs: no records of the embedded suite"):
        agreement(upstream, upstream)
    with pytest.raises(ConfigError, match="upstream runs: no run given"):
        agreement(embedded, [])
    with pytest.raises(ConfigError, match=r"--template: no template named 'test_fake'.*test_out"):
        agreement(embedded, upstream, "test_fake")


def test_the_text_report(tmp_path):
    report = agreement(frame_of(tmp_path, EMBEDDED, "e"), frame_of(tmp_path, UPSTREAM, "u"))
    text = format_report(report, show=2)
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("template"))
    assert lines[header].split() == [
        "template",
        "pairs",
        "ran",
        "agree",
        "miss",
        "false",
        "xfail",
        "skip1",
        "skip2",
        "emb-only",
        "up-only",
    ]
    assert lines[header + 1].split() == [
        "TestCommon.test_out", "9", "7", "57.1%", "1", "1", "1", "1", "1", "1", "1"
    ]  # fmt: skip
    assert lines[header + 2].split()[0] == "total"
    assert "TestCommon.test_out: 2 of 3 disagreements" in text
    assert "  miss          sub float32" in text
    assert "    upstream: failed wrong_error: AssertionError: RuntimeError not raised" in text
    assert "cos float32" not in text  # beyond --show 2
    assert "TestOptimRenewed.test_step_matches_cpu (1)" in text
    assert "disagreements" not in format_report(report, show=0)


def test_cli_prints_the_report_and_writes_json(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_run(runs, "emb-1", EMBEDDED[:5], suite="embedded:smoke")
    write_run(runs, "emb-2", EMBEDDED[5:], suite="embedded:smoke")
    write_run(runs, "up-1", UPSTREAM, suite="upstream:/src/test")
    out_json = tmp_path / "agree.json"
    argv = ["suite", "agree", "emb-1", str(runs / "emb-2"), "--upstream", "up-1"]
    argv += ["--runs-root", str(runs), "--json", str(out_json), "--show", "5"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "TestCommon.test_out" in text and "57.1%" in text
    assert "false_failure div.no_rounding_mode float32" in text
    data = json.loads(out_json.read_text())
    assert data["total"]["pairs"] == 9 and data["total"]["agreed"] == 4
    (item,) = data["templates"]
    assert item["counts"]["miss"] == 1
    assert item["disagreements"][0]["upstream"]["category"] == "wrong_error"
    assert data["upstream_only_templates"] == {"TestCommon.test_numpy_ref": 1}
    assert data["renamed_templates"] == {
        "TestCompareCpuGradients.test_fn_grad_compare_cpu": "TestBwdGradients.test_fn_grad"
    }

    assert main([*argv[:6], "--runs-root", str(runs), "--template", "test_out"]) == 0
    assert "TestCommon.test_out" in capsys.readouterr().out


def test_cli_bad_input_exits_2_naming_it(tmp_path, capsys):
    runs = tmp_path / "runs"
    write_run(runs, "emb", EMBEDDED[:2], suite="embedded:smoke")
    write_run(runs, "up", UPSTREAM[:2], suite="upstream:/src/test")
    write_run(runs, "up-cpu", UPSTREAM[:2], suite="upstream:/src/test", backend="cpu")
    write_run(runs, "up-compile", UPSTREAM[:2], suite="upstream:/src/test", mode="compile")
    root = ["--runs-root", str(runs)]

    def error(*argv: str) -> str:
        assert main(["suite", "agree", *argv, *root]) == 2
        return capsys.readouterr().err

    assert "EMBEDDED_RUN: run up " in error("up", "--upstream", "up")
    assert "holds no tests of the embedded suite (upstream)" in error("up", "--upstream", "up")
    assert "--upstream: run emb " in error("emb", "--upstream", "emb")
    assert "no run named 'nope'" in error("emb", "--upstream", "nope")
    assert "different devices (emb: emu; up-cpu: cpu)" in error("emb", "--upstream", "up-cpu")
    assert "different modes" in error("emb", "--upstream", "up-compile")
    assert "--template: no template named 'test_nope'" in error(
        "emb", "--upstream", "up", "--template", "test_nope"
    )
    assert "cannot write" in error(
        "emb", "--upstream", "up", "--json", str(tmp_path / "no" / "such" / "dir.json")
    )
    with pytest.raises(SystemExit) as exit_info:  # argparse: --upstream is required
        main(["suite", "agree", "emb", *root])
    assert exit_info.value.code == 2
    assert "--upstream" in capsys.readouterr().err
