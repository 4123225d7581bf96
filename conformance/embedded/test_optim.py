"""Optimizer template over ``optim_db``: optimizer steps on the device against the CPU.

Naming: the class is ``TestOptimRenewed``, upstream's class in ``test/test_optim.py``, so
class-wide OptimizerInfo decorators apply; the template itself, ``test_step_matches_cpu``,
has no upstream namesake (upstream compares implementations with each other, not devices),
so only decorators aimed at the whole class reach it.

Each optimizer configuration from the OptimizerInfo's ``optim_inputs_func`` (except the
``fused`` and ``capturable`` ones, which are accelerator-specific implementations) takes
three steps on a small least-squares problem, once on the CPU and once on the device with
identical starting parameters; parameters must agree after every step. The loss and its
gradient are computed on each side, so the step runs the backend's ops end to end.
"""

from __future__ import annotations

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_optimizers import optims
from torch.testing._internal.common_utils import TestCase, run_tests

from conformance.embedded._samples import SEED
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


class TestOptimRenewed(TestCase):
    exact_dtype = True

    @optims(select_optimizers(), dtypes=dtypes_for("test_step_matches_cpu")["allowed_dtypes"])
    def test_step_matches_cpu(self, device, dtype, optim_info):
        """Each configuration's steps give the CPU's parameters after every step."""
        checked = 0
        for optim_input in optim_info.optim_inputs_func(device=device, dtype=dtype):
            kwargs = dict(optim_input.kwargs)
            if kwargs.get("fused") or kwargs.get("capturable"):
                continue
            expected = _run(optim_info.optim_cls, kwargs, dtype, "cpu")
            actual = _run(optim_info.optim_cls, kwargs, dtype, device)
            self.assertEqual(actual, expected, msg=optim_input.desc)
            checked += 1
        self.assertGreater(checked, 0, msg="no optimizer configuration was checked")


instantiate_device_type_tests(TestOptimRenewed, globals())

if __name__ == "__main__":
    run_tests()
