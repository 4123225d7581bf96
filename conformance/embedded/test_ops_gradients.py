"""Gradient templates over ``op_db``: backward against the CPU, forward-mode AD.

Naming:
- ``TestFwdGradients.test_forward_mode_AD`` carries upstream's name (``test_ops_fwd_gradients.py``)
  and checks the same property the same way: ``gradcheck`` of the forward-mode derivative
  on the device, in double precision. The OpInfos' skips and expected failures for it (ops
  whose forward AD formula is missing or wrong) therefore apply unchanged. A backend without
  forward AD fails here; the harness classifies that as ``unsupported_feature/forward_ad``.
- ``TestCompareCpuGradients.test_fn_grad_compare_cpu`` has no upstream namesake: upstream's
  ``test_fn_grad`` is a finite-difference gradcheck, and its expected failures describe
  gradcheck's limits, not the device's. Comparing the device's gradient with the CPU's on
  the same samples and cotangents is our own check, so it takes its own name and only the
  OpInfo's declared capabilities (``supports_autograd``, backward dtypes) select it.
"""

from __future__ import annotations

import functools

import torch
from torch.autograd.gradcheck import GradcheckError
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_utils import TestCase, run_tests
from torch.utils._pytree import tree_flatten, tree_unflatten

from conformance.embedded._samples import (
    backward_grads,
    call,
    cpu_samples,
    indexed,
    noting,
    skip_in_compile_mode,
    to_device,
)
from conformance.embedded.selection import dtypes_for, select_ops


class TestCompareCpuGradients(TestCase):
    exact_dtype = True

    @ops(select_ops("test_fn_grad_compare_cpu"), **dtypes_for("test_fn_grad_compare_cpu"))
    def test_fn_grad_compare_cpu(self, device, dtype, op):
        """The gradient on the device equals the CPU's for the same samples and cotangents."""
        for index, cpu_sample in indexed(cpu_samples(op, dtype, requires_grad=True)):
            with noting(index, cpu_sample):
                # The reference too runs on a copy. Some samples hold a view of another
                # tensor made outside autograd (istft's window[:8]), and autograd gives
                # such a view no grad of its own; copies are fresh leaves on both sides.
                reference = to_device(cpu_sample, "cpu", reference=True)
                expected = backward_grads(call(op, reference), reference)
                sample = to_device(cpu_sample, device)
                actual = backward_grads(call(op, sample), sample)
                self.assertEqual(actual, expected)


class TestFwdGradients(TestCase):
    exact_dtype = True

    @ops(select_ops("test_forward_mode_AD"), **dtypes_for("test_forward_mode_AD"))
    def test_forward_mode_AD(self, device, dtype, op):
        """Forward-mode derivatives on the device pass gradcheck against finite differences."""
        skip_in_compile_mode(self)
        for index, cpu_sample in indexed(cpu_samples(op, dtype, requires_grad=True)):
            with noting(index, cpu_sample):
                sample = to_device(cpu_sample, device)
                leaves, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
                positions = [
                    i
                    for i, x in enumerate(leaves)
                    if isinstance(x, torch.Tensor) and x.requires_grad
                ]
                if not positions:
                    continue

                def fn(*tensors, leaves=leaves, spec=spec, positions=positions, sample=sample):
                    rebuilt = list(leaves)
                    for position, tensor in zip(positions, tensors, strict=True):
                        rebuilt[position] = tensor
                    inp, args, kwargs = tree_unflatten(rebuilt, spec)
                    out = op.gradcheck_wrapper(op.get_op(), inp, *args, **kwargs)
                    return sample.output_process_fn_grad(out)

                inputs = tuple(leaves[i] for i in positions)
                check = functools.partial(
                    torch.autograd.gradcheck,
                    fn,
                    inputs,
                    check_forward_ad=True,
                    check_backward_ad=False,
                    check_undefined_grad=False,
                    check_batched_grad=False,
                    # As upstream: also vmapped forward grads, where the op claims them.
                    check_batched_forward_grad=op.check_batched_forward_grad,
                    nondet_tol=op.gradcheck_nondet_tol,
                )
                # Fast mode (upstream's default unless the OpInfo says otherwise) checks a
                # random projection of the Jacobian: the same property at a fraction of
                # the cost. Its finite difference along a random direction is inexact for
                # large inputs (logsumexp's samples near 1e6), so a fast-mode mismatch is
                # confirmed with the full Jacobian before it counts, as gradcheck advises.
                fast = op.gradcheck_fast_mode is not False
                try:
                    self.assertTrue(check(fast_mode=fast))
                except GradcheckError:
                    if not fast:
                        raise
                    self.assertTrue(check(fast_mode=False))


instantiate_device_type_tests(TestCompareCpuGradients, globals())
instantiate_device_type_tests(TestFwdGradients, globals())

if __name__ == "__main__":
    run_tests()
