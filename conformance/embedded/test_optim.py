"""Optimizer templates over ``optim_db``: optimizer steps on the device against the CPU.

Each optimizer configuration from the OptimizerInfo's ``optim_inputs_func`` takes three
steps on a small least-squares problem, once on the CPU and once on the device with
identical starting parameters; parameters must agree after every step. The loss and its
gradient are computed on each side, so a step runs the backend's ops end to end. The CPU
side always runs the for-loop implementation.

- ``test_step_matches_cpu`` (no upstream namesake: upstream compares implementations with
  each other, not devices): the device runs the for-loop implementation too.
- ``test_foreach_matches_forloop`` and ``test_fused_matches_forloop`` carry upstream's
  names and check their property, that the multi-tensor (``foreach=True``) and fused
  (``fused=True``) implementations give the for-loop's parameters, with the CPU's for-loop
  as the reference, which ``test_step_matches_cpu`` ties to the device's. The
  OptimizerInfos' decorators for those tests therefore apply. Fused runs on every device
  type torch allows fused kernels on (a PrivateUse1 backend included), not only on those
  the OptimizerInfo lists: a backend learns which fused kernels it lacks.

Configurations that choose an implementation themselves (``fused``, ``foreach``,
``capturable``, ``differentiable``) are left out; the templates choose it.
"""

from __future__ import annotations

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_optimizers import optims
from torch.testing._internal.common_utils import TestCase, run_tests
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

from conformance.embedded._samples import SEED, skip_in_compile_mode
from conformance.embedded.selection import dtypes_for, select_optimizers

_STEPS = 3


def _problem(dtype: torch.dtype):
    """Starting parameters and data of a small least-squares fit, on the CPU.

    Every parameter is a matrix (the bias a row that broadcasts): some optimizers (Muon)
    take 2-D parameters only."""
    generator = torch.Generator().manual_seed(SEED)
    weight = torch.randn(3, 4, dtype=dtype, generator=generator)
    bias = torch.randn(1, 3, dtype=dtype, generator=generator)
    x = torch.randn(5, 4, dtype=dtype, generator=generator)
    y = torch.randn(5, 3, dtype=dtype, generator=generator)
    return [weight, bias], x, y


def _run(optim_cls, kwargs, dtype, device) -> list[list[torch.Tensor]]:
    """Parameters (on the CPU) after each step on ``device``."""
    start, x, y = _problem(dtype)
    params = [p.to(device).requires_grad_() for p in start]
    x, y = x.to(device), y.to(device)
    optimizer = optim_cls(params, **kwargs)

    def closure():
        optimizer.zero_grad()
        loss = ((x @ params[0].t() + params[1] - y) ** 2).mean()
        loss.backward()
        return loss

    history = []
    for _ in range(_STEPS):
        optimizer.step(closure)
        history.append([p.detach().to("cpu", copy=True) for p in params])
    return history


#: Optimizer keyword arguments that choose an implementation.
_IMPLEMENTATION_KWARGS = ("fused", "foreach", "capturable", "differentiable")


def _forloop(optim_info) -> dict:
    """The keyword choosing the for-loop implementation, for optimizers that have others."""
    return {"foreach": False} if "foreach" in optim_info.supported_impls else {}


class TestOptimRenewed(TestCase):
    exact_dtype = True

    def _check_matches_cpu(self, optim_info, device, dtype, implementation: dict) -> None:
        """Every plain configuration with ``implementation`` on the device gives the CPU's
        for-loop parameters after every step."""
        skip_in_compile_mode(self)  # optimizer steps are not compiled
        checked = 0
        for optim_input in optim_info.optim_inputs_func(device=device, dtype=dtype):
            kwargs = dict(optim_input.kwargs)
            if any(kwargs.get(k) for k in _IMPLEMENTATION_KWARGS):
                continue
            expected = _run(optim_info.optim_cls, {**kwargs, **_forloop(optim_info)}, dtype, "cpu")
            actual = _run(optim_info.optim_cls, {**kwargs, **implementation}, dtype, device)
            self.assertEqual(actual, expected, msg=optim_input.desc)
            checked += 1
        self.assertGreater(checked, 0, msg="no optimizer configuration was checked")

    @optims(select_optimizers(), dtypes=dtypes_for("test_step_matches_cpu")["allowed_dtypes"])
    def test_step_matches_cpu(self, device, dtype, optim_info):
        """Each configuration's for-loop steps give the CPU's parameters after every step."""
        self._check_matches_cpu(optim_info, device, dtype, _forloop(optim_info))

    @optims(
        select_optimizers(implementation="foreach"),
        dtypes=dtypes_for("test_foreach_matches_forloop")["allowed_dtypes"],
    )
    def test_foreach_matches_forloop(self, device, dtype, optim_info):
        """The multi-tensor implementation gives the for-loop's parameters."""
        self._check_matches_cpu(optim_info, device, dtype, {"foreach": True})

    @optims(
        select_optimizers(implementation="fused"),
        dtypes=dtypes_for("test_fused_matches_forloop")["allowed_dtypes"],
    )
    def test_fused_matches_forloop(self, device, dtype, optim_info):
        """The fused implementation gives the for-loop's parameters."""
        device_type = torch.device(device).type
        if device_type not in _get_fused_kernels_supported_devices():
            self.skipTest(f"torch allows no fused optimizer kernels on {device_type}")
        self._check_matches_cpu(optim_info, device, dtype, {"fused": True})


instantiate_device_type_tests(TestOptimRenewed, globals())

if __name__ == "__main__":
    run_tests()
