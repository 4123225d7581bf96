"""Every dtype the harness uses round-trips, prints, compares and fills on emu."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close, make_tensor

DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_test_infrastructure_works(dtype, no_fallback):
    import torch_emu

    for noncontiguous in (False, True):
        t = make_tensor((3, 5), dtype=dtype, device="emu", noncontiguous=noncontiguous)
        host = t.cpu()
        assert t.dtype == dtype and host.dtype == dtype
        assert_close(t, host.to("emu"))
        assert_close(t.cpu(), host)
        text = repr(t)
        assert "device='emu:0'" in text
        assert torch.equal(
            torch.zeros(3, dtype=dtype, device="emu").cpu(), torch.zeros(3, dtype=dtype)
        )
        assert torch.equal(
            torch.ones(3, dtype=dtype, device="emu").cpu(), torch.ones(3, dtype=dtype)
        )
        full = torch.full((2,), True if dtype is torch.bool else 3, dtype=dtype, device="emu")
        assert (
            full.cpu().tolist()
            == torch.full((2,), True if dtype is torch.bool else 3, dtype=dtype).tolist()
        )
    assert torch_emu.fallback_counts() == {}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_casts_match_cpu(dtype):
    host = make_tensor((4,), dtype=torch.float32, device="cpu", low=-5, high=5)
    assert torch.equal(host.to("emu").to(dtype).cpu(), host.to(dtype))
    assert torch.equal(host.to(dtype).to("emu").cpu(), host.to(dtype))


def test_assert_close_reports_mismatches_on_emu():
    a = torch.ones(3, device="emu")
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 3"):
        assert_close(a, torch.tensor([1.0, 1.0, 2.0], device="emu"))
