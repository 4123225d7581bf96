"""Reductions: sum, mean, prod, min/max, arg-reductions, var/std, norms, scans, all/any."""

from __future__ import annotations

from torch_emu.lowering.registry import lower

lower("aten::sum", "aten::sum.dim_IntList", "aten::sum.IntList_out", "aten::sum.out")
lower("aten::mean", "aten::mean.dim", "aten::mean.out", "aten::mean.dtype_out")
lower("aten::prod", "aten::prod.dim_int", "aten::prod.int_out", "aten::prod.out")
lower("aten::amax", "aten::amax.out")
lower("aten::amin", "aten::amin.out")
lower("aten::aminmax", "aten::aminmax.out")
lower("aten::argmax", "aten::argmax.out")
lower("aten::argmin", "aten::argmin.out")
lower("aten::max", "aten::max.dim", "aten::max.dim_max", "aten::max.unary_out")
lower("aten::min", "aten::min.dim", "aten::min.dim_min", "aten::min.unary_out")
lower("aten::var.correction", "aten::var.correction_out")
lower("aten::std.correction", "aten::std.correction_out")
lower("aten::var_mean.correction", "aten::var_mean.correction_out")
lower("aten::std_mean.correction", "aten::std_mean.correction_out")
lower("aten::norm.Scalar", "aten::norm.ScalarOpt_dim", "aten::norm.ScalarOpt_dim_dtype")
lower("aten::norm.ScalarOpt_dtype", "aten::norm.out", "aten::norm.dtype_out")
lower("aten::norm.ScalarOpt_dtype_out", "aten::norm.Scalar_out")
lower("aten::linalg_vector_norm", "aten::linalg_vector_norm.out")
lower("aten::logsumexp", "aten::logsumexp.out")
lower("aten::cumsum", "aten::cumsum.out", "aten::cumsum_")
lower("aten::cumprod", "aten::cumprod.out", "aten::cumprod_")
lower("aten::all", "aten::all.dim", "aten::all.dims", "aten::all.out", "aten::all.dims_out")
lower("aten::all.all_out")
lower("aten::any", "aten::any.dim", "aten::any.dims", "aten::any.out", "aten::any.dims_out")
lower("aten::any.all_out")
lower("aten::count_nonzero", "aten::count_nonzero.dim_IntList")
lower("aten::count_nonzero.out", "aten::count_nonzero.dim_IntList_out")
