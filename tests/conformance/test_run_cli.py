"""`conformance run`: choosing tests, checking input, judging a finished run (no pytest runs)."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from conformance import run_cli
from conformance.errors import ConfigError
from conformance.model import ResultRecord, RunMeta
from conformance.store import RunWriter, read_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "upstream"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    run_cli.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["run", *argv])


GENERIC = "instantiate_device_type_tests(TestFoo, globals())\n"
DEVICE_TEST = """
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestFoo(TestCase):
    def test_add(self, device):
        self.assertEqual(torch.ones(2, device=device) + 1, torch.full((2,), 2.0, device=device))


instantiate_device_type_tests(TestFoo, globals())
"""


@pytest.fixture
def upstream(tmp_path):
    """A test/ folder: device-generic files at the top and in nn/, one that is not
    device-generic, one on the shipped exclusion list, and a helper."""
    folder = tmp_path / "test"
    (folder / "nn").mkdir(parents=True)
    for name in (
        "test_ops.py",
        "test_nn.py",
        "test_binary_ufuncs.py",
        "test_unary_ufuncs.py",
        "test_cuda.py",
        "nn/test_convolution.py",
    ):
        (folder / name).write_text(GENERIC)
    (folder / "test_plain.py").write_text("class TestPlain: ...\n")
    (folder / "helper.py").write_text(GENERIC)
    return folder


def test_a_folder_runs_its_device_generic_files_or_the_chosen_ones(upstream):
    selection = run_cli.select_tests(parse("--device", "cpu", "--tests", str(upstream)))
    assert [p.relative_to(upstream).as_posix() for p in selection.paths] == [
        "test_binary_ufuncs.py",
        "test_nn.py",
        "test_ops.py",
        "test_unary_ufuncs.py",
        "nn/test_convolution.py",
    ]
    assert selection.rootdir == upstream and selection.suite == f"upstream:{upstream}"

    args = parse(
        "--device", "cpu", "--tests", str(upstream), "--files", "test_nn", "test_*_ufuncs.py"
    )
    assert [p.name for p in run_cli.select_tests(args).paths] == [
        "test_nn.py",
        "test_binary_ufuncs.py",
        "test_unary_ufuncs.py",
    ]


def test_files_under_subfolders_are_chosen_by_path(upstream):
    args = parse("--device", "cpu", "--tests", str(upstream), "--files", "nn/test_convolution.py")
    assert run_cli.select_tests(args).paths == [upstream / "nn" / "test_convolution.py"]
    args = parse("--device", "cpu", "--tests", str(upstream), "--files", "test_cuda", "nn/*")
    assert run_cli.select_tests(args).paths == [
        upstream / "test_cuda.py",  # excluded by default, run when named
        upstream / "nn" / "test_convolution.py",
    ]


def test_a_folder_without_device_generic_files_is_refused(tmp_path):
    (tmp_path / "test_mine.py").write_text("")
    with pytest.raises(ConfigError, match=r"--tests: no test file under .* instantiates"):
        run_cli.select_tests(parse("--device", "cpu", "--tests", str(tmp_path)))


def test_the_embedded_suite_passes_its_selection_through_the_environment():
    from conformance.embedded import SUITE_DIR

    selection = run_cli.select_tests(parse("--device", "cpu", "--suite", "embedded:core"))
    assert selection.rootdir == SUITE_DIR and selection.suite == "embedded:core"
    assert selection.env == {"CONFORMANCE_SELECTION": "core"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--tests", "/no/such/folder"), "--tests: no such file or folder: /no/such/folder"),
        (("--suite", "embedded:huge"), "--suite: unknown suite 'embedded:huge'"),
        (("--suite", "nightly"), "--suite: unknown suite 'nightly'"),
    ],
)
def test_bad_selections_are_named(argv, message):
    with pytest.raises(ConfigError, match=message):
        run_cli.select_tests(parse("--device", "cpu", *argv))


def test_a_file_pattern_that_matches_nothing_is_named(upstream):
    with pytest.raises(ConfigError, match=r"--files: no test file in .* matches 'test_linalg'"):
        run_cli.select_tests(
            parse("--device", "cpu", "--tests", str(upstream), "--files", "test_linalg")
        )
    with pytest.raises(ConfigError, match=r"--files: no test file in .* matches 'nn/test_x\.py'"):
        run_cli.select_tests(
            parse("--device", "cpu", "--tests", str(upstream), "--files", "nn/test_x.py")
        )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("-n", "0"), "-n: expected a number >= 1 or auto"),
        (("--shard", "3/2"), "--shard: expected K/N"),
        (("--shard", "x"), "--shard: expected K/N"),
        (("--device", "nosuchdev"), "unknown device 'nosuchdev'"),
        (("--skiplist", "/no/such.toml"), "--skiplist: no such file: /no/such.toml"),
        (("--mode", "compile", "--trace-ops"), "--trace-ops: op tracing runs under a dispatch"),
        (("--mode", "compile", "--profile"), "--profile: compiling dispatches ATen ops on fake"),
    ],
)
def test_usage_errors_stop_before_any_run(upstream, tmp_path, argv, message):
    args = parse(
        "--device", "cpu", "--tests", str(upstream), "--runs-root", str(tmp_path / "runs"), *argv
    )
    with pytest.raises(ConfigError, match=message):
        run_cli.run_command(args)
    assert not (tmp_path / "runs").exists()


def write_run(path, outcomes, *, complete=True, collected=None, expected=None):
    writer = RunWriter(path, RunMeta(run_id=path.name, backend="cpu", expected=expected))
    for i, (outcome, message) in enumerate(outcomes):
        writer.write(
            ResultRecord(
                run_id=path.name,
                nodeid=f"t{i}",
                test_id=f"t{i}",
                file="f.py",
                outcome=outcome,
                message=message,
            )
        )
    if complete:
        writer.close(collected=len(outcomes) if collected is None else collected)


@pytest.mark.parametrize(
    ("outcomes", "options", "code"),
    [
        (
            [("passed", ""), ("xfailed", ""), ("skipped", ""), ("deselected", ""), ("xpassed", "")],
            {},
            0,
        ),
        ([("passed", ""), ("failed", "AssertionError")], {}, 1),
        ([("passed", ""), ("crashed", "")], {}, 1),
        ([("passed", ""), ("timeout", "")], {}, 1),
        ([("xpassed", "[XPASS(strict)] known_bug: fixed")], {}, 1),
        ([("passed", "")], {"complete": False}, 1),
        ([("passed", "")], {"expected": 10}, 1),
    ],
)
def test_the_exit_code_says_whether_every_outcome_was_expected(tmp_path, outcomes, options, code):
    write_run(tmp_path / "r", outcomes, **options)
    assert run_cli.judge(tmp_path / "r") == code


def test_upstream_fetches_the_tag_and_runs_the_chosen_files(upstream, monkeypatch):
    import conformance.fetch

    fetched = []
    monkeypatch.setattr(
        conformance.fetch, "fetch_tests", lambda tag: fetched.append(tag) or upstream
    )
    monkeypatch.setattr(conformance.fetch, "torch_tag", lambda: "v2.13.0")
    selection = run_cli.select_tests(parse("--device", "cpu", "--upstream", "--files", "test_ops"))
    assert fetched == ["v2.13.0"] and selection.suite == "upstream:v2.13.0"
    assert selection.paths == [upstream / "test_ops.py"]
    run_cli.select_tests(parse("--device", "cpu", "--upstream", "v2.12.0"))
    assert fetched[-1] == "v2.12.0"


def test_list_files_prints_the_selection_and_runs_nothing(upstream, tmp_path, capsys):
    from conformance.cli import main

    runs = tmp_path / "runs"
    argv = ["run", "--device", "nosuchdev", "--tests", str(upstream), "--runs-root", str(runs)]
    assert main([*argv, "--list-files"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "test_binary_ufuncs.py",
        "test_nn.py",
        "test_ops.py",
        "test_unary_ufuncs.py",
        "nn/test_convolution.py",
    ]
    assert main([*argv, "--files", "test_ops", "nn/*", "--list-files"]) == 0
    assert capsys.readouterr().out.splitlines() == ["test_ops.py", "nn/test_convolution.py"]
    assert not runs.exists()  # nothing ran, and the device was never loaded

    assert main([*argv, "--list-files", "--rerun", "latest"]) == 2
    assert "--list-files: lists the selection" in capsys.readouterr().err


def test_files_that_share_a_module_name_run_side_by_side(upstream, tmp_path, capsys):
    from conformance.cli import main

    (upstream / "functorch").mkdir()
    (upstream / "functorch" / "test_ops.py").write_text(GENERIC)
    argv = [
        "run",
        "--device",
        "cpu",
        "--tests",
        str(upstream),
        "--files",
        "test_ops",
        "functorch/*",
    ]
    assert main([*argv, "--list-files"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["test_ops.py", "functorch/test_ops.py"]
    assert "note: test_ops.py, functorch/test_ops.py share a module name" in err
    # pytest alone collects one of them; a run imports the second under a name of its own,
    # its folder first on sys.path, so its sibling helper imports as upstream's do.
    (upstream / "functorch" / "helper_db.py").write_text("VALUE = 3\n")
    (upstream / "test_ops.py").write_text(DEVICE_TEST)
    (upstream / "functorch" / "test_ops.py").write_text(
        "from helper_db import VALUE\nimport functorch\nassert hasattr(functorch, 'vmap')\n"
        + DEVICE_TEST
    )
    runs = tmp_path / "runs"
    assert main([*argv, "--runs-root", str(runs), "-n", "1", "--progress-interval", "0"]) == 0
    _, frame = read_run(runs / "latest")
    files = frame.groupby("file").size().to_dict()
    assert set(files) == {"test_ops.py", "functorch/test_ops.py"}
    assert files["test_ops.py"] == files["functorch/test_ops.py"]
    assert set(frame.outcome) <= {"passed", "skipped"}


@pytest.mark.slow
def test_list_tests_counts_what_each_file_collects_on_the_device(tmp_path, capsys):
    from conformance.cli import main

    folder = tmp_path / "test"
    (folder / "nn").mkdir(parents=True)
    shutil.copy(FIXTURES / "test_fixture_ops.py", folder / "test_fixture_ops.py")
    shutil.copy(FIXTURES / "test_fixture_ops.py", folder / "nn" / "test_fixture_nn.py")
    (folder / "test_broken.py").write_text("import no_such_module\n" + GENERIC)
    code = main(["run", "--device", "cpu", "--tests", str(folder), "--list-tests"])
    out, err = capsys.readouterr()
    rows = dict(line.split("\t") for line in out.splitlines())
    assert rows["nn/test_fixture_nn.py"] == rows["test_fixture_ops.py"] != "0"
    assert rows["test_broken.py"] == "0"
    assert int(rows["total"]) == 2 * int(rows["test_fixture_ops.py"])
    assert list(rows) == ["test_broken.py", "test_fixture_ops.py", "nn/test_fixture_nn.py", "total"]
    assert "test_broken.py: ModuleNotFoundError" in err and code == 1
