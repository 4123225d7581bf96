"""Failed tests are retried once in a fresh process; one that then passes is flaky."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from xml.etree import ElementTree

import pytest

from conformance import run_cli
from conformance.model import FORMAT_VERSION, ResultRecord
from conformance.outcome import is_unexpected
from conformance.retry import fold_retries, plan_retries
from conformance.store import read_meta, read_records, read_run

FLAKY_FILE = """
import pathlib

MARK = pathlib.Path(__file__).with_name("flaky.mark")


def test_flaky():
    if not MARK.exists():  # the first attempt fails and leaves the mark; the next passes
        MARK.write_text("seen")
        raise AssertionError("first attempt fails")


def test_broken():
    raise AssertionError("fails every time")


def test_fine():
    pass
"""


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    run_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["run", *argv])
    return args.handler(args)


def flaky_run(tmp_path: Path, run_id: str, *extra: str) -> tuple[int, Path]:
    tests = tmp_path / run_id
    tests.mkdir()
    (tests / "test_flaky.py").write_text(FLAKY_FILE)
    code = run(
        "--device", "cpu", "--tests", str(tests / "test_flaky.py"), "-n", "1", "--no-skiplist",
        "--runs-root", str(tmp_path / "runs"), "--run-id", run_id, *extra,
    )  # fmt: skip
    return code, tmp_path / "runs" / run_id


@pytest.fixture(scope="module")
def retried(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, Path]:
    """A cpu run of FLAKY_FILE with retries on (the default): exit code, output, folder."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code, run_dir = flaky_run(tmp_path_factory.mktemp("retry"), "retried")
    return code, out.getvalue(), run_dir


@pytest.mark.slow
def test_a_test_that_passes_on_its_retry_is_flaky_with_both_attempts(retried):
    code, out, run_dir = retried
    assert code == 1  # test_broken fails again; the flaky test alone would not fail the run
    assert "retry: 1 flaky (failed, then passed), 1 failed again" in out
    assert "1 flaky (failed, then passed on a retry): test_flaky.py::test_flaky" in out
    meta, frame = read_run(run_dir)
    assert (meta.format_version, meta.retry_cap, meta.retry_left_out) == (FORMAT_VERSION, 50, 0)
    rows = frame.set_index("test_id")
    flaky = rows.loc["test_flaky.py::test_flaky"]
    assert (flaky["outcome"], flaky["category"], flaky["rerun"]) == ("flaky", "flaky", 1)
    assert flaky["detail"] == "other"  # the first attempt's category
    assert "first attempt fails" in flaky["message"]
    first, second = flaky["attempts"]
    assert (first["outcome"], second["outcome"]) == ("failed", "passed")
    assert "first attempt fails" in first["message"] and second["message"] == ""
    assert first["duration_s"] > 0 and second["duration_s"] > 0
    assert not is_unexpected(flaky["outcome"], flaky["message"])

    broken = rows.loc["test_flaky.py::test_broken"]
    assert (broken["outcome"], broken["rerun"]) == ("failed", 1)  # keeps its failure
    assert [a["outcome"] for a in broken["attempts"]] == ["failed", "failed"]
    fine = rows.loc["test_flaky.py::test_fine"]
    assert (fine["outcome"], fine["rerun"], list(fine["attempts"])) == ("passed", 0, [])
    # The JSON lines say what the Parquet file says.
    lines = {r["test_id"]: r for r in read_records(run_dir)}
    assert lines["test_flaky.py::test_flaky"]["outcome"] == "flaky"
    parquet = run_dir / "outcomes.parquet"
    moved = parquet.rename(run_dir / "aside.parquet")
    try:
        _, from_lines = read_run(run_dir)
    finally:
        moved.rename(parquet)
    assert from_lines.set_index("test_id").loc["test_flaky.py::test_flaky", "outcome"] == "flaky"


@pytest.mark.slow
def test_reports_show_flaky_as_neither_a_pass_nor_a_failure(retried, tmp_path):
    from reports.build import build_model
    from reports.render import render_report

    _, _, run_dir = retried
    # The same tests as an earlier run in which test_flaky passed and one in which it failed.
    _, frame = read_run(run_dir)
    for name, outcome in (("passed-before", "passed"), ("failed-before", "failed")):
        earlier = frame.assign(attempts=[[] for _ in range(len(frame))], rerun=0)
        earlier.loc[earlier["test_id"] == "test_flaky.py::test_flaky", "outcome"] = outcome
        earlier.loc[earlier["test_id"] == "test_flaky.py::test_flaky", "category"] = (
            "" if outcome == "passed" else "other"
        )
        write_frame(tmp_path / name, earlier)
    for before in ("passed-before", "failed-before"):
        model = build_model(run_dir, compare_dir=tmp_path / before)
        kinds = {k.key: k.rows["test_id"].tolist() for k in model.diff.kinds}
        assert kinds["newly_flaky"] == ["test_flaky.py::test_flaky"]
        assert kinds["new_failures"] == kinds["fixed"] == []  # not a regression, not a fix
    out = tmp_path / "report"
    render_report(model, out, ["html", "json", "md", "junit"])
    totals = model.summary.totals
    assert (totals.n_passed, totals.n_failed, totals.n_flaky, totals.total) == (1, 1, 1, 3)

    summary = json.loads((out / "summary.json").read_text())
    assert (summary["totals"]["flaky"], summary["totals"]["bucket_failed"]) == (1, 1)
    (listed,) = summary["flaky"]
    assert listed["test_id"] == "test_flaky.py::test_flaky"
    assert [a["outcome"] for a in listed["attempts"]] == ["failed", "passed"]
    assert "flaky" not in summary["breakdown"]["failed_by_category"]

    markdown = (out / "summary.md").read_text()
    assert "**1** flaky (failed, then passed on a retry)" in markdown
    assert "| flaky | 1 |" in markdown
    assert "- `test_flaky.py::test_flaky`: failed (`AssertionError: first attempt fails`)" in (
        markdown
    )

    junit = ElementTree.parse(out / "junit.xml").getroot()
    suite = junit.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "0")
    case = next(c for c in suite.iter("testcase") if c.get("name") == "test_flaky")
    assert [child.tag for child in case] == ["flakyFailure"]
    assert "first attempt fails" in case[0].get("message")

    index = (out / "index.html").read_text()
    assert '<div class="big flaky"><b>1</b> flaky' in index
    assert '<section id="flaky">' in index and "test_flaky.py::test_flaky" in index
    files = (out / "files.html").read_text()
    assert '<td class="num flaky" data-value="1">1</td>' in files


@pytest.mark.slow
def test_skiplist_update_writes_no_entry_for_a_flaky_test(retried, tmp_path, capsys):
    from conformance.cli import main

    _, _, run_dir = retried
    target = tmp_path / "cpu.toml"
    target.write_text('[skiplist]\nbackend = "cpu"\n')
    code = main(
        ["skiplist", "update", "--from", str(run_dir), "--skiplist", str(target), "--to",
         str(target), "--backend", "cpu", "--torch", "2.13"]
    )  # fmt: skip
    assert code == 0
    text = target.read_text()
    assert "test_flaky.py::test_broken" in text  # it failed twice: a known failure
    assert "test_flaky.py::test_flaky" not in text
    err = capsys.readouterr().err
    assert "1 flaky test(s) (failed, then passed on a retry) not added" in err


@pytest.mark.slow
def test_retries_can_be_turned_off_and_are_capped(tmp_path, capsys):
    code, run_dir = flaky_run(tmp_path, "off", "--retry-failures", "0")
    assert code == 1
    meta, frame = read_run(run_dir)
    assert (meta.retry_cap, meta.retry_left_out) == (0, 2)
    assert set(frame["outcome"]) == {"failed", "passed"}
    assert frame["rerun"].tolist() == [0, 0, 0]
    assert "2 failed tests not retried (--retry-failures 0)" in capsys.readouterr().out

    # A cap of 1 retries test_broken (first by test_id): test_flaky keeps its failure.
    code, run_dir = flaky_run(tmp_path, "capped", "--retry-failures", "1")
    assert code == 1
    assert "retrying 1 failed tests" in capsys.readouterr().out
    meta, frame = read_run(run_dir)
    assert (meta.retry_cap, meta.retry_left_out) == (1, 1)
    rows = frame.set_index("test_id")
    assert rows.loc["test_flaky.py::test_flaky", ["outcome", "rerun"]].tolist() == ["failed", 0]
    assert rows.loc["test_flaky.py::test_broken", ["outcome", "rerun"]].tolist() == ["failed", 1]


def test_a_bad_cap_is_refused_naming_the_option(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        run("--device", "cpu", "--tests", str(tmp_path), "--retry-failures", "-1")
    assert exc.value.code == 2
    assert "--retry-failures: expected a number of tests >= 0" in capsys.readouterr().err


def write_frame(run_dir: Path, frame) -> None:
    """A complete run folder holding ``frame``'s records."""
    from conformance.model import RunMeta
    from conformance.store import RunWriter

    writer = RunWriter(run_dir, RunMeta(run_id=run_dir.name, backend="cpu"))
    for row in frame.to_dict("records"):
        writer.write(ResultRecord.from_dict({**row, "run_id": run_dir.name}))
    writer.close()


def record(test_id: str, outcome: str, category: str = "", **fields) -> dict:
    fields.setdefault("template", test_id.rsplit("::", 1)[-1])
    return ResultRecord(
        run_id="r",
        nodeid=test_id,
        test_id=test_id,
        file=test_id.split("::")[0],
        outcome=outcome,
        category=category,
        **fields,
    ).to_dict()


def test_what_is_retried_and_in_which_order():
    records = [
        record("a.py::test_lowering", "failed", "missing_lowering", detail="aten::x.out"),
        record("a.py::test_mismatch", "failed", "numerical_mismatch"),
        record("a.py::test_crash", "crashed", "crash"),
        record("a.py::test_hang", "timeout", "timeout"),
        record("a.py::test_error", "error", "other"),
        record("a.py::test_known", "xfailed", "known_bug", skip_entry="emu.toml:3"),
        record("a.py::test_xpass", "xpassed", "", message="[XPASS(strict)] fixed"),
        record("a.py::test_skip", "skipped", "upstream_skip"),
        record("a.py::test_pass", "passed"),
        record("a.py::test_retried", "failed", "other", rerun=1),
        record("b.py", "error", "collection_error", template=""),
    ]
    plan = plan_retries(records, 50)
    # Causes that do not come and go go last; a file that failed to collect is no test.
    assert plan.test_ids == [
        "a.py::test_crash",
        "a.py::test_error",
        "a.py::test_hang",
        "a.py::test_mismatch",
        "a.py::test_lowering",
    ]
    assert (plan.files, plan.left_out) == (["a.py"], 0)
    capped = plan_retries(records, 2)
    assert (capped.test_ids, capped.left_out) == (["a.py::test_crash", "a.py::test_error"], 3)
    assert plan_retries(records, 0).left_out == 5


def test_folding_keeps_the_first_attempt_and_adds_both():
    records = [
        record("a.py::test_one", "failed", "numerical_mismatch", message="not close", duration_s=2),
        record("a.py::test_two", "crashed", "crash", message="worker died", duration_s=1),
        record("a.py::test_three", "error", "other", message="boom"),
        record("a.py::test_pass", "passed"),
    ]
    retry = [
        record("a.py::test_one", "passed", duration_s=1.5),
        record("a.py::test_two", "timeout", "timeout", message="timed out", duration_s=300),
    ]
    ids = ["a.py::test_one", "a.py::test_two", "a.py::test_three"]
    folded, result = fold_retries(records, ids, retry)
    one, two, three, passed = folded
    assert (one["outcome"], one["category"], one["detail"]) == (
        "flaky",
        "flaky",
        "numerical_mismatch",
    )
    assert (one["message"], one["duration_s"], one["rerun"]) == ("not close", 2, 1)
    assert one["attempts"] == [
        {"outcome": "failed", "category": "numerical_mismatch", "detail": "", "message": "not close", "duration_s": 2.0},
        {"outcome": "passed", "category": "", "detail": "", "message": "", "duration_s": 1.5},
    ]  # fmt: skip
    assert (two["outcome"], two["category"], two["rerun"]) == ("crashed", "crash", 1)
    assert [a["outcome"] for a in two["attempts"]] == ["crashed", "timeout"]
    assert three == records[2] and passed == records[3]  # no retry recorded: left as it was
    assert (result.flaky, result.failed_again, result.unrecorded) == (
        ["a.py::test_one"],
        ["a.py::test_two"],
        ["a.py::test_three"],
    )


def test_a_run_of_an_older_format_reads_with_no_attempts(tmp_path):
    from conformance.model import RunMeta
    from conformance.store import RunWriter

    writer = RunWriter(tmp_path / "old", RunMeta(run_id="old", format_version=4))
    writer.write(ResultRecord(run_id="old", nodeid="a", test_id="a", file="a", outcome="failed"))
    writer.close()
    assert read_meta(tmp_path / "old").retry_cap == 0
    _, frame = read_run(tmp_path / "old")
    assert list(frame.loc[0, "attempts"]) == [] and frame.loc[0, "rerun"] == 0
