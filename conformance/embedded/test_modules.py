"""Module templates over ``module_db``: forward, and forward plus backward, against the CPU.

Naming: the class is ``TestModule`` and the templates carry the names of upstream's
``test/test_modules.py`` tests that check the same property, so the ModuleInfos' own skips,
expected failures and tolerance overrides apply for the device type under test:
- ``test_forward``: upstream checks the forward pass; ours checks it against the CPU.
- ``test_cpu_gpu_parity``: upstream compares an accelerator's forward and backward with the
  CPU's; ours does the same for whatever device is under test (on ``cpu`` it compares two
  CPU copies of the module, which checks determinism).

The module is built once on the CPU from a fixed seed, run once to materialize lazy
parameters, then copied to the device, so both sides hold the same parameters.
"""

from __future__ import annotations

import copy

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_modules import modules
from torch.testing._internal.common_utils import TestCase, run_tests
from torch.utils._pytree import tree_map

from conformance.embedded._samples import (
    SEED,
    compiled,
    compiling,
    indexed,
    noting,
    tensor_outputs,
    to_cpu,
)
from conformance.embedded.selection import dtypes_for, max_samples, select_modules


def _module_inputs(module_info, dtype: torch.dtype, training: bool, requires_grad: bool) -> list:
    torch.manual_seed(SEED)
    inputs = module_info.module_inputs_func(
        module_info, device="cpu", dtype=dtype, requires_grad=requires_grad, training=training
    )
    inputs = [i for i in inputs if i.forward_input is not None]
    limit = max_samples()
    return inputs if limit is None else inputs[:limit]


def _moved(value, device):
    def move(x):
        if isinstance(x, torch.Tensor):
            return x.detach().to(device).requires_grad_(x.requires_grad)
        return x

    return tree_map(move, value)


def _forward(module, forward_input, device, *, under_test=False):
    """The module's forward on ``device``; compiled in compile mode when ``under_test``
    (the device's module, not the CPU reference)."""
    args = _moved(forward_input.args, device)
    kwargs = _moved(forward_input.kwargs, device)
    if under_test and compiling():
        module = compiled(module, torch.device(device).type)
    torch.manual_seed(SEED)  # modules that draw random numbers draw the same ones
    return module(*args, **kwargs), args, kwargs


def _module_pair(module_info, module_input, dtype, training, device):
    """The module on the CPU and an identical copy on ``device``."""
    ctor = module_input.constructor_input
    torch.manual_seed(SEED)
    cpu_module = module_info.module_cls(*ctor.args, **ctor.kwargs).to(dtype)
    cpu_module.train(training)
    with torch.no_grad():
        _forward(cpu_module, module_input.forward_input, "cpu")  # materializes lazy modules
    return cpu_module, copy.deepcopy(cpu_module).to(device)


def _leaves(module, args, kwargs) -> list[torch.Tensor]:
    inputs = [t for t in tensor_outputs((args, kwargs)) if t.requires_grad]
    return inputs + [p for p in module.parameters() if p.requires_grad]


def _grads(module, result, args, kwargs) -> list:
    outputs = [t for t in tensor_outputs(result) if t.requires_grad]
    leaves = _leaves(module, args, kwargs)
    if not outputs or not leaves:
        return []
    generator = torch.Generator().manual_seed(SEED)
    cotangents = [
        torch.randn(t.shape, dtype=t.dtype, generator=generator).to(t.device) for t in outputs
    ]
    grads = torch.autograd.grad(outputs, leaves, cotangents, allow_unused=True)
    return [to_cpu(g) for g in grads]


class TestModule(TestCase):
    exact_dtype = True

    @modules(select_modules(), allowed_dtypes=dtypes_for("test_forward")["allowed_dtypes"])
    def test_forward(self, device, dtype, module_info, training):
        """The module's forward on the device equals the CPU's, outputs on the device."""
        inputs = _module_inputs(module_info, dtype, training, requires_grad=False)
        for index, module_input in indexed(inputs):
            with noting(index, module_input.desc, "module input"):
                cpu_module, dev_module = _module_pair(
                    module_info, module_input, dtype, training, device
                )
                with torch.no_grad():
                    expected, _, _ = _forward(cpu_module, module_input.forward_input, "cpu")
                    actual, _, _ = _forward(
                        dev_module, module_input.forward_input, device, under_test=True
                    )
                for t in tensor_outputs(actual):
                    self.assertEqual(t.device.type, torch.device(device).type, msg="output device")
                self.assertEqual(to_cpu(actual), expected, msg=module_input.desc)

    @modules(select_modules(), allowed_dtypes=dtypes_for("test_cpu_gpu_parity")["allowed_dtypes"])
    def test_cpu_gpu_parity(self, device, dtype, module_info, training):
        """Forward results and the grads of inputs and parameters equal the CPU's."""
        inputs = _module_inputs(module_info, dtype, training, requires_grad=True)
        for index, module_input in indexed(inputs):
            with noting(index, module_input.desc, "module input"):
                cpu_module, dev_module = _module_pair(
                    module_info, module_input, dtype, training, device
                )
                forward = module_input.forward_input
                expected, cpu_args, cpu_kwargs = _forward(cpu_module, forward, "cpu")
                actual, dev_args, dev_kwargs = _forward(
                    dev_module, forward, device, under_test=True
                )
                self.assertEqual(to_cpu(actual), to_cpu(expected), msg=module_input.desc)
                self.assertEqual(
                    _grads(dev_module, actual, dev_args, dev_kwargs),
                    _grads(cpu_module, expected, cpu_args, cpu_kwargs),
                    msg=f"grads, {module_input.desc}",
                )


instantiate_device_type_tests(TestModule, globals())

if __name__ == "__main__":
    run_tests()
