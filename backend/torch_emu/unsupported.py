"""Features emu does not implement, each failing with an error that names it.

Like TorchNeuron's first release, emu has no sparse layouts, no NestedTensor
and no per-channel quantization.  (Forward-mode AD, which that release also
lacked, works: autograd computes tangents with the lowered ops, and the core
implements the zero tensors it makes for known-zero tangents.)  Instead of the
generic "Could not run ..." message, these raise ``NotImplementedError`` containing
``unsupported feature '<name>'``, which the conformance harness classifies as
``unsupported_feature`` with the name as detail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["FEATURES", "UnsupportedRegistration", "install", "registrations"]

FEATURES = {
    "sparse": "sparse layouts (COO, CSR, CSC, BSR, BSC) are not implemented on emu",
    "nested": "NestedTensor is not implemented on emu",
    "per_channel_quant": "per-channel quantization is not implemented on emu",
}

# Dense-to-sparse and dense-to-nested conversions and per-channel quantizers dispatch on
# the dense emu key; everything on an already-sparse or nested emu tensor dispatches on
# the keys caught by the fallbacks.
_OPS = {
    "sparse": [
        "_to_sparse",
        "_to_sparse.sparse_dim",
        "_to_sparse_csr",
        "_to_sparse_csc",
        "_to_sparse_bsr",
        "_to_sparse_bsc",
    ],
    # Padded dense tensors packed into a NestedTensor (nn.TransformerEncoder's fast path for
    # a padding mask); _nested_view_from_buffer is refused in the native core.
    "nested": [
        "_nested_tensor_from_mask",
        "_nested_from_padded",
    ],
    "per_channel_quant": [
        "quantize_per_channel",
        "_make_per_channel_quantized_tensor",
        "fake_quantize_per_channel_affine_cachemask",
        "_fake_quantize_learnable_per_channel_affine",
    ],
}
_FALLBACK_KEYS = {
    "SparsePrivateUse1": "sparse",
    "SparseCsrPrivateUse1": "sparse",
    "NestedTensorPrivateUse1": "nested",
}


@dataclass(frozen=True)
class UnsupportedRegistration:
    """Where an unsupported feature is caught: an overload or a dispatch-key fallback."""

    feature: str
    target: str  # "aten::_to_sparse" or "fallback:SparsePrivateUse1"
    dispatch_key: str


def message(feature: str) -> str:
    """The error text for ``feature``; the harness keys on ``unsupported feature '<name>'``."""
    return f"emu: unsupported feature '{feature}': {FEATURES[feature]}"


def _raiser(feature: str) -> Callable:
    def kernel(*args: object, **kwargs: object) -> None:
        raise NotImplementedError(message(feature))

    return kernel


_libraries: list[torch.library.Library] = []
_registrations: list[UnsupportedRegistration] = []


def install() -> None:
    """Register the raising kernels; idempotent."""
    if _libraries:
        return
    aten = torch.library.Library("aten", "IMPL")
    for feature, names in _OPS.items():
        for name in names:
            aten.impl(name, _raiser(feature), "PrivateUse1")
            _registrations.append(UnsupportedRegistration(feature, f"aten::{name}", "PrivateUse1"))
    glob = torch.library.Library("_", "IMPL")
    for key, feature in _FALLBACK_KEYS.items():
        raiser = _raiser(feature)
        glob.fallback(lambda op, *args, _r=raiser, **kwargs: _r(), key)
        _registrations.append(UnsupportedRegistration(feature, f"fallback:{key}", key))
    _libraries.extend([aten, glob])


def registrations() -> list[UnsupportedRegistration]:
    """Every place an unsupported feature is caught."""
    return list(_registrations)
