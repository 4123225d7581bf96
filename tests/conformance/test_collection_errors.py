"""Nothing drops out silently: a file that fails to collect is an outcome of the run.

A file with a syntax error or an import that fails is recorded once (whatever the number of
xdist workers that failed to import it, and across a resume) as an ``error`` of category
``collection_error`` with the exception; it fails the run unless a skiplist entry expects
it; every report names it; and a report compared with an earlier run lists the files it
collected fewer tests from. The good file is a real upstream one.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pandas
import pyarrow.parquet  # noqa: F401 (loaded before pytester, whose module snapshot would drop it)
import pytest

from conformance.cli import main
from conformance.identity import collector_identity
from conformance.model import COLLECTION_ERROR, ResultRecord, is_collection_record
from conformance.store import JSONL_NAME, read_meta, read_run
from reports.build import build_model
from reports.compare import FileDrop, fewer_tests
from reports.synthetic import write_run
from skiplists.errors import SkiplistError
from skiplists.loader import parse_text
from tests.conformance.test_resume import KILLED

UPSTREAM = Path(__file__).resolve().parents[3] / "shared" / "upstream" / "test"
GOOD = "test_scatter_gather_ops.py"
#: Its quick tests: test_gather_large_* take minutes on a loaded machine.
GOOD_TESTS = "test_gather and not large"
SYNTAX = "test_broken_syntax.py"
IMPORT = "test_broken_import.py"
BROKEN_FILES = {
    SYNTAX: "import torch\n\n\ndef test_x(:\n    pass\n",
    IMPORT: "from torch import no_such_name_here\n\n\ndef test_y():\n    pass\n",
}

SKIPLIST = f"""\
[[skip]]
test_id = "{SYNTAX}"
tier = "xfail"
category = "collection_error"
reason = "a syntax error upstream, fixed in the next release"

[[skip]]
file = "{IMPORT}"
tier = "xfail"
category = "collection_error"
reason = "imports a name this torch does not have"
"""


def conformance(*argv: str) -> tuple[int, str, str]:
    """``conformance ARGS`` in this process: (exit code, stdout, stderr). pytest's own
    output goes to the real streams (it runs in a subprocess)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def make_test_folder(root: Path) -> Path:
    """A test/ folder holding the real upstream file and the two broken ones."""
    if not (UPSTREAM / GOOD).is_file():
        pytest.skip(f"no upstream checkout at {UPSTREAM}")
    folder = root / "test"
    folder.mkdir()
    shutil.copy(UPSTREAM / GOOD, folder)  # read-only where it is: copied
    for name, text in BROKEN_FILES.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def run_selection(folder: Path, runs: Path, run_id: str, *options: str) -> tuple[int, str, str]:
    return conformance(
        "run", "--device", "cpu", "--tests", str(folder), "--files", GOOD, SYNTAX, IMPORT,
        "-n", "2", "--runs-root", str(runs), "--run-id", run_id, *options,
        "--", "-k", GOOD_TESTS,
    )  # fmt: skip


@pytest.fixture(scope="module")
def broken_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str, str]:
    """A cpu run on 2 workers of the upstream file and the two broken files, with no
    skiplist: (run folder, exit code, stdout, stderr)."""
    root = tmp_path_factory.mktemp("collection")
    folder = make_test_folder(root)
    code, out, err = run_selection(folder, root / "runs", "broken", "--no-skiplist")
    return root / "runs" / "broken", code, out, err


@pytest.mark.slow
def test_each_broken_file_is_one_error_record_and_the_run_fails(broken_run) -> None:
    run_dir, code, _out, err = broken_run
    assert code == 1
    meta, frame = read_run(run_dir)  # from Parquet: the run is complete
    assert meta.complete
    errors = frame.loc[frame["category"] == COLLECTION_ERROR].set_index("test_id")
    assert sorted(errors.index) == [IMPORT, SYNTAX]  # once each, though 2 workers failed
    assert errors["nodeid"].to_dict() == {IMPORT: IMPORT, SYNTAX: SYNTAX}
    assert (errors["outcome"] == "error").all() and (errors["template"] == "").all()
    assert errors.loc[SYNTAX, "file"] == SYNTAX and errors.loc[SYNTAX, "test_class"] == ""
    assert errors["detail"].to_dict() == {IMPORT: "ImportError", SYNTAX: "SyntaxError"}
    assert errors.loc[SYNTAX, "message"].startswith("SyntaxError: invalid syntax")
    assert f'{SYNTAX}", line 4' in errors.loc[SYNTAX, "message"]  # where it is
    assert errors.loc[IMPORT, "message"].startswith(
        "ImportError: cannot import name 'no_such_name_here' from 'torch'"
    )
    # The good file's tests are all there, and the collected count is of tests only.
    good = frame.loc[frame["file"] == GOOD]
    assert len(good) == meta.collected > 0 and set(good["outcome"]) == {"passed"}
    assert len(frame) == meta.collected + 2
    # The log of record holds each of them once too.
    lines = (run_dir / JSONL_NAME).read_text(encoding="utf-8").splitlines()
    assert sorted(json.loads(line)["test_id"] for line in lines) == sorted(frame["test_id"])
    assert f"{SYNTAX} failed to collect (error): SyntaxError: invalid syntax" in err
    assert f"{IMPORT} failed to collect (error): ImportError: cannot import name" in err


@pytest.mark.slow
def test_every_report_names_the_file_and_its_error(broken_run, tmp_path: Path) -> None:
    run_dir, *_ = broken_run
    out = tmp_path / "report"
    code, stdout, _ = conformance("report", str(run_dir), "--out", str(out))
    assert code == 0
    assert f"failed to collect (error): {SYNTAX}: SyntaxError: invalid syntax" in stdout

    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    listed = {row["file"]: row for row in summary["collection_errors"]}
    assert sorted(listed) == [IMPORT, SYNTAX]
    assert listed[SYNTAX]["outcome"] == "error"
    assert listed[SYNTAX]["message"].startswith("SyntaxError: invalid syntax")
    assert listed[IMPORT]["message"].startswith("ImportError: cannot import name")
    files = {row["file"]: row for row in summary["files"]}
    assert (files[SYNTAX]["total"], files[SYNTAX]["error"]) == (1, 1)  # the per-file counts
    assert files[GOOD]["total"] == files[GOOD]["passed"] > 0

    markdown = (out / "summary.md").read_text(encoding="utf-8")
    assert "### Failed to collect" in markdown
    assert f"- `{SYNTAX}` (error): `SyntaxError: invalid syntax`" in markdown
    assert f"- `{IMPORT}` (error): `ImportError: cannot import name" in markdown

    index = (out / "index.html").read_text(encoding="utf-8")
    assert 'id="collection-errors"' in index
    assert SYNTAX in index and "SyntaxError: invalid syntax" in index
    assert "ImportError: cannot import name" in index
    assert "failed to collect</span>" in (out / "files.html").read_text(encoding="utf-8")
    junit = (out / "junit.xml").read_text(encoding="utf-8")
    assert f'<testsuite name="{SYNTAX}" tests="1" failures="0" errors="1"' in junit


@pytest.mark.slow
def test_a_comparison_says_which_files_collected_fewer_tests(broken_run, tmp_path) -> None:
    run_dir, *_ = broken_run
    meta, frame = read_run(run_dir)
    # The run before: the syntax error's file collected 3 tests, the other files as now.
    earlier = frame.loc[~frame["test_id"].isin([SYNTAX])].copy()
    extra = [
        ResultRecord(
            run_id="earlier", nodeid=f"{SYNTAX}::test_{i}", test_id=f"{SYNTAX}::test_{i}",
            file=SYNTAX, template=f"test_{i}", outcome="passed", device="cpu",
        ).to_dict()
        for i in range(3)
    ]  # fmt: skip
    earlier = pandas.concat([earlier, pandas.DataFrame(extra)], ignore_index=True)
    before = meta.to_dict() | {"run_id": "earlier", "start_time": "2026-01-01T00:00:00+00:00"}
    write_run(tmp_path / "earlier", type(meta).from_dict(before), earlier)

    out = tmp_path / "report"
    code, stdout, _ = conformance(
        "report", str(run_dir), "--compare", str(tmp_path / "earlier"), "--out", str(out)
    )
    assert code == 0
    assert (
        f"fewer tests than earlier: {SYNTAX}: 3 tests before, 0 now "
        "(failed to collect: SyntaxError: invalid syntax)"
    ) in stdout
    assert "fewer tests than earlier: " + GOOD not in stdout  # the same tests as before
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["diff"]["fewer_tests"] == [
        {"file": SYNTAX, "before": 3, "now": 0, "error": "SyntaxError: invalid syntax"}
    ]
    markdown = (out / "summary.md").read_text(encoding="utf-8")
    assert "Files with fewer tests than `earlier`:" in markdown
    assert f"- `{SYNTAX}`: 3 tests before, 0 now (failed to collect: `SyntaxError" in markdown
    diff = (out / "diff.html").read_text(encoding="utf-8")
    assert 'id="fewer-tests"' in diff and SYNTAX in diff
    assert "collected fewer tests than earlier from 1 file" in (out / "index.html").read_text()


@pytest.mark.slow
def test_a_skiplist_entry_that_expects_a_file_not_to_collect_passes_the_run(tmp_path) -> None:
    folder = make_test_folder(tmp_path)
    skiplist = tmp_path / "expected.toml"
    skiplist.write_text(SKIPLIST, encoding="utf-8")
    code, out, err = run_selection(
        folder, tmp_path / "runs", "expected", "--skiplist", str(skiplist)
    )
    assert code == 0, err
    meta, frame = read_run(tmp_path / "runs" / "expected")
    assert meta.complete
    errors = frame.loc[frame["category"] == COLLECTION_ERROR].set_index("test_id")
    assert errors["outcome"].to_dict() == {IMPORT: "xfailed", SYNTAX: "xfailed"}
    entries = errors["skip_entry"].map(lambda where: where.rsplit(":", 1)[-1]).to_dict()
    assert entries == {SYNTAX: "1", IMPORT: "7"}  # by test_id, and by file alone
    assert errors.loc[SYNTAX, "message"].startswith("SyntaxError: invalid syntax")
    assert set(frame.loc[frame["file"] == GOOD, "outcome"]) == {"passed"}
    assert f"{SYNTAX} failed to collect (xfailed): SyntaxError" in out
    assert "expected by" in out


@pytest.mark.slow
def test_a_resumed_run_records_each_broken_file_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_killed=KILLED,
        test_syntax="def test_x(:\n    pass\n",
        test_raises="raise RuntimeError('needs a device this machine lacks')\n",
    )
    common = ("--device", "cpu", "-p", "no:cacheprovider")
    # Serial: pytest would stop before the first test; the plugin runs the other files.
    first = pytester.runpytest_subprocess(*common, "--run-dir", "run")
    assert first.ret != 0
    meta, frame = read_run(pytester.path / "run")
    assert not meta.complete
    assert sorted(frame["nodeid"]) == ["test_killed.py::test_1", "test_raises.py", "test_syntax.py"]
    rows = frame.set_index("nodeid")
    assert rows.loc["test_raises.py", "message"] == (
        "RuntimeError: needs a device this machine lacks"
    )
    assert rows.loc["test_raises.py", "detail"] == "RuntimeError"

    # Both workers fail to collect both files again: still one record each.
    second = pytester.runpytest_subprocess(*common, "--resume", "run", "-n", "2")
    assert second.ret != 0
    meta, frame = read_run(pytester.path / "run")
    assert meta.complete and meta.collected == 3
    assert sorted(frame["nodeid"]) == [
        "test_killed.py::test_1",
        "test_killed.py::test_2",
        "test_killed.py::test_3",
        "test_raises.py",
        "test_syntax.py",
    ]
    lines = (pytester.path / "run" / JSONL_NAME).read_text(encoding="utf-8").splitlines()
    assert len(lines) == 5
    broken = frame.loc[
        [
            is_collection_record(c, t)
            for c, t in zip(frame["category"], frame["template"], strict=True)
        ]
    ]
    assert set(broken["outcome"]) == {"error"}
    assert read_meta(pytester.path / "run").collected == 3


def test_a_collector_is_named_by_its_file_then_its_generic_class() -> None:
    identity = collector_identity("test_broken.py", ["emu"], None)
    assert (identity.test_id, identity.file, identity.test_class, identity.template) == (
        "test_broken.py",
        "test_broken.py",
        "",
        "",
    )
    identity = collector_identity("test_ops.py::TestCommonPRIVATEUSE1", ["emu"], None)
    assert (identity.test_id, identity.test_class) == ("test_ops.py::TestCommon", "TestCommon")
    assert collector_identity("", ["emu"], None).test_id == "."


def test_a_skiplist_entry_may_name_a_file_that_fails_to_collect() -> None:
    entries = parse_text(SKIPLIST, Path("expected.toml"))
    assert entries[0].selector.test_ids == (SYNTAX,)
    assert entries[1].selector.file == IMPORT and entries[1].category == COLLECTION_ERROR
    bad = 'test_id = "test_broken"\ntier = "xfail"\ncategory = "other"\nreason = "r"\n'
    with pytest.raises(SkiplistError, match="is not a test_id"):
        parse_text("[[skip]]\n" + bad, Path("bad.toml"))


def test_files_that_lost_tests_or_vanished_are_listed_with_both_counts() -> None:
    def records(counts: dict[str, int]) -> pandas.DataFrame:
        rows = [
            ResultRecord(
                run_id="r", nodeid=f"{file}::test_{i}", test_id=f"{file}::test_{i}",
                file=file, template=f"test_{i}", outcome="passed",
            ).to_dict()
            for file, count in counts.items()
            for i in range(count)
        ]  # fmt: skip
        return pandas.DataFrame(rows)

    before = records({"a.py": 3, "b.py": 2, "c.py": 1, "d.py": 2})
    now = records({"a.py": 3, "b.py": 1, "d.py": 0, "e.py": 5})
    broken = ResultRecord(
        run_id="r", nodeid="d.py", test_id="d.py", file="d.py", outcome="error",
        category=COLLECTION_ERROR, message="ImportError: no\nmore",
    )  # fmt: skip
    now = pandas.concat([now, pandas.DataFrame([broken.to_dict()])], ignore_index=True)
    assert fewer_tests(now, before) == [
        FileDrop("b.py", 2, 1),
        FileDrop("c.py", 1, 0),
        FileDrop("d.py", 2, 0, "ImportError: no"),
    ]
    assert fewer_tests(before, before) == []


def test_a_report_of_a_run_without_collection_errors_lists_none(tmp_path: Path) -> None:
    from tests.reports.conftest import make_runs_root

    root = make_runs_root(tmp_path)
    model = build_model(root / "run-b", compare_dir=root / "run-a")
    assert model.collection_errors == [] and model.diff.fewer_tests == []
    assert all(not row.collection_error for row in model.files)


def test_the_history_says_which_files_a_run_collected_fewer_tests_from(tmp_path) -> None:
    from conformance.model import RunMeta

    def write(run_id: str, day: int, counts: dict[str, int], *extra: ResultRecord, **meta):
        rows = [
            ResultRecord(
                run_id=run_id, nodeid=f"{file}::test_{i}", test_id=f"{file}::test_{i}",
                file=file, template=f"test_{i}", outcome="passed", device="emu",
            )
            for file, count in counts.items()
            for i in range(count)
        ]  # fmt: skip
        frame = pandas.DataFrame([r.to_dict() for r in [*rows, *extra]])
        start = f"2026-11-0{day}T01:00:00+00:00"
        fields = dict(backend="emu", suite="upstream:v2.13.0", start_time=start, complete=True)
        write_run(tmp_path / "runs" / run_id, RunMeta(run_id=run_id, **{**fields, **meta}), frame)

    broken = ResultRecord(
        run_id="night-3", nodeid="test_b.py", test_id="test_b.py", file="test_b.py",
        outcome="error", category=COLLECTION_ERROR, detail="ImportError", device="emu",
        message="ImportError: cannot import name 'x'",
    )  # fmt: skip
    write("night-1", 1, {"test_a.py": 3, "test_b.py": 2})
    write("night-2", 2, {"test_a.py": 3, "test_b.py": 2})
    # A rerun of one test, and a run of another selection, are compared with nothing.
    write("rerun", 3, {"test_a.py": 1}, amends="night-2")
    write("smoke", 4, {"test_a.py": 1}, suite="embedded:smoke")
    write("night-3", 5, {"test_a.py": 2}, broken)

    out = tmp_path / "report"
    root = tmp_path / "runs"
    code, stdout, _ = conformance(
        "report", str(root / "night-3"), "--history", str(root), "--out", str(out)
    )
    assert code == 0
    assert "fewer tests than night-2 (history): test_a.py: 3 tests before, 2 now" in stdout
    assert (
        "fewer tests than night-2 (history): test_b.py: 2 tests before, 0 now "
        "(failed to collect: ImportError)"
    ) in stdout
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    runs = {p["run_id"]: p for p in summary["trends"]["runs"]}
    assert {name: p["compared_with"] for name, p in runs.items()} == {
        "night-1": "",
        "night-2": "night-1",
        "rerun": "",
        "smoke": "",
        "night-3": "night-2",
    }
    assert runs["night-2"]["fewer_tests"] == runs["smoke"]["fewer_tests"] == []
    assert runs["night-3"]["fewer_tests"] == [
        {"file": "test_a.py", "before": 3, "now": 2, "error": ""},
        {"file": "test_b.py", "before": 2, "now": 0, "error": "ImportError"},
    ]
    assert "Against `night-2`, the run before it" in (out / "summary.md").read_text()
    trends = (out / "trends.html").read_text(encoding="utf-8")
    assert 'id="fewer-tests"' in trends and "test_b.py" in trends
    assert "collected fewer tests than night-2" in (out / "index.html").read_text()
