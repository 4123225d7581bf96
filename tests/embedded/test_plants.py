"""Each bug planted in emu (``EMU_PLANT``) is caught by the template meant for it.

Subprocesses on ``emu`` with the smoke selection: one run per plant runs only that plant's
target (one template for one op) and must fail; one unplanted run of all the targets
must pass.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from conformance.embedded import SELECTION_ENV, SUITE_DIR

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("torch_emu") is None, reason="emu is not installed"
    ),
]

#: plant -> the suite file and test-name prefix of the template run meant to catch it.
TARGETS = {
    "wrong_result": ("test_ops.py", "test_compare_cpu_exp_"),
    "ignores_out": ("test_ops.py", "test_out_sin_"),
    "noncontiguous": ("test_ops.py", "test_noncontiguous_samples_cos_"),
    "wrong_grad": ("test_ops_gradients.py", "test_fn_grad_compare_cpu_tanh_"),
    "accepts_bad_dtype": ("test_ops.py", "test_dtypes_bitwise_not_"),
    "materializes_cow": ("test_ops.py", "test_cow_input_neg_"),
    "column_major": ("test_ops.py", "test_fake_tril_"),
    "device_check_first": ("test_modules.py", "test_errors_nn_Embedding_"),
    "no_autocast": ("test_autocast.py", "test_autocast_lower_precision_fp_mm_"),
    "wrong_reduction": ("test_distributed.py", "test_all_reduce_reduce_op_sum_"),
    "no_profiler": ("test_profiler.py", "test_profiler_device_events_mm_"),
    "rng_state_ignored": ("test_runtime.py", "test_runtime_rng_"),
    "dropped_rank": ("test_distributed.py", "test_fsdp2_"),
}

#: The distributed templates that never reduce with all_reduce's SUM: wrong_reduction
#: must leave them passing (test_ddp and test_default_backend sum through all_reduce).
OTHER_COLLECTIVES = [
    ("test_distributed.py", prefix)
    for prefix in (
        "test_reduce_scatter_tensor_",
        "test_reduce_scatter_",
        "test_all_gather_",
        "test_all_gather_into_tensor_",
        "test_broadcast_",
        "test_all_to_all_",
        "test_all_to_all_single_",
        "test_send_recv_",
        "test_barrier_",
    )
]

#: Runs started at once: two, for the two cores.
PARALLEL = 2


def _start(plant: str, targets: list[tuple[str, str]]) -> subprocess.Popen:
    env = dict(os.environ)
    env.update(
        {
            "EMU_PLANT": plant,
            "PYTORCH_TESTING_DEVICE_ONLY_FOR": "emu",
            SELECTION_ENV: "smoke",
            "PYTORCH_PRINT_REPRO_ON_FAILURE": "0",
        }
    )
    command = [
        sys.executable,
        "-m",
        "pytest",
        *sorted({str(SUITE_DIR / file) for file, _ in targets}),
        "-p",
        "no:conformance",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rA",
        "-k",
        " or ".join(prefix for _, prefix in targets),
    ]
    return subprocess.Popen(
        command, cwd=SUITE_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _outcomes(process: subprocess.Popen, targets: list[tuple[str, str]]) -> dict[str, str]:
    """Outcome per target prefix: "failed" if any of its tests failed, else "passed"."""
    out, _ = process.communicate(timeout=600)
    by_test = {}
    for line in out.splitlines():
        word, _, nodeid = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR") and "::" in nodeid:
            by_test[nodeid.split("::")[-1].split(" ")[0]] = word.lower()
    result = {}
    for _, prefix in targets:
        runs = [o for name, o in by_test.items() if name.startswith(prefix)]
        assert runs, f"no test ran for {prefix}:\n{out[-3000:]}"
        result[prefix] = "passed" if set(runs) == {"passed"} else "failed"
    return result


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, str]]:
    """Outcome per target prefix, per plant ("" is the unplanted run of every target)."""
    jobs = [("", list(TARGETS.values()))] + [(p, [t]) for p, t in TARGETS.items()]
    results: dict[str, dict[str, str]] = {}
    for start in range(0, len(jobs), PARALLEL):
        batch = [
            (plant, targets, _start(plant, targets))
            for plant, targets in jobs[start : start + PARALLEL]
        ]
        for plant, targets, process in batch:
            results[plant] = _outcomes(process, targets)
    return results


@pytest.mark.parametrize("plant", list(TARGETS))
def test_target_passes_without_plants(runs, plant):
    assert runs[""][TARGETS[plant][1]] == "passed"


@pytest.mark.parametrize("plant", list(TARGETS))
def test_plant_is_caught_by_its_template(runs, plant):
    prefix = TARGETS[plant][1]
    assert runs[plant] == {prefix: "failed"}, f"{plant} was not caught by {prefix}"


def test_wrong_reduction_is_caught_by_all_reduce_alone():
    # The other collectives' templates, all_reduce's other reductions included, still pass.
    targets = [*OTHER_COLLECTIVES, ("test_distributed.py", "test_all_reduce_reduce_op_max_")]
    outcomes = _outcomes(_start("wrong_reduction", targets), targets)
    assert set(outcomes.values()) == {"passed"}, outcomes
