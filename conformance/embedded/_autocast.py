"""The autocast templates' cases: torch's own autocast op lists, one case per entry.

The cases come from ``torch.testing._internal.autocast_test_lists.AutocastTestLists``, the
lists upstream's CUDA autocast tests run (test_cuda.py), which are the policy torch applies
on accelerators (CUDA, and the op lists ``ATen/autocast_mode.h`` offers PrivateUse1
backends):

- ``lower_precision_fp``: ``torch_fp16``, ``nn_fp16``, ``linalg_fp16``, ``methods_fp16``.
  Floating inputs are cast to the autocast dtype; the output has that dtype.
- ``fp32``: ``torch_fp32``, ``nn_fp32``, ``methods_fp32``. The ops run in float32.
- ``promote``: ``torch_need_autocast_promote``. Inputs are cast to the widest among them.
- ``builtin_promote``: ``torch_expect_builtin_promote``, ``methods_expect_builtin_promote``.
  Autocast leaves them alone; their own type promotion must still hold under it.
- ``banned``: ``banned``. Autocast refuses them (RuntimeError).

The CPU has its own policy (``AutocastCPUTestLists``). On the CPU a case runs where those
lists give its op the same policy, and is skipped, naming the CPU list, where they do not.

How a device declares its autocast dtypes (:func:`declared_dtypes`): a PrivateUse1 backend
through its device module's ``get_amp_supported_dtype()``, the function ``torch.autocast``
itself requires of it; CUDA float16, and bfloat16 where ``torch.cuda.is_bf16_supported()``;
every other device type the two dtypes ``torch.autocast`` accepts for it (bfloat16,
float16). The default dtype is ``torch.get_autocast_dtype(device_type)``.
"""

from __future__ import annotations

import collections
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.testing._internal.autocast_test_lists import AutocastCPUTestLists, AutocastTestLists

__all__ = [
    "POLICIES",
    "AutocastCase",
    "AutocastEntry",
    "cases",
    "cpu_skip_reason",
    "declared_dtypes",
    "device_skip_reason",
    "entry_on",
]

#: Policy -> the AutocastTestLists attributes holding its entries and the module each one's
#: functions are looked up on (None: Tensor methods only).
POLICIES: dict[str, tuple[tuple[str, str | None], ...]] = {
    "lower_precision_fp": (
        ("torch_fp16", "torch"),
        ("nn_fp16", "torch._C._nn"),
        ("linalg_fp16", "torch._C._linalg"),
        ("methods_fp16", None),
    ),
    "fp32": (("torch_fp32", "torch"), ("nn_fp32", "torch._C._nn"), ("methods_fp32", None)),
    "promote": (("torch_need_autocast_promote", "torch"),),
    "builtin_promote": (
        ("torch_expect_builtin_promote", "torch"),
        ("methods_expect_builtin_promote", None),
    ),
    "banned": (("banned", None),),
}

#: The CPU lists (AutocastCPUTestLists) that give an op each policy.
_CPU_LISTS = {
    "lower_precision_fp": ("torch_16", "nn_16"),
    "fp32": ("torch_fp32", "nn_fp32"),
    "promote": ("torch_need_autocast_promote",),
    # cat and stack: promoted by the CPU's autocast, by the op itself elsewhere; float32
    # comes out either way
    "builtin_promote": (
        "torch_expect_builtin_promote",
        "methods_expect_builtin_promote",
        "torch_need_autocast_promote",
    ),
    "banned": (),
}

#: Operators of CUDA's own libraries in the lists; their policy is CUDA's alone.
_CUDA_ONLY = frozenset({"cudnn_convolution", "cudnn_convolution_transpose"})

#: upstream's einsum entry passes a 4-D equation with 2-D operands, which einsum refuses
#: (upstream's test skips the entry by accident: its third element reads as a skip flag);
#: the case runs the same operands through an equation that fits them.
_EINSUM_EQUATION = "ij,jk->ik"


@dataclass(frozen=True)
class AutocastCase:
    """One entry of the autocast lists, named as the test that checks it.

    ``full_name`` and ``variant_test_name`` are what the harness's test identity reads as the
    op and variant (as of an OpInfo): the op as the list names it and, for an op listed more
    than once in a policy, the entry's ordinal among them (``pow`` and ``pow`` ``1``).
    """

    policy: str
    source: str
    index: int
    op: str
    module: str | None
    variant_test_name: str = ""

    @property
    def full_name(self) -> str:
        return self.op

    @property
    def test_name(self) -> str:
        return "_".join(p for p in (self.op, self.variant_test_name) if p)

    def functions(self) -> list[tuple[str, Callable[..., Any], bool]]:
        """``(label, function, is_method)`` for each variant that exists: the module's
        function (``torch.mm``) and the Tensor method (``Tensor.mm``, called on the first
        argument)."""
        found: list[tuple[str, Callable[..., Any], bool]] = []
        if self.module is not None:
            module = importlib.import_module(self.module)
            if hasattr(module, self.op):
                found.append((f"{self.module}.{self.op}", getattr(module, self.op), False))
        if hasattr(torch.Tensor, self.op):
            found.append((f"Tensor.{self.op}", getattr(torch.Tensor, self.op), True))
        return found

    def __repr__(self) -> str:  # shown by pytest and in messages
        return f"{self.source}[{self.index}] {self.op}"


@dataclass(frozen=True)
class AutocastEntry:
    """A case's arguments on a device: positional and keyword arguments, the output dtype
    the list states (builtin_promote), whether the list marks the entry to be skipped
    (upstream's ROCm flag), and the module a banned op lives on."""

    args: tuple
    kwargs: dict
    out_type: torch.dtype | None = None
    skip: bool = False
    banned_module: Any = None


def _parse(raw: tuple) -> AutocastEntry:
    op, rest = raw[0], raw[1:]
    if op == "einsum":
        return AutocastEntry((_EINSUM_EQUATION, *rest[1]), {})
    args, kwargs, out_type, skip, module = rest[0], {}, None, False, None
    for extra in rest[1:]:
        if isinstance(extra, dict):
            kwargs = extra
        elif isinstance(extra, torch.dtype):
            out_type = extra
        elif isinstance(extra, bool):
            skip = extra
        else:
            module = extra
    return AutocastEntry(tuple(args), dict(kwargs), out_type, skip, module)


def cases(policy: str) -> list[AutocastCase]:
    """Every case of ``policy``, in list order (built on the meta device: no data, no RNG)."""
    lists = AutocastTestLists("meta")
    found: list[AutocastCase] = []
    seen: collections.Counter[str] = collections.Counter()
    for source, module in POLICIES[policy]:
        for index, raw in enumerate(getattr(lists, source)):
            op = raw[0]
            ordinal = seen[op]
            seen[op] += 1
            found.append(
                AutocastCase(policy, source, index, op, module, str(ordinal) if ordinal else "")
            )
    return found


def _move(value: Any, device: str, low: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.float16:
            value = value.to(low)
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_move(v, device, low) for v in value)
    if isinstance(value, dict):
        return {k: _move(v, device, low) for k, v in value.items()}
    return value


def entry_on(case: AutocastCase, device: str, seed: int, low: torch.dtype) -> AutocastEntry:
    """The case's arguments on ``device`` for autocast to ``low``: drawn on the CPU from
    ``seed`` (the global RNG left as it was), so every device gets the same values, then
    moved. The lists' float16 inputs stand for the lower-precision dtype (the CUDA tests
    they come from autocast to float16) and become ``low``: a promote op under bfloat16
    autocast must not meet float16 inputs, which torch's promotion refuses to mix with it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        raw = getattr(AutocastTestLists("cpu"), case.source)[case.index]
    entry = _parse(raw)
    return AutocastEntry(
        _move(entry.args, device, low),
        _move(entry.kwargs, device, low),
        entry.out_type,
        entry.skip,
        entry.banned_module,
    )


def _cpu_policies() -> dict[str, set[str]]:
    lists = AutocastCPUTestLists("meta")
    policies: dict[str, set[str]] = collections.defaultdict(set)
    for policy, sources in _CPU_LISTS.items():
        for source in sources:
            for raw in getattr(lists, source):
                policies[raw[0]].add(policy)
    return policies


_CPU_POLICIES: dict[str, set[str]] | None = None


def cpu_skip_reason(case: AutocastCase) -> str | None:
    """Why ``case`` does not apply to the CPU's autocast, or None when it does (worded as
    torch's device skips are, so that the harness files it as not applicable)."""
    global _CPU_POLICIES
    if _CPU_POLICIES is None:
        _CPU_POLICIES = _cpu_policies()
    if case.policy in _CPU_POLICIES.get(case.op, ()):
        return None
    listed = sorted(_CPU_POLICIES.get(case.op, ()))
    where = f"as {', '.join(listed)}" if listed else "in none of its lists"
    return (
        f"doesn't run on cpu: the CPU's autocast has a policy of its own, and "
        f"AutocastCPUTestLists has {case.op} {where}, not as {case.policy}"
    )


def device_skip_reason(case: AutocastCase, device_type: str, entry: AutocastEntry) -> str | None:
    """Why ``case`` does not apply to ``device_type``, or None when it does."""
    if case.op in _CUDA_ONLY and device_type != "cuda":
        return f"Only runs on cuda: {case.op} is an operator of cuDNN, its autocast policy CUDA's"
    if entry.skip:
        return f"the autocast lists skip {case.op} on this build (ROCm)"
    if device_type == "cpu":
        return cpu_skip_reason(case)
    return None


def declared_dtypes(device_type: str) -> tuple[torch.dtype, ...]:
    """The lower-precision dtypes ``device_type`` declares for autocast (see the module's
    docstring)."""
    if device_type == torch._C._get_privateuse1_backend_name():
        module = getattr(torch, device_type, None)
        declare = getattr(module, "get_amp_supported_dtype", None)
        return tuple(declare()) if declare is not None else ()
    if device_type == "cuda":
        bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        return (torch.float16, torch.bfloat16) if bf16 else (torch.float16,)
    return (torch.bfloat16, torch.float16)
