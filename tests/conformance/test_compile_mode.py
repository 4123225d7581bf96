"""Compile mode: the harness runs a suite's ops under torch.compile with the device's backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.classify import classify_failure, classify_skip
from conformance.store import read_run

pytestmark = pytest.mark.slow

EMU = pytest.importorskip("torch_emu", reason="emu is not installed")

#: An op emu does not lower eagerly but whose decomposition it lowers, and the op that
#: carries the planted wrong result.
TESTS = "test_compare_cpu_rsub_emu_float32 or test_compare_cpu_exp_emu_float32"

UPSTREAM_STYLE = """
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


class TestRsub(TestCase):
    def test_rsub(self, device):
        a, b = torch.ones(3, device=device), torch.full((3,), 2.0, device=device)
        self.assertEqual(torch.rsub(a, b).cpu(), torch.ones(3))


instantiate_device_type_tests(TestRsub, globals())

if __name__ == "__main__":
    run_tests()
"""


def _conformance(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "EMU_PLANT"} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "conformance", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _outcomes(run_dir: Path) -> dict[str, tuple[str, str, str]]:
    _, frame = read_run(run_dir)
    return {
        row.template + "_" + row.op: (row.outcome, row.category, row.detail)
        for row in frame.itertuples()
    }


def test_compiled_ops_decompose_to_lowered_ops_and_a_planted_bug_fails_in_both_modes(tmp_path):
    runs = tmp_path / "runs"
    common = ["run", "--device", "emu", "--suite", "embedded:full", "--files", "test_ops.py"]
    common += ["--no-skiplist", "-n", "1", "--runs-root", str(runs), "--progress-interval", "0"]
    plant = {"EMU_PLANT": "wrong_result"}
    for mode in ("eager", "compile"):
        done = _conformance(*common, "--mode", mode, "--run-id", mode, "--", "-k", TESTS, env=plant)
        assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]

    eager, compiled = _outcomes(runs / "eager"), _outcomes(runs / "compile")
    assert eager["test_compare_cpu_rsub"] == ("failed", "missing_lowering", "aten::rsub.Tensor")
    assert compiled["test_compare_cpu_rsub"] == ("passed", "", "")
    assert eager["test_compare_cpu_exp"] == ("failed", "numerical_mismatch", "values")
    assert compiled["test_compare_cpu_exp"] == ("failed", "numerical_mismatch", "values")

    meta, frame = read_run(runs / "compile")
    assert meta.mode == "compile" and set(frame["mode"]) == {"compile"}
    assert meta.env["CONFORMANCE_MODE"] == "compile"
    assert set(read_run(runs / "eager")[1]["mode"]) == {"eager"}

    # The mode is in the report's summaries, and --modes joins the two runs.
    out = tmp_path / "report"
    done = _conformance(
        "report", str(runs / "compile"), "--modes", str(runs / "eager"), "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["meta"]["run"]["mode"] == "compile"
    markdown = (out / "summary.md").read_text()
    assert "(embedded:full, compile)" in markdown
    modes = summary["modes"]
    rsub = "embedded/test_ops.py::TestCommon::test_compare_cpu_rsub_float32"
    assert (modes["eager_run"], modes["compile_run"], modes["common"]) == ("eager", "compile", 2)
    assert modes["fail_eager_only"] == [rsub] and modes["fail_compiled_only"] == []
    assert modes["by_op"] == {"rsub": [0, 1]}  # exp fails in both: no difference
    assert "1 fail eager and pass compiled" in markdown
    assert "fail eager and pass compiled" in (out / "ops" / "rsub.html").read_text()
    # Two runs of one mode do not join.
    done = _conformance("report", str(runs / "compile"), "--modes", str(runs / "compile"))
    assert done.returncode == 2 and "ran in compile mode, like this run" in done.stderr


def test_upstream_tests_compile_through_compile_fn_with_the_device_backend(tmp_path):
    test_file = tmp_path / "test_rsub.py"
    test_file.write_text(UPSTREAM_STYLE)
    runs = tmp_path / "runs"
    common = ["run", "--device", "emu", "--tests", str(test_file), "--no-skiplist", "-n", "1"]
    common += ["--runs-root", str(runs), "--progress-interval", "0"]
    eager = _conformance(*common, "--run-id", "eager")
    assert eager.returncode == 1
    (record,) = read_run(runs / "eager")[1].to_dict("records")
    assert (record["category"], record["detail"]) == ("missing_lowering", "aten::rsub.Tensor")
    # Upstream's switch compiles the whole test; with inductor, an emu tensor would fail.
    compiled = _conformance(*common, "--mode", "compile", "--run-id", "compile")
    assert compiled.returncode == 0, compiled.stdout[-3000:] + compiled.stderr[-3000:]
    meta, frame = read_run(runs / "compile")
    assert meta.env["PYTORCH_TEST_WITH_INDUCTOR"] == "1"
    assert frame.to_dict("records")[0]["outcome"] == "passed"


def test_compile_failures_are_classified():
    import torch

    def breaks(x):
        torch._dynamo.graph_break()
        return x + 1

    try:
        torch.compile(breaks, backend="eager", fullgraph=True)(torch.ones(2))
    except Exception as exc:  # torch._dynamo.exc.Unsupported
        assert classify_failure(exc, f"{type(exc).__name__}: {exc}") == (
            "compile_error",
            "graph_break",
        )
    else:
        pytest.fail("fullgraph=True did not refuse a graph break")

    def boom(gm, example_inputs):
        raise ValueError("the backend's compiler broke")

    try:
        torch.compile(lambda x: x.sin(), backend=boom)(torch.ones(2))
    except Exception as exc:  # BackendCompilerFailed
        assert classify_failure(exc, str(exc)) == ("compile_error", "backend_compiler")
    else:
        pytest.fail("a failing backend compiler did not raise")
    # From a report's text alone (an xdist worker's), the same.
    text = "E   torch._dynamo.exc.Unsupported: Shape mismatch with out= tensor variant"
    assert classify_failure(None, text) == ("compile_error", "graph_break")
    assert classify_skip("runs eager only: this template calls no op under torch.compile") == (
        "not_applicable",
        "eager_only",
    )
