"""A backend's claims checked against the feature matrix (``conformance report --claims``):
the file format and its errors, the verdicts on hand-made records, and what the terminal,
summary.json, summary.md and features.html say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.errors import ConfigError
from conformance.model import ResultRecord
from reports.claims import CLAIMABLE, apply_claims, load_claims, parse_claims
from reports.features import AREAS, build_features
from reports.viewmodel import prepare
from tests.reports.conftest import frame_of, record, run_report, write_small_run

REPOSITORY = Path(__file__).resolve().parents[2]
AUTOCAST = "embedded/test_autocast.py::TestAutocast::"
PROFILER = "embedded/test_profiler.py::TestProfiler::"
MODULES = "embedded/test_modules.py::TestModule::"


def autocast_and_profiler(mode: str = "eager") -> list[ResultRecord]:
    """Autocast's 2 tests pass (supported), one of Profiler's 2 fails (partial), one of nn
    modules' 3 tests is refused as needing dynamic shapes and 2 pass (partial), and no
    test is sparse (not run)."""
    fields = {"mode": mode}
    return [
        record(AUTOCAST + "test_autocast_mm", "passed", **fields),
        record(AUTOCAST + "test_autocast_conv", "passed", **fields),
        record(PROFILER + "test_profiler_events", "passed", **fields),
        record(
            PROFILER + "test_profiler_memory",
            "failed",
            "numerical_mismatch",
            message="AssertionError: no device time",
            **fields,
        ),
        record(MODULES + "test_forward_nn_Linear_float32", "passed", op="nn.Linear", **fields),
        record(MODULES + "test_forward_nn_ReLU_float32", "passed", op="nn.ReLU", **fields),
        record(
            MODULES + "test_forward_nn_LSTM_float32",
            "xfailed",
            "unsupported_feature",
            detail="dynamic_shapes",
            skip_entry="skiplists/emu.toml:3",
            op="nn.LSTM",
            **fields,
        ),
    ]


def claimed(text: str, mode: str = "eager", records: list[ResultRecord] | None = None):
    """The rows of the records' matrix with the claims of ``text`` for ``mode``, by key."""
    matrix = build_features(prepare(frame_of(records or autocast_and_profiler(mode))))
    apply_claims(matrix, parse_claims(text, "claims.toml"), mode)
    return {row.key: row for row in matrix.rows}


def write_claims(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "claims.toml"
    path.write_text(text, encoding="utf-8")
    return path


# -- Verdicts ------------------------------------------------------------------------------------


def test_a_claim_agrees_differs_or_was_not_run() -> None:
    rows = claimed(
        '[claims]\nautocast = "supported"\nprofiler = "supported"\nsparse = "unsupported"\n'
    )
    assert rows["autocast"].status == "supported" and rows["autocast"].verdict == "agrees"
    assert rows["profiler"].status == "partial" and rows["profiler"].verdict == "differs"
    # No sparse test ran: the claim is not checked.
    assert rows["sparse"].status == "not run" and rows["sparse"].verdict == "not run"
    # An area the file does not claim has no verdict.
    assert rows["modules"].claimed is None and rows["modules"].verdict == ""


def test_a_mode_table_replaces_the_claims_for_runs_in_that_mode() -> None:
    text = '[claims]\nmodules = "supported"\nautocast = "supported"\n\n'
    text += '[claims.compile]\nmodules = "partial"\ncompile = "partial"\n'
    eager = claimed(text, "eager")
    assert eager["modules"].status == "partial" and eager["modules"].verdict == "differs"
    assert eager["compile"].claimed is None  # the compile table's claims are not eager's
    compiled = claimed(text, "compile")
    assert compiled["modules"].claimed == "partial" and compiled["modules"].verdict == "agrees"
    assert compiled["compile"].claimed == "partial" and compiled["compile"].verdict == "agrees"
    # A claim of the top level the compile table leaves alone still holds in compile mode.
    assert compiled["autocast"].claimed == "supported"
    # A run from before modes (no mode in its metadata) is eager.
    claims = parse_claims(text)
    assert (
        claims.for_mode("")
        == claims.for_mode("eager")
        == {
            "modules": "supported",
            "autocast": "supported",
        }
    )


# -- The file format ------------------------------------------------------------------------------


def test_emus_claims_load_and_name_only_known_areas() -> None:
    path = REPOSITORY / "backend" / "features.toml"
    claims = load_claims(path)
    keys = {area.key for area in AREAS}
    every_mode = [claims.statuses, *claims.by_mode.values()]
    assert set(claims.by_mode) == {"compile"}
    for statuses in every_mode:
        assert set(statuses) <= keys and set(statuses.values()) <= set(CLAIMABLE)
    # Every area is claimed, the torch.compile row (compile mode only) in the compile table.
    assert set(claims.statuses) | set(claims.by_mode["compile"]) == keys
    assert claims.for_mode("compile")["compile"] == "partial"
    assert claims.for_mode("eager")["sparse"] == "unsupported"


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        (
            '[claims]\nautocast = "supported"\nautocats = "supported"\n',
            ":3",
            "unknown area 'autocats' (did you mean 'autocast'?); areas: eager_ops, ",
        ),
        (
            '[claims]\n\nautocast = "suported"\n',
            ":3",
            "area 'autocast': status 'suported' (did you mean 'supported'?) is not one of "
            "supported, partial, unsupported",
        ),
        ("[claims]\nautocast = true\n", ":2", "area 'autocast': status True is not one of"),
        (
            '[claims]\nsparse = "not run"\n',
            ":2",
            "area 'sparse': 'not run' is a run's status, not a claim",
        ),
        (
            '[claims]\nautocast = "supported"\n\n[claims.compiled]\nmodules = "partial"\n',
            ":4",
            "unknown mode table [claims.compiled] (did you mean 'compile'?); modes: eager, compile",
        ),
        (
            '[claims]\nautocast = "supported"\n\n[claims.compile]\nmodule = "partial"\n',
            ":5",
            "unknown area 'module' (did you mean 'modules'?)",
        ),
        (
            'backend = "emu"\n[claims]\nautocast = "supported"\n',
            ":1",
            "unknown top-level key 'backend'",
        ),
        ('[claim]\nautocast = "supported"\n', ":1", "unknown top-level key 'claim' (did you mean"),
        ("# nothing claimed\n", "", "no [claims] table of area = status"),
        ("[claims]\n", ":1", "[claims] states no claim"),
        ("[claims]\nautocast = supported\n", ":2", "not a valid TOML claims file: "),
        ('{"claims": {"autocast": "supported"}}\n', ":1", "not a valid TOML claims file: "),
    ],
)
def test_a_bad_claims_file_exits_2_naming_the_file_line_and_value(
    runs_root: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    where: str,
    message: str,
) -> None:
    path = write_claims(tmp_path, text)
    out = tmp_path / "report"
    code = run_report(
        ["run-b", "--runs-root", str(runs_root), "--out", str(out), "--claims", str(path)]
    )
    printed = capsys.readouterr().out
    assert code == 2
    assert f"conformance report: error: {path}{where}: {message}" in printed
    assert not out.exists()  # nothing rendered


def test_a_missing_claims_file_exits_2(runs_root: Path, tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nope.toml"
    code = run_report(["run-b", "--runs-root", str(runs_root), "--claims", str(missing)])
    assert code == 2
    assert f"{missing}: cannot read the claims file" in capsys.readouterr().out


def test_a_line_is_found_for_a_mode_table_written_inline() -> None:
    with pytest.raises(ConfigError, match=r"^c\.toml:3: unknown area 'dynamic'"):
        parse_claims(
            '[claims]\nautocast = "supported"\ncompile = {dynamic = "partial"}\n', "c.toml"
        )


# -- The report ---------------------------------------------------------------------------------


def write_run(tmp_path: Path, mode: str = "eager") -> Path:
    records = autocast_and_profiler(mode)
    return write_small_run(
        tmp_path / "runs", f"run-{mode}", records, coverage=False, mode=mode, collected=7
    )


def test_a_claim_that_differs_makes_the_report_exit_1_and_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path)
    claims = write_claims(
        tmp_path,
        '[claims]\nautocast = "supported"\nprofiler = "supported"\nsparse = "unsupported"\n',
    )
    out = tmp_path / "report"
    assert run_report([str(run), "--out", str(out), "--claims", str(claims)]) == 1
    printed = capsys.readouterr().out
    assert f"  claims: 1 agree, 1 differ, 1 not run ({claims}, eager mode)\n" in printed
    assert (
        "    differs: Profiler: claimed supported, measured partial: 1 of 2 judged tests "
        "passed natively (50.0%) (numerical_mismatch (1))\n" in printed
    )
    assert printed.count("differs:") == 1

    data = json.loads((out / "summary.json").read_text())["features"]
    assert data["claims_file"] == str(claims)
    assert data["claims"] == [
        {"area": "autocast", "claimed": "supported", "measured": "supported", "verdict": "agrees"},
        {"area": "profiler", "claimed": "supported", "measured": "partial", "verdict": "differs"},
        {"area": "sparse", "claimed": "unsupported", "measured": "not run", "verdict": "not run"},
    ]
    text = (out / "summary.md").read_text()
    assert (
        f"Claims of `{claims}` (eager mode): 1 agree, **1 differ**, 1 not run (not checked)."
        in text
    )
    assert "- Profiler: claimed supported, measured partial: 1 of 2 judged tests" in text
    assert "| area | status | claimed | native pass |" in text
    assert "| Profiler | partial | **supported** (differs) | 50.0% |" in text
    assert "| Autocast | supported | supported | 100.0% |" in text
    page = (out / "features.html").read_text()
    assert '<th title="the status' in page and ">claimed</th>" in page
    assert '<tr id="profiler" class="differs">' in page
    assert '<tr id="autocast">' in page
    assert '<span class="claim-differs">1 differ</span>' in page
    area = (out / "features" / "profiler.html").read_text()
    assert (
        'Claimed <span class="fstatus supported">supported</span>: '
        '<span class="claim-differs">differs</span>.' in area
    )


def test_claims_that_agree_exit_0_in_the_runs_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path, "compile")
    claims = write_claims(
        tmp_path,
        '[claims]\nautocast = "supported"\nmodules = "supported"\n\n'
        '[claims.compile]\nmodules = "partial"\nprofiler = "partial"\n',
    )
    out = tmp_path / "report"
    assert run_report([str(run), "--out", str(out), "--claims", str(claims)]) == 0
    printed = capsys.readouterr().out
    assert f"  claims: 3 agree, 0 differ, 0 not run ({claims}, compile mode)\n" in printed
    assert "differs:" not in printed
    data = json.loads((out / "summary.json").read_text())["features"]
    assert {c["area"]: c["verdict"] for c in data["claims"]} == {
        "modules": "agrees",
        "autocast": "agrees",
        "profiler": "agrees",
    }
    assert "0 differ, 0 not run (not checked)." in (out / "summary.md").read_text()
    assert 'class="differs"' not in (out / "features.html").read_text()


def test_without_claims_the_report_is_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path)
    out = tmp_path / "report"
    assert run_report([str(run), "--out", str(out)]) == 0
    assert "claims:" not in capsys.readouterr().out
    data = json.loads((out / "summary.json").read_text())["features"]
    assert data["claims"] is None and data["claims_file"] is None
    assert "claimed" not in (out / "summary.md").read_text()
    assert ">claimed</th>" not in (out / "features.html").read_text()


def test_the_help_says_a_difference_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_report(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--claims FILE" in text
    assert "1 when --claims is given and a claim differs from the measured status" in text
