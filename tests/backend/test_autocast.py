"""Autocast on emu: torch's accelerator policy on the AutocastPrivateUse1 key."""

from __future__ import annotations

import pytest
import torch
import torch_emu  # noqa: F401  (registers emu)


def _has_autocast_kernel(op: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op, "AutocastPrivateUse1")


def test_emu_declares_float16_and_bfloat16_and_defaults_to_float16():
    assert torch.emu.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.get_autocast_dtype("emu") == torch.float16


def test_the_policy_ops_have_kernels_and_the_others_pass_through():
    assert torch.ops.emu.autocast_registered()
    for op in ("aten::mm", "aten::conv2d", "aten::linear", "aten::exp", "aten::sum"):
        assert _has_autocast_kernel(op), op
    for op in ("aten::addcmul", "aten::norm.Scalar", "aten::binary_cross_entropy"):
        assert _has_autocast_kernel(op), op
    assert not _has_autocast_kernel("aten::add.Tensor")


def test_matmul_runs_in_bfloat16_and_fp32_ops_in_float32():
    x = torch.randn(4, 4, device="emu")
    with torch.autocast("emu", dtype=torch.bfloat16):
        product = x @ x
        assert product.dtype == torch.bfloat16
        assert torch.exp(product).dtype == torch.float32
        assert torch.sum(product).dtype == torch.float32
        assert torch.addcmul(x, product, product).dtype == torch.float32
        assert (x + x).dtype == torch.float32
    expected = x.cpu().bfloat16() @ x.cpu().bfloat16()
    assert torch.equal(product.cpu(), expected)
    with torch.autocast("emu"):
        assert (x @ x).dtype == torch.float16
    assert (x @ x).dtype == torch.float32


def test_torch_emu_amp_autocast_is_torch_autocast_on_emu():
    x = torch.randn(2, 2, device="emu")
    with torch.emu.amp.autocast(dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("emu")
        assert torch.mm(x, x).dtype == torch.bfloat16


def test_binary_cross_entropy_is_refused_under_autocast():
    p = torch.rand(3, device="emu")
    torch.nn.functional.binary_cross_entropy(p, p)
    with torch.autocast("emu"), pytest.raises(RuntimeError, match="unsafe to autocast"):
        torch.nn.functional.binary_cross_entropy(p, p)


def test_cpu_autocast_leaves_emu_operands_alone():
    # emu's kernels run CPU kernels on CPU aliases: the CPU's autocast must not reach them.
    x = torch.randn(3, 3, device="emu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.mm(x, x).dtype == torch.float32
        assert torch.mm(x.cpu(), x.cpu()).dtype == torch.bfloat16
