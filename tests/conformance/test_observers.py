"""What the harness adds to a run leaves every outcome as it is: the same selection run with
and without op tracing ends the same way, test by test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.store import read_run

UPSTREAM = Path(__file__).resolve().parents[3] / "shared" / "upstream" / "test"

#: Templates whose checks read what tracing could disturb: view semantics and version
#: counters (Python references, conjugate and negative views), lazy copy-on-write inputs,
#: fake tensors (whose mode sends TorchScript ops such as prim::device through the tracer).
EMBEDDED = (
    "--suite",
    "embedded:smoke",
    "--",
    "-k",
    "python_ref or (conj_view or neg_view or cow_input or test_fake) and (neg or mul or sum or expand)",
)


def _upstream(tmp_path: Path) -> tuple[str, ...]:
    if not (UPSTREAM / "test_view_ops.py").is_file():
        pytest.skip(f"PyTorch's own test files are not at {UPSTREAM}")
    tests = tmp_path / "test"
    tests.mkdir()
    shutil.copy(UPSTREAM / "test_view_ops.py", tests)
    # TestViewOps: views, their bases and version counters; the slow tensor_split tests
    # of the other class add nothing here.
    return ("--tests", str(tests), "--files", "test_view_ops.py", "--", "-k", "TestViewOps")


def _outcomes(tmp_path: Path, run_id: str, selection: tuple[str, ...], *extra: str) -> dict:
    split = selection.index("--")
    argv = ["run", "--device", "emu", *selection[:split], "-n", "2", "--no-skiplist"]
    argv += ["--runs-root", str(tmp_path / "runs"), "--run-id", run_id, "--progress-interval", "0"]
    main([*argv, *extra, *selection[split:]])
    _, frame = read_run(tmp_path / "runs" / run_id)
    return dict(
        zip(frame["test_id"], zip(frame["outcome"], frame["category"], strict=True), strict=True)
    )


@pytest.mark.slow
@pytest.mark.parametrize("which", ["embedded", "upstream"])
def test_op_tracing_leaves_every_outcome_as_it_is(tmp_path, which):
    pytest.importorskip("torch_emu")
    selection = EMBEDDED if which == "embedded" else _upstream(tmp_path)
    plain = _outcomes(tmp_path, "plain", selection)
    traced = _outcomes(tmp_path, "traced", selection, "--trace-ops")
    assert len(plain) > 50
    differ = {t: (plain.get(t), traced.get(t)) for t in plain.keys() | traced.keys()}
    assert {t: d for t, d in differ.items() if d[0] != d[1]} == {}
    _, frame = read_run(tmp_path / "runs" / "traced")
    assert frame["ops_dispatched"].map(len).sum() > 0  # it did trace
