"""Shape and ordering: cat, stack, flip, roll, sort, topk, triangles, repeat, fills, unique."""

from __future__ import annotations

from torch_emu import plants
from torch_emu.lowering.registry import lower

lower("aten::cat", "aten::cat.out")
lower("aten::stack", "aten::stack.out")
lower("aten::flip", "aten::flip.out")
lower("aten::roll", "aten::roll.out")
lower("aten::sort", "aten::sort.stable", "aten::sort.values", "aten::sort.values_stable")
lower("aten::topk", "aten::topk.values")
lower("aten::tril", **plants.hooks("column_major"))
lower("aten::tril.out", "aten::tril_")
lower("aten::triu", "aten::triu.out", "aten::triu_")
lower("aten::repeat", "aten::repeat.out")
lower("aten::fill_.Scalar", "aten::fill_.Tensor")
lower("aten::zero_")
lower("aten::_unique2")
lower("aten::searchsorted.Tensor", "aten::searchsorted.Tensor_out")
lower("aten::searchsorted.Scalar", "aten::searchsorted.Scalar_out")
lower("aten::bucketize.Tensor", "aten::bucketize.Scalar", "aten::bucketize.Tensor_out")
lower("aten::repeat_interleave.Tensor")
lower("aten::complex.out")
lower("aten::unfold_backward")
lower("aten::narrow_copy.out")
lower("aten::unique_dim_consecutive")
# Whether two tensors view the same memory the same way: the CPU's kernel, on aliases that
# share a storage exactly when the emu tensors do.
lower("aten::is_set_to")
