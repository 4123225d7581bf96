"""Unsupported features fail with an error that names them."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch_emu
from torch.autograd import forward_ad


def _feature(name):
    return pytest.raises(NotImplementedError, match=f"unsupported feature '{name}'")


def test_sparse():
    dense = torch.ones(2, 2, device="emu")
    with _feature("sparse"):
        dense.to_sparse()
    with _feature("sparse"):
        dense.to_sparse_csr()
    coo = torch.sparse_coo_tensor(
        torch.tensor([[0]]), torch.tensor([1.0]), (2,), check_invariants=False
    )
    with _feature("sparse"):
        coo.to("emu")
    with _feature("sparse"):
        torch.empty(2, layout=torch.sparse_coo, device="emu")


def test_nested():
    # torch warns once per process that strided nested tensors are a prototype: not checked,
    # as another test in the same worker may have made one first.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], device="emu")
    with _feature("nested"):
        nested + 1
    with _feature("nested"):
        print(nested)


def test_padded_batches_are_checked_then_refused_as_nested():
    # nn.TransformerEncoder's inference fast path checks that a padding mask is left-aligned
    # (a dense computation, lowered), then packs the batch into a NestedTensor.
    batch = torch.randn(2, 3, 4)
    for keep in ([[True, True, False], [True, True, True]], [[False, True, True], [True] * 3]):
        mask = torch.tensor(keep)
        on_emu = torch._nested_tensor_from_mask_left_aligned(batch.to("emu"), mask.to("emu"))
        assert on_emu == torch._nested_tensor_from_mask_left_aligned(batch, mask)
    layer = torch.nn.TransformerEncoderLayer(4, 2, 8, batch_first=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # enable_nested_tensor's layout advice
        encoder = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=True)
    encoder = encoder.to("emu").eval()
    padding = torch.tensor([[False, False, True], [False, False, False]], device="emu")
    with torch.no_grad(), _feature("nested"):
        encoder(batch.to("emu"), src_key_padding_mask=padding)


def test_forward_ad_works():
    """Forward-mode AD is supported: tangents through emu's lowerings match the CPU's."""
    primal = torch.linspace(-1, 1, 5, dtype=torch.float64)
    tangent = torch.linspace(0.5, 2, 5, dtype=torch.float64)
    other = torch.arange(5, dtype=torch.float64)

    def tangents(device):
        with forward_ad.dual_level():
            dual = forward_ad.make_dual(primal.to(device), tangent.to(device))
            # alpha= scales a zero tangent for `other`: the zero tensor path.
            out = torch.add(torch.tanh(dual), other.to(device), alpha=2).dot(other.to(device))
            return forward_ad.unpack_dual(out).tangent.cpu()

    torch.testing.assert_close(tangents("emu"), tangents("cpu"))


def test_zero_tensors():
    zero = torch._efficientzerotensor((3,), dtype=torch.float64, device="emu:1")
    assert zero._is_zerotensor() and zero.device == torch.device("emu:1")
    ones = torch.ones(3, dtype=torch.float64, device="emu:1")
    # dot and mul.Scalar bypass the ZeroTensor key and reach emu's kernels.
    assert torch.dot(zero, ones).item() == 0
    assert torch.equal((zero * 2.0).cpu(), torch.zeros(3, dtype=torch.float64))
    assert torch.equal(zero.cpu(), torch.zeros(3, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="immutable"):
        zero.add_(1)


def test_per_channel_quantization():
    x = torch.ones(2, 2, device="emu")
    with _feature("per_channel_quant"):
        torch.quantize_per_channel(
            x,
            torch.ones(2, device="emu"),
            torch.zeros(2, dtype=torch.long, device="emu"),
            0,
            torch.qint8,
        )


def test_features_are_listed():
    features = torch_emu.unsupported_features()
    assert set(features) == {"sparse", "nested", "per_channel_quant"}
    assert all(features.values())
    assert "fallback:SparsePrivateUse1" in features["sparse"]
