"""Failure classification on real torch exceptions and on realistic report texts."""

from __future__ import annotations

import time
import unittest
import warnings

import pytest
import torch
import torch.autograd.forward_ad as fwAD

from conformance.classify import classify_failure, classify_skip, missing_op
from conformance.model import CATEGORIES, TORCH_LIMITATIONS


def _raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as exc:  # the point is to keep whatever torch raised
        return exc
    raise AssertionError(f"{fn} raised nothing")


def _classify(fn) -> tuple[str, str]:
    exc = _raised(fn)
    category, detail = classify_failure(exc, f"{type(exc).__name__}: {exc}")
    assert category in CATEGORIES
    return category, detail


# --- real exceptions from torch on the CPU -------------------------------------------


def test_missing_kernel_for_a_dense_backend_is_a_missing_lowering() -> None:
    # cudnn_grid_sampler has no CPU kernel: the dispatcher error a backend raises too.
    assert _classify(
        lambda: torch.ops.aten.cudnn_grid_sampler(torch.ones(1, 1, 2, 2), torch.ones(1, 2, 2, 2))
    ) == ("missing_lowering", "aten::cudnn_grid_sampler")


def test_missing_kernel_of_an_out_of_tree_operator_names_its_namespace() -> None:
    lib = torch.library.Library("conformance_classify_probe", "DEF")
    try:
        lib.define("double_it(Tensor x) -> Tensor")
        lib.impl("double_it", lambda x: x * 2, "Meta")
        assert _classify(lambda: torch.ops.conformance_classify_probe.double_it(torch.ones(2))) == (
            "missing_lowering",
            "conformance_classify_probe::double_it",
        )
    finally:
        lib._destroy()


def test_sparse_dispatch_key_is_an_unsupported_feature() -> None:
    assert _classify(lambda: torch.ones(2, 2).to_sparse().cumsum(0)) == (
        "unsupported_feature",
        "sparse",
    )


def test_nested_dispatch_key_is_an_unsupported_feature() -> None:
    def nested_cumsum() -> None:
        with warnings.catch_warnings():  # nested tensors are a prototype (warned once)
            warnings.simplefilter("ignore")
            nt = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
        nt.cumsum(0)

    assert _classify(nested_cumsum) == ("unsupported_feature", "nested")


def test_forward_ad_without_a_formula_is_an_unsupported_feature() -> None:
    def forward_ad() -> None:
        with fwAD.dual_level():
            weight = fwAD.make_dual(torch.randn(3, 3), torch.randn(3, 3))
            torch.nn.functional.embedding_bag(torch.tensor([0, 1]), weight, torch.tensor([0]))

    assert _classify(forward_ad) == ("unsupported_feature", "forward_ad")


def test_dtype_without_a_kernel_is_an_unsupported_dtype() -> None:
    def complex_half_exp() -> None:
        with warnings.catch_warnings():  # ComplexHalf is experimental (warned once)
            warnings.simplefilter("ignore")
            x = torch.zeros(3, dtype=torch.complex32)
        x.exp()

    assert _classify(complex_half_exp) == ("unsupported_dtype", "complex32")


def test_assert_close_mismatches_are_numerical() -> None:
    assert _classify(
        lambda: torch.testing.assert_close(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5]))
    ) == ("numerical_mismatch", "values")
    assert _classify(lambda: torch.testing.assert_close(1.0, 1.5)) == (
        "numerical_mismatch",
        "values",
    )
    assert _classify(
        lambda: torch.testing.assert_close(torch.ones(1), torch.ones(1, dtype=torch.float64))
    ) == ("numerical_mismatch", "dtype")
    assert _classify(lambda: torch.testing.assert_close(torch.ones(2), torch.ones(3))) == (
        "numerical_mismatch",
        "shape",
    )


class _Case(unittest.TestCase):
    def runTest(self) -> None:  # a TestCase instance to call assertions on
        pass


def test_torch_testcase_assert_equal_is_numerical() -> None:
    from torch.testing._internal.common_utils import TestCase

    class Probe(TestCase):
        def runTest(self) -> None:
            pass

    case = Probe()
    assert _classify(lambda: case.assertEqual(torch.tensor([1.0]), torch.tensor([2.0]))) == (
        "numerical_mismatch",
        "values",
    )
    assert _classify(lambda: case.assertEqual(1, 2)) == ("numerical_mismatch", "values")


def test_a_gradient_that_gradcheck_refuses_is_a_numerical_mismatch() -> None:
    class WrongBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 3  # the planted bug: the derivative is 2

    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert _classify(lambda: torch.autograd.gradcheck(WrongBackward.apply, (x,))) == (
        "numerical_mismatch",
        "gradient",
    )


def test_assert_raises_that_saw_no_error_or_another_message_is_a_wrong_error() -> None:
    case = _Case()

    def not_raised() -> None:
        with case.assertRaises(RuntimeError):
            pass

    def other_message() -> None:
        with case.assertRaisesRegex(RuntimeError, "must be positive"):
            raise RuntimeError("index out of range")

    assert _classify(not_raised) == ("wrong_error", "not_raised")
    assert _classify(other_message) == ("wrong_error", "message")


def test_expected_error_replaced_by_a_missing_kernel_is_the_missing_kernel() -> None:
    # assertRaisesRegex fails while the dispatcher error is its __context__: the root
    # cause is the missing kernel, not the test's regex.
    case = _Case()

    def missing_instead_of_expected() -> None:
        with case.assertRaisesRegex(RuntimeError, "must be positive"):
            torch.ops.aten.cudnn_grid_sampler(torch.ones(1, 1, 2, 2), torch.ones(1, 2, 2, 2))

    assert _classify(missing_instead_of_expected) == (
        "missing_lowering",
        "aten::cudnn_grid_sampler",
    )


def test_opinfo_reraise_is_classified_from_the_original(monkeypatch) -> None:
    """A real @ops test: torch re-raises as a plain Exception with the original as cause."""
    from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.testing._internal.common_utils import TestCase

    # torch only tracks sample inputs (and so only re-raises) from the second op of an
    # @ops list on: the first op's wrapper copies the test's attributes before tracking
    # is switched on. Test the second op, cumprod.
    ops_list = [op for op in op_db if op.full_name in ("cumsum", "cumprod")]
    assert [op.full_name for op in ops_list] == ["cumsum", "cumprod"]

    class TestProbe(TestCase):
        @ops(ops_list, allowed_dtypes=(torch.float32,))
        def test_sparse(self, device, dtype, op):
            for sample in op.sample_inputs(device, dtype):
                op(sample.input.to_sparse(), *sample.args, **sample.kwargs)

        @ops(ops_list, allowed_dtypes=(torch.float32,))
        def test_mismatch(self, device, dtype, op):
            for sample in op.sample_inputs(device, dtype):
                result = op(sample.input, *sample.args, **sample.kwargs)
                self.assertEqual(result, result + 1)

    scope = {"TestProbe": TestProbe}
    instantiate_device_type_tests(TestProbe, scope, only_for="cpu")
    cls = scope["TestProbeCPU"]

    for name, expected in (
        ("test_sparse_cumprod_cpu_float32", ("unsupported_feature", "sparse")),
        ("test_mismatch_cumprod_cpu_float32", ("numerical_mismatch", "values")),
    ):
        exc = _raised(getattr(cls(name), name))
        assert type(exc) is Exception and exc.__cause__ is not None  # torch's re-raise
        assert "Caused by sample input" in str(exc)
        assert classify_failure(exc, "") == expected
        # The same from the text alone, as an xdist controller sees it.
        assert classify_failure(None, f"{type(exc).__name__}: {exc}") == expected


def test_unknown_errors_are_other_with_the_exception_type() -> None:
    assert _classify(lambda: torch.ones(2) @ torch.ones(3)) == ("other", "RuntimeError")
    assert classify_failure(None, "E   ValueError: bad value") == ("other", "ValueError")
    assert classify_failure(None, "") == ("other", "")


# --- report texts ---------------------------------------------------------------------

LONGREPR_NOT_RAISED = """\
self = <test_ops.TestCommonEMU testMethod=test_errors_add_emu>

    def test_errors(self, device, op):
        for ei in op.error_inputs(device):
>           with self.assertRaisesRegex(ei.error_type, "not implemented for 'Half'"):
E           AssertionError: RuntimeError not raised

test_ops.py:312: AssertionError
"""

LONGREPR_OPINFO = """\
    def test_out(self, device, dtype, op):
>       op(sample.input, *sample.args, out=out)
E       NotImplementedError: Could not run 'aten::cumsum.out' with arguments from the 'emu' backend. This could be because the operator doesn't exist for this backend, or was omitted during the selective/custom build process (if using custom build).

The above exception was the direct cause of the following exception:

>   raise e_tracked from e
E   Exception: Could not run 'aten::cumsum.out' with arguments from the 'emu' backend.
E
E   Caused by sample input at index 0: SampleInput(input=Tensor[size=(5,), device="emu:0", dtype=torch.float32], args=(0))
"""

TEXTS = [
    (LONGREPR_NOT_RAISED, ("wrong_error", "not_raised")),
    (LONGREPR_OPINFO, ("missing_lowering", "aten::cumsum.out")),
    (
        "NotImplementedError: Could not run 'aten::add.out' with arguments from the "
        "'SparsePrivateUse1' backend.",
        ("unsupported_feature", "sparse"),
    ),
    (
        "NotImplementedError: Could not run 'aten::mul.Tensor' with arguments from the "
        "'AutogradPrivateUse1' backend.",
        ("missing_lowering", "aten::mul.Tensor"),
    ),
    ("NotImplementedError: emu: unsupported feature 'sparse'", ("unsupported_feature", "sparse")),
    ("NotImplementedError: unsupported feature 'nested'", ("unsupported_feature", "nested")),
    (
        "NotImplementedError: unsupported feature 'per_channel_quant'",
        ("unsupported_feature", "per_channel_quant"),
    ),
    (
        "NotImplementedError: unsupported feature 'forward_ad'",
        ("unsupported_feature", "forward_ad"),
    ),
    (
        "RuntimeError: The operator 'aten::_linalg_eigh.eigenvalues' is not currently "
        "implemented for the MPS device.",
        ("missing_lowering", "aten::_linalg_eigh.eigenvalues"),
    ),
    (
        "RuntimeError: \"addmm_impl_cpu_\" not implemented for 'Half'",
        ("unsupported_dtype", "float16"),
    ),
    (
        "RuntimeError: \"norm_cuda\" not implemented for 'BFloat16'",
        ("unsupported_dtype", "bfloat16"),
    ),
    ("TypeError: emu does not support dtype torch.float64", ("unsupported_dtype", "float64")),
    ("RuntimeError: Unsupported dtype Half", ("unsupported_dtype", "float16")),
    (
        "AssertionError: Tensor-likes are not equal!\n\nMismatched elements: 3 / 4",
        ("numerical_mismatch", "values"),
    ),
    ("AssertionError: Booleans mismatch: True is not False", ("numerical_mismatch", "values")),
    (
        "AssertionError: The values for attribute 'stride()' do not match: (1,) != (2,).",
        ("numerical_mismatch", "stride"),
    ),
    (
        "AssertionError: The values for attribute 'layout' do not match: torch.strided != "
        "torch.sparse_coo.",
        ("numerical_mismatch", "layout"),
    ),
    ("Failed: Regex pattern did not match.\n Regex: 'x'\n Input: 'y'", ("wrong_error", "message")),
    ("Failed: DID NOT RAISE <class 'RuntimeError'>", ("wrong_error", "not_raised")),
    ("AssertionError: UserWarning not triggered", ("wrong_error", "not_raised")),
    (
        "E   Failed: Timeout >300.0s\n+++++++++++++++++++ Timeout +++++++++++++++++++",
        ("timeout", "300.0s"),
    ),
    ("timed out after 300 s", ("timeout", "300s")),
    ("timed out", ("timeout", "")),
    (
        "E   RuntimeError: Connection timed out while waiting for the store",
        ("other", "RuntimeError"),
    ),
    (
        "worker 'gw1' crashed while running "
        "'test_ops.py::TestCommonEMU::test_out_cumsum_emu_float32'",
        ("crash", ""),
    ),
    (
        "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f (most recent call first):",
        ("crash", "SIGSEGV"),
    ),
    ("Fatal Python error: Aborted", ("crash", "SIGABRT")),
    (
        "[gw0] node down: Not properly terminated\nworker crashed with signal 11",
        ("crash", "SIGSEGV"),
    ),
    (
        "RuntimeError: emu: attn_mask is not supported by scaled_dot_product_attention",
        ("unsupported_feature", "attn_mask"),
    ),
    (
        "RuntimeError: Trying to use forward AD with cumsum that does not support it",
        ("unsupported_feature", "forward_ad"),
    ),
    (
        "torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode: Could not guard on "
        "data-dependent expression Eq(u0, 1)",
        ("unsupported_feature", "dynamic_shapes"),
    ),
]


@pytest.mark.parametrize(("text", "expected"), TEXTS, ids=[str(i) for i in range(len(TEXTS))])
def test_report_texts(text: str, expected: tuple[str, str]) -> None:
    assert classify_failure(None, text) == expected


def test_long_adversarial_text_is_classified_in_linear_time() -> None:
    # Reports can be long (a big tensor printed in a message): no regex may backtrack
    # quadratically over them.
    text = "x" * 100_000 + '"' * 2_000 + "a_b" * 20_000 + " doesn't run on" + "\nE   boom"
    start = time.perf_counter()
    assert classify_failure(None, text) == ("other", "")
    assert classify_skip(text)[0] in CATEGORIES
    assert time.perf_counter() - start < 5


def test_exception_with_a_broken_str_is_still_classified() -> None:
    class Broken(RuntimeError):
        def __str__(self) -> str:
            raise ValueError("no")

    assert classify_failure(Broken("x"), "") == ("other", "Broken")


def test_exception_wins_over_the_text() -> None:
    exc = NotImplementedError(
        "Could not run 'aten::sin.out' with arguments from the 'emu' backend."
    )
    assert classify_failure(exc, "AssertionError: Tensor-likes are not close!") == (
        "missing_lowering",
        "aten::sin.out",
    )


def test_missing_op_finds_the_first_operator() -> None:
    text = (
        "Could not run 'aten::cumsum.out' with arguments from the 'emu' backend.\n"
        "Could not run 'aten::add.out' with arguments from the 'emu' backend."
    )
    assert missing_op(text) == "aten::cumsum.out"
    assert missing_op("RuntimeError: boom") is None
    assert missing_op("cfm::foo: attempted to run this operator with Meta tensors") == "cfm::foo"


# --- skip reasons ---------------------------------------------------------------------

SKIPS = [
    ("Only runs on cuda", ("not_applicable", "cuda")),
    ("onlyNativeDeviceTypes: doesn't run on emu", ("not_applicable", "onlyNativeDeviceTypes")),
    ("onlyCUDAAndPRIVATEUSE1: doesn't run on cpu", ("not_applicable", "onlyCUDAAndPRIVATEUSE1")),
    ("fewer than 2 devices detected", ("not_applicable", "")),
    ("only one GPU detected", ("not_applicable", "")),  # TEST_MULTIGPU: torch.cuda's count
    # test_nn.py's generated module tests: each has a CUDA twin, whatever the device
    ("Excluded from CUDA tests", ("not_applicable", "cuda")),
    ("CUDA unavailable", ("not_applicable", "cuda")),
    ("needs cudnn", ("not_applicable", "")),
    ("CUDNN or multi-gpu not available", ("not_applicable", "")),
    (
        "could not download test file 'https://download.pytorch.org/test_data/linear.pt'",
        ("environment", "network"),
    ),
    ("emu:0 is not supported for fused on AdamW", ("not_applicable", "fused")),
    ("Insufficient emu memory", ("not_applicable", "")),
    ("cuDNN not available", ("not_applicable", "")),
    (
        "not implemented: Could not run 'aten::lu_unpack.out' with arguments from the 'emu' backend.",
        ("missing_lowering", "aten::lu_unpack.out"),
    ),
    (
        "not_implemented: Could not run 'aten::add' with arguments from the 'SparsePrivateUse1' backend.",
        ("unsupported_feature", "sparse"),
    ),
    ("not implemented: \"foo_cpu\" not implemented for 'Half'", ("unsupported_dtype", "float16")),
    ("Skipped! add does not support dtype torch.float16", ("unsupported_dtype", "float16")),
    ("dtype not supported", ("unsupported_dtype", "")),
    ("unsupported feature 'nested'", ("unsupported_feature", "nested")),
    ("test is slow; run with PYTORCH_TEST_WITH_SLOW to enable test", ("upstream_skip", "slow")),
    ("Skipped! sparse backward not supported", ("upstream_skip", "")),
    ("Policy: we don't run OpInfo tests w/ Dynamo", ("upstream_skip", "")),
    ("Skipped: Expected: empty is not comparable", ("upstream_skip", "")),
    # Reasons PyTorch's own test files give on emu (test_binary_ufuncs, test_unary_ufuncs,
    # test_reductions, test_foreach, test_ops: torch 2.13).
    ("Only runs on ['cuda', 'xpu']", ("not_applicable", "cuda,xpu")),
    ("CUDA not found", ("not_applicable", "cuda")),
    ("Scipy required for the test.", ("environment", "scipy")),
    ("Requires SciPy", ("environment", "scipy")),
    ("test require SciPy, but SciPy not found", ("environment", "scipy")),
    ("Need psutil to determine if memory is sufficient", ("environment", "psutil")),
    ("Unknown device type", ("torch_limitation", "largeTensorTest")),
    ("Failing on some jobs", ("upstream_skip", "")),
]


@pytest.mark.parametrize(("reason", "expected"), SKIPS, ids=[s[0][:40] for s in SKIPS])
def test_skip_reasons(reason: str, expected: tuple[str, str]) -> None:
    assert classify_skip(reason) == expected


def test_real_upstream_skip_decorators() -> None:
    """Reasons produced by torch's own decorators, run on the cpu device."""
    from torch.testing._internal.common_device_type import (
        instantiate_device_type_tests,
        onlyCUDA,
        onlyNativeDeviceTypes,
    )
    from torch.testing._internal.common_utils import TestCase, skip_exception_type

    class TestSkips(TestCase):
        @onlyCUDA
        def test_cuda_only(self, device):
            pass

        def test_not_implemented(self, device):
            with skip_exception_type(NotImplementedError):
                torch.ops.aten.cudnn_grid_sampler(torch.ones(1, 1, 2, 2), torch.ones(1, 2, 2, 2))

        @onlyNativeDeviceTypes
        def test_native(self, device):
            raise unittest.SkipTest("onlyNativeDeviceTypes: doesn't run on emu")

    scope = {"TestSkips": TestSkips}
    instantiate_device_type_tests(TestSkips, scope, only_for="cpu")
    cls = scope["TestSkipsCPU"]
    reasons = {}
    for name in ("test_cuda_only_cpu", "test_not_implemented_cpu", "test_native_cpu"):
        exc = _raised(getattr(cls(name), name))
        assert isinstance(exc, unittest.SkipTest)
        reasons[name] = classify_skip(str(exc))
    assert reasons == {
        "test_cuda_only_cpu": ("not_applicable", "cuda"),
        "test_not_implemented_cpu": ("missing_lowering", "aten::cudnn_grid_sampler"),
        "test_native_cpu": ("not_applicable", "onlyNativeDeviceTypes"),
    }


@pytest.mark.parametrize(
    ("message", "detail"),
    [
        # test_ops.py TestCommon (python refs and others), as upstream words it
        ("AssertionError: The torch implementation returns a view, while the reference does not", "returns_view"),
        ("AssertionError: The reference returns a view, while the torch implementation does not", "returns_copy"),
        # TestCompositeCompliance.test_cow_input
        ("AssertionError: Argument 0 during forward call unexpectedly materializes. Either set "
         "`supports_cow_input_no_materialize_forward=False` in this operation's OpInfo", "cow_materialized"),
        ("AssertionError: Argument 2 during backward call unexpectedly materializes.", "cow_materialized"),
    ],
)  # fmt: skip
def test_view_semantics_and_copy_on_write_are_aliasing(message: str, detail: str) -> None:
    assert classify_failure(AssertionError(message.partition(": ")[2]), message) == (
        "aliasing",
        detail,
    )
    assert classify_failure(None, "E   " + message) == ("aliasing", detail)


# -- multi-rank tests: the collective and the c10d backend ---------------------------------

_RANK_TRACEBACK = (
    'Traceback (most recent call last):\n  File "test_distributed.py", line 9, in test\n'
    '  File "/site-packages/torch/distributed/c10d_logger.py", line 81, in wrapper\n'
    '  File "/site-packages/torch/distributed/distributed_c10d.py", line 3012, in {fn}\n'
    "{error}\n\nTo execute this test, run the following from the base repo dir:\n"
)


def _ranks_failure(*rank_texts: str, backend: str = "emuccl") -> AssertionError:
    lines = [f"rank {r} failed: {t.strip().splitlines()[-1]}" for r, t in enumerate(rank_texts)]
    details = [f"rank {r}:\n{t}" for r, t in enumerate(rank_texts)]
    return AssertionError(
        f"{len(rank_texts)} ranks on {backend}, 0.3 s:\n"
        + "\n".join(lines)
        + "\n\n\n\n".join(details)
    )


def test_a_wrong_collective_result_names_the_collective_and_the_backend() -> None:
    rank = (
        "Traceback (most recent call last):\n"
        "AssertionError: Tensor-likes are not equal!\n\nMismatched elements: 3 / 4\n\n"
        "all_reduce(async_op=True)\n"
    )
    error = _ranks_failure(rank, rank)
    assert classify_failure(error, "") == ("numerical_mismatch", "all_reduce on emuccl")


def test_an_error_inside_a_collective_names_the_collective_it_was_raised_in() -> None:
    rank = _RANK_TRACEBACK.format(
        fn="reduce_scatter_tensor", error="RuntimeError: emuccl: the peer went away"
    )
    error = _ranks_failure(rank, rank, backend="gloo")
    assert classify_failure(error, "") == ("other", "reduce_scatter_tensor on gloo")


def test_a_missing_collective_kernel_stays_a_missing_lowering_of_its_op() -> None:
    rank = _RANK_TRACEBACK.format(
        fn="all_reduce",
        error="NotImplementedError: Could not run 'c10d::allreduce_' with arguments from the "
        "'PrivateUse1' backend.",
    )
    error = _ranks_failure(rank, rank)
    assert classify_failure(error, "") == ("missing_lowering", "c10d::allreduce_")


def test_ranks_that_hang_are_a_timeout_on_the_backend() -> None:
    error = RuntimeError(
        "2 ranks on emuccl, 120.1 s: the ranks did not finish in 120 s and were killed "
        "(still running: 1)\ntimed out after 120 s"
    )
    assert classify_failure(error, "") == ("timeout", "120s on emuccl")


def test_a_crashed_rank_keeps_its_signal() -> None:
    error = AssertionError("2 ranks on emuccl, 0.4 s:\nrank 1 crashed with signal SIGSEGV\n")
    assert classify_failure(error, "") == ("crash", "SIGSEGV")


def test_an_unclassified_rank_error_is_named_by_the_ranks_error_not_the_summarys() -> None:
    rank = "Traceback (most recent call last):\nValueError: the model diverged\n"
    error = _ranks_failure(rank, rank)
    assert classify_failure(error, "") == ("other", "ValueError on emuccl")


def _upstream_rank_failure(error: str, fn: str = "get_default_backend_for_device") -> RuntimeError:
    """The failure upstream's MultiProcessTestCase raises in the parent for a failed rank."""
    return RuntimeError(
        "Process 1 exited with error code 10 and exception:\n"
        "Traceback (most recent call last):\n"
        '  File "/site-packages/torch/testing/_internal/common_distributed.py", line 1058, '
        "in run_test\n    getattr(self, test_name)()\n"
        f'  File "/site-packages/torch/distributed/distributed_c10d.py", line 1511, in {fn}\n'
        f"{error}\n"
    )


def test_an_upstream_ranks_error_is_classified_by_the_ranks_traceback() -> None:
    error = _upstream_rank_failure("ValueError: the model diverged", fn="all_reduce")
    assert classify_failure(error, "") == ("other", "all_reduce: ValueError")
    kernel = _upstream_rank_failure(
        "NotImplementedError: Could not run 'c10d::allreduce_' with arguments from the "
        "'PrivateUse1' backend.",
        fn="all_reduce",
    )
    assert classify_failure(kernel, "") == ("missing_lowering", "c10d::allreduce_")


@pytest.mark.parametrize(
    ("error", "detail"),
    [
        # A spawned rank of a device-type test never ran PrivateUse1TestBase.setUpClass.
        (_upstream_rank_failure("RuntimeError: Invalid device string: 'privateuse1'"),
         "device_type_in_ranks"),
        (AssertionError("Torch not compiled with CUDA enabled"), "cuda_call"),
        # DataParallel on a PrivateUse1 device reaches CUDA's comm functions.
        (AttributeError("module 'torch._C' has no attribute '_broadcast_coalesced'"), "cuda_call"),
        # nn/test_convolution.py's test_conv_backend expects the CPU's choice on any device.
        (AssertionError("Object comparison failed: <_ConvBackend.Overrideable: 12> != "
                        "<_ConvBackend.SlowDilated2d: 15>"), "conv_backend_selection"),
    ],
)  # fmt: skip
def test_what_torch_gets_wrong_on_any_privateuse1_device_is_a_torch_limitation(
    error: BaseException, detail: str
) -> None:
    assert classify_failure(error, "") == ("torch_limitation", detail)
    assert detail in TORCH_LIMITATIONS


@pytest.mark.parametrize(
    ("inner", "report"),
    [
        # torch.compile's default backend on a device that registered no Inductor codegen
        (KeyError("emu"), "InductorError: KeyError: 'emu'"),
        (RuntimeError("device emu nyi"), "InductorError: RuntimeError: device emu nyi"),
        (None, "InductorError: LoweringException: NotImplementedError: No interface for "
         "device emu\n  target: aten.amax.default"),
    ],
)  # fmt: skip
def test_inductor_without_the_devices_code_generators_is_an_unsupported_feature(inner, report):
    from torch._inductor.exc import InductorError

    if inner is not None:
        try:
            raise InductorError(inner, None) from inner
        except InductorError as error:
            assert classify_failure(error, "") == ("unsupported_feature", "inductor")
    text = f"E   torch._inductor.exc.{report}\n"
    assert classify_failure(None, text) == ("unsupported_feature", "inductor")
