"""The autocast templates' cases: arguments, device applicability, declared dtypes."""

from __future__ import annotations

import torch

from conformance.embedded import _autocast
from conformance.embedded.selection import select_autocast


def _case(policy: str, name: str) -> _autocast.AutocastCase:
    return next(c for c in select_autocast(policy, "full") if c.test_name == name)


def test_arguments_are_the_same_on_every_call_and_leave_the_global_rng_alone():
    case = _case("lower_precision_fp", "mm")
    state = torch.get_rng_state()
    first = _autocast.entry_on(case, "cpu", 1234, torch.float16)
    second = _autocast.entry_on(case, "cpu", 1234, torch.float16)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(a, b) for a, b in zip(first.args, second.args, strict=True))
    assert [a.dtype for a in first.args] == [torch.float32, torch.float32]


def test_the_lists_float16_inputs_become_the_autocast_dtype():
    case = _case("promote", "addcmul")
    entry = _autocast.entry_on(case, "cpu", 1234, torch.bfloat16)
    assert [a.dtype for a in entry.args] == [torch.float32, torch.bfloat16, torch.bfloat16]


def test_entries_with_keywords_out_types_and_einsum_are_read():
    norm = _autocast.entry_on(_case("fp32", "norm_3"), "cpu", 1234, torch.float16)
    assert norm.kwargs == {"p": 1, "dim": 0}
    eq = _autocast.entry_on(_case("builtin_promote", "eq"), "cpu", 1234, torch.float16)
    assert eq.out_type == torch.bool
    einsum = _autocast.entry_on(_case("lower_precision_fp", "einsum"), "cpu", 1234, torch.float16)
    assert torch.einsum(*einsum.args).shape == (8, 8)
    banned = _case("banned", "binary_cross_entropy")
    entry = _autocast.entry_on(banned, "cpu", 1234, torch.float16)
    assert entry.banned_module is torch._C._nn


def test_cpu_runs_the_cases_its_own_lists_give_the_same_policy():
    assert _autocast.cpu_skip_reason(_case("lower_precision_fp", "mm")) is None
    assert _autocast.cpu_skip_reason(_case("fp32", "mse_loss")) is None
    reason = _autocast.cpu_skip_reason(_case("fp32", "exp"))
    assert reason.startswith("doesn't run on cpu") and "exp" in reason
    assert _autocast.cpu_skip_reason(_case("banned", "binary_cross_entropy"))
    cudnn = _case("lower_precision_fp", "cudnn_convolution")
    entry = _autocast.entry_on(cudnn, "cpu", 1234, torch.float16)
    assert _autocast.device_skip_reason(cudnn, "emu", entry).startswith("Only runs on cuda")


def test_declared_dtypes():
    assert _autocast.declared_dtypes("cpu") == (torch.bfloat16, torch.float16)
    backend = torch._C._get_privateuse1_backend_name()
    module = getattr(torch, backend, None)
    if module is not None and hasattr(module, "get_amp_supported_dtype"):
        assert _autocast.declared_dtypes(backend) == tuple(module.get_amp_supported_dtype())
