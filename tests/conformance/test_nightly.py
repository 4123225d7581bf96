"""The nightly pipeline, rehearsed on one machine: shards on emu and cpu, merged, joined,
reported with trends; the next night balances its shards by the last one's durations."""

from __future__ import annotations

import json

import pytest

from conformance.cli import main
from conformance.store import list_runs, read_run


@pytest.mark.slow
def test_a_rehearsal_runs_the_nightly_steps_and_the_next_night_reuses_its_durations(
    tmp_path, monkeypatch, capsys
):
    pytest.importorskip("torch_emu")
    monkeypatch.chdir(tmp_path)
    # Module templates run in both modes, so the compile leg compiles them.
    small = ["--files", "test_modules.py", "-n", "1"]
    assert main(["nightly", "rehearse", "--shards", "2", *small, "--run-id", "night1"]) == 0
    out = capsys.readouterr().out
    assert "--shard-durations" not in out  # the first night has no history to balance by

    runs = {meta.run_id: meta for meta in list_runs(tmp_path / "history")}
    # Both modes on the device (the default), the cpu baseline eager.
    assert set(runs) == {"nightly-night1-emu", "nightly-night1-emu-compile", "nightly-night1-cpu"}
    assert runs["nightly-night1-emu-compile"].mode == "compile"
    assert runs["nightly-night1-emu"].mode == runs["nightly-night1-cpu"].mode == "eager"
    emu_meta, emu = read_run(tmp_path / "history" / "nightly-night1-emu")
    cpu_meta, cpu = read_run(tmp_path / "history" / "nightly-night1-cpu")
    assert emu_meta.complete and cpu_meta.complete and emu_meta.shard == ""
    assert set(emu["shard"]) == {"1/2", "2/2"}
    # The baseline on demand: cpu ran the tests that did not pass on emu, in either mode.
    _, emu_compile = read_run(tmp_path / "history" / "nightly-night1-emu-compile")
    not_passed = {
        t
        for frame in (emu, emu_compile)
        for t in frame.loc[frame["outcome"] != "passed", "test_id"]
    }
    assert set(cpu["test_id"]) == not_passed and len(cpu) < len(emu)
    assert cpu_meta.baseline_for.split(",") == [
        "emu-shard-1", "emu-compile-shard-1", "emu-shard-2", "emu-compile-shard-2"
    ]  # fmt: skip
    assert emu["ops_dispatched"].map(len).sum() > 0  # the device's shards trace ops
    joined = json.loads((tmp_path / "history" / "nightly-night1-emu" / "baseline.json").read_text())
    emu_not_passed = int((emu["outcome"] != "passed").sum())
    assert (joined["on_demand"], joined["needed"], joined["only_here"]) == (
        True,
        emu_not_passed,
        0,
    )  # every test that did not pass on emu is joined
    # Tests that passed eager but not compiled ran on cpu too: joined, not "not re-run".
    assert joined["in_both"] == len(cpu)
    assert joined["not_rerun"] == len(set(emu["test_id"]) - set(cpu["test_id"]))
    assert (tmp_path / "history" / "nightly-night1-emu" / "op_coverage.json").is_file()
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["baseline"]["on_demand"] and summary["baseline"]["warning"] is None
    assert summary["baseline"]["needed"] == emu_not_passed
    assert (tmp_path / "report" / "index.html").is_file()
    compiled = json.loads((tmp_path / "report" / "compile" / "summary.json").read_text())
    assert compiled["meta"]["run"]["mode"] == "compile"
    assert compiled["modes"]["eager_run"] == "nightly-night1-emu"
    assert compiled["modes"]["common"] == len(emu)
    _, emu_compiled = read_run(tmp_path / "history" / "nightly-night1-emu-compile")
    # Compiled, not refused under op tracing: what fails is only what emu's list expects,
    # and only the eager-only templates (error inputs, Module.to()) skip.
    outcomes = set(emu_compiled["outcome"])
    assert "passed" in outcomes and outcomes <= {"passed", "xfailed", "skipped"}, outcomes
    skipped = emu_compiled[emu_compiled["outcome"] == "skipped"]
    assert set(skipped["template"]) <= {"test_errors", "test_to"}, set(skipped["template"])
    compiled_templates = set(emu_compiled[emu_compiled["outcome"] == "passed"]["template"])
    assert {"test_forward", "test_cpu_gpu_parity"} <= compiled_templates

    # The next night's machine: its shard is balanced by the last nightly of both devices.
    code = main(["nightly", "shard", "1/2", *small, "--runs-root", "night2"])
    assert code == 0
    out = capsys.readouterr().out
    durations = "--shard-durations history/nightly-night1-emu --shard-durations "
    # emu's eager and compile runs; cpu's runs only what they did not pass
    assert out.count(durations + "history/nightly-night1-cpu") == 2
    assert "--baseline-for night2/emu-shard-1 --baseline-for night2/emu-compile-shard-1" in out
    _, emu2 = read_run(tmp_path / "night2" / "emu-shard-1")
    cpu2_meta, cpu2 = read_run(tmp_path / "night2" / "cpu-shard-1")
    assert set(cpu2["test_id"]) <= set(emu2["test_id"]) and len(emu2) < len(emu)
    assert cpu2_meta.shard == "1/2"


def test_finish_names_the_shards_it_misses(tmp_path, capsys):
    assert main(["nightly", "finish", "--shards", "2", "--runs-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "shard runs missing" in err and "emu-shard-1" in err and "cpu-shard-2" in err


def test_finish_passes_the_claims_to_the_report_and_a_difference_exits_1(tmp_path, capsys):
    """Shards written by hand (every test passing): ``--claims`` reaches the report, whose
    claim that differs makes finish exit 1 after rendering; a bad file stops it first."""
    from reports.synthetic import write_run
    from tests.reports.conftest import frame_of, record, small_meta

    runs = tmp_path / "runs"
    for device in ("emu", "cpu"):
        records = [
            record(f"embedded/test_autocast.py::TestAutocast::test_autocast_{name}", "passed")
            for name in ("mm", "conv")
        ]
        meta = small_meta(
            f"{device}-shard-1", backend=device, shard="1/1", collected=2, expected=None
        )
        write_run(runs / f"{device}-shard-1", meta, frame_of(records))
    claims = tmp_path / "claims.toml"
    claims.write_text('[claims]\nautocast = "partial"\n', encoding="utf-8")
    finish = ["nightly", "finish", "--shards", "1", "--modes", "eager", "--runs-root", str(runs)]
    finish += ["--history", str(tmp_path / "history"), "--report", str(tmp_path / "report")]

    assert main([*finish, "--claims", str(claims), "--run-id", "one"]) == 1
    out = capsys.readouterr().out
    assert f"--claims {claims}" in out
    assert "differs: Autocast: claimed partial, measured supported" in out
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["features"]["claims"] == [
        {"area": "autocast", "claimed": "partial", "measured": "supported", "verdict": "differs"}
    ]

    claims.write_text('[claims]\nautocast = "supported"\n', encoding="utf-8")
    assert main([*finish, "--claims", str(claims), "--run-id", "two"]) == 0
    assert "claims: 1 agree, 0 differ" in capsys.readouterr().out

    claims.write_text('[claims]\nautocast = "fine"\n', encoding="utf-8")
    assert main([*finish, "--claims", str(claims), "--run-id", "three"]) == 2
    assert f"{claims}:2: area 'autocast': status 'fine'" in capsys.readouterr().err
    assert not (tmp_path / "history" / "nightly-three-emu").exists()  # stopped before merging
