"""What the harness adds to a run leaves every outcome as it is: the same selection run with
and without op tracing, and with and without the profiler, ends the same way, test by test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.profile_store import PROFILE_PARQUET_NAME, read_profile
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
    tests.mkdir(exist_ok=True)
    shutil.copy(UPSTREAM / "test_view_ops.py", tests)
    # TestViewOps: views, their bases and version counters; the slow tensor_split tests
    # of the other class add nothing here.
    return ("--tests", str(tests), "--files", "test_view_ops.py", "--", "-k", "TestViewOps")


def _outcomes(root: Path, run_id: str, selection: tuple[str, ...], *extra: str) -> dict:
    split = selection.index("--")
    argv = ["run", "--device", "emu", *selection[:split], "-n", "2", "--no-skiplist"]
    argv += ["--runs-root", str(root / "runs"), "--run-id", run_id, "--progress-interval", "0"]
    main([*argv, *extra, *selection[split:]])
    _, frame = read_run(root / "runs" / run_id)
    return dict(
        zip(frame["test_id"], zip(frame["outcome"], frame["category"], strict=True), strict=True)
    )


#: The plain run of each selection, made once for every observer compared with it.
_plain_runs: dict[str, tuple[Path, tuple[str, ...], dict]] = {}


@pytest.fixture(params=["embedded", "upstream"])
def plain(request, tmp_path_factory) -> tuple[Path, tuple[str, ...], dict]:
    """(folder, selection, outcomes) of the selection run on emu with no observer."""
    pytest.importorskip("torch_emu")
    which = request.param
    if which not in _plain_runs:
        root = tmp_path_factory.mktemp(f"observers-{which}")
        selection = EMBEDDED if which == "embedded" else _upstream(root)
        _plain_runs[which] = (root, selection, _outcomes(root, "plain", selection))
    return _plain_runs[which]


def _differences(plain: dict, observed: dict) -> dict:
    differ = {t: (plain.get(t), observed.get(t)) for t in plain.keys() | observed.keys()}
    return {t: d for t, d in differ.items() if d[0] != d[1]}


@pytest.mark.slow
def test_op_tracing_leaves_every_outcome_as_it_is(plain):
    root, selection, outcomes = plain
    traced = _outcomes(root, "traced", selection, "--trace-ops")
    assert len(outcomes) > 50
    assert _differences(outcomes, traced) == {}
    _, frame = read_run(root / "runs" / "traced")
    assert frame["ops_dispatched"].map(len).sum() > 0  # it did trace


@pytest.mark.slow
def test_profiling_leaves_every_outcome_as_it_is(plain):
    root, selection, outcomes = plain
    profiled = _outcomes(root, "profiled", selection, "--profile")
    assert len(outcomes) > 50
    assert _differences(outcomes, profiled) == {}
    # It did profile: the tests that passed have their ops in the run's Parquet (but one
    # that calls no ATen op, such as upstream's view-dtype check for complex128, which has
    # no larger dtype to try), and no row names a test the run did not record.
    assert (root / "runs" / "profiled" / PROFILE_PARQUET_NAME).is_file()
    _, records = read_run(root / "runs" / "profiled")
    profile = read_profile(root / "runs" / "profiled")
    profiled = set(profile["test_id"])
    passed = set(records.loc[records["outcome"] == "passed", "test_id"])
    assert len(passed) > 50 and len(passed - profiled) <= len(passed) // 100, passed - profiled
    assert profiled <= set(records["test_id"])
    assert profile["op"].str.startswith("aten::").any() and (profile["calls"] > 0).all()


@pytest.mark.slow
def test_op_tracing_reaches_the_ranks_of_distributed_tests(tmp_path):
    # A distributed test's ops run in its ranks: the ranks trace their own and the test
    # process records them, and the outcomes stay as they are.
    pytest.importorskip("torch_emu")
    selection = ("--suite", "embedded:smoke", "--", "-k", "ddp or all_gather_into_tensor")
    plain = _outcomes(tmp_path, "plain", selection)
    traced = _outcomes(tmp_path, "traced", selection, "--trace-ops")
    assert len(plain) >= 6
    assert _differences(plain, traced) == {}
    _, frame = read_run(tmp_path / "runs" / "traced")
    ops = dict(zip(frame["test_id"], frame["ops_dispatched"], strict=True))
    ddp = [test_id for test_id in ops if "test_ddp" in test_id]
    assert ddp and all("aten::addmm" in ops[test_id] for test_id in ddp), ops
