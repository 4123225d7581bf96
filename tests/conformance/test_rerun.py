"""Reruns: a run of only the tests earlier records select, amending the run they came from."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas  # noqa: F401 (loaded before pytester, whose module snapshot would drop it)
import pyarrow.parquet  # noqa: F401
import pytest
import torch  # noqa: F401 (likewise: torch cannot be imported a second time in a process)

from conformance.cli import main
from conformance.errors import ConfigError
from conformance.rerun import parse_where
from conformance.store import read_as_amended, read_run
from op_coverage.triage import blocked_tests

FIXTURE = """
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestRerun(TestCase):
    @dtypes(torch.float32, torch.float64)
    def test_compress(self, device, dtype):
        torch.ops.aten._cslt_compress(torch.ones(4, 4, device=device, dtype=dtype))

    @dtypes(torch.float32, torch.float64)
    def test_mismatch(self, device, dtype):
        self.assertEqual(torch.ones(2, device=device), torch.zeros(2, device=device))

    def test_passes(self, device):
        self.assertEqual(torch.ones(2, device=device).sum().item(), 2.0)


instantiate_device_type_tests(TestRerun, globals())
"""


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.slow
def test_a_rerun_runs_exactly_the_selected_tests_and_leaves_the_base_run_alone(
    pytester: pytest.Pytester, capsys
):
    path = pytester.makepyfile(test_rerun=FIXTURE)
    runs = pytester.path / "runs"
    common = ["run", "--device", "cpu", "--tests", str(path), "-n", "1", "--no-skiplist"]
    common += ["--runs-root", str(runs)]
    assert main([*common, "--run-id", "base"]) == 1
    base_meta, base = read_run(runs / "base")
    before = snapshot(runs / "base")

    blocked = blocked_tests(base)
    expected = set(blocked.loc[blocked["blocking_op"] == "aten::_cslt_compress", "test_id"])
    assert len(expected) == 2
    where = ["--where", "blocking=aten::_cslt_compress"]
    assert main([*common, "--rerun", "base", *where, "--run-id", "fix"]) == 1
    out = capsys.readouterr().out
    assert "rerun of 2 tests of base (blocking=aten::_cslt_compress) in 1 file(s)" in out
    meta, frame = read_run(runs / "fix")
    assert set(frame["test_id"]) == expected and meta.collected == 2 and meta.complete
    assert meta.amends == "base" and meta.suite == base_meta.suite
    assert snapshot(runs / "base") == before  # the base run is never rewritten

    # By outcome and template together: the mismatches only.
    where = ["--where", "outcome=failed", "--where", "template=test_mismatch"]
    assert main([*common, "--rerun", "base", *where, "--run-id", "mismatch"]) == 1
    _, frame = read_run(runs / "mismatch")
    assert sorted(frame["test_id"]) == [
        f"test_rerun.py::TestRerun::test_mismatch_{d}" for d in ("float32", "float64")
    ]
    # Each failure can be run again alone, as the run ran it.
    assert (
        main(["repro", str(runs / "base"), "test_rerun.py::TestRerun::test_mismatch_float32"]) == 0
    )
    out = capsys.readouterr().out
    assert "in run base on cpu: failed (numerical_mismatch values)" in out
    lines = out.splitlines()
    command = lines[lines.index("run it alone:") + 1].strip()
    assert "template test_mismatch of upstream has no standalone script" in out
    assert command.startswith(f"cd {pytester.path} && ")
    assert "test_rerun.py::TestRerunCPU::test_mismatch_cpu_float32 --device cpu" in command
    # "python" as in the environment the runs were made in (this interpreter's).
    bin_dir = Path(sys.executable).parent
    alone = pytester.run("bash", "-c", f'PATH="{bin_dir}:$PATH"; {command}')
    assert alone.ret == 1 and "1 failed" in alone.stdout.str()

    # Nothing matches: a clear error, no run written.
    assert main([*common, "--rerun", "base", "--where", "outcome=crashed"]) == 2
    assert "no test of base matches outcome=crashed" in capsys.readouterr().err


@pytest.mark.slow
def test_reports_triage_and_update_show_a_base_run_amended_by_its_reruns(
    pytester: pytest.Pytester, capsys
):
    import json

    path = pytester.makepyfile(test_rerun=FIXTURE)
    runs = pytester.path / "runs"
    common = ["run", "--device", "cpu", "--tests", str(path), "-n", "1", "--no-skiplist"]
    common += ["--runs-root", str(runs)]
    assert main([*common, "--run-id", "base"]) == 1
    before = snapshot(runs / "base")
    # The contributor's fix lands: the op no longer fails; rerun what it blocked.
    path.write_text(FIXTURE.replace("torch.ops.aten._cslt_compress(", "torch.abs("))
    where = ["--where", "blocking=aten::_cslt_compress"]
    assert main([*common, "--rerun", "base", *where, "--run-id", "fix"]) == 0
    capsys.readouterr()

    assert main(["ops", "triage", str(runs / "base"), "--json"]) == 0
    ranked = [row["op"] for row in json.loads(capsys.readouterr().out)["ranked"]]
    assert ranked == ["aten::_cslt_compress"]
    assert main(["ops", "triage", str(runs / "base"), "--amend", str(runs / "fix"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ranked"] == []  # the gain shows at once

    out = pytester.path / "report"
    assert (
        main(["report", str(runs / "base"), "--amend", str(runs / "fix"), "--out", str(out)]) == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    totals = summary["totals"]
    assert (totals["passed"], totals["failed"]) == (3, 2)  # was 1 passed, 4 failed
    assert summary["meta"]["amended_by"] == ["fix"]
    assert "Run `base` amended by rerun `fix` (" in (out / "summary.md").read_text()
    assert snapshot(runs / "base") == before  # amended views never rewrite the base run

    # A rerun of another run does not amend this one.
    assert main([*common, "--run-id", "other"]) == 1
    assert main(["ops", "triage", str(runs / "base"), "--amend", str(runs / "other")]) == 2
    assert "amends no run, not base" in capsys.readouterr().err

    # skiplist update from the amended view: only what still fails gets an entry.
    listed = pytester.path / "cpu.toml"
    listed.write_text("[skiplist]\n")
    update = ["skiplist", "update", "--from", str(runs / "base"), "--amend", str(runs / "fix")]
    assert main([*update, "--skiplist", str(listed), "--to", str(listed), "--torch", "2.13.0"]) == 0
    written = listed.read_text()
    assert "test_mismatch_float32" in written and "test_mismatch_float64" in written
    assert "_cslt_compress" not in written  # fixed by the rerun: nothing to list
    capsys.readouterr()

    # The next fix, rerun from the first rerun: it amends the same base, and selects from
    # the base amended by the first rerun (the two mismatches are all that still fail).
    path.write_text(path.read_text().replace("torch.zeros(2, device=device)", "torch.ones(2)"))
    assert main([*common, "--rerun", "fix", "--where", "outcome=failed", "--run-id", "fix2"]) == 0
    meta, frame = read_run(runs / "fix2")
    assert meta.amends == "base" and frame["template"].tolist() == ["test_mismatch"] * 2
    _, whole = read_as_amended(runs / "fix2")
    assert len(whole) == 5 and set(whole["outcome"]) == {"passed"}
    # ops diff of the base run and the last rerun: every blocked test unblocked.
    for run in ("base", "fix2"):
        assert main(["ops", "snapshot", str(runs / run), "--no-opinfo"]) == 0
    capsys.readouterr()
    assert main(["ops", "diff", str(runs / "base"), str(runs / "fix2"), "--json"]) == 0
    tests = json.loads(capsys.readouterr().out)["tests"]
    assert tests["unblocked"] == [
        f"test_rerun.py::TestRerun::test_compress_{d}" for d in ("float32", "float64")
    ]
    written = snapshot(runs / "base")
    assert written.pop("op_coverage.json") and written == before  # the snapshot asked for


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        (["outcome"], "expected KEY=VALUE"),
        (["colour=red"], "KEY one of outcome"),
        (["outcome=failed", "outcome=error"], "outcome given twice"),
        (["test_id=test_(x"], "test_id='test_(x'"),
    ],
)
def test_bad_filters_are_named(specs, message):
    with pytest.raises(ConfigError, match="--where") as caught:
        parse_where(specs)
    assert message in str(caught.value)


def test_alternatives_are_comma_separated():
    assert parse_where(["outcome=failed, error", "template=test_out"]) == {
        "outcome": ("failed", "error"),
        "template": ("test_out",),
    }
