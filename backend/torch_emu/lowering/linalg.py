"""Matrix products: mm, bmm, addmm, dot, mv and their fused and batched relatives."""

from __future__ import annotations

from torch_emu.lowering.registry import lower

lower("aten::mm", "aten::mm.out", "aten::mm.dtype", "aten::mm.dtype_out")
lower("aten::bmm", "aten::bmm.out", "aten::bmm.dtype", "aten::bmm.dtype_out")
lower(
    "aten::addmm", "aten::addmm.out", "aten::addmm.dtype", "aten::addmm.dtype_out", "aten::addmm_"
)
lower("aten::_addmm_activation", "aten::_addmm_activation.out")
lower("aten::baddbmm", "aten::baddbmm.out", "aten::baddbmm_")
lower("aten::addbmm", "aten::addbmm.out", "aten::addbmm_")
lower("aten::dot", "aten::dot.out")
lower("aten::vdot", "aten::vdot.out")
lower("aten::mv", "aten::mv.out")
lower("aten::addmv", "aten::addmv.out", "aten::addmv_")
