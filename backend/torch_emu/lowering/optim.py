"""Fused optimizer steps (``torch.optim`` with ``fused=True``): one kernel updates every
parameter, gradient and state tensor of a parameter group in place."""

from __future__ import annotations

from torch_emu.lowering.registry import lower

for _name in ("_fused_adam_", "_fused_adamw_", "_fused_sgd_", "_fused_adagrad_"):
    lower(f"aten::{_name}", f"aten::{_name}.tensor_lr")

# Gradient scaling (torch.amp.GradScaler): unscale the grads in place and record whether
# any is inf or NaN, then grow or back off the scale.
lower("aten::_amp_foreach_non_finite_check_and_unscale_", "aten::_amp_update_scale_")
