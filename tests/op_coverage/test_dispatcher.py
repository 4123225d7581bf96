from __future__ import annotations

import pytest
import torch

from conformance.errors import ConfigError, ConformanceError
from op_coverage.dispatcher import _classify, aten_overloads, dispatch_key_for, dispatcher_view

OPS = [
    "aten::add.Tensor",
    "aten::add.out",
    "aten::matmul",
    "aten::zeros",
    "aten::cumsum.out",
    "aten::sin",
]


def test_every_aten_overload_with_its_tags():
    overloads = aten_overloads()
    assert len(overloads) > 2000
    assert all(name.startswith("aten::") for name in overloads)
    assert "core" in overloads["aten::add.Tensor"]
    assert "aten::dot" in overloads and "aten::dot.default" not in overloads
    assert list(overloads) == sorted(overloads)


def test_cpu_view_names_kernel_kinds():
    view = dispatcher_view("CPU", OPS)
    assert (view["aten::add.out"].status, view["aten::add.out"].kind) == ("native", "native")
    assert "RegisterCPU" in view["aten::add.out"].source
    assert (view["aten::matmul"].status, view["aten::matmul"].kind) == (
        "composite",
        "CompositeImplicitAutograd",
    )
    assert (view["aten::zeros"].status, view["aten::zeros"].kind) == (
        "composite",
        "CompositeExplicitAutograd",
    )


def test_a_key_without_a_backend_has_only_composites():
    # PrivateUse2: like PrivateUse1 before a backend registers (an installed backend may
    # have autoloaded into this process and taken PrivateUse1).
    view = dispatcher_view("PrivateUse2", OPS)
    assert view["aten::cumsum.out"].status == "missing"
    assert view["aten::add.out"].status == "missing"
    # add.Tensor is structured: its default kernel calls add.out, which is what a backend lacks.
    assert view["aten::add.Tensor"].kind == "CompositeExplicitAutogradNonFunctional"
    assert view["aten::matmul"].status == "composite"


def test_whole_view_agrees_with_the_boolean_queries():
    for key in ("PrivateUse1", "CPU"):
        view = dispatcher_view(key)
        for name, entry in view.items():
            assert torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, key) == (
                entry.status != "missing"
            )
            assert torch._C._dispatch_has_kernel_for_dispatch_key(name, key) == (
                entry.status == "native"
            )


@pytest.mark.parametrize(
    ("line", "status", "kind"),
    [
        ("PrivateUse1: registered at /x/lowering/pointwise.py:12 [kernel]", "native", "python"),
        ("PrivateUse1: registered at /x/csrc/emu_core.cpp:212 [kernel]", "native", "native"),
        ("PrivateUse1: registered at /x/fallback.py:14 [backend fallback]", "fallback", "fallback"),
        ("PrivateUse1: fallthrough registered at /x/a.cpp:3 [backend fallback]", "missing", ""),
        (
            "PrivateUse1: registered at /b/RegisterCompositeExplicitAutogradNonFunctional_0.cpp:1342 "
            "[default backend kernel]",
            "composite",
            "CompositeExplicitAutogradNonFunctional",
        ),
    ],
)
def test_dump_lines(line, status, kind):
    entry = _classify("aten::x", line, "PrivateUse1")
    assert (entry.status, entry.kind) == (status, kind)


def test_unknown_dump_lines_are_errors_not_missing_ops():
    with pytest.raises(ConformanceError, match=r"\[new marker\] for aten::x"):
        _classify("aten::x", "PrivateUse1: registered at a.cpp:1 [new marker]", "PrivateUse1")
    with pytest.raises(ConformanceError, match="cannot read"):
        _classify("aten::x", "PrivateUse1 is here", "PrivateUse1")


def test_dispatch_keys():
    assert dispatch_key_for("cpu") == "CPU"
    assert dispatch_key_for("privateuseone") == "PrivateUse1"
    with pytest.raises(ConfigError, match="nosuchdevice"):
        dispatch_key_for("nosuchdevice")
