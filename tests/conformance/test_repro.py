"""Repro per failure: the failing sample's index in records, and standalone scripts."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conformance.classify import failing_sample
from conformance.errors import ConfigError
from conformance.model import RECORD_COLUMNS, RunMeta
from conformance.repro_script import (
    SCRIPT_TEMPLATES,
    UPSTREAM_TEMPLATES,
    script_for,
    script_name,
)
from conformance.store import read_records, read_run

#: Blocks the harness: a script that imported it fails at once.
WITHOUT_HARNESS = (
    "import sys; sys.modules['conformance'] = None; sys.argv = sys.argv[1:]; "
    "exec(compile(open(sys.argv[0]).read(), sys.argv[0], 'exec'))"
)


def _run_script(path: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "EMU_PLANT"} | env
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_HARNESS, str(path)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_failing_sample_is_read_from_the_note_upstream_message_or_tracked_input():
    exc = AssertionError("Tensor-likes are not close!")
    exc.add_note("while testing sample 7: SampleInput(input=Tensor[size=(3,)])")
    assert failing_sample(exc) == 7

    # upstream's wrapper (common_device_type.ops): a new Exception whose cause is the error
    try:
        try:
            raise ValueError("boom")
        except ValueError as inner:
            raise Exception(
                "boom\n\nCaused by sample input at index 12: SampleInput(...)"
            ) from inner
    except Exception as outer:
        assert failing_sample(outer) == 12

    class Tracked:
        index, type_desc = 4, "sample input"

    tracked = Exception("boom")
    tracked._tracked_input = Tracked()
    assert failing_sample(tracked) == 4
    Tracked.type_desc = "reference input"  # OpInfo.reference_inputs, as test_compare_cpu draws
    assert failing_sample(tracked) == 4
    Tracked.type_desc = "conjugate sample input"  # another list of samples: no index
    assert failing_sample(Exception("no sample")) is None
    assert failing_sample(tracked) is None


def test_runs_recorded_before_sample_indices_read_minus_one(tmp_path):
    columns = [c for c in RECORD_COLUMNS if c != "sample_index"]
    row = {c: "" for c in columns} | {"duration_s": 0.5, "rerun": 0}
    row |= {"run_id": "old", "nodeid": "a.py::T::t", "test_id": "a.py::T::t", "suite": "upstream"}
    row |= {"ops_dispatched": [], "ops_fallback": [], "outcome": "failed"}
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "outcomes.parquet")
    meta = RunMeta(run_id="old", format_version=3, backend="cpu")
    (tmp_path / "meta.json").write_text(__import__("json").dumps(meta.to_dict()))
    _, frame = read_run(tmp_path)
    assert frame["sample_index"].tolist() == [-1] and frame["outcome"].tolist() == ["failed"]
    assert read_records(tmp_path)[0]["sample_index"] == -1


def _record(template, op, dtype, file="test_ops.py", cls="TestCommon", index=0, params=""):
    return {
        "test_id": f"embedded/{file}::{cls}::{template}_{op}_{dtype}",
        "suite": "embedded",
        "template": template,
        "op": op,
        "dtype": dtype,
        "params": params,
        "sample_index": index,
        "outcome": "failed",
        "category": "numerical_mismatch",
        "detail": "values",
        "message": "AssertionError: Tensor-likes are not close!",
    }


#: One test per kind of script; on the CPU each compares the CPU with itself and agrees.
CASES = [
    _record("test_compare_cpu", "exp", "float32"),
    _record("test_out", "add", "float32", index=1),
    _record("test_noncontiguous_samples", "cos", "float32"),
    _record("test_variant_consistency_eager", "mul", "float32"),
    _record("test_errors", "index_select", ""),
    _record("test_fn_grad_compare_cpu", "tanh", "float32", "test_ops_gradients.py"),
    _record("test_forward_mode_AD", "tanh", "float64", "test_ops_gradients.py"),
    _record("test_forward", "nn.Linear", "float32", "test_modules.py", "TestModule", 1),
    _record(
        "test_cpu_gpu_parity",
        "nn.BatchNorm1d",
        "float32",
        "test_modules.py",
        "TestModule",
        params="training=False",
    ),
]


def _upstream(template, op, dtype, cls="TestCommon", index=0):
    file = "test_ops_gradients.py" if "Gradients" in cls else "test_ops.py"
    return _record(template, op, dtype, index=index) | {
        "test_id": f"{file}::{cls}::{template}_{op}_{dtype}",
        "suite": "upstream",
        "test_class": cls,
    }


#: One test per upstream template a script is written for.
UPSTREAM_CASES = [
    _upstream("test_compare_cpu", "exp", "float32", index=3),
    _upstream("test_out", "add", "float32", index=1),
    _upstream("test_out_warning", "sub", "float32"),
    _upstream("test_noncontiguous_samples", "cos", "float32", index=2),
    _upstream("test_variant_consistency_eager", "mul", "complex64"),
    _upstream("test_errors", "index_select", ""),
    _upstream("test_fn_grad", "tanh", "float64", "TestBwdGradients"),
    _upstream("test_fn_gradgrad", "sin", "float64", "TestBwdGradients"),
    _upstream("test_forward_mode_AD", "tanh", "float64", "TestFwdGradients"),
]


def test_scripts_seed_as_the_suite_does():
    from conformance import repro_script
    from conformance.embedded._samples import SEED

    assert repro_script._SEED == SEED  # a script rebuilds the very sample the test drew


def test_every_kind_of_script_is_covered():
    assert {SCRIPT_TEMPLATES[r["template"]] for r in CASES} == set(SCRIPT_TEMPLATES.values())
    assert {r["template"] for r in UPSTREAM_CASES} == set(UPSTREAM_TEMPLATES)


@pytest.mark.slow
def test_scripts_of_every_kind_run_and_agree_on_the_cpu(tmp_path):
    paths = []
    for record in CASES + UPSTREAM_CASES:
        path = tmp_path / script_name(record)
        path.write_text(script_for(record, device="cpu", selection="smoke", backend_module=""))
        paths.append(path)
    # One interpreter runs them all (torch's import is most of each script's time).
    driver = (
        "import runpy, sys\n"
        "sys.modules['conformance'] = None\n"
        "for path in sys.argv[1:]:\n"
        "    print('==', path, flush=True)\n"
        "    try:\n"
        "        runpy.run_path(path, run_name='__main__')\n"
        "    except SystemExit as stop:\n"
        "        print('exit', stop.code, flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", driver, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=600,
        env={k: v for k, v in os.environ.items() if k != "EMU_PLANT"},
    )
    assert done.returncode == 0, done.stderr
    reports = done.stdout.split("== ")[1:]
    assert len(reports) == len(paths), done.stdout
    for report in reports:
        assert report.rstrip().endswith("exit 0"), report
        assert "FAIL" not in report and "ok    " in report, report


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"suite": "upstream", "template": "test_python_ref"},
            "template test_python_ref of upstream has no standalone script",
        ),
        (
            {"template": "test_dtypes"},
            "template test_dtypes of the embedded suite has no standalone script",
        ),
        ({"sample_index": -1}, "the record names no failing sample"),
    ],
)
def test_tests_without_a_standalone_repro_are_named(change, message):
    record = _record("test_compare_cpu", "exp", "float32") | change
    with pytest.raises(ConfigError, match=message) as raised:
        script_for(record, device="emu", selection="smoke", backend_module="torch_emu")
    assert record["test_id"] in str(raised.value)


@pytest.mark.slow
def test_a_planted_wrong_result_gives_a_script_that_fails_only_with_the_plant(tmp_path):
    pytest.importorskip("torch_emu")
    env = {k: v for k, v in os.environ.items() if k != "EMU_PLANT"}
    run = [sys.executable, "-m", "conformance", "run", "--device", "emu", "--no-skiplist"]
    run += ["--suite", "embedded:smoke", "--files", "test_ops.py", "-n", "1"]
    run += ["--runs-root", str(tmp_path / "runs"), "--run-id", "planted"]
    run += ["--", "-k", "test_compare_cpu_exp_emu_float32"]
    done = subprocess.run(
        run, env=env | {"EMU_PLANT": "wrong_result"}, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    _, frame = read_run(tmp_path / "runs" / "planted")
    (record,) = frame.to_dict("records")
    assert record["outcome"] == "failed" and record["sample_index"] == 0

    test_id = "embedded/test_ops.py::TestCommon::test_compare_cpu_exp_float32"
    script = tmp_path / "repro.py"
    repro = [sys.executable, "-m", "conformance", "repro", "planted", test_id]
    repro += ["--runs-root", str(tmp_path / "runs"), "--script", str(script)]
    done = subprocess.run(repro, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "failing sample: 0" in done.stdout
    assert "PYTORCH_OPINFO_SAMPLE_INPUT_INDEX=0" in done.stdout
    assert "import torch_emu" in script.read_text()

    planted = _run_script(script, EMU_PLANT="wrong_result")
    assert planted.returncode == 1, planted.stdout + planted.stderr
    assert "FAIL  exp on emu equals the CPU: AssertionError: Tensor-likes are not close!" in (
        planted.stdout
    )
    fixed = _run_script(script)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "ok    exp on emu equals the CPU" in fixed.stdout


FIXTURES = Path(__file__).parent.parent / "fixtures" / "upstream"


def _exec_script(text: str) -> dict:
    """Run a script's text in this process and return its globals (it ends in sys.exit)."""
    scope = {"__name__": "__main__"}
    with contextlib.suppress(SystemExit):
        exec(compile(text, "repro.py", "exec"), scope)
    return scope


def _tensors(sample) -> list:
    import torch
    from torch.utils._pytree import tree_flatten

    leaves = tree_flatten((sample.input, sample.args, sample.kwargs))[0]
    return [t.detach() for t in leaves if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize(
    "template, inputs, index",
    [
        ("test_compare_cpu", "reference_inputs", 5),
        ("test_noncontiguous_samples", "sample_inputs", 3),
    ],
)
def test_upstream_scripts_draw_the_very_sample_the_test_drew(monkeypatch, template, inputs, index):
    import importlib.util
    import unittest

    import torch
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.testing._internal.common_utils import set_rng_seed

    spec = importlib.util.spec_from_file_location(
        "test_fixture_samples", FIXTURES / "test_fixture_samples.py"
    )
    fixture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixture)
    op = next(o for o in op_db if o.full_name == "add")
    drawn_by_test = []
    draw = getattr(op, inputs)

    def recording(*args, **kwargs):
        for sample in draw(*args, **kwargs):
            drawn_by_test.append(_tensors(sample))
            yield sample

    monkeypatch.setattr(op, inputs, recording)
    result = unittest.TestResult()
    fixture.TestCommonCPU(f"{template}_add_cpu_float32").run(result)
    assert result.wasSuccessful() and len(drawn_by_test) > index, result.errors
    monkeypatch.undo()

    record = _upstream(template, "add", "float32", index=index)
    scope = _exec_script(script_for(record, device="cpu", selection="", backend_module=""))
    rebuilt = _tensors(scope["drawn"])
    assert len(rebuilt) == len(drawn_by_test[index])
    assert all(torch.equal(a, b) for a, b in zip(rebuilt, drawn_by_test[index], strict=True))
    # The seed is the template's: a draw seeded as a plain TestCase.setUp would differ.
    set_rng_seed()
    naive = _tensors(list(getattr(op, inputs)("cpu", torch.float32, set_seed=False))[index])
    assert not all(torch.equal(a, b) for a, b in zip(naive, drawn_by_test[index], strict=True))


@pytest.mark.slow
def test_an_upstream_failure_gives_a_script_that_fails_only_with_the_plant(tmp_path):
    pytest.importorskip("torch_emu")
    env = {k: v for k, v in os.environ.items() if k != "EMU_PLANT"}
    runs = tmp_path / "runs"
    run = [sys.executable, "-m", "conformance", "run", "--device", "emu", "--no-skiplist"]
    run += ["--tests", str(FIXTURES / "test_fixture_samples.py"), "-n", "1"]
    run += ["--runs-root", str(runs), "--run-id", "planted", "--", "-k", "compare_cpu_exp"]
    done = subprocess.run(
        run, env=env | {"EMU_PLANT": "wrong_result"}, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    (record,) = read_run(runs / "planted")[1].to_dict("records")
    assert (record["suite"], record["outcome"], record["sample_index"]) == ("upstream", "failed", 0)

    script = tmp_path / "repro.py"
    repro = [sys.executable, "-m", "conformance", "repro", "planted", record["test_id"]]
    repro += ["--runs-root", str(runs), "--script", str(script)]
    done = subprocess.run(repro, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "standalone script" in done.stdout, done.stdout + done.stderr
    assert "upstream's TestCommon.test_compare_cpu does (on the device)" in script.read_text()

    planted = _run_script(script, EMU_PLANT="wrong_result")
    assert planted.returncode == 1, planted.stdout + planted.stderr
    assert "FAIL  exp on emu equals the CPU: AssertionError" in planted.stdout
    fixed = _run_script(script)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "ok    exp on emu equals the CPU" in fixed.stdout
