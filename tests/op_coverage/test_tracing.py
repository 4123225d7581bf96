from __future__ import annotations

import pytest
import torch

from op_coverage.tracing import trace_ops


def test_records_overloads_on_the_traced_device_only():
    cpu = torch.ones(3)
    with trace_ops("meta") as trace:
        a = torch.empty(2, 3, device="meta")  # factory: the device is an argument
        (a + 1).sum()
        cpu * 2  # on another device: not recorded
    assert "aten::empty.memory_format" in trace.ops
    assert "aten::add.Tensor" in trace.ops
    assert "aten::sum" in trace.ops
    assert "aten::mul.Tensor" not in trace.ops
    assert trace.ops == sorted(trace.ops)


def test_default_traces_every_device_but_cpu_and_meta():
    with trace_ops() as trace:
        torch.ones(3).sin()
        torch.empty(2, device="meta").cos()
    assert trace.ops == []


def test_records_after_composite_implicit_decomposition_including_backward():
    a = torch.randn(3, 3, requires_grad=True)
    with trace_ops("cpu") as trace:
        (a @ a).sin().sum().backward()
    assert "aten::mm" in trace.ops  # matmul decomposes above the mode
    assert "aten::matmul" not in trace.ops
    assert "aten::cos" in trace.ops  # sin's backward


def test_an_op_that_raises_is_recorded_and_the_trace_completes():
    a = torch.ones(2, 2, device="meta")
    with pytest.raises(RuntimeError), trace_ops("meta") as trace:
        torch.mm(a, torch.ones(3, 3, device="meta"))
    assert trace.ops == ["aten::mm", "aten::ones"]


def test_second_calls_of_a_recorded_overload_still_run():
    with trace_ops("cpu") as trace:
        values = [torch.ones(2).add(i) for i in range(3)]
    assert [float(v[0]) for v in values] == [1.0, 2.0, 3.0]
    assert trace.ops == ["aten::add.Tensor", "aten::ones"]


def test_fallback_ops_are_the_counts_that_grew():
    counts = {"aten::sin.out": 2, "aten.cos.out": 1}

    def fallback_counts():
        return dict(counts)

    with trace_ops("meta", fallback_counts=fallback_counts) as trace:
        counts["aten::sin.out"] += 1
        counts["aten::ceil.out"] = 4
    assert trace.fallback == ["aten::ceil.out", "aten::sin.out"]


def test_tracing_leaves_no_mode_behind():
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    with trace_ops("cpu"):
        assert _get_current_dispatch_mode() is not None
    assert _get_current_dispatch_mode() is None


def test_views_made_inside_a_prims_kernel_stay_views_when_traced():
    """A Python reference's view prims make their views in the ATen ops they call: tracing
    must leave those ops their view and version-counter kernels."""
    import torch._refs as refs
    from torch._prims.context import TorchRefsMode

    def views() -> list[bool]:
        base = torch.randn(3, 1)
        with TorchRefsMode(strict=True):
            results = [refs.expand(base, 3, 4), refs.permute(base, (1, 0)), refs.t(base)]
        return [r._is_view() and r._base is base for r in results]

    untraced = views()
    with trace_ops("cpu"):
        traced = views()
    assert untraced == [True, True, True]
    assert traced == untraced
