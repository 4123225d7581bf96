"""Indexing: advanced indexing, index_put_, gather/scatter, index_select, masks, nonzero."""

from __future__ import annotations

import torch

from torch_emu.lowering.kernels import derived_kernel
from torch_emu.lowering.registry import lower, lowering

lower("aten::index.Tensor", "aten::index.Tensor_out")
lower("aten::index_put", "aten::index_put_", "aten::_index_put_impl_")
lower("aten::gather", "aten::gather.out")
lower(
    "aten::scatter.value", "aten::scatter.src", "aten::scatter.reduce", "aten::scatter.value_reduce"
)
lower("aten::scatter.src_out", "aten::scatter.value_out", "aten::scatter.reduce_out")
lower("aten::scatter.value_reduce_out", "aten::scatter_.src", "aten::scatter_.value")
lower("aten::scatter_.reduce", "aten::scatter_.value_reduce")
lower("aten::scatter_add", "aten::scatter_add.out", "aten::scatter_add_")
lower("aten::scatter_reduce.two", "aten::scatter_reduce.two_out", "aten::scatter_reduce_.two")
lower("aten::index_select", "aten::index_select.out")
lower("aten::index_add", "aten::index_add.out", "aten::index_add_")
lower("aten::index_copy", "aten::index_copy.out", "aten::index_copy_")
lower("aten::index_fill.int_Tensor", "aten::index_fill.int_Scalar")
lower("aten::index_fill_.int_Tensor", "aten::index_fill_.int_Scalar")
lower("aten::masked_fill.Scalar", "aten::masked_fill.Tensor")
lower("aten::masked_fill_.Scalar", "aten::masked_fill_.Tensor")
lower("aten::masked_select", "aten::masked_select.out")
lower("aten::masked_scatter", "aten::masked_scatter_")
lower("aten::take", "aten::take.out")
lower("aten::put", "aten::put_")
lower("aten::nonzero", "aten::nonzero.out")
lower("aten::index_reduce", "aten::index_reduce.out", "aten::index_reduce_")
lower("aten::nonzero_static.out")

_nonzero_static = derived_kernel(torch.ops.aten.nonzero_static.default)


@lowering("aten::nonzero_static")
def nonzero_static(self, *, size, fill_value=-1):
    # Column-major, as torch's fake tensors (and so compiled graphs) expect of a device
    # that is not the CPU, MPS or XPU; the CPU kernel's result is row-major.
    result = _nonzero_static(self, size=size, fill_value=fill_value)
    rows = result.shape[0]
    laid_out = torch.empty_strided(
        result.shape, (1, max(rows, 1)), dtype=result.dtype, device=result.device
    )
    return laid_out.copy_(result)
