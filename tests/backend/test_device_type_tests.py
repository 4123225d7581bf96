"""Upstream's device-generic test machinery instantiates and runs tests on emu."""

from __future__ import annotations

import pytest

UPSTREAM_STYLE = """
import torch
from torch.testing._internal.common_device_type import (
    dtypes, instantiate_device_type_tests, onlyPRIVATEUSE1,
)
from torch.testing._internal.common_utils import TestCase, make_tensor, run_tests


class TestEmuSmoke(TestCase):
    @dtypes(torch.float32, torch.int64, torch.bfloat16)
    def test_matches_cpu(self, device, dtype):
        x = make_tensor((4, 5), dtype=dtype, device=device, noncontiguous=True)
        for fn in (torch.add, torch.mul):
            self.assertEqual(fn(x, x), fn(x.cpu(), x.cpu()))
        self.assertEqual(x.sum(0), x.cpu().sum(0))
        self.assertEqual(x.cumsum(1), x.cpu().cumsum(1))

    @dtypes(torch.float32)
    @onlyPRIVATEUSE1
    def test_device_is_emu(self, device, dtype):
        self.assertEqual(torch.device(device).type, "emu")

    def test_missing_lowering(self, device):
        torch.special.erfcx(torch.ones(2, device=device))


instantiate_device_type_tests(TestEmuSmoke, globals(), only_for=("privateuse1",))

if __name__ == "__main__":
    run_tests()
"""


@pytest.mark.slow
def test_upstream_style_tests_run_on_emu(pytester):
    pytester.makepyfile(test_upstream_style=UPSTREAM_STYLE)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-rA")
    output = result.stdout.str()
    # The class suffix is PRIVATEUSE1, the test suffix the backend's name.
    prefix = "PASSED test_upstream_style.py::TestEmuSmokePRIVATEUSE1::"
    assert f"{prefix}test_matches_cpu_emu_bfloat16" in output
    assert f"{prefix}test_device_is_emu_emu_float32" in output
    # Everything passes except the op emu deliberately lacks.
    result.assert_outcomes(passed=4, failed=1)
    assert "Could not run 'aten::special_erfcx.out' with arguments from the 'emu' backend" in output
