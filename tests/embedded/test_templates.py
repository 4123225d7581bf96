"""Template rules that are data: upstream expectations the templates set aside."""

from __future__ import annotations

import unittest

from torch.testing._internal.common_methods_invocations import op_db, python_ref_db

from conformance.embedded import test_ops


def _upstream_xfails(op, test_name: str) -> list:
    return [
        d
        for d in op.decorators
        if getattr(d, "cls_name", None) == test_ops._TEMPLATE_CLASS.get(test_name, "TestCommon")
        and d.test_name == test_name
        and unittest.expectedFailure in d.decorators
    ]


def test_every_expectation_set_aside_exists_upstream():
    # An entry whose xfail torch no longer declares (or an OpInfo renamed) is stale.
    by_name = {op.full_name: op for op in (*op_db, *python_ref_db)}
    for (test_name, name), reason in test_ops.NOT_APPLYING.items():
        assert name in by_name, f"{name}: no such OpInfo"
        assert _upstream_xfails(by_name[name], test_name), f"{name}: no xfail for {test_name}"
        assert reason.strip(), (test_name, name)


def test_set_aside_expectations_are_removed_and_others_kept():
    ops = {
        op.full_name: op
        for op in test_ops._without_xfails(op_db, "test_out", lambda op, _: op.full_name == "geqrf")
    }
    assert not _upstream_xfails(ops["geqrf"], "test_out")
    assert _upstream_xfails(ops["ormqr"], "test_out")
    # The originals in op_db are untouched.
    assert _upstream_xfails(next(op for op in op_db if op.full_name == "geqrf"), "test_out")


def test_out_returns_nothing_only_for_tensor_list_outs():
    by_name = {op.full_name: op for op in (*op_db, *python_ref_db)}
    assert test_ops._out_returns_nothing(by_name["unbind_copy"])
    assert test_ops._out_returns_nothing(by_name["split_with_sizes_copy"])
    assert not test_ops._out_returns_nothing(by_name["sin"])
    assert not test_ops._out_returns_nothing(by_name["max.reduction_with_dim"])
