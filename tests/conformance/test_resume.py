"""Resume finishes the interrupted run it was given and refuses anything else, untouched."""

from __future__ import annotations

import json
from pathlib import Path

import pandas  # noqa: F401 (loaded before pytester, whose module snapshot would drop it)
import pyarrow.parquet  # noqa: F401
import pytest

from conformance.cli import main
from conformance.errors import ConfigError
from conformance.model import RunMeta
from conformance.resume import Wanted, check_resumable
from conformance.store import RunWriter, read_run, resolve_run

KILLED = """
import os, signal, pathlib

FLAG = pathlib.Path(__file__).with_name("killed.flag")

def test_1():
    pass

def test_2():
    if not FLAG.exists():  # the first run dies here, as if killed from outside
        FLAG.write_text("killed")
        os.kill(os.getpid(), signal.SIGKILL)

def test_3():
    pass
"""

OTHER = """
def test_other():
    pass
"""


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file of a run folder, by name, byte for byte."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def run(*argv: str) -> int:
    return main(["run", *argv])


@pytest.fixture
def killed_run(pytester: pytest.Pytester) -> Path:
    """An interrupted cpu run of test_killed.py (test_1 recorded) under runs/, named as
    `conformance run --tests test_killed.py` names its runs."""
    pytester.makepyfile(test_killed=KILLED, test_other=OTHER)
    path = pytester.path / "test_killed.py"
    result = pytester.runpytest_subprocess(
        "test_killed.py", "--device", "cpu", "--runs-root", "runs", "--run-id", "killed",
        "--suite", f"upstream:{path}", "-p", "no:cacheprovider",
    )  # fmt: skip
    assert result.ret != 0
    run_dir = pytester.path / "runs" / "killed"
    meta, frame = read_run(run_dir)
    assert not meta.complete and list(frame["outcome"]) == ["passed"]
    return run_dir


@pytest.mark.slow
def test_resuming_another_selection_is_refused_and_leaves_the_run_untouched(
    pytester: pytest.Pytester, killed_run: Path
):
    before = snapshot(killed_run)
    suite = f"upstream:{pytester.path / 'test_killed.py'}"
    common = ("--resume", str(killed_run), "--suite", suite, "-p", "no:cacheprovider")
    other = pytester.runpytest_subprocess("test_other.py", "--device", "cpu", *common)
    assert other.ret == pytest.ExitCode.USAGE_ERROR
    err = other.stderr.str()
    assert "not the same selection" in err and "test paths" in err and "test_other.py" in err
    filtered = pytester.runpytest_subprocess(
        "test_killed.py", "-k", "test_3", "--device", "cpu", *common
    )
    assert filtered.ret == pytest.ExitCode.USAGE_ERROR
    assert "filters: the run has none, this command [-k test_3]" in filtered.stderr.str()
    sharded = pytester.runpytest_subprocess(
        "test_killed.py", "--device", "cpu", "--shard", "1/2", *common
    )
    assert sharded.ret == pytest.ExitCode.USAGE_ERROR
    assert "shard: the run has none, this command '1/2'" in sharded.stderr.str()
    assert snapshot(killed_run) == before

    # The right selection resumes it: nothing lost, nothing run twice.
    same = pytester.runpytest_subprocess("test_killed.py", "--device", "cpu", *common)
    assert same.ret == 0
    meta, frame = read_run(killed_run)
    assert meta.complete and sorted(frame["test_id"]) == [
        f"test_killed.py::test_{i}" for i in (1, 2, 3)
    ]
    done = snapshot(killed_run)
    again = pytester.runpytest_subprocess("test_killed.py", "--device", "cpu", *common)
    assert again.ret == pytest.ExitCode.USAGE_ERROR
    assert "the run is complete: there is nothing to resume" in again.stderr.str()
    assert snapshot(killed_run) == done


@pytest.mark.slow
def test_the_command_resolves_latest_against_the_runs_root_and_exits_2(
    pytester: pytest.Pytester, killed_run: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    # The working directory holds another runs root whose latest run is complete.
    elsewhere = pytester.path / "elsewhere"
    writer = RunWriter(elsewhere / "done", RunMeta(run_id="done", backend="cpu"))
    writer.close(complete=True)
    monkeypatch.chdir(elsewhere)
    assert resolve_run("latest", pytester.path / "runs") == pytester.path / "runs" / "killed"
    before, done = snapshot(killed_run), snapshot(elsewhere / "done")

    code = run(
        "--device", "cpu", "--tests", str(pytester.path / "test_other.py"), "-n", "1",
        "--runs-root", str(pytester.path / "runs"), "--resume", "latest",
    )  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert f"{killed_run}: not the same selection" in err and "test paths" in err
    assert snapshot(killed_run) == before and snapshot(elsewhere / "done") == done

    code = run(
        "--device", "cpu", "--tests", str(pytester.path / "test_killed.py"), "-n", "1",
        "--runs-root", str(pytester.path / "runs"), "--resume", "latest",
    )  # fmt: skip
    assert code == 0
    meta, frame = read_run(killed_run)
    assert meta.complete and len(frame) == 3 and frame["test_id"].is_unique
    assert snapshot(elsewhere / "done") == done


def meta_of(**fields) -> RunMeta:
    base = {
        "run_id": "r",
        "backend": "emu",
        "suite": "embedded:smoke",
        "shard": "2/4",
        "torch_version": "2.13.0",
        "paths": ["/suite"],
        "filters": [],
    }
    return RunMeta(**{**base, **fields})


WANTED = Wanted("emu", "embedded:smoke", "2/4", "2.13.0", ["/suite"], [])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"backend": "cpu"}, "device: the run has 'cpu', this command 'emu'"),
        ({"suite": "embedded:core"}, "suite: the run has 'embedded:core'"),
        ({"shard": "3/4"}, "shard: the run has '3/4', this command '2/4'"),
        ({"torch_version": "2.12.1"}, "torch version: the run has '2.12.1'"),
        ({"paths": ["/elsewhere"]}, "test paths: the run has [/elsewhere], this command [/suite]"),
        ({"format_version": 1}, "format version: the run has 1, whose records this harness"),
        ({"mode": "compile"}, "mode: the run has 'compile', this command 'eager'"),
        ({"complete": True}, "the run is complete"),
    ],
)
def test_every_difference_is_named(tmp_path: Path, fields, message):
    (tmp_path / "meta.json").write_text(json.dumps(meta_of(**fields).to_dict()))
    with pytest.raises(ConfigError) as caught:
        check_resumable(tmp_path, WANTED)
    assert message in str(caught.value) and str(tmp_path) in str(caught.value)


def test_the_same_selection_may_resume(tmp_path: Path):
    (tmp_path / "meta.json").write_text(json.dumps(meta_of().to_dict()))
    assert check_resumable(tmp_path, WANTED).run_id == "r"
    # filters not known yet (the command line, before pytest parses them) are not compared
    (tmp_path / "meta.json").write_text(json.dumps(meta_of(filters=["-k x"]).to_dict()))
    check_resumable(tmp_path, Wanted("emu", "embedded:smoke", "2/4", "2.13.0", ["/suite"], None))
