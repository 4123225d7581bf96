"""Autocast templates: torch's mixed-precision policy for accelerators, on the device.

Per op (the cases of :mod:`conformance.embedded._autocast`: torch's own autocast op lists),
for each lower-precision dtype, under ``torch.autocast(device_type, dtype=...)``:

- ``test_autocast_lower_precision_fp``, ``test_autocast_fp32``, ``test_autocast_promote``,
  ``test_autocast_builtin_promote``: the output has the dtype the policy gives (the autocast
  dtype, float32, the widest input's, the op's own promotion); the torch function and the
  Tensor method agree; the result is bitwise the result of the same call with autocast off
  and the inputs cast by hand, as upstream's autocast tests check; and it agrees with the
  op run in float32 on the CPU, within the dtype's rounding.
- ``test_autocast_banned``: ops the policy refuses raise RuntimeError.

Behaviour of the context manager, with ``mm`` (cast down on every device) and ``mse_loss``
(run in float32 on every device) as probes:

- ``test_autocast_default_dtype``: ``torch.autocast(device_type)`` casts to
  ``torch.get_autocast_dtype(device_type)``, one of the dtypes the device declares.
- ``test_autocast_nested``: regions nest; ``enabled=False`` inside switches autocast off,
  another dtype inside applies and ends with its region; the state is restored on exit, and
  autocast on one device type leaves another's tensors alone.
- ``test_autocast_disabled``: ``enabled=False`` casts nothing, as a context manager and as a
  decorator.
- ``test_autocast_cache``: with ``cache_enabled`` (the default) a weight (a float32 leaf that
  requires grad) is cast once per autocast region however often it is used; without, once
  per use; the cache ends with the outermost region.
- ``test_autocast_ignored_types``: float64 and integer inputs are never cast.
- ``test_autocast_backward``: gradients of float32 leaves used in a lower-precision op are
  float32 and agree with the CPU's.

A dtype the device does not declare for autocast skips its tests. On the CPU, whose autocast
has a policy of its own, the per-op tests run the cases its lists give the same policy and
skip the others, naming the list; the behaviour tests run as they are.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, parametrize, run_tests
from torch.utils._python_dispatch import TorchDispatchMode

from conformance.embedded._autocast import (
    AutocastCase,
    declared_dtypes,
    device_skip_reason,
    entry_on,
)
from conformance.embedded._samples import SEED, compiling
from conformance.embedded.selection import dtypes_for, select_autocast


def _autocast_dtypes(template: str) -> tuple[torch.dtype, ...]:
    return dtypes_for(template)["allowed_dtypes"]


def _cases(policy: str):
    return parametrize("op", select_autocast(policy), name_fn=lambda case: case.test_name)


#: Tolerance of a result against float32 on the CPU, per output dtype: relative, and absolute
#: as a fraction of the largest reference value (inputs and output rounded to 16 bits; a few
#: roundings inside RNN cells). float32 results (fp32 and promote policies) come from inputs
#: that convert exactly, so only the kernels' own order of operations differs.
_TOLERANCE = {torch.float16: 5e-3, torch.bfloat16: 3e-2, torch.float32: 1e-4}


def _tensors(result: Any) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (list, tuple)):
        return [t for r in result for t in _tensors(r)]
    return []


def _cast(value: Any, dtype: torch.dtype, device: str | None = None) -> Any:
    """``value`` with every floating tensor cast to ``dtype`` (and moved to ``device``)."""
    if isinstance(value, torch.Tensor):
        value = value.to(device) if device is not None else value
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype, device) for v in value)
    if isinstance(value, dict):
        return {k: _cast(v, dtype, device) for k, v in value.items()}
    return value


def _call(function, is_method: bool, args: tuple, kwargs: dict) -> Any:
    return function(args[0], *args[1:], **kwargs) if is_method else function(*args, **kwargs)


class _WeightCasts(TorchDispatchMode):
    """Counts the casts of one tensor to one dtype."""

    def __init__(self, weight: torch.Tensor, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight, self.dtype, self.count = weight, dtype, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if (
            func is torch.ops.aten._to_copy.default
            and args[0] is self.weight
            and kwargs.get("dtype") == self.dtype
        ):
            self.count += 1
        return func(*args, **kwargs)


class TestAutocast(TestCase):
    exact_dtype = True

    def _device_type(self, device: str, dtype: torch.dtype | None = None) -> str:
        """The device type; skips what does not apply (compile mode, an undeclared dtype)."""
        if compiling():
            self.skipTest("runs eager only: autocast regions are not compiled by this template")
        device_type = torch.device(device).type
        declared = declared_dtypes(device_type)
        self.assertTrue(
            declared,
            f"{device_type} declares no autocast dtype (a PrivateUse1 backend declares them "
            f"with get_amp_supported_dtype() on its device module)",
        )
        if dtype is not None and dtype not in declared:
            self.skipTest(
                f"{device_type} does not support {dtype} for autocast (declares: "
                f"{', '.join(map(str, declared))})"
            )
        return device_type

    def _check_policy(
        self, device: str, dtype: torch.dtype, case: AutocastCase, run_as: torch.dtype | None
    ) -> None:
        """The case's output dtype and values under autocast (``run_as``: the dtype the
        policy computes in; None for the widest of the inputs, which is float32 in every
        promote entry)."""
        device_type = self._device_type(device, dtype)
        entry = entry_on(case, device, SEED, dtype)
        reason = device_skip_reason(case, device_type, entry)
        if reason:
            self.skipTest(reason)
        run_as = run_as or torch.float32
        expected_dtype = entry.out_type or run_as
        functions = case.functions()
        self.assertTrue(functions, f"{case.op} is neither on {case.module} nor a Tensor method")

        self.assertFalse(torch.is_autocast_enabled(device_type))
        results = []
        with torch.autocast(device_type, dtype=dtype):
            self.assertTrue(torch.is_autocast_enabled(device_type))
            for label, function, is_method in functions:
                result = _call(function, is_method, entry.args, entry.kwargs)
                for output in _tensors(result):
                    self.assertEqual(
                        output.dtype,
                        expected_dtype,
                        msg=f"under autocast({dtype}) {label} gave {output.dtype}, "
                        f"the policy ({case.policy}) gives {expected_dtype}",
                    )
                results.append((label, result))
        self.assertFalse(torch.is_autocast_enabled(device_type))
        label, result = results[0]
        for other_label, other in results[1:]:
            self.assertEqual(other, result, atol=0, rtol=0, msg=f"{other_label} != {label}")

        # As upstream's autocast tests: autocast must compute what the op computes on the
        # inputs cast by hand, bit for bit.
        _, function, is_method = functions[0]
        with torch.autocast(device_type, enabled=False):
            control = _call(function, is_method, _cast(entry.args, run_as), entry.kwargs)
        self.assertEqual(
            result,
            control,
            atol=0,
            rtol=0,
            msg=f"{label} under autocast differs from {label} on inputs cast to {run_as}",
        )

        cpu_args = _cast(entry.args, torch.float32, "cpu")
        cpu_kwargs = _cast(entry.kwargs, torch.float32, "cpu")
        reference = _call(function, is_method, cpu_args, cpu_kwargs)
        outputs, expected = _tensors(result), _tensors(reference)
        self.assertEqual(len(outputs), len(expected))
        if not outputs:
            self.assertEqual(result, reference)
        for output, reference_output in zip(outputs, expected, strict=True):
            output = output.cpu()
            if not output.is_floating_point():
                self.assertEqual(output, reference_output, exact_dtype=False)
                continue
            tolerance = _TOLERANCE[output.dtype]
            scale = max(1.0, reference_output.abs().max().item()) if reference_output.numel() else 1
            self.assertEqual(
                output.float(),
                reference_output,
                atol=tolerance * scale,
                rtol=tolerance,
                msg=f"{label} under autocast({dtype}) does not agree with float32 on the CPU",
            )

    @dtypes(*_autocast_dtypes("test_autocast_lower_precision_fp"))
    @_cases("lower_precision_fp")
    def test_autocast_lower_precision_fp(self, device, dtype, op):
        """Matmuls, convolutions, linear, RNN cells run in the autocast dtype."""
        self._check_policy(device, dtype, op, dtype)

    @dtypes(*_autocast_dtypes("test_autocast_fp32"))
    @_cases("fp32")
    def test_autocast_fp32(self, device, dtype, op):
        """Ops that lose accuracy in 16 bits run in float32, whatever their inputs."""
        self._check_policy(device, dtype, op, torch.float32)

    @dtypes(*_autocast_dtypes("test_autocast_promote"))
    @_cases("promote")
    def test_autocast_promote(self, device, dtype, op):
        """Ops of several inputs cast all of them to the widest."""
        self._check_policy(device, dtype, op, None)

    @dtypes(*_autocast_dtypes("test_autocast_builtin_promote"))
    @_cases("builtin_promote")
    def test_autocast_builtin_promote(self, device, dtype, op):
        """Ops that promote by themselves still do under autocast."""
        self._check_policy(device, dtype, op, torch.float32)

    @dtypes(*_autocast_dtypes("test_autocast_banned"))
    @_cases("banned")
    def test_autocast_banned(self, device, dtype, op):
        """Ops the policy refuses raise RuntimeError under autocast, and run without it."""
        device_type = self._device_type(device, dtype)
        entry = entry_on(op, device, SEED, dtype)
        reason = device_skip_reason(op, device_type, entry)
        if reason:
            self.skipTest(reason)
        function = getattr(entry.banned_module, op.op)
        function(*entry.args)
        with torch.autocast(device_type, dtype=dtype), self.assertRaises(RuntimeError):
            function(*entry.args)

    def _probes(self, device: str):
        generator = torch.Generator().manual_seed(SEED)
        a = torch.randn(4, 4, generator=generator).to(device)
        b = torch.randn(4, 4, generator=generator).to(device)
        return a, b

    def test_autocast_default_dtype(self, device):
        """``torch.autocast(device_type)`` casts to the device's default autocast dtype."""
        device_type = self._device_type(device)
        default = torch.get_autocast_dtype(device_type)
        self.assertIn(default, declared_dtypes(device_type))
        a, b = self._probes(device)
        with torch.autocast(device_type):
            self.assertEqual(torch.mm(a, b).dtype, default)
            self.assertEqual(F.mse_loss(a.to(default), b.to(default)).dtype, torch.float32)
        self.assertEqual(torch.mm(a, b).dtype, torch.float32)

    @dtypes(*_autocast_dtypes("test_autocast_nested"))
    def test_autocast_nested(self, device, dtype):
        """Nested regions: switched off, re-enabled, another dtype; restored on exit."""
        device_type = self._device_type(device, dtype)
        a, b = self._probes(device)
        low = a.to(dtype)
        outside = torch.get_autocast_dtype(device_type)
        with torch.autocast(device_type, dtype=dtype):
            self.assertEqual(torch.mm(a, b).dtype, dtype)
            with torch.autocast(device_type, enabled=False):
                self.assertFalse(torch.is_autocast_enabled(device_type))
                self.assertEqual(torch.mm(a, b).dtype, torch.float32)
                self.assertEqual(torch.mm(low, low).dtype, dtype)
                self.assertEqual(F.mse_loss(low, low).dtype, dtype)
                with torch.autocast(device_type, dtype=dtype):
                    self.assertEqual(torch.mm(a, b).dtype, dtype)
                self.assertEqual(torch.mm(a, b).dtype, torch.float32)
            self.assertTrue(torch.is_autocast_enabled(device_type))
            for other in declared_dtypes(device_type):
                with torch.autocast(device_type, dtype=other):
                    self.assertEqual(torch.get_autocast_dtype(device_type), other)
                    self.assertEqual(torch.mm(a, b).dtype, other)
                self.assertEqual(torch.get_autocast_dtype(device_type), dtype)
            self.assertEqual(torch.mm(a, b).dtype, dtype)
            self.assertEqual(F.mse_loss(low, low).dtype, torch.float32)
            if device_type != "cpu":
                # autocast is per device type: the CPU's tensors are left alone
                self.assertEqual(torch.mm(a.cpu(), b.cpu()).dtype, torch.float32)
        self.assertFalse(torch.is_autocast_enabled(device_type))
        self.assertEqual(torch.get_autocast_dtype(device_type), outside)
        self.assertEqual(torch.mm(a, b).dtype, torch.float32)
        if device_type != "cpu":
            with torch.autocast("cpu"):
                self.assertEqual(torch.mm(a, b).dtype, torch.float32)

    @dtypes(*_autocast_dtypes("test_autocast_disabled"))
    def test_autocast_disabled(self, device, dtype):
        """``enabled=False`` casts nothing, as a context manager and as a decorator."""
        device_type = self._device_type(device, dtype)
        a, b = self._probes(device)
        low = a.to(dtype)
        eager = torch.mm(a, b)
        with torch.autocast(device_type, dtype=dtype, enabled=False):
            self.assertFalse(torch.is_autocast_enabled(device_type))
            self.assertEqual(torch.mm(a, b), eager, atol=0, rtol=0)
            self.assertEqual(F.mse_loss(low, low).dtype, dtype)

        @torch.autocast(device_type, dtype=dtype, enabled=False)
        def off(x, y):
            return torch.mm(x, y)

        @torch.autocast(device_type, dtype=dtype)
        def on(x, y):
            return torch.mm(x, y)

        self.assertEqual(off(a, b).dtype, torch.float32)
        self.assertEqual(on(a, b).dtype, dtype)
        self.assertFalse(torch.is_autocast_enabled(device_type))

    @dtypes(*_autocast_dtypes("test_autocast_cache"))
    def test_autocast_cache(self, device, dtype):
        """A weight is cast once per region with the cache, once per use without it."""
        device_type = self._device_type(device, dtype)
        x, w = self._probes(device)
        weight = w.clone().requires_grad_()

        def casts(cache_enabled: bool | None, regions: int = 1, uses: int = 3) -> int:
            kwargs = {} if cache_enabled is None else {"cache_enabled": cache_enabled}
            with _WeightCasts(weight, dtype) as counter:
                for _ in range(regions):
                    with torch.autocast(device_type, dtype=dtype, **kwargs):
                        if cache_enabled is not None:
                            self.assertEqual(torch.is_autocast_cache_enabled(), cache_enabled)
                        for _ in range(uses):
                            self.assertEqual(torch.mm(x, weight).dtype, dtype)
            return counter.count

        was = torch.is_autocast_cache_enabled()
        self.assertEqual(casts(None), 1, msg="cached by default: one cast per region")
        self.assertEqual(casts(True), 1, msg="cache_enabled=True: one cast per region")
        self.assertEqual(casts(False), 3, msg="cache_enabled=False: one cast per use")
        self.assertEqual(casts(True, regions=2), 2, msg="the cache ends with its region")
        self.assertEqual(torch.is_autocast_cache_enabled(), was)

    @dtypes(*_autocast_dtypes("test_autocast_ignored_types"))
    def test_autocast_ignored_types(self, device, dtype):
        """float64 and integer inputs are never cast."""
        device_type = self._device_type(device, dtype)
        for ignored in (torch.float64, torch.int32):
            a = torch.ones(4, 4, dtype=ignored, device=device)
            b = torch.ones(4, 4, dtype=ignored, device=device)
            with torch.autocast(device_type, enabled=False):
                expected = {
                    "pow": torch.pow(a, 2.0).dtype,
                    "sum": torch.sum(a).dtype,
                    "mm": torch.mm(a, b).dtype if ignored.is_floating_point else None,
                }
            with torch.autocast(device_type, dtype=dtype):
                self.assertEqual(torch.pow(a, 2.0).dtype, expected["pow"])
                self.assertEqual(torch.sum(a).dtype, expected["sum"])
                if ignored.is_floating_point:
                    self.assertEqual(torch.mm(a, b).dtype, expected["mm"])
                    with self.assertRaises(RuntimeError):
                        torch.mm(a, b.to(dtype))  # float64 stays float64: dtypes differ

    @dtypes(*_autocast_dtypes("test_autocast_backward"))
    def test_autocast_backward(self, device, dtype):
        """float32 leaves get float32 gradients that agree with the CPU's."""
        device_type = self._device_type(device, dtype)
        x, w = self._probes(device)
        weight = w.clone().requires_grad_()
        with torch.autocast(device_type, dtype=dtype):
            y = torch.mm(x, weight)
            self.assertEqual(y.dtype, dtype)
            loss = (y.float() ** 2).sum()
        loss.backward()
        self.assertEqual(weight.grad.dtype, torch.float32)
        cpu_weight = w.cpu().clone().requires_grad_()
        (torch.mm(x.cpu(), cpu_weight) ** 2).sum().backward()
        tolerance = _TOLERANCE[dtype]
        scale = max(1.0, cpu_weight.grad.abs().max().item())
        self.assertEqual(weight.grad.cpu(), cpu_weight.grad, atol=tolerance * scale, rtol=tolerance)


instantiate_device_type_tests(TestAutocast, globals())

if __name__ == "__main__":
    run_tests()
