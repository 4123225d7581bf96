"""Operator templates over ``op_db``: forward results, ``out=``, variants, strides, dtypes, errors.

Naming: the class is called ``TestCommon`` and the templates carry the names of upstream's
``test/test_ops.py`` tests that check the same property (``test_compare_cpu``, ``test_out``,
``test_out_warning``, ``test_variant_consistency_eager``, ``test_noncontiguous_samples``,
``test_dtypes``, ``test_errors``). ``@ops`` applies an OpInfo's ``DecorateInfo`` entries by
class and test name, so these names make every OpInfo's own skips, expected failures and
tolerance overrides for ``("TestCommon", "test_out")`` and the rest apply here, for the device
type under test. The code is our own; each template checks what its namesake checks, so the
upstream expectations keep their meaning. Where they do not, the docstring says so.

Samples are generated on the CPU from a fixed seed and copied to the device (see
``_samples``), so comparisons against the CPU use the same values. On ``cpu`` the suite still
runs the CPU reference computation; those comparisons then check determinism.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import unittest
import warnings

import torch
import torch._prims_common as prims_common
from torch._prims.context import TorchRefsMode
from torch._subclasses import fake_tensor
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_dtype import all_types_and_complex_and
from torch.testing._internal.common_utils import TestCase, run_tests
from torch.testing._internal.opinfo.core import DecorateInfo
from torch.utils._pytree import tree_leaves

from conformance.embedded._samples import (
    SEED,
    backward_grads,
    call,
    cpu_reference_inputs,
    cpu_samples,
    device_tensors,
    error_inputs,
    grad_inputs,
    indexed,
    noting,
    skip_in_compile_mode,
    tensor_outputs,
    to_cpu,
    to_device,
    under_test,
)
from conformance.embedded.selection import (
    aten_packet,
    current_selection,
    dtypes_for,
    select_ops,
    select_refs,
)

#: Upstream's expected failures that describe upstream's way of testing, not the op, so
#: they do not hold for these templates: ``{(test name, OpInfo full name): why}``. They
#: are removed (on every device type), so the test passes where the op behaves, and a
#: backend where it does not still fails.
NOT_APPLYING: dict[tuple[str, str], str] = {
    **{
        ("test_dtypes", name): (
            "upstream asks every floating sample for grad, which this op, claiming no "
            "autograd, rejects; this template asks only ops that claim autograd"
        )
        for name in ("geqrf", "resize_", "resize_as_")
    },
    **{
        ("test_variant_consistency_eager", name): (
            "op_db marks samples as broadcasting their input where only the other operands "
            "broadcast, and upstream then expects the in-place variant to raise; this "
            "template expects that only where the result's shape is not the input's"
        )
        for name in ("addcdiv", "addcmul")
    },
    **{
        ("test_out", name): (
            "the CPU's LAPACK kernels restride outs that have no elements, and upstream's "
            "stride check counts that; this template compares strides only of outs with "
            "more than one element, where they mean something"
        )
        for name in ("cholesky_inverse", "geqrf", "linalg.eig", "ormqr", "triangular_solve")
    },
    **{
        (test, name): (
            "op_db expects upstream's TestMathBits check to fail for this op on every device "
            "and gives no reason; this template makes the same comparisons (grads through "
            "torch.autograd.grad) and they hold on the CPU, where the expectation would only "
            "report an unexpected success"
        )
        for test, names in (
            ("test_conj_view", ("cartesian_prod", "narrow", "stack")),
            ("test_neg_view", ("_upsample_bilinear2d_aa", "cartesian_prod", "narrow", "stack")),
        )
        for name in names
    },
    ("test_python_ref_torch_fallback", "_refs.nn.functional.pdist"): (
        "op_db expects this to fail on the CPU in float32 and gives no reason; on this "
        "suite's samples (its own seed) the comparison holds on the CPU, where the "
        "expectation would only report an unexpected success"
    ),
    ("test_variant_consistency_eager", "chalf"): (
        "upstream sums the complex32 result before backward and the CPU has no complex32 "
        "sum; this template seeds backward with a cotangent of the result's shape instead"
    ),
}


#: The class of each template outside TestCommon (DecorateInfo names the class).
_TEMPLATE_CLASS = {
    "test_fake": "TestFakeTensor",
    "test_cow_input": "TestCompositeCompliance",
    "test_conj_view": "TestMathBits",
    "test_neg_view": "TestMathBits",
}


def _is_xfail(d, test_name: str) -> bool:
    return (
        isinstance(d, DecorateInfo)
        and d.cls_name == _TEMPLATE_CLASS.get(test_name, "TestCommon")
        and d.test_name == test_name
        and all(x is unittest.expectedFailure for x in d.decorators)
    )


def _without_xfails(op_list, test_name: str, drop) -> list:
    """Copies of the OpInfos without the expected failures for the template ``test_name``
    for which ``drop(op, decorate_info)`` is true. Skips and tolerances stay."""
    result = []
    for op in op_list:
        if any(_is_xfail(d, test_name) and drop(op, d) for d in op.decorators):
            op = copy.copy(op)
            op.decorators = tuple(
                d for d in op.decorators if not (_is_xfail(d, test_name) and drop(op, d))
            )
        result.append(op)
    return result


def _ops_for(test_name: str) -> list:
    """The selection's OpInfos for ``test_name``, without the expectations in NOT_APPLYING."""
    return _without_xfails(
        select_ops(test_name),
        test_name,
        lambda op, _: (test_name, op.full_name) in NOT_APPLYING,
    )


def _refs_for(test_name: str) -> list:
    """The selection's Python references for ``test_name``, as :func:`_ops_for`."""
    return _without_xfails(
        select_refs(test_name),
        test_name,
        lambda op, _: (test_name, op.full_name) in NOT_APPLYING,
    )


def _ops_for_compare_cpu() -> list:
    """Upstream runs ``test_compare_cpu`` only on accelerators, so an expected failure
    declared there without a device type records how an accelerator's kernels differ from
    the CPU's. Against the CPU itself, or a backend built on CPU kernels, the comparison
    passes and the expectation would report an unexpected success: those are removed."""
    return _without_xfails(
        select_ops("test_compare_cpu"), "test_compare_cpu", lambda _, d: d.device_type is None
    )


def _fill_garbage(t: torch.Tensor) -> torch.Tensor:
    # Values an op must never leave behind in out=: NaN, or the dtype's maximum.
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return t.fill_(float("nan"))
    if t.dtype == torch.bool:
        return t.fill_(True)
    return t.fill_(torch.iinfo(t.dtype).max)


def _outputs_for_out(result):
    """The output tensors as ``out=`` takes them, or None when out= cannot express them."""
    if isinstance(result, torch.Tensor):
        return result
    if (
        isinstance(result, (tuple, list))
        and result
        and all(isinstance(t, torch.Tensor) for t in result)
    ):
        return tuple(result)
    return None


def _like(expected, make):
    if isinstance(expected, torch.Tensor):
        return make(expected)
    return tuple(make(t) for t in expected)


def _as_tuple(x) -> tuple:
    return (x,) if isinstance(x, torch.Tensor) else tuple(x)


def _strides(out) -> list:
    """The strides that matter: those of outs with more than one element."""
    return [t.stride() if t.numel() > 1 else None for t in _as_tuple(out)]


def _out_returns_nothing(op) -> bool:
    """True when the op's out= is a ``Tensor[]`` whose ATen schema returns nothing
    (``unbind_copy.int_out(..., Tensor(a!)[] out) -> ()``); other out= calls return the outs."""
    packet = aten_packet(op)
    if packet is None:
        return False
    for name in packet.overloads():
        schema = getattr(packet, name)._schema
        outs = [a for a in schema.arguments if a.is_out]
        if outs and not schema.returns and any(isinstance(a.type, torch.ListType) for a in outs):
            return True
    return False


def _factory_takes_from_out(op, sample) -> frozenset[str]:
    """What a factory function takes from its out= because the sample does not name it.

    ``torch.linspace(0, 1, 5, out=out)`` computes in ``out``'s dtype on ``out``'s device;
    only an explicit ``dtype=`` or ``device=`` makes a mismatching out an error.
    """
    if not op.is_factory_function:
        return frozenset()
    return frozenset(k for k in ("dtype", "device") if sample.kwargs.get(k) is None)


#: ATen's resize_output warning, the one upstream promises for a resized non-empty out=.
_RESIZE_WARNING = "An output with one or more elements was resized"


def _resize_warnings(caught) -> list:
    return [w for w in caught if _RESIZE_WARNING in str(w.message)]


class TestCommon(TestCase):
    exact_dtype = True

    @ops(_ops_for_compare_cpu(), **dtypes_for("test_compare_cpu"))
    def test_compare_cpu(self, device, dtype, op):
        """Forward results on the device equal the CPU's on the same samples."""
        # The full selection adds the OpInfo's reference inputs (larger, edge-case values).
        reference = current_selection() == "full"
        compared = 0
        for index, sample in indexed(cpu_samples(op, dtype, reference=reference)):
            with noting(index, sample):
                try:
                    expected = sample.output_process_fn_grad(call(op, sample))
                except NotImplementedError:
                    # The CPU has no kernel for this sample (torch 2.13: antialiased
                    # interpolation in half precision): there is nothing to compare with.
                    continue
                compared += 1
                moved = to_device(sample, device)
                actual = call(op, moved)
                # A sample of Python numbers alone (reference inputs of binary ops) computes
                # on the CPU wherever it runs: only a tensor or device= places the result.
                if any(True for _ in device_tensors(moved)) or "device" in moved.kwargs:
                    for t in tensor_outputs(actual):
                        self.assertEqual(
                            t.device.type, torch.device(device).type, msg="output device"
                        )
                actual = sample.output_process_fn_grad(to_cpu(actual))
                self.assertEqual(actual, to_cpu(expected))
        if not compared:
            self.skipTest(f"the CPU computes none of {op.name}'s samples in {dtype}")

    @ops(_ops_for("test_out"), **dtypes_for("test_out"))
    def test_out(self, device, dtype, op):
        """``out=`` writes the result in place, resizes empty outs, checks dtype and device.

        As upstream: outs of the right shape keep their strides and storage; a factory
        function called without ``dtype=`` (or ``device=``) takes the out's dtype (device),
        so only with the keyword must a mismatching out be rejected.
        """
        returns_out = not _out_returns_nothing(op)
        for index, cpu_sample in indexed(cpu_samples(op, dtype)):
            with noting(index, cpu_sample):
                sample = to_device(cpu_sample, device)
                expected = _outputs_for_out(call(op, sample))
                if expected is None:
                    continue
                expected_cpu = to_cpu(expected)

                # Correct metadata, garbage values: the garbage must be overwritten, the very
                # tensors passed are returned, and nothing is resized (so nothing warns).
                out = _like(expected, lambda t: _fill_garbage(torch.empty_like(t)))
                strides = _strides(out)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    got = call(op, sample, out=out)
                self.assertEqual(_resize_warnings(caught), [], msg="out= of the right shape warned")
                if returns_out:
                    for returned, given in zip(_as_tuple(got), _as_tuple(out), strict=True):
                        self.assertIs(returned, given, msg="out= must return the out tensor itself")
                else:
                    self.assertIsNone(got, msg="an out= of type Tensor[] returns nothing")
                self.assertEqual(to_cpu(out), expected_cpu)
                self.assertEqual(_strides(out), strides, msg="out= of the right shape restrided")

                # Empty outs are resized to the result's shape.
                out = _like(expected, lambda t: t.new_empty((0,)))
                call(op, sample, out=out)
                self.assertEqual(to_cpu(out), expected_cpu)

                # Non-contiguous outs of the right shape are written through their strides,
                # in their own storage.
                out = _like(expected, lambda t: _fill_garbage(t.new_empty((*t.shape, 2)))[..., 0])
                ptrs, strides = [t.data_ptr() for t in _as_tuple(out)], _strides(out)
                call(op, sample, out=out)
                self.assertEqual([t.data_ptr() for t in _as_tuple(out)], ptrs)
                self.assertEqual(_strides(out), strides, msg="non-contiguous out= restrided")
                self.assertEqual(to_cpu(out), expected_cpu)

                # A floating or complex result cannot be cast safely to an integer out.
                factory_takes = _factory_takes_from_out(op, sample)
                if "dtype" not in factory_takes and any(
                    t.dtype.is_floating_point or t.dtype.is_complex for t in _as_tuple(expected)
                ):
                    out = _like(
                        expected,
                        lambda t: torch.empty_like(
                            t,
                            dtype=torch.long
                            if (t.dtype.is_floating_point or t.dtype.is_complex)
                            else t.dtype,
                        ),
                    )
                    # Structured kernels raise RuntimeError, argument checks in C++ TypeError.
                    with self.assertRaises((RuntimeError, TypeError), msg="unsafe cast into out="):
                        call(op, sample, out=out)

                # An out on another device raises (only checkable when the device is not the CPU),
                # 0-dim ones too, as upstream checks: a 0-dim CPU tensor may stand for a scalar
                # among an op's inputs, never for what it writes.
                if torch.device(device).type != "cpu" and "device" not in factory_takes:
                    out = _like(expected, lambda t: torch.empty_like(t, device="cpu"))
                    with self.assertRaises(RuntimeError, msg="out= on another device must raise"):
                        call(op, sample, out=out)

    @ops(_ops_for("test_out_warning"), **dtypes_for("test_out_warning"))
    def test_out_warning(self, device, dtype, op):
        """Resizing a non-empty ``out=`` warns and still gives the result."""
        for index, cpu_sample in indexed(cpu_samples(op, dtype)):
            with noting(index, cpu_sample):
                sample = to_device(cpu_sample, device)
                expected = _outputs_for_out(call(op, sample))
                if expected is None:
                    continue

                # A non-empty out of another shape: ATen resizes it and warns.
                out = _like(expected, lambda t: t.new_empty((t.numel() + 1,)))
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    call(op, sample, out=out)
                self.assertTrue(_resize_warnings(caught), msg="resizing a non-empty out= must warn")
                self.assertEqual(to_cpu(out), to_cpu(expected))

    @ops(_ops_for("test_variant_consistency_eager"), **dtypes_for("test_variant_consistency_eager"))
    def test_variant_consistency_eager(self, device, dtype, op):
        """Method, operator and in-place variants agree with the function, values and grads."""
        requires_grad = _backward_claimed(op, dtype, device)
        for index, cpu_sample in indexed(cpu_samples(op, dtype, requires_grad=requires_grad)):
            with noting(index, cpu_sample):
                sample = to_device(cpu_sample, device)
                expected = call(op, sample)
                expected_grads = backward_grads(expected, sample)
                variants = [op.method_variant]
                if not sample.kwargs:  # operator.add and friends take no keyword arguments
                    variants.append(op.operator_variant)
                for variant in filter(None, variants):
                    got = call(variant, sample)
                    self.assertEqual(to_cpu(got), to_cpu(expected))
                    self.assertEqual(backward_grads(got, sample), expected_grads)
                if not isinstance(sample.input, torch.Tensor):
                    continue
                if not isinstance(expected, torch.Tensor) or expected.dtype != sample.input.dtype:
                    continue
                with_grad = requires_grad and op.supports_inplace_autograd
                inplace = [op.inplace_variant]
                if not sample.kwargs:
                    inplace.append(op.inplace_operator_variant)
                for variant in filter(None, inplace):
                    # A clone: in-place on a leaf that requires grad is illegal. Without
                    # in-place autograd, the variant runs on a tensor outside the graph.
                    target = sample.input.clone() if with_grad else sample.input.detach().clone()
                    if sample.broadcasts_input:
                        # The input broadcasts to the result's shape: in place, that must be
                        # refused. op_db marks some samples so where only the other
                        # operands broadcast (addcmul's); those have nothing to check.
                        if expected.shape != target.shape:
                            with self.assertRaises(RuntimeError, msg="in place, input resized"):
                                call(variant, _with_input(sample, target))
                        continue
                    got = call(variant, _with_input(sample, target))
                    self.assertIs(got, target, msg="an in-place variant returns its input")
                    self.assertEqual(to_cpu(target), to_cpu(expected))
                    if with_grad:
                        self.assertEqual(backward_grads(got, sample), expected_grads)

    @ops(_ops_for("test_noncontiguous_samples"), **dtypes_for("test_noncontiguous_samples"))
    def test_noncontiguous_samples(self, device, dtype, op):
        """Non-contiguous (strided) inputs give the results and grads contiguous ones give."""
        requires_grad = _backward_claimed(op, dtype, device)
        for index, cpu_sample in indexed(cpu_samples(op, dtype, requires_grad=requires_grad)):
            with noting(index, cpu_sample):
                sample = to_device(cpu_sample, device)
                strided = under_test(sample.noncontiguous(), device)
                expected = call(op, sample)
                got = call(op, strided)
                self.assertEqual(to_cpu(got), to_cpu(expected))
                self.assertEqual(backward_grads(got, strided), backward_grads(expected, sample))

    @ops(_ops_for("test_dtypes"), **dtypes_for("test_dtypes"))
    def test_dtypes(self, device, op):
        """The dtypes that work are exactly the dtypes the OpInfo claims, forward and backward.

        A dtype works when every sample runs; a dtype where only some samples run is
        left out of both checks, as upstream does. Eager only: dtype claims are the
        eager kernels'.
        """
        skip_in_compile_mode(self)
        device_type = torch.device(device).type
        forward_ok, forward_bad, backward_ok, backward_bad = set(), set(), set(), set()
        for dtype in _ALL_DTYPES:
            try:
                samples = cpu_samples(op, dtype, requires_grad=_differentiable(op, dtype))
            except Exception:
                forward_bad.add(dtype)
                continue
            for cpu_sample in samples:
                sample = to_device(cpu_sample, device)
                try:
                    result = call(op, sample)
                except Exception:
                    forward_bad.add(dtype)
                    if grad_inputs(sample):  # no forward, no backward either
                        backward_bad.add(dtype)
                    continue
                forward_ok.add(dtype)
                if not grad_inputs(sample):
                    continue
                outputs = tensor_outputs(sample.output_process_fn_grad(result))
                if not outputs or not outputs[0].requires_grad:
                    continue
                try:
                    torch.manual_seed(0)
                    outputs[0].backward(torch.randn_like(outputs[0]))
                    backward_ok.add(dtype)
                except Exception:
                    backward_bad.add(dtype)

        claimed = set(op.supported_dtypes(device_type))
        claimed_bwd = (
            set(op.supported_backward_dtypes(device_type)) if op.supports_autograd else set()
        )
        problems = []
        for kind, ok, bad, claim in (
            ("forward", forward_ok, forward_bad, claimed),
            ("backward", backward_ok, backward_bad, claimed_bwd & set(_ALL_DTYPES)),
        ):
            works, fails = ok - bad, bad - ok
            if unclaimed := sorted(map(str, works - claim)):
                problems.append(f"{kind} works for dtypes the OpInfo does not claim: {unclaimed}")
            if broken := sorted(map(str, claim & fails)):
                problems.append(f"{kind} fails for dtypes the OpInfo claims: {broken}")
        if problems:
            self.fail(f"{op.full_name} on {device_type}: " + "; ".join(problems))

    @ops(_ops_for("test_errors"), **dtypes_for("test_errors"))
    def test_errors(self, device, op):
        """Each of the OpInfo's error inputs raises its documented exception and message."""
        skip_in_compile_mode(self)
        for index, error in indexed(error_inputs(op, device)):
            sample = error.sample_input
            with (
                noting(index, sample, "error input"),
                self.assertRaisesRegex(error.error_type, error.error_regex),
            ):
                result = op(sample.input, *sample.args, **sample.kwargs)
                if result is NotImplemented:
                    # Python's binary-operator protocol: a reflected method such as
                    # Tensor.__rsub__ returns NotImplemented for operands it rejects, and
                    # the interpreter turns that into a TypeError. So does this template.
                    raise TypeError(f"{op.name} returned NotImplemented for these operands")

    @ops(_refs_for("test_python_ref"), **dtypes_for("test_python_ref"))
    def test_python_ref(self, device, dtype, op):
        """A Python reference computes on the device what the op computes, its own torch
        calls redirected to references too (``TorchRefsMode(strict=True)``)."""
        self._check_python_ref(op, dtype, device, lambda: TorchRefsMode(strict=True))

    @ops(
        _refs_for("test_python_ref_torch_fallback"), **dtypes_for("test_python_ref_torch_fallback")
    )
    def test_python_ref_torch_fallback(self, device, dtype, op):
        """A Python reference computes on the device what the op computes, its own torch
        calls left to the device's kernels."""
        self._check_python_ref(op, dtype, device, contextlib.nullcontext)

    def _check_python_ref(self, op, dtype, device, mode) -> None:
        """As upstream: metadata (shape, dtype, device, strides that matter, conj/neg bits)
        and view semantics must match exactly; values must be close, or else the reference
        must be at least as close as the op to the op computed in double precision."""
        skip_in_compile_mode(self)  # references are traced by refs mode, not compiled
        for index, cpu_sample in indexed(cpu_reference_inputs(op, dtype)):
            with noting(index, cpu_sample):
                sample = to_device(cpu_sample, device, reference=True)
                with mode():
                    got = op(sample.input, *sample.args, **sample.kwargs)
                want = op.torch_opinfo(sample.input, *sample.args, **sample.kwargs)
                for ref, real in zip(tree_leaves(got), tree_leaves(want), strict=False):
                    if not (isinstance(ref, torch.Tensor) or isinstance(real, torch.Tensor)):
                        continue
                    prims_common.compare_tensor_meta(ref, real)
                    if getattr(op, "validate_view_consistency", True):
                        self.assertEqual(
                            ref._is_view(),
                            real._is_view(),
                            msg=f"The torch implementation "
                            f"{'returns' if real._is_view() else 'does not return'} a view, "
                            f"while the reference {'does' if ref._is_view() else 'does not'}",
                        )
                try:
                    self.assertEqual(got, want, exact_stride=False, exact_device=True)
                except AssertionError:
                    precise = _more_precise(dtype)
                    if precise is None:
                        raise
                    wider = _widened(sample, dtype, precise)
                    best = op.torch_opinfo(wider.input, *wider.args, **wider.kwargs)
                    ref_off, op_off = _distance(got, best), _distance(want, best)
                    self.assertTrue(
                        ref_off <= op_off,
                        msg=f"Reference result was farther ({ref_off}) from the precise "
                        f"computation than the torch result was ({op_off})!",
                    )


class TestCompositeCompliance(TestCase):
    """Templates named as upstream's ``TestCompositeCompliance``: how kernels treat their
    inputs' storage, which a device's kernels decide for themselves."""

    @ops(_ops_for("test_cow_input"), **dtypes_for("test_cow_input"))
    def test_cow_input(self, device, dtype, op):
        """Kernels only read a lazy copy-on-write input: forward and backward leave it lazy
        (so no copy is made) and its data unchanged.

        As upstream: every strided tensor argument (and every cotangent) is replaced by a
        lazy clone (``torch._lazy_clone``) of itself. The OpInfo may declare that an op
        materializes its inputs (``supports_cow_input_no_materialize_forward`` /
        ``_backward``), or name the arguments it may materialize
        (``allow_cow_input_materialize_forward`` / ``_backward``); even then the data seen
        through the original must not change. Backward is checked where the op has
        autograd, the OpInfo does not skip it (``skip_cow_input_backward``) and every
        differentiable output is strided, for the positional arguments and the cotangents.
        """
        skip_in_compile_mode(self)  # copy-on-write is eager storage; a graph has none
        for index, cpu_sample in indexed(
            cpu_samples(op, dtype, requires_grad=op.supports_autograd)
        ):
            with noting(index, cpu_sample):
                self._check_cow_sample(op, to_device(cpu_sample, device))

    def _check_cow_sample(self, op, sample) -> None:
        raw: dict = dict(enumerate([sample.input, *sample.args]))
        raw.update(sample.kwargs)
        copies = {key: _snapshot(arg) for key, arg in raw.items()}
        lazy = {key: torch._lazy_clone(arg) if _strided(arg) else arg for key, arg in raw.items()}
        args = [lazy[i] for i in range(len(sample.args) + 1)]
        kwargs = {key: lazy[key] for key in sample.kwargs}
        result = op.get_op()(*args, **kwargs)
        forward = (
            op.supports_cow_input_no_materialize_forward,
            op.allow_cow_input_materialize_forward,
        )
        for key, arg in lazy.items():
            self._check_cow_arg(arg, raw[key], copies[key], key, "forward", *forward)

        leaves = [t for t in tensor_outputs((args, kwargs)) if t.requires_grad]
        if not op.supports_autograd or not leaves or op.skip_cow_input_backward:
            return
        result = sample.output_process_fn_grad(result) if sample.output_process_fn_grad else result
        outputs = [t for t in tensor_outputs(result) if t.requires_grad]
        if not outputs or not all(_strided(t) for t in outputs):
            return
        cotangents = [torch.ones_like(t) for t in outputs]
        lazy_cotangents = [torch._lazy_clone(t) for t in cotangents]
        torch.autograd.grad(outputs, leaves, lazy_cotangents, allow_unused=True, retain_graph=True)
        backward = (
            op.supports_cow_input_no_materialize_backward,
            op.allow_cow_input_materialize_backward,
        )
        for i, arg in enumerate(args):  # as upstream: keyword arguments only forward
            self._check_cow_arg(arg, raw[i], copies[i], i, "backward", *backward)
        for i, (arg, cotangent) in enumerate(zip(lazy_cotangents, cotangents, strict=True)):
            name = f"output grad {i}"
            self._check_cow_arg(arg, cotangent, _snapshot(cotangent), name, "backward", *backward)

    def _check_cow_arg(self, arg, raw, copy_, key, when, no_materialize, allowed) -> None:
        if not _strided(arg):
            return
        if isinstance(key, int):
            name = f"Argument {key} during {when} call"
        elif key.startswith("output grad"):
            name = f"The {key} during {when} call"
        else:
            name = f"Keyword argument '{key}' during {when} call"
        # Checked before any data is read: reading through a writable pointer would
        # materialize what it reads.
        self.assertTrue(
            torch._C._is_cow_tensor(raw),
            msg=f"{name} unexpectedly materializes the original of its lazy clone",
        )
        still_lazy = torch._C._is_cow_tensor(arg)
        if no_materialize and not (allowed is not None and key in allowed):
            self.assertTrue(
                still_lazy,
                msg=f"{name} unexpectedly materializes: the kernel took a writable pointer "
                "to an input it only reads",
            )
        self.assertTrue(
            _same_data(arg if still_lazy else raw, copy_),
            msg=f"{name}: the op changed the data of a copy-on-write input",
        )


_SPARSE_NOT_COMPARABLE = "sparse outputs have no storage to compare aliasing with"


class TestFakeTensor(TestCase):
    """The template named as upstream's ``TestFakeTensor.test_fake``: fake tensors model the
    device. ``torch.compile`` traces with fake tensors, so a device kernel whose outputs
    differ from what the fake (meta) implementation predicts breaks compiled code that
    eager runs accept."""

    @ops(_ops_for("test_fake"), **dtypes_for("test_fake"))
    def test_fake(self, device, dtype, op):
        """For each sample, the op on fake copies of the device's tensors gives fake outputs
        with the shape, dtype, device and strides of the device's real outputs, aliasing
        the inputs as they do."""
        skip_in_compile_mode(self)  # fake tensors are what compile mode traces with
        if op.full_name in _FAKE_NOT_COMPARABLE or "sparse" in op.full_name:
            self.skipTest(_FAKE_NOT_COMPARABLE.get(op.full_name, _SPARSE_NOT_COMPARABLE))
        for index, cpu_sample in indexed(cpu_samples(op, dtype)):
            with noting(index, cpu_sample):
                sample = to_device(cpu_sample, device)
                real = call(op, sample)
                mode = FakeTensorMode()
                fake_sample = sample.transform(functools.partial(_faked, mode))
                try:
                    with mode:
                        fake = call(op, fake_sample)
                except _NOT_MODELLED:
                    continue  # outputs whose shape or value only real data gives
                self._check_fake(real, fake, sample, fake_sample, op.name not in _FAKE_STRIDES)

    def _check_fake(self, real, fake, sample, fake_sample, strides: bool) -> None:
        reals, fakes = tree_leaves(real), tree_leaves(fake)
        self.assertEqual(len(fakes), len(reals), msg="fake and real outputs")
        for position, (r, f) in enumerate(zip(reals, fakes, strict=True)):
            if not isinstance(r, torch.Tensor):
                self.assertNotIsInstance(f, torch.Tensor, msg=f"output {position}")
                continue
            self.assertIsInstance(f, FakeTensor, msg=f"output {position}")
            where = f"output {position}"
            self.assertEqual(f.shape, r.shape, msg=f"{where}: shape")
            self.assertEqual(f.dtype, r.dtype, msg=f"{where}: dtype")
            self.assertEqual(f.device, r.device, msg=f"{where}: device")
            if strides:
                # Strides of dimensions of length 1, and of empty tensors, mean nothing.
                same, _ = prims_common.check_significant_strides(f, r, only_cuda=False)
                self.assertTrue(same, msg=f"{where}: strides {f.stride()} (fake) != {r.stride()}")
            self.assertEqual(
                _aliased(f, fake_sample), _aliased(r, sample), msg=f"{where}: aliases an input"
            )


#: Ops whose fake outputs cannot be compared here, as upstream's fake-tensor tests skip
#: them: ``{OpInfo full name: why}``.
_FAKE_NOT_COMPARABLE = {
    "tensor_split": "reads the values of its CPU index tensor, which a fake copy does not hold",
}

#: Ops whose fake strides differ from the CPU kernel's own, so from any device built on it
#: (upstream lists such ops too): ``{OpInfo name: why}``. Their strides are not compared.
_FAKE_STRIDES = {
    "nn.functional.max_unpool2d": "the CPU kernel keeps the input's channels-last strides, "
    "which torch's meta function does not model",
}

#: What fake tensors refuse to predict: data-dependent output shapes and values, and ops
#: with no fake implementation (which compile mode graph-breaks on).
_NOT_MODELLED = (
    fake_tensor.DynamicOutputShapeException,
    fake_tensor.DataDependentOutputException,
    fake_tensor.UnsupportedOperatorException,
    fake_tensor.UnsupportedFakeTensorException,
)


def _faked(mode: FakeTensorMode, x):
    return mode.from_tensor(x) if isinstance(x, torch.Tensor) else x


def _aliased(output: torch.Tensor, sample) -> list[bool]:
    """Which of the sample's tensors ``output`` shares storage with."""
    storage = output.untyped_storage()
    return [t.untyped_storage()._cdata == storage._cdata for t in device_tensors(sample)]


class TestMathBits(TestCase):
    """Templates named as upstream's ``TestMathBits``: lazy conjugate and negative views.

    ``x.conj()`` and ``torch._neg_view(x)`` only set a bit on the tensor; kernels must honour
    it. Each template computes the op on a sample and on the same values held as a view
    with the bit set (the physically conjugated or negated tensor, viewed back), on the
    device, and compares results, the in-place variant (whose result keeps the bit) and
    grads, as upstream's namesakes do.
    """

    @ops(_ops_for("test_conj_view"), **dtypes_for("test_conj_view"))
    def test_conj_view(self, device, dtype, op):
        """Complex ops give the same results and grads on a conjugate view."""
        bits = (torch.conj_physical, torch.conj, torch.is_conj, torch.is_complex)
        self._check_math_view(op, dtype, device, *bits)

    @ops(_ops_for("test_neg_view"), **dtypes_for("test_neg_view"))
    def test_neg_view(self, device, dtype, op):
        """Ops give the same results and grads on a negative view."""
        bits = (torch.neg, torch._neg_view, torch.is_neg, torch.is_floating_point)
        self._check_math_view(op, dtype, device, *bits)

    def _check_math_view(self, op, dtype, device, physical, view, is_set, cotangent_kind) -> None:
        """``physical`` makes the values the ``view`` then shows as the sample's; ``is_set``
        reads the bit; outputs of ``cotangent_kind`` are also checked with a cotangent
        held as a view."""
        skip_in_compile_mode(self)  # the bits are eager tensor metadata
        requires_grad = _backward_claimed(op, dtype, device)
        for index, cpu_sample in indexed(cpu_samples(op, dtype, requires_grad=requires_grad)):
            with noting(index, cpu_sample):
                sample = to_device(cpu_sample, device)
                self._check_view_sample(op, sample, physical, view, is_set, cotangent_kind)

    def _check_view_sample(self, op, sample, physical, view, is_set, cotangent_kind) -> None:
        def as_view(t: torch.Tensor, requires_grad: bool) -> torch.Tensor:
            with torch.no_grad():
                held = physical(t)
            return view(held).requires_grad_(requires_grad)

        def with_view(value):
            if isinstance(value, torch.Tensor):
                return as_view(value, value.requires_grad)
            items = [t.detach().clone().requires_grad_(t.requires_grad) for t in value]
            items[0] = as_view(items[0], items[0].requires_grad)
            return items

        first = sample.input if isinstance(sample.input, torch.Tensor) else sample.input[0]
        viewed = with_view(sample.input)
        expected = op(sample.input, *sample.args, **sample.kwargs)
        got = op(viewed, *sample.args, **sample.kwargs)
        self.assertEqual(to_cpu(got), to_cpu(expected), msg="on a view with the bit set")

        inplace = op.inplace_variant
        if (
            inplace is not None
            and not sample.broadcasts_input
            and isinstance(expected, torch.Tensor)
            and expected.dtype is first.dtype
        ):
            result = inplace(as_view(first, False), *sample.args, **sample.kwargs)
            self.assertTrue(is_set(result), msg="the in-place result on a view lost its bit")
            self.assertEqual(to_cpu(result), to_cpu(expected), msg="in place on a view")

        if not (isinstance(expected, torch.Tensor) and expected.requires_grad):
            return
        process = sample.output_process_fn_grad or (lambda x: x)
        expected, got = process(expected), process(got)
        viewed_first = viewed if isinstance(viewed, torch.Tensor) else viewed[0]
        if not (first.requires_grad and viewed_first.requires_grad):
            return
        want = torch.autograd.grad(
            expected.sum().abs(), first, retain_graph=True, allow_unused=True
        )
        have = torch.autograd.grad(
            got.sum().abs(), viewed_first, retain_graph=True, allow_unused=True
        )
        self.assertEqual(to_cpu(have), to_cpu(want), msg="grads through a view")
        if cotangent_kind(expected):
            torch.manual_seed(SEED)
            cotangent = torch.randn_like(expected)
            want = torch.autograd.grad(expected, first, cotangent, allow_unused=True)
            have = torch.autograd.grad(
                got, viewed_first, as_view(cotangent, False), allow_unused=True
            )
            self.assertEqual(to_cpu(have), to_cpu(want), msg="grads for a cotangent view")


def _more_precise(dtype: torch.dtype) -> torch.dtype | None:
    """The dtype a more precise computation runs in (None: integers and bools, which must
    simply be close)."""
    if dtype.is_complex:
        return torch.cdouble
    if dtype.is_floating_point:
        return torch.double
    return None


def _widened(sample, dtype: torch.dtype, precise: torch.dtype):
    """``sample`` with its tensors (and dtype arguments) of ``dtype`` in ``precise``."""

    def widen(x):
        if isinstance(x, torch.Tensor) and x.dtype is dtype:
            return x.to(precise)
        return precise if isinstance(x, torch.dtype) else x

    return sample.transform(widen)


def _distance(result, precise) -> float:
    """Summed absolute distance of ``result``'s tensors from ``precise``'s (NaNs in the same
    places count as equal)."""
    total = 0.0
    for a, b in zip(tree_leaves(result), tree_leaves(precise), strict=False):
        if not isinstance(a, torch.Tensor):
            continue
        a, b = a.detach().cpu(), b.detach().cpu().to(a.dtype)
        same = (a == b) | (a.isnan() & b.isnan())
        total += float(torch.where(same, 0, (a - b).abs()).sum().real)
    return total


def _strided(x) -> bool:
    return isinstance(x, torch.Tensor) and x.layout == torch.strided


def _snapshot(x):
    return x.detach().to("cpu", copy=True) if isinstance(x, torch.Tensor) else x


def _same_data(t: torch.Tensor, expected: torch.Tensor) -> bool:
    t = t.detach().cpu()
    return t.shape == expected.shape and bool(
        ((t == expected) | (t.isnan() & expected.isnan())).all()
    )


#: The dtypes test_dtypes tries. complex32 is left out: its claims in op_db are incomplete
#: (several ops work for it without claiming it), so checking it would only report noise.
_ALL_DTYPES = tuple(all_types_and_complex_and(torch.bool, torch.half, torch.bfloat16))


def _differentiable(op, dtype: torch.dtype) -> bool:
    # test_dtypes tries backward in every floating and complex dtype, claimed or not.
    return op.supports_autograd and (dtype.is_floating_point or dtype.is_complex)


def _backward_claimed(op, dtype: torch.dtype, device: str) -> bool:
    # The other templates check gradients only where the OpInfo claims them, as upstream:
    # to_sparse, for one, has no backward for complex outputs.
    return op.supports_autograd and dtype in op.supported_backward_dtypes(torch.device(device).type)


def _with_input(sample, new_input):
    clone = copy.copy(sample)
    clone.input = new_input
    return clone


instantiate_device_type_tests(TestCommon, globals())
instantiate_device_type_tests(TestCompositeCompliance, globals())
instantiate_device_type_tests(TestMathBits, globals())
instantiate_device_type_tests(TestFakeTensor, globals())

if __name__ == "__main__":
    run_tests()
