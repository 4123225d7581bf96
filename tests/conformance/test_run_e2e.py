"""End to end: `conformance run` on the emu backend with a CPU baseline."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from conformance import run_cli
from conformance.baseline import read_baseline
from conformance.store import read_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "upstream"


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    run_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["run", *argv])
    return args.handler(args)


@pytest.mark.slow
def test_emu_run_with_cpu_baseline_separates_backend_failures(tmp_path, capsys):
    pytest.importorskip("torch_emu")
    tests = tmp_path / "test"
    tests.mkdir()
    shutil.copy(FIXTURES / "test_fixture_ops.py", tests)
    code = run(
        "--device",
        "emu",
        "--tests",
        str(tests),
        "--files",
        "test_fixture_ops",
        "-n",
        "1",
        "--runs-root",
        str(tmp_path / "runs"),
        "--baseline",
        "cpu",
        "--run-id",
        "emu-run",
        "--no-skiplist",
    )
    out = capsys.readouterr().out
    assert code == 1  # the missing kernel and the mismatch are unexpected failures
    assert f"run written to {tmp_path / 'runs' / 'emu-run'}" in out
    assert (tmp_path / "runs" / "latest").resolve().name == "emu-run"

    meta, frame = read_run(tmp_path / "runs" / "emu-run")
    assert (meta.backend, meta.suite, meta.complete) == ("emu", f"upstream:{tests}", True)
    assert meta.collected == len(frame) == 12
    assert set(frame["device"]) == {"emu"}
    assert frame["nodeid"].str.contains("PRIVATEUSE1|EMU").sum() == 10

    summary, joined = read_baseline(tmp_path / "runs" / "emu-run")
    assert summary["baseline_device"] == "cpu"
    base_meta, _ = read_run(tmp_path / "runs" / summary["baseline_run_id"])
    assert base_meta.backend == "cpu"
    rows = joined.set_index("test_id")
    ops = "test_fixture_ops.py::TestFixtureDevice::"
    # torch's expectedFailureCPU swallows the failure on cpu only: on emu it is the backend's
    assert rows.loc[ops + "test_known_failure", "failure_scope"] == "backend"
    assert rows.loc[ops + "test_known_failure", "backend_only"]
    assert rows.loc[ops + "test_missing_kernel", "failure_scope"] == "both"
    assert rows.loc[ops + "test_missing_kernel", "detail"] == "aten::_cslt_compress"
    assert summary["backend_only"] == int(joined["backend_only"].sum()) >= 1


@pytest.mark.slow
def test_a_shard_runs_the_same_tests_on_emu_and_its_cpu_baseline(tmp_path, capsys):
    pytest.importorskip("torch_emu")
    tests = tmp_path / "test"
    tests.mkdir()
    shutil.copy(FIXTURES / "test_fixture_ops.py", tests)
    runs = tmp_path / "runs"
    common = ("--tests", str(tests), "--files", "test_fixture_ops", "-n", "1")
    common += ("--runs-root", str(runs), "--no-skiplist")
    assert run("--device", "cpu", *common, "--run-id", "cpu-full") == 1  # two failures
    _, full = read_run(runs / "cpu-full")

    for balance in ([], ["--shard-durations", "cpu-full"]):  # by hash, then by cpu's durations
        name = "by-time" if balance else "by-hash"
        parts = []
        for k in (1, 2):
            baseline = ["--baseline", "cpu", "--baseline-full"] if k == 1 else []
            shard = ["--shard", f"{k}/2", *balance]
            run("--device", "emu", *common, *shard, *baseline, "--run-id", f"{name}-{k}")
            _, frame = read_run(runs / f"{name}-{k}")
            parts.append(set(frame["test_id"]))
        # The two shards partition the selection, test_id by test_id.
        assert parts[0] | parts[1] == set(full["test_id"]) and not parts[0] & parts[1]
        # The full baseline ran the same shard on cpu: every test of the shard is joined.
        summary, joined = read_baseline(runs / f"{name}-1")
        base_meta, base = read_run(runs / summary["baseline_run_id"])
        assert base_meta.shard == "1/2" and set(base["test_id"]) == parts[0]
        assert (summary["in_both"], summary["only_here"]) == (len(parts[0]), 0)
        assert summary["only_baseline"] == 0
        assert set(joined["baseline_outcome"]) - {""} and (joined["baseline_outcome"] != "").all()
    capsys.readouterr()


@pytest.mark.slow
def test_upstream_files_run_under_pytests_defaults_wherever_they_live(tmp_path):
    """A checkout inside another project (a cache folder in a repository) is not run with
    that project's pytest configuration: PyTorch's `serial` mark under --strict-markers
    would otherwise fail every file to collect."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\naddopts = "--strict-markers -p no:nonexistent"\n'
    )
    tests = tmp_path / "cache" / "test"
    tests.mkdir(parents=True)
    (tests / "test_marked.py").write_text(
        "import pytest\n"
        "from torch.testing._internal.common_device_type import instantiate_device_type_tests\n"
        "from torch.testing._internal.common_utils import TestCase\n\n\n"
        "class TestMarked(TestCase):\n"
        "    @pytest.mark.serial\n"
        "    def test_one(self, device):\n"
        "        self.assertTrue(True)\n\n\n"
        "instantiate_device_type_tests(TestMarked, globals())\n"
    )
    code = run(
        "--device", "cpu", "--tests", str(tests), "-n", "1", "--no-skiplist",
        "--runs-root", str(tmp_path / "runs"), "--run-id", "marked",
    )  # fmt: skip
    _, frame = read_run(tmp_path / "runs" / "marked")
    assert code == 0
    assert frame["outcome"].tolist() == ["passed"]
