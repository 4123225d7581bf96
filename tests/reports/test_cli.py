"""``conformance report``: what a user types, what they get, and clear errors for bad
input (exit code 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reports.conftest import run_report


def test_report_writes_every_format_and_prints_the_headline(
    runs_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    code = run_report(
        [
            "run-b",
            "--runs-root",
            str(runs_root),
            "--out",
            str(out),
            "--baseline",
            str(runs_root.parent / "baseline" / "cpu"),
            "--compare",
            "run-a",
            "--history",
            str(runs_root),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert printed.startswith("run-b: 12 outcomes, 3 passed (25.0%), 6 failed, 3 skipped")
    assert (
        "  feature matrix: 0 supported, 2 partial, 4 unsupported, 16 not run; "
        "1 changed since run-a\n    integers: supported -> unsupported\n" in printed
    )
    for name in (
        "index.html",
        "summary.json",
        "summary.md",
        "junit.xml",
        "hud.json",
        "diff.html",
        "trends.html",
        "baseline-0.html",
        "static/style.css",
        "features.html",
        "features/eager_ops.html",
    ):
        assert (out / name).is_file(), name


def test_latest_and_a_subset_of_formats(runs_root: Path, tmp_path: Path) -> None:
    (runs_root / "latest").symlink_to("run-b")
    out = tmp_path / "ci"
    assert (
        run_report(
            ["latest", "--runs-root", str(runs_root), "--out", str(out), "--format", "md,hud"]
        )
        == 0
    )
    assert sorted(p.name for p in out.iterdir()) == [
        ".conformance-report",
        ".gitignore",
        "hud.json",
        "summary.md",
    ]
    # Rendering again replaces the earlier report.
    assert run_report([str(runs_root / "run-b"), "--out", str(out), "--format", "json"]) == 0
    assert not (out / "hud.json").exists() and (out / "summary.json").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nope"], "no run named 'nope'"),
        (["run-b", "--format", "html,pdf"], "--format: unknown format pdf"),
        (["run-b", "--compare", "missing"], "no run named 'missing'"),
        (["run-b", "--history", "/no/such/root"], "no such runs folder"),
    ],
)
def test_bad_input_exits_2_naming_what_is_wrong(
    runs_root: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    code = run_report([*argv, "--runs-root", str(runs_root), "--out", str(tmp_path / "o")])
    assert code == 2
    assert message in capsys.readouterr().out
    assert not (tmp_path / "o").exists()


def test_refuses_to_overwrite_a_folder_that_is_not_a_report(
    runs_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    assert run_report(["run-b", "--runs-root", str(runs_root), "--out", str(precious)]) == 2
    assert "holds no report; not overwriting it" in capsys.readouterr().out
    assert (precious / "notes.txt").read_text() == "keep me"


def test_a_failed_render_leaves_the_earlier_report(
    runs_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "report"
    assert (
        run_report(["run-b", "--runs-root", str(runs_root), "--out", str(out), "--format", "md"])
        == 0
    )

    def broken(*args: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr("reports.render.write_junit", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        run_report(
            ["run-b", "--runs-root", str(runs_root), "--out", str(out), "--format", "md,junit"]
        )
    assert sorted(p.name for p in out.iterdir()) == [
        ".conformance-report",
        ".gitignore",
        "summary.md",
    ]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_the_conformance_command_lists_report(
    runs_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from conformance.cli import main

    out = tmp_path / "report"
    assert (
        main(
            ["report", "run-b", "--runs-root", str(runs_root), "--out", str(out), "--format", "hud"]
        )
        == 0
    )
    assert (out / "hud.json").is_file()
    assert main(["report", "nope", "--runs-root", str(runs_root)]) == 2
    assert "conformance report: error: no run named 'nope'" in capsys.readouterr().err


def test_a_run_still_going_on_and_an_empty_run_render(tmp_path: Path) -> None:
    from conformance.model import RunMeta
    from conformance.store import RunWriter
    from tests.reports.conftest import small_records

    live = RunWriter(tmp_path / "live", RunMeta(run_id="live", backend="emu"))
    for result in small_records("live")[:5]:
        live.write(result)  # JSON lines only: no Parquet until the run ends
    assert run_report(["live", "--runs-root", str(tmp_path), "--out", str(tmp_path / "a")]) == 0
    index = (tmp_path / "a" / "index.html").read_text()
    assert "This run did not finish" in index and "<b>5</b> outcomes" in index
    RunWriter(tmp_path / "empty", RunMeta(run_id="empty", backend="emu")).close()
    assert run_report(["empty", "--runs-root", str(tmp_path), "--out", str(tmp_path / "b")]) == 0
    assert "<b>0</b> outcomes" in (tmp_path / "b" / "index.html").read_text()
