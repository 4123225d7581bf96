"""Suite tests that once failed against the CPU because of the suite, run against the CPU.

Each name below is a template and op whose check the suite had wrong (see the templates'
comments): error inputs of reflected operators, out= of factory functions and of ops with
Tensor[] outs, upstream expectations set aside in NOT_APPLYING, the optimizer templates,
the copy-on-write template's keyword arguments (checked forward only, as upstream).
Against the CPU every one must pass: a failure or an unexpected success here is a bug in
the suite.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conformance.embedded import SELECTION_ENV, SUITE_DIR

pytestmark = pytest.mark.slow

#: Test-name fragments (pytest -k), each one of the suite's former false failures on cpu.
FORMER_FAILURES = (
    "test_errors___rsub__",
    "test_out_linspace_cpu",
    "test_out_unbind_copy_cpu",
    "test_out_geqrf_cpu",
    "test_dtypes_resize_as__cpu",
    "test_variant_consistency_eager_addcmul_cpu",
    "test_variant_consistency_eager_to_sparse_cpu",
    "test_compare_cpu_div_floor_rounding_cpu",
    "test_fn_grad_compare_cpu_istft_cpu",
    "test_foreach_matches_forloop_Adam_cpu",
    "test_fused_matches_forloop_Adam_cpu",
    # upstream's view-template xfails set aside; kwargs checked only forward
    "test_neg_view_narrow_cpu",
    "test_conj_view_cartesian_prod_cpu",
    "test_cow_input_nn_functional_instance_norm_cpu",
)


def test_the_suite_passes_where_it_once_failed_against_the_cpu():
    env = {
        **os.environ,
        SELECTION_ENV: "full",
        "PYTORCH_TESTING_DEVICE_ONLY_FOR": "cpu",
        "PYTORCH_PRINT_REPRO_ON_FAILURE": "0",
    }
    command = [
        sys.executable,
        "-m",
        "pytest",
        "test_ops.py",
        "test_ops_gradients.py",
        "test_optim.py",
        "-p",
        "no:conformance",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rA",
        "-k",
        " or ".join(FORMER_FAILURES),
    ]
    done = subprocess.run(
        command, cwd=SUITE_DIR, env=env, capture_output=True, text=True, timeout=900
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    passed = [line for line in out.splitlines() if line.startswith("PASSED ")]
    for fragment in FORMER_FAILURES:
        assert any(fragment in line for line in passed), (
            f"nothing ran for {fragment}\n{out[-2000:]}"
        )
