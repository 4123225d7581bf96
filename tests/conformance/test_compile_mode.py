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


#: A Dynamo backend that runs emu's and counts the compiled graphs it runs.
COUNTING_BACKEND = "conformance_test_counting_emu"
_GRAPH_RUNS: list[int] = []


def _counting_emu_backend(gm, example_inputs):
    from torch_emu.compiler import emu_backend

    compiled = emu_backend(gm, example_inputs)

    def run(*args):
        _GRAPH_RUNS.append(1)
        return compiled(*args)

    return run


@pytest.fixture
def compile_mode(monkeypatch):
    """Compile mode in this process, with the counting backend and no compiled call held."""
    import torch

    from conformance.backends import COMPILE_BACKEND_ENV
    from conformance.embedded import MODE_ENV
    from conformance.embedded._samples import compiled_calls

    if COUNTING_BACKEND not in torch._dynamo.list_backends(exclude_tags=()):
        torch._dynamo.register_backend(_counting_emu_backend, name=COUNTING_BACKEND)
    monkeypatch.setenv(MODE_ENV, "compile")
    monkeypatch.setenv(COMPILE_BACKEND_ENV, COUNTING_BACKEND)
    compiled_calls.clear()
    yield compiled_calls
    compiled_calls.clear()


def _breaks_when(x, flag):
    import torch

    if flag:
        torch._dynamo.graph_break()
    return x + 1


def _outcome(fn, sample) -> tuple:
    """What a call gives: its result on the CPU (values, strides, requires_grad), or its
    exception's type."""
    import torch

    from conformance.embedded._samples import call, tensor_outputs, to_cpu

    try:
        result = call(fn, sample)
    except Exception as exc:
        return ("raised", type(exc).__name__)
    return (
        "returned",
        to_cpu(result),
        [(t.stride(), t.requires_grad) for t in tensor_outputs(result)],
        torch.is_tensor(result) and result.data_ptr() == sample.input.data_ptr(),
    )


def test_compiled_calls_are_reused_always_run_compiled_and_give_a_fresh_compilations_results(
    compile_mode, monkeypatch
):
    """Compile mode keeps a compiled callable per function across calls and tests. Every
    call still runs a compiled graph (none falls back to eager: not at Dynamo's recompile
    limit, not after a failed compilation, not after the memory bound drops them all), and
    every call gives what a fresh compilation of it alone gives, also where samples differ
    in what Dynamo's guards leave out (a leaf or not, a view's storage offset)."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.testing._internal.opinfo.core import SampleInput

    torch.manual_seed(0)

    def emu(*shape):
        return torch.randn(*shape).to("emu")

    base = torch.arange(12.0).to("emu")
    leaf = emu(3, 4).requires_grad_()
    exp = next(op for op in op_db if op.name == "exp")
    cases = [
        (torch.add, SampleInput(emu(3, 4), args=(emu(3, 4),), kwargs={"alpha": 2.0})),
        (torch.add, SampleInput(emu(3, 4), args=(emu(3, 4),), kwargs={"alpha": 3.0})),
        (torch.add, SampleInput(emu(3, 4), args=(emu(3, 4),), kwargs={"alpha": 3})),
        (torch.Tensor.exp, SampleInput(leaf)),
        (torch.Tensor.exp, SampleInput(emu(3, 4))),
        (torch.Tensor.exp, SampleInput(emu(4, 3).t())),
        (exp, SampleInput(emu(3, 4))),  # an OpInfo: its op is compiled
        (torch.sum, SampleInput(emu(3, 4), args=(0,))),
        (torch.sum, SampleInput(emu(3, 4), args=(1,))),
        # In place on a non-leaf that requires grad works; on such a leaf it must fail.
        (torch.Tensor.mul_, SampleInput(leaf * 1, args=(2.0,))),
        (torch.Tensor.mul_, SampleInput(emu(3, 4).requires_grad_(), args=(2.0,))),
        # Outputs that view the input, from inputs at other storage offsets.
        (torch.narrow, SampleInput(base[0:6], args=(0, 1, 3))),
        (torch.narrow, SampleInput(base[4:10], args=(0, 1, 3))),
        (_breaks_when, SampleInput(emu(3), args=(True,))),
        (_breaks_when, SampleInput(emu(3), args=(False,))),
    ]
    # More shapes of one function than Dynamo's default recompile limit (8).
    cases += [(torch.sin, SampleInput(emu(2, n))) for n in range(1, 13)]

    # Each call compiled alone, as compile mode once compiled every call.
    fresh = [_outcome(_compiled_alone(fn), _copy(sample)) for fn, sample in cases]
    assert fresh[10] == ("raised", "TorchRuntimeError")  # in place on a leaf
    assert fresh[13] == ("raised", "Unsupported")  # the graph break
    assert all(outcome[0] == "returned" for i, outcome in enumerate(fresh) if i not in (10, 13))

    compile_mode.clear()
    graphs = []
    for round_ in range(2):  # the second round runs the first round's graphs
        for index, (fn, sample) in enumerate(cases):
            runs = len(_GRAPH_RUNS)
            got = _outcome(fn, _under_test(_copy(sample)))
            assert _same(got, fresh[index]), (round_, index, got, fresh[index])
            if got[0] == "returned":
                assert len(_GRAPH_RUNS) > runs, f"call {index} ran eagerly (round {round_})"
        graphs.append(compile_mode.graphs)
    # One graph a call but for the two that fail to compile; then one: the failed
    # compilation dropped _breaks_when's callable, so its next call compiles again.
    assert graphs == [len(cases) - 2, len(cases) - 1]

    # The memory bound drops every callable and resets Dynamo; calls compile again.
    monkeypatch.setattr(compile_mode, "max_graphs", 3)
    for index in range(len(cases) - 12, len(cases)):
        fn, sample = cases[index]
        runs = len(_GRAPH_RUNS)
        assert _same(_outcome(fn, _under_test(_copy(sample))), fresh[index])
        assert len(_GRAPH_RUNS) > runs
        assert compile_mode.graphs <= 3


def _compiled_alone(fn):
    """``fn`` compiled afresh for each call (a reset, then ``torch.compile``)."""
    from conformance.embedded._samples import compiled

    def run(*args, **kwargs):
        return compiled(lambda *a, **k: fn(*a, **k), "emu")(*args, **kwargs)

    return run


def _copy(sample):
    """A sample with copies of its tensors (in-place calls write the copies), each a leaf or
    not, a view at its offset or not, as the original is."""
    import torch
    from torch.testing._internal.opinfo.core import SampleInput

    def copy(t):
        if not isinstance(t, torch.Tensor):
            return t
        if t._is_view():
            base = t._base.detach().clone()
            return base.as_strided(t.size(), t.stride(), t.storage_offset())
        fresh = t.detach().clone().requires_grad_(t.requires_grad)
        return fresh if t.is_leaf else fresh * 1

    return SampleInput(copy(sample.input), args=tuple(map(copy, sample.args)), kwargs=sample.kwargs)


def _under_test(sample):
    from conformance.embedded._samples import under_test

    return under_test(sample, "emu")


def _same(a: tuple, b: tuple) -> bool:
    import torch

    if a[0] != b[0] or a[0] == "raised":
        return a == b
    try:
        torch.testing.assert_close(a[1], b[1], rtol=0, atol=0)
    except AssertionError:
        return False
    return a[2:] == b[2:]
