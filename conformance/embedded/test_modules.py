"""Module templates over ``module_db``: forward, and forward plus backward, against the CPU.

Naming: the class is ``TestModule`` and the templates carry the names of upstream's
``test/test_modules.py`` tests that check the same property, so the ModuleInfos' own skips,
expected failures and tolerance overrides apply for the device type under test:
- ``test_forward``: upstream checks the forward pass; ours checks it against the CPU.
- ``test_cpu_gpu_parity``: upstream compares an accelerator's forward and backward with the
  CPU's; ours does the same for whatever device is under test (on ``cpu`` it compares two
  CPU copies of the module, which checks determinism).
- ``test_errors``: as upstream, each ModuleInfo's error inputs, drawn on the device, raise
  the error and message it names, at construction or in forward.
- ``test_to``: as upstream, ``Module.to()`` between the CPU and the device and across the
  module's dtypes, with and without swapping tensors, with and without grads. Upstream also
  requires that without swapping a parameter keeps its tensor across devices; torch does that
  only for tensor types it can shallow-copy between, and lists no PrivateUse1 among them, so
  ours requires it where torch reports the two tensors compatible.

The module is built once on the CPU from a fixed seed, run once to materialize lazy
parameters, then copied to the device, so both sides hold the same parameters.
"""

from __future__ import annotations

import copy
import itertools

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_modules import ModuleErrorEnum, modules
from torch.testing._internal.common_utils import TestCase, parametrize, run_tests
from torch.utils._pytree import tree_map

from conformance.embedded._samples import (
    SEED,
    compiled,
    compiling,
    indexed,
    noting,
    skip_in_compile_mode,
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

    @modules(
        [m for m in select_modules() if m.module_error_inputs_func is not None],
        allowed_dtypes=dtypes_for("test_module_errors")["allowed_dtypes"],
    )
    def test_errors(self, device, dtype, module_info, training):
        """Each error input raises its error and message, as the CPU does: the module's own
        checks come before any the device adds."""
        skip_in_compile_mode(self)
        torch.manual_seed(SEED)
        error_inputs = module_info.module_error_inputs_func(
            module_info, device=device, dtype=dtype, requires_grad=False, training=training
        )
        for index, error_input in indexed(error_inputs):
            module_input = error_input.module_error_input
            ctor, forward = module_input.constructor_input, module_input.forward_input
            with noting(index, module_input.desc or error_input.error_regex, "error input"):
                if error_input.error_on == ModuleErrorEnum.CONSTRUCTION_ERROR:
                    with self.assertRaisesRegex(error_input.error_type, error_input.error_regex):
                        module_info.module_cls(*ctor.args, **ctor.kwargs)
                else:
                    module = module_info.module_cls(*ctor.args, **ctor.kwargs)
                    with self.assertRaisesRegex(error_input.error_type, error_input.error_regex):
                        module(*forward.args, **forward.kwargs)

    @modules(
        [m for m in select_modules() if not m.is_lazy],
        allowed_dtypes=dtypes_for("test_to")["allowed_dtypes"],
    )
    @parametrize("swap", [True, False])
    @parametrize("set_grad", [True, False])
    def test_to(self, device, dtype, module_info, training, swap, set_grad):
        """``Module.to()`` moves parameters, buffers and grads between the CPU and the device
        and across dtypes; parameters stay the same Python objects."""
        skip_in_compile_mode(self)
        before = torch.__future__.get_swap_module_params_on_conversion()
        torch.__future__.set_swap_module_params_on_conversion(swap)
        try:
            inputs = _module_inputs(module_info, dtype, training, requires_grad=False)
            for index, module_input in indexed(inputs):
                with noting(index, module_input.desc, "module input"):
                    self._check_to(module_info, module_input, device, dtype, swap, set_grad)
        finally:
            torch.__future__.set_swap_module_params_on_conversion(before)

    def _check_to(self, module_info, module_input, device, dtype, swap, set_grad):
        ctor = module_input.constructor_input
        torch.manual_seed(SEED)
        module = module_info.module_cls(*ctor.args, **ctor.kwargs)
        _place(module, device, dtype, set_grad)  # by hand: .to() is what is under test
        if swap and not set_grad and list(module.parameters()):
            # .to() must still work once backward has run (autograd holds the parameters).
            out, _, _ = _forward(module, module_input.forward_input, device)
            out = out[0] if isinstance(out, tuple) else out
            out.sum().backward()
            module.to(dtype=torch.half)
            module.to(dtype=dtype)
        where = (torch.device(device).type, dtype)
        for target in itertools.product(("cpu", where[0]), module_info.dtypes):
            moved, where = target != where, target
            params = list(module.parameters())
            tensors_before = _cdatas(params)
            grads_before = _cdatas(p.grad for p in params) if set_grad else []
            module.to(device=target[0], dtype=target[1])
            after = list(module.parameters())
            for name, tensor in itertools.chain(module.named_parameters(), module.named_buffers()):
                self.assertEqual(tensor.device.type, target[0], msg=f"{name} after .to{target}")
                if tensor.dtype.is_floating_point:
                    self.assertEqual(tensor.dtype, target[1], msg=f"{name} after .to{target}")
            for old, new in zip(params, after, strict=True):
                self.assertIsInstance(new, torch.nn.Parameter)
                if swap or torch._has_compatible_shallow_copy_type(new, old):
                    self.assertIs(new, old, msg=f"parameter replaced by .to{target}")
            if swap:
                # Swapped: the same objects hold new tensors; a grad the move leaves
                # unchanged keeps its tensor.
                self.assertTrue(
                    all(a != b for a, b in zip(tensors_before, _cdatas(after), strict=True))
                )
                if set_grad:
                    grads_after = _cdatas(p.grad for p in after)
                    self.assertTrue(
                        all(
                            (a != b) == moved
                            for a, b in zip(grads_before, grads_after, strict=True)
                        ),
                        msg=f"grads swapped by .to{target}",
                    )
            for p in after if set_grad else ():
                self.assertEqual(p.grad.device.type, target[0], msg=f"grad after .to{target}")
                self.assertEqual(p.grad.dtype, target[1], msg=f"grad after .to{target}")


def _cdatas(tensors) -> list[int]:
    return [t._cdata for t in tensors]


def _place(module, device, dtype, set_grad):
    """Moves every parameter and buffer to ``device`` and ``dtype`` without ``Module.to()``,
    giving each parameter a random grad when ``set_grad``."""
    for child in module.children():
        _place(child, device, dtype, set_grad)
    for name, param in list(module.named_parameters(recurse=False)):
        moved = torch.nn.Parameter(param.detach().clone().to(device, dtype))
        if set_grad:
            moved.grad = torch.randn_like(moved)
        setattr(module, name, moved)
    for name, buffer in list(module.named_buffers(recurse=False)):
        setattr(module, name, buffer.detach().clone().to(device, dtype))


instantiate_device_type_tests(TestModule, globals())

if __name__ == "__main__":
    run_tests()
