"""Which ops, modules, optimizers and dtypes each template of the embedded suite covers.

The selection is read from ``CONFORMANCE_SELECTION`` when a test file is collected and
filters the databases *before* instantiation, so a small selection collects quickly:

- ``smoke``: a fixed list of common ops, modules and optimizers with one or two dtypes
  and at most :data:`SMOKE_MAX_SAMPLES` samples per test. Deterministic (samples are
  generated from a fixed seed) and small enough for every CI run.
- ``core``: the OpInfos whose ATen operator carries ``torch.Tag.core`` (see
  :func:`is_core_op`), every ModuleInfo and OptimizerInfo, every autocast case, the
  templates' usual dtypes.
- ``full``: every OpInfo, ModuleInfo and OptimizerInfo the template applies to, every
  autocast case.

A template only receives entries it applies to (``test_out`` only ops with ``out=``, the
gradient templates only ops that claim autograd, ...), whatever the selection.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import torch
from torch.testing._internal.common_device_type import OpDTypes
from torch.testing._internal.common_methods_invocations import op_db, python_ref_db
from torch.testing._internal.common_modules import module_db
from torch.testing._internal.common_optimizers import optim_db

from conformance.embedded import (
    COLLECTIVE_TEMPLATES,
    DEFAULT_SELECTION,
    SELECTION_ENV,
    SELECTIONS,
    TEMPLATES,
)
from conformance.embedded._autocast import POLICIES, cases
from conformance.errors import ConfigError

__all__ = [
    "SMOKE_AUTOCAST_CASES",
    "SMOKE_MAX_SAMPLES",
    "SMOKE_MODULES",
    "SMOKE_OPS",
    "SMOKE_OPTIMIZERS",
    "current_selection",
    "dtypes_for",
    "is_core_op",
    "max_samples",
    "select_autocast",
    "select_modules",
    "select_ops",
    "select_optimizers",
    "select_refs",
]

#: OpInfo full names in ``smoke``. The plant targets (exp, sin, cos, tanh, bitwise_not)
#: must stay: the suite's own tests prove each plant is caught through them.
SMOKE_OPS = (
    "exp",
    "sin",
    "cos",
    "tanh",
    "bitwise_not",
    "abs",
    "neg",
    "sqrt",
    "rsqrt",
    "log",
    "sigmoid",
    "floor",
    "add",
    "sub",
    "mul",
    "div.no_rounding_mode",
    "pow",
    "maximum",
    "eq",
    "lt",
    "logical_and",
    "bitwise_and",
    "where",
    "clamp",
    "sum",
    "mean",
    "amax",
    "argmax",
    "cumsum",
    "var",
    "mm",
    "matmul",
    "addmm",
    "bmm",
    "cat",
    "stack",
    "index_select",
    "gather",
    "masked_fill",
    "t",
    "permute",
    "reshape",
    "flip",
    "sort",
    "topk",
    "softmax",
    "log_softmax",
    "nn.functional.relu",
    "nn.functional.gelu",
    "nn.functional.linear",
    "nn.functional.layer_norm",
    "nn.functional.conv2d",
    "nn.functional.mse_loss",
    "sinh",
    "atan",
    "erf",
    "expm1",
    "log1p",
    "ceil",
    "round",
    "sign",
    "reciprocal",
    "remainder",
    "minimum",
    "ne",
    "ge",
    "logical_not",
    "isnan",
    "prod",
    "amin",
    "argmin",
    "std",
    "squeeze",
    "unsqueeze",
    "expand",
    "repeat",
    "narrow",
    "roll",
    "tril",
    "triu",
    "index_add",
    "scatter_add",
    "clone",
    "baddbmm",
    "mv",
    "outer",
    "nn.functional.silu",
    "nn.functional.softplus",
    "nn.functional.leaky_relu",
    "nn.functional.hardtanh",
    "nn.functional.avg_pool2d",
    "nn.functional.max_pool2d",
)

#: ModuleInfo names in ``smoke``.
SMOKE_MODULES = (
    "nn.Linear",
    "nn.Conv2d",
    "nn.ReLU",
    "nn.LayerNorm",
    "nn.BatchNorm2d",
    "nn.Embedding",
    "nn.MSELoss",
    "nn.CrossEntropyLoss",
)

#: Optimizer class names in ``smoke``.
SMOKE_OPTIMIZERS = ("SGD", "Adam", "AdamW")

#: Autocast cases in ``smoke`` (test names of :mod:`conformance.embedded._autocast`'s cases),
#: a few per policy: ``mm`` must stay, the ``no_autocast`` plant's target.
SMOKE_AUTOCAST_CASES = (
    "mm",
    "matmul",
    "addmm",
    "bmm",
    "conv2d",
    "linear",
    "__matmul__",
    "exp",
    "log",
    "pow",
    "softmax",
    "layer_norm",
    "sum",
    "cumsum",
    "mse_loss",
    "addcmul",
    "atan2",
    "dot",
    "add",
    "eq",
    "cat",
    "binary_cross_entropy",
)

#: Samples per test in ``smoke``: the first ones generated, which are deterministic.
#: Checks that judge an op on all its samples (``test_dtypes`` calls a dtype supported only
#: when every sample runs) see fewer of them; ops whose verdict needs later samples
#: (``nn.functional.embedding``: only its later samples reject integer weights) are
#: therefore not in ``SMOKE_OPS``.
SMOKE_MAX_SAMPLES = 4


def current_selection() -> str:
    """The selection named by ``CONFORMANCE_SELECTION`` (default ``smoke``).

    Raises :class:`ConfigError` naming the variable and the valid names for anything else.
    """
    name = os.environ.get(SELECTION_ENV, "").strip() or DEFAULT_SELECTION
    if name not in SELECTIONS:
        raise ConfigError(
            f"unknown selection {name!r}; valid names: {', '.join(SELECTIONS)}",
            where=f"environment variable {SELECTION_ENV}",
        )
    return name


def max_samples(selection: str | None = None) -> int | None:
    """How many samples a test uses at most (``None``: all of them)."""
    return SMOKE_MAX_SAMPLES if (selection or current_selection()) == "smoke" else None


def aten_packet(op) -> torch._ops.OpOverloadPacket | None:
    """The ATen operator (all overloads) an OpInfo tests, or None for Python compositions."""
    # OpInfo.aten_name is upstream's own mapping from an OpInfo to its ATen operator
    # (it defaults to the OpInfo name); a few OpInfos name an overload directly.
    names = [op.aten_name, op.name.rsplit(".", 1)[-1]]
    if op.name.startswith("torch.ops.aten."):
        names.insert(0, op.name.split(".")[3])
    for name in names:
        if name and hasattr(torch.ops.aten, name):
            return getattr(torch.ops.aten, name)
    return None


def is_core_op(op) -> bool:
    """True when the OpInfo's ATen operator has an overload tagged ``torch.Tag.core``.

    The ATen operator is found through ``OpInfo.aten_name``; OpInfos that are Python
    compositions with no ATen operator of that name (``nn.functional.normalize``,
    reverse dunder ops, window functions) are not core.
    """
    packet = aten_packet(op)
    if packet is None:
        return False
    return any(torch.Tag.core in getattr(packet, name).tags for name in packet.overloads())


# What each op template needs from an OpInfo, whatever the selection.
_OP_APPLIES: dict[str, Callable] = {
    "test_compare_cpu": lambda op: True,
    "test_out": lambda op: op.supports_out,
    "test_out_warning": lambda op: op.supports_out,
    "test_variant_consistency_eager": lambda op: any(
        v is not None
        for v in (
            op.method_variant,
            op.inplace_variant,
            op.operator_variant,
            op.inplace_operator_variant,
        )
    ),
    "test_noncontiguous_samples": lambda op: True,
    "test_dtypes": lambda op: True,
    "test_errors": lambda op: op.error_inputs_func is not None,
    "test_fn_grad_compare_cpu": lambda op: op.supports_autograd,
    "test_forward_mode_AD": lambda op: op.supports_forward_ad,
    "test_cow_input": lambda op: True,
    # upstream instantiates these for every op and skips the ones whose OpInfo opts out
    "test_conj_view": lambda op: op.test_conjugated_samples,
    "test_neg_view": lambda op: op.test_neg_view,
    # over python_ref_db (select_refs)
    "test_python_ref": lambda op: True,
    "test_python_ref_torch_fallback": lambda op: True,
    "test_fake": lambda op: True,
}

# dtypes per template and selection: an OpDTypes mode plus the allowed dtypes (None: any).
_F32, _F64, _I64, _C64, _C128, _F16, _BF16 = (
    torch.float32,
    torch.float64,
    torch.int64,
    torch.complex64,
    torch.complex128,
    torch.float16,
    torch.bfloat16,
)
_COLLECTIVE_DTYPES = (
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    _I64,
    _F16,
    _BF16,
    _F32,
    _F64,
    _C64,
    _C128,
)
_DTYPES: dict[str, dict[str, tuple[OpDTypes, tuple[torch.dtype, ...] | None]]] = {
    "test_compare_cpu": {
        "smoke": (OpDTypes.supported, (_F32, _I64)),
        "core": (OpDTypes.supported, None),
        "full": (OpDTypes.supported, None),
    },
    "test_out": {s: (OpDTypes.any_one, None) for s in SELECTIONS},
    "test_out_warning": {s: (OpDTypes.any_one, None) for s in SELECTIONS},
    "test_variant_consistency_eager": {
        "smoke": (OpDTypes.supported, (_F32,)),
        "core": (OpDTypes.supported, (_F32, _C64)),
        "full": (OpDTypes.supported, (_F32, _C64)),
    },
    "test_noncontiguous_samples": {
        "smoke": (OpDTypes.supported, (_F32, _I64)),
        "core": (OpDTypes.supported, (_F32, _I64, _C64)),
        "full": (OpDTypes.supported, (_F32, _I64, _C64)),
    },
    "test_dtypes": {s: (OpDTypes.none, None) for s in SELECTIONS},
    "test_errors": {s: (OpDTypes.none, None) for s in SELECTIONS},
    "test_fn_grad_compare_cpu": {
        "smoke": (OpDTypes.supported_backward, (_F32,)),
        "core": (OpDTypes.supported_backward, (_F32, _F64)),
        "full": (OpDTypes.supported_backward, (_F32, _F64, _C64)),
    },
    # As upstream: copy-on-write is about storage, so one dtype tells.
    "test_cow_input": {s: (OpDTypes.supported, (_F32,)) for s in SELECTIONS},
    # The views of upstream's TestMathBits: conjugation on complex, negation on double.
    "test_conj_view": {s: (OpDTypes.supported, (_C64,)) for s in SELECTIONS},
    "test_neg_view": {s: (OpDTypes.supported, (_F64,)) for s in SELECTIONS},
    # Python references: one floating and one integer dtype tell whether the device's
    # kernels compute what the reference's decomposition does.
    **{
        template: {
            "smoke": (OpDTypes.supported, (_F32,)),
            "core": (OpDTypes.supported, (_F32, _I64)),
            "full": (OpDTypes.supported, (_F32, _I64)),
        }
        for template in ("test_python_ref", "test_python_ref_torch_fallback")
    },
    # As upstream (OpDTypes.any_one): fake tensors propagate metadata, which one dtype tells.
    "test_fake": {s: (OpDTypes.any_one, None) for s in SELECTIONS},
    # gradcheck needs double precision, as upstream's gradient tests do.
    "test_forward_mode_AD": {
        "smoke": (OpDTypes.supported_backward, (_F64,)),
        "core": (OpDTypes.supported_backward, (_F64, _C128)),
        "full": (OpDTypes.supported_backward, (_F64, _C128)),
    },
    "test_forward": {
        "smoke": (OpDTypes.supported, (_F32,)),
        "core": (OpDTypes.supported, (_F32, _F64)),
        "full": (OpDTypes.supported, (_F32, _F64)),
    },
    "test_cpu_gpu_parity": {
        "smoke": (OpDTypes.supported, (_F32,)),
        "core": (OpDTypes.supported, (_F32, _F64)),
        "full": (OpDTypes.supported, (_F32, _F64)),
    },
    # As upstream: error inputs and Module.to() in float32 (test_to visits every dtype of
    # the module itself).
    "test_module_errors": {s: (OpDTypes.supported, (_F32,)) for s in SELECTIONS},
    "test_to": {s: (OpDTypes.supported, (_F32,)) for s in SELECTIONS},
    # Autocast: the lower-precision dtypes of torch.autocast (the device's declared ones run).
    **{
        name: {s: (OpDTypes.supported, (_F16, _BF16)) for s in SELECTIONS}
        for name in (
            "test_autocast_lower_precision_fp",
            "test_autocast_fp32",
            "test_autocast_promote",
            "test_autocast_builtin_promote",
            "test_autocast_banned",
            "test_autocast_nested",
            "test_autocast_disabled",
            "test_autocast_cache",
            "test_autocast_ignored_types",
            "test_autocast_backward",
        )
    },
    "test_autocast_default_dtype": {s: (OpDTypes.none, None) for s in SELECTIONS},
    **{
        name: {s: (OpDTypes.supported, (_F32,)) for s in SELECTIONS}
        for name in (
            "test_step_matches_cpu",
            "test_foreach_matches_forloop",
            "test_fused_matches_forloop",
        )
    },
    # Collectives: every dtype a backend may move or reduce (smoke: one floating, one
    # integer); ReduceOps that torch does not define on a dtype skip before ranks start.
    **{
        name: {
            "smoke": (OpDTypes.supported, (_F32, _I64)),
            "core": (OpDTypes.supported, _COLLECTIVE_DTYPES),
            "full": (OpDTypes.supported, _COLLECTIVE_DTYPES),
        }
        for name in COLLECTIVE_TEMPLATES
    },
    # The profiler's workloads, the runtime's checks and the layouts' (float32 tensors in a
    # sparse, nested or quantized layout) are fixed programs: no dtype parameter.
    **{
        name: {s: (OpDTypes.none, None) for s in SELECTIONS}
        for file in ("test_profiler.py", "test_runtime.py", "test_layouts.py")
        for name in TEMPLATES[file]
    },
    "test_barrier": {s: (OpDTypes.none, None) for s in SELECTIONS},
    # FSDP2, tensor and pipeline parallelism train a float32 MLP: no dtype parameter.
    **{
        name: {s: (OpDTypes.none, None) for s in SELECTIONS}
        for name in (
            "test_fsdp2",
            "test_tensor_parallel",
            "test_dtensor_redistribute",
            "test_pipeline",
        )
    },
    "test_default_backend": {s: (OpDTypes.none, None) for s in SELECTIONS},
    "test_ddp": {
        "smoke": (OpDTypes.supported, (_F32,)),
        "core": (OpDTypes.supported, (_F32, _F64)),
        "full": (OpDTypes.supported, (_F32, _F64)),
    },
}


def dtypes_for(template: str, selection: str | None = None) -> dict:
    """Keyword arguments (``dtypes``, ``allowed_dtypes``) for ``@ops``/``@modules``/``@optims``."""
    if template not in _DTYPES:
        raise ConfigError(f"no dtype rule for template {template!r}", where="selection")
    mode, allowed = _DTYPES[template][selection or current_selection()]
    kwargs: dict = {"dtypes": mode}
    if allowed is not None:
        kwargs["allowed_dtypes"] = allowed
    return kwargs


def _check_names(wanted: Sequence[str], known: set[str], kind: str) -> None:
    # A renamed entry in a new torch release must fail loudly, not shrink smoke silently.
    missing = sorted(set(wanted) - known)
    if missing:
        raise ConfigError(
            f"{kind} {', '.join(missing)} not in this torch's database", where="smoke selection"
        )


def select_ops(template: str, selection: str | None = None, ops: Sequence = op_db) -> list:
    """The OpInfos ``template`` runs over in ``selection``, in database order."""
    selection = selection or current_selection()
    if template not in _OP_APPLIES:
        raise ConfigError(f"unknown op template {template!r}", where="selection")
    applies = _OP_APPLIES[template]
    if selection == "smoke":
        _check_names(SMOKE_OPS, {op.full_name for op in op_db}, "ops")
        wanted = set(SMOKE_OPS)
        chosen = [op for op in ops if _torch_op(op).full_name in wanted]
    elif selection == "core":
        chosen = [op for op in ops if is_core_op(_torch_op(op))]
    else:
        chosen = list(ops)
    return [op for op in chosen if applies(op)]


def select_refs(template: str, selection: str | None = None) -> list:
    """The Python references (``python_ref_db``) ``template`` runs over in ``selection``:
    those of the selection's ops."""
    return select_ops(template, selection, python_ref_db)


def _torch_op(op):
    """The op_db OpInfo a Python reference stands for (an OpInfo stands for itself)."""
    return getattr(op, "torch_opinfo", None) or op


def select_modules(selection: str | None = None, modules: Sequence = module_db) -> list:
    """The ModuleInfos the module templates run over."""
    selection = selection or current_selection()
    if selection != "smoke":
        return list(modules)
    _check_names(SMOKE_MODULES, {m.name for m in modules}, "modules")
    return [m for m in modules if m.name in SMOKE_MODULES]


def select_optimizers(
    selection: str | None = None, optims: Sequence = optim_db, implementation: str | None = None
) -> list:
    """The OptimizerInfos the optimizer templates run over.

    ``implementation`` (``"foreach"``, ``"fused"``) keeps the optimizers that have it.
    Optimizers that only accept sparse gradients (SparseAdam) are left out: the templates
    step dense parameters.
    """
    selection = selection or current_selection()
    chosen = [
        o
        for o in optims
        if not o.only_supports_sparse_grads
        and (implementation is None or implementation in o.supported_impls)
    ]
    if selection != "smoke":
        return chosen
    names = {o.optim_cls.__name__ for o in optims}
    _check_names(SMOKE_OPTIMIZERS, names, "optimizers")
    return [o for o in chosen if o.optim_cls.__name__ in SMOKE_OPTIMIZERS]


def select_autocast(policy: str, selection: str | None = None) -> list:
    """The autocast cases (:mod:`conformance.embedded._autocast`) of ``policy`` a template
    runs over in ``selection``: :data:`SMOKE_AUTOCAST_CASES` in ``smoke``, all of them else."""
    selection = selection or current_selection()
    if policy not in POLICIES:
        raise ConfigError(f"unknown autocast policy {policy!r}", where="selection")
    chosen = cases(policy)
    if selection != "smoke":
        return chosen
    known = {case.test_name for p in POLICIES for case in cases(p)}
    _check_names(SMOKE_AUTOCAST_CASES, known, "autocast cases")
    return [case for case in chosen if case.test_name in SMOKE_AUTOCAST_CASES]
