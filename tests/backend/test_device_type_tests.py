"""Upstream's device-generic test machinery instantiates and runs tests on emu."""

from __future__ import annotations

import pytest

UPSTREAM_STYLE = """
import torch
from torch.testing._internal.common_device_type import (
    dtypes, instantiate_device_type_tests, ops, onlyPRIVATEUSE1,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

SELECTED = [op for op in op_db if op.name in ("add", "mul", "sum", "cumsum")]


class TestEmuSmoke(TestCase):
    @ops(SELECTED, allowed_dtypes=(torch.float32, torch.int64))
    def test_matches_cpu(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype):
            expected = op(sample.input.cpu(), *[a.cpu() if isinstance(a, torch.Tensor) else a
                                                 for a in sample.args], **sample.kwargs)
            actual = op(sample.input, *sample.args, **sample.kwargs)
            self.assertEqual(actual, expected)

    @dtypes(torch.float32)
    @onlyPRIVATEUSE1
    def test_device_is_emu(self, device, dtype):
        self.assertEqual(torch.device(device).type, "emu")

    def test_missing_lowering(self, device):
        torch.special.zeta(torch.ones(2, device=device), torch.ones(2, device=device))


instantiate_device_type_tests(TestEmuSmoke, globals(), only_for=("privateuse1",))

if __name__ == "__main__":
    run_tests()
"""


@pytest.mark.slow
def test_upstream_style_tests_run_on_emu(pytester):
    pytester.makepyfile(test_upstream_style=UPSTREAM_STYLE)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-rA")
    output = result.stdout.str()
    assert "TestEmuSmokePRIVATEUSE1::test_matches_cpu_add_emu_float32 PASSED" in output or (
        "PASSED test_upstream_style.py::TestEmuSmokePRIVATEUSE1::test_matches_cpu_add_emu_float32"
        in output
    )
    assert "test_device_is_emu_emu_float32" in output
    assert "test_matches_cpu_cumsum_emu_int64" in output
    # Everything passes except the op emu deliberately lacks.
    result.assert_outcomes(passed=9, failed=1)
    assert "Could not run 'aten::special_zeta.out' with arguments from the 'emu' backend" in output
