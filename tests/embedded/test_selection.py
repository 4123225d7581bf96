"""The named selections: what each contains, and how a bad name is reported."""

from __future__ import annotations

import ast

import pytest
import torch

from conformance.embedded import SELECTION_ENV, SELECTIONS, SUITE_DIR, TEMPLATES
from conformance.embedded import selection as sel
from conformance.errors import ConfigError

PLANT_OPS = ("exp", "sin", "cos", "tanh", "bitwise_not")


def test_default_selection_is_smoke(monkeypatch):
    monkeypatch.delenv(SELECTION_ENV, raising=False)
    assert sel.current_selection() == "smoke"
    monkeypatch.setenv(SELECTION_ENV, " core ")
    assert sel.current_selection() == "core"


def test_unknown_selection_names_the_variable_and_the_valid_names(monkeypatch):
    monkeypatch.setenv(SELECTION_ENV, "nightly")
    with pytest.raises(ConfigError) as info:
        sel.current_selection()
    message = str(info.value)
    assert SELECTION_ENV in message and "'nightly'" in message
    assert all(name in message for name in SELECTIONS)


def test_smoke_keeps_the_plant_targets_in_every_template_they_apply_to():
    names = {op.full_name for op in sel.select_ops("test_compare_cpu", "smoke")}
    assert set(PLANT_OPS) <= names
    assert "sin" in {op.full_name for op in sel.select_ops("test_out", "smoke")}
    assert "tanh" in {op.full_name for op in sel.select_ops("test_fn_grad_compare_cpu", "smoke")}
    assert "bitwise_not" in {op.full_name for op in sel.select_ops("test_dtypes", "smoke")}


def test_templates_only_get_ops_with_the_capability_they_test():
    for selection in ("smoke", "core"):
        assert all(op.supports_out for op in sel.select_ops("test_out", selection))
        assert all(
            op.supports_autograd for op in sel.select_ops("test_fn_grad_compare_cpu", selection)
        )
        assert all(
            op.supports_forward_ad for op in sel.select_ops("test_forward_mode_AD", selection)
        )
        assert all(op.error_inputs_func for op in sel.select_ops("test_errors", selection))


def test_core_is_the_ops_whose_aten_operator_is_tagged_core():
    core = sel.select_ops("test_compare_cpu", "core")
    names = {op.full_name for op in core}
    assert {"add", "exp", "mm", "sum", "nn.functional.relu"} <= names
    # Python compositions and CompositeImplicit ops with no core tag are out.
    assert not names & {"nn.functional.normalize", "matmul", "__radd__"}
    assert torch.Tag.core in torch.ops.aten.exp.default.tags
    smoke, full = (
        sel.select_ops("test_compare_cpu", "smoke"),
        sel.select_ops("test_compare_cpu", "full"),
    )
    assert len(smoke) < len(core) < len(full)


def test_renamed_smoke_entries_fail_loudly():
    with pytest.raises(ConfigError, match="no_such_op"):
        sel._check_names(["exp", "no_such_op"], {"exp"}, "ops")


def test_dtype_rules_cover_every_template_and_selection():
    for templates in TEMPLATES.values():
        for template in templates:
            for selection in SELECTIONS:
                assert "dtypes" in sel.dtypes_for(template, selection)
    with pytest.raises(ConfigError, match="test_nothing"):
        sel.dtypes_for("test_nothing", "smoke")


def test_modules_and_optimizers_per_selection():
    smoke = [m.name for m in sel.select_modules("smoke")]
    assert set(smoke) == set(sel.SMOKE_MODULES)
    assert len(sel.select_modules("full")) > len(smoke)
    optimizers = {o.optim_cls.__name__ for o in sel.select_optimizers("full")}
    assert "SparseAdam" not in optimizers and {"SGD", "Adam", "LBFGS"} <= optimizers


def test_the_template_list_matches_the_test_files():
    for file, templates in TEMPLATES.items():
        tree = ast.parse((SUITE_DIR / file).read_text())
        defined = {
            node.name
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
        }
        assert defined == set(templates), file
    on_disk = {p.name for p in SUITE_DIR.glob("test_*.py")}
    assert on_disk == set(TEMPLATES)


def test_autocast_cases_come_from_torch_lists_with_unique_names():
    for policy in ("lower_precision_fp", "fp32", "promote", "builtin_promote", "banned"):
        full = sel.select_autocast(policy, "full")
        assert full == sel.select_autocast(policy, "core")
        names = [case.test_name for case in full]
        assert len(names) == len(set(names)), policy
        assert 0 < len(sel.select_autocast(policy, "smoke")) <= len(full)
    fp32 = {case.test_name: case for case in sel.select_autocast("fp32", "full")}
    assert {"exp", "pow", "pow_1", "norm_3", "mse_loss", "__pow__"} <= set(fp32)
    assert (fp32["pow_1"].full_name, fp32["pow_1"].variant_test_name) == ("pow", "1")
    smoke = {case.test_name for case in sel.select_autocast("lower_precision_fp", "smoke")}
    assert "mm" in smoke  # the no_autocast plant's target
    with pytest.raises(ConfigError, match="bogus"):
        sel.select_autocast("bogus", "full")
