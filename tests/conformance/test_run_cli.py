"""`conformance run`: choosing tests, checking input, judging a finished run (no pytest runs)."""

from __future__ import annotations

import argparse

import pytest

from conformance import run_cli
from conformance.errors import ConfigError
from conformance.model import ResultRecord, RunMeta
from conformance.store import RunWriter


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    run_cli.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["run", *argv])


@pytest.fixture
def upstream(tmp_path):
    folder = tmp_path / "test"
    folder.mkdir()
    for name in (
        "test_ops.py",
        "test_nn.py",
        "test_binary_ufuncs.py",
        "test_unary_ufuncs.py",
        "helper.py",
    ):
        (folder / name).write_text("")
    return folder


def test_a_folder_runs_the_curated_files_it_has_or_the_chosen_ones(upstream):
    selection = run_cli.select_tests(parse("--device", "cpu", "--tests", str(upstream)))
    assert [p.name for p in selection.paths] == [
        "test_ops.py",
        "test_nn.py",
        "test_binary_ufuncs.py",
        "test_unary_ufuncs.py",
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


def test_a_folder_without_curated_files_runs_whole(tmp_path):
    (tmp_path / "test_mine.py").write_text("")
    assert run_cli.select_tests(parse("--device", "cpu", "--tests", str(tmp_path))).paths == [
        tmp_path
    ]


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


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("-n", "0"), "-n: expected a number >= 1 or auto"),
        (("--shard", "3/2"), "--shard: expected K/N"),
        (("--shard", "x"), "--shard: expected K/N"),
        (("--device", "nosuchdev"), "unknown device 'nosuchdev'"),
        (("--skiplist", "/no/such.toml"), "--skiplist: no such file: /no/such.toml"),
        (("--mode", "compile", "--trace-ops"), "--trace-ops: op tracing runs under a dispatch"),
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


def test_upstream_fetches_the_tag_and_runs_the_curated_files(upstream, monkeypatch):
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
