"""Factories and random fills: ranges, eye, and every random op, drawn from the emu generator.

``empty``/``empty_strided`` live in the native core; ``zeros``, ``full``,
``ones`` and friends are composites of empty and the fills in shape.py.
"""

from __future__ import annotations

import torch

from torch_emu.lowering.kernels import on_device
from torch_emu.lowering.registry import lower, lowering

lower("aten::arange.out", "aten::arange.start_out")
lower("aten::linspace.out", "aten::linspace.Tensor_Tensor_out")
lower("aten::linspace.Tensor_Scalar_out", "aten::linspace.Scalar_Tensor_out")
lower("aten::logspace.out")
lower("aten::eye.out", "aten::eye.m_out")

# Random ops: the derived kernel swaps the Generator argument (or the device's
# default generator) for a CPU generator with the same state and writes the
# advanced state back.
lower("aten::normal_", "aten::normal.Tensor_float", "aten::normal.float_Tensor")
lower(
    "aten::normal.Tensor_Tensor", "aten::normal.Tensor_float_out", "aten::normal.float_Tensor_out"
)
lower("aten::normal.Tensor_Tensor_out", "aten::normal.float_float_out")
lower("aten::uniform_")
lower("aten::random_", "aten::random_.from", "aten::random_.to")
lower("aten::bernoulli", "aten::bernoulli.out", "aten::bernoulli.p")
lower("aten::bernoulli_.Tensor", "aten::bernoulli_.float")
lower("aten::exponential_")
lower("aten::randperm.generator_out")
lower("aten::multinomial", "aten::multinomial.out")

# In-place random fills: the derived kernel draws from the emu generator's state.
lower("aten::geometric_")
lower("aten::cauchy_")
lower("aten::log_normal_")


def _index_factory(name: str):
    """``triu_indices``/``tril_indices``: no tensor argument to alias, so the indices are
    computed on the CPU and copied to the device ``device=`` names (else the current one)."""
    cpu_op = getattr(torch.ops.aten, name).default

    def kernel(row, col, offset=0, *, dtype=None, layout=None, device=None, pin_memory=None):
        index = torch.device(device).index if device is not None else None
        if index is None:
            index = torch.ops.emu.current_device.default()
        return on_device(cpu_op(row, col, offset, dtype=dtype), index)

    lowering(f"aten::{name}")(kernel)


_index_factory("triu_indices")
_index_factory("tril_indices")

# Samplers of distributions (Gamma, Dirichlet, Poisson, binomial), drawn the same way.
lower("aten::_standard_gamma", "aten::_sample_dirichlet", "aten::poisson", "aten::binomial")
lower("aten::range.out")
