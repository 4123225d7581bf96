"""Linear algebra: matrix products, decompositions and solvers; and the FFT primitives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torch_emu.lowering.kernels import derived_kernel
from torch_emu.lowering.registry import lower, lowering, resolve

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
# addr and addr.out are composite on other backends: addr.out would write a CPU out=
# without complaint, and addr would take a floating beta or alpha for integer inputs. The
# CPU kernels through derived kernels check both, as CUDA's do.
lower("aten::addr", "aten::addr.out")

# Decompositions and solvers (LAPACK on the CPU aliases), ranked first by triage.
lower("aten::_linalg_svd", "aten::_linalg_svd.U")
lower("aten::linalg_inv_ex", "aten::linalg_inv_ex.inverse")
lower("aten::_linalg_eigh", "aten::_linalg_eigh.eigenvalues")
lower("aten::linalg_eig", "aten::linalg_eig.out", "aten::_linalg_eigvals")
lower("aten::linalg_qr", "aten::linalg_qr.out")
lower("aten::linalg_lu_factor_ex", "aten::linalg_lu_factor_ex.out")
lower("aten::linalg_lu_solve", "aten::linalg_lu_solve.out")
lower("aten::_linalg_solve_ex", "aten::_linalg_solve_ex.result")
lower("aten::_linalg_slogdet", "aten::_linalg_slogdet.sign")
lower("aten::linalg_cholesky_ex", "aten::linalg_cholesky_ex.L")
lower("aten::linalg_lstsq.out")
lower("aten::linalg_cross", "aten::linalg_cross.out")
lower("aten::linalg_solve_triangular", "aten::linalg_solve_triangular.out")
lower("aten::lu_unpack", "aten::lu_unpack.out")

# Spectral: the three FFT primitives every torch.fft function reaches. The CPU's FFT
# libraries have no half precision; emu transforms half and complex32 in float32 and
# complex64 and rounds the result, as accelerators' FFT libraries take them.
lower("aten::_fft_c2c.out", "aten::_fft_r2c.out", "aten::_fft_c2r.out")
_fft_c2c_cpu = derived_kernel(resolve("aten::_fft_c2c"))
_fft_r2c_cpu = derived_kernel(resolve("aten::_fft_r2c"))
_fft_c2r_cpu = derived_kernel(resolve("aten::_fft_c2r"))
_HALF_FFT = {torch.float16: torch.float32, torch.complex32: torch.complex64}


def _in_half(kernel: Callable, input: torch.Tensor, *args: Any, result: torch.dtype) -> Any:
    wide = _HALF_FFT.get(input.dtype)
    if wide is None:
        return kernel(input, *args)
    return kernel(input.to(wide), *args).to(result)


@lowering("aten::_fft_c2c")
def _fft_c2c(self, dim, normalization, forward):
    return _in_half(_fft_c2c_cpu, self, dim, normalization, forward, result=self.dtype)


@lowering("aten::_fft_r2c")
def _fft_r2c(self, dim, normalization, onesided):
    return _in_half(_fft_r2c_cpu, self, dim, normalization, onesided, result=torch.complex32)


@lowering("aten::_fft_c2r")
def _fft_c2r(self, dim, normalization, last_dim_size):
    return _in_half(_fft_c2r_cpu, self, dim, normalization, last_dim_size, result=torch.float16)


# The remaining factorizations and solvers ranked by triage.
lower("aten::linalg_ldl_factor_ex.out", "aten::linalg_ldl_factor_ex")
lower("aten::_cholesky_solve_helper")
lower("aten::cholesky_inverse", "aten::cholesky_inverse.out")
lower("aten::triangular_solve.X", "aten::triangular_solve")
lower("aten::linalg_matrix_exp")
lower("aten::ormqr", "aten::ormqr.out")
lower("aten::_linalg_det.result", "aten::_linalg_det")
lower("aten::cholesky", "aten::cholesky.out")
lower("aten::linalg_householder_product", "aten::linalg_householder_product.out")
lower("aten::linalg_lu.out", "aten::linalg_lu")
lower("aten::geqrf")
lower("aten::linalg_ldl_solve.out", "aten::linalg_ldl_solve")
lower("aten::geqrf.a")
lower("aten::linalg_eigvals.out")
# Weight-only int8 quantized matmul (per output channel scales), as the CPU runs it.
lower("aten::_weight_int8pack_mm")
# Dynamically quantized 4-bit matmul: the weight packed in the CPU's layout, which the
# CPU's matmul kernel reads.
lower("aten::_dyn_quant_pack_4bit_weight", "aten::_dyn_quant_matmul_4bit")

# 4-bit weight-only matmul: every backend packs the weight in its own layout. An
# accelerator's packing takes the 4-bit values two to a byte, high nibble first, (N, K / 2)
# uint8; emu unpacks them, packs them as the CPU does and keeps the bytes in the int32
# shape torch's meta function gives (N / 8, K / (16 * inner_k_tiles), 32,
# inner_k_tiles / 2): the same N * K / 2 bytes, which _weight_int4pack_mm reads back for
# the CPU's kernel.
_pack_int4_cpu = derived_kernel(resolve("aten::_convert_weight_to_int4pack_for_cpu"))
_int4_mm_cpu = derived_kernel(resolve("aten::_weight_int4pack_mm_for_cpu"))


@lowering("aten::_convert_weight_to_int4pack")
def _convert_weight_to_int4pack(self, inner_k_tiles):
    shape = torch.ops.aten._convert_weight_to_int4pack(self.to("meta"), inner_k_tiles).shape
    pairs = self.to(torch.int32)
    values = torch.stack([pairs >> 4, pairs & 0xF], dim=-1).reshape(self.size(0), -1)
    return _pack_int4_cpu(values, inner_k_tiles).view(torch.int32).reshape(shape)


@lowering("aten::_weight_int4pack_mm")
def _weight_int4pack_mm(self, mat2, q_group_size, q_scale_and_zeros):
    packed = mat2.contiguous().view(torch.uint8).reshape(mat2.size(0) * 8, -1)
    return _int4_mm_cpu(self, packed, q_group_size, q_scale_and_zeros)


lower("aten::_int_mm", "aten::_int_mm.out")
lower("aten::_compute_linear_combination", "aten::_compute_linear_combination.out")
