"""Unsupported features fail with an error that names them."""

from __future__ import annotations

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
    with pytest.warns(UserWarning):  # torch's "prototype" warning for strided nested tensors
        nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], device="emu")
    with _feature("nested"):
        nested + 1
    with _feature("nested"):
        print(nested)


def test_forward_ad():
    primal = torch.ones(2, device="emu")
    with forward_ad.dual_level(), _feature("forward_ad"):
        forward_ad.make_dual(primal, torch.ones(2, device="emu"))


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
    assert set(features) == {"sparse", "nested", "forward_ad", "per_channel_quant"}
    assert all(features.values())
    assert "fallback:SparsePrivateUse1" in features["sparse"]
