"""Planted bugs: off by default, each switched on by EMU_PLANT, each a real defect."""

from __future__ import annotations

import json

import pytest
import torch_emu

from tests.backend.conftest import run_python

# One child process checks every defect (the plants touch disjoint ops), printing
# for each check whether emu agreed with the CPU.
PROBE = """
import json, torch, torch_emu
x = torch.linspace(-1, 1, 6).reshape(2, 3)
e = x.to("emu")
def same(a, b):
    return bool(torch.allclose(a.cpu(), b))
checks = {
    "exp": same(torch.exp(e), x.exp()),
    "exp_": same(e.clone().exp_(), x.exp()),
    "exp.out": same(torch.exp(e, out=torch.empty(2, 3, device="emu")), x.exp()),
    "sin": same(torch.sin(e), x.sin()),
    "sin.out": same(torch.sin(e, out=torch.zeros(2, 3, device="emu")), x.sin()),
    "cos": same(torch.cos(e), x.cos()),
    "cos transposed": same(torch.cos(e.t()), x.t().cos()),
}
y = e.clone().requires_grad_()
torch.tanh(y).sum().backward()
checks["tanh grad"] = same(y.grad, 1 - x.tanh() ** 2)
try:
    torch.bitwise_not(e)
    checks["bitwise_not float raises"] = False
except RuntimeError:
    checks["bitwise_not float raises"] = True
checks["bitwise_not int"] = torch.bitwise_not(torch.tensor([1, 2], device="emu")).cpu().tolist() == [-2, -3]
lazy = torch._lazy_clone(e)
checks["neg"] = same(torch.neg(lazy), -x)
checks["neg keeps a lazy input lazy"] = torch._C._is_cow_tensor(lazy)
lazy = torch._lazy_clone(e)
checks["exp keeps a lazy input lazy"] = same(torch.exp(lazy), x.exp()) and torch._C._is_cow_tensor(lazy)
checks["tril row-major"] = torch.tril(e).stride() == (3, 1) and same(torch.tril(e), x.tril())
try:
    torch.nn.functional.embedding(torch.zeros(2, device="emu"), torch.ones(3, 2))
except RuntimeError as exc:
    checks["embedding checks indices first"] = "scalar type" in str(exc)
with torch.autocast("emu", dtype=torch.bfloat16):
    checks["autocast mm in bfloat16"] = torch.mm(e, e.t()).dtype == torch.bfloat16
    checks["autocast exp in float32"] = torch.exp(e.bfloat16()).dtype == torch.float32
print(json.dumps({"active": torch_emu.planted_bugs(), "checks": checks}))
"""

ALL_CORRECT = {
    "exp": True,
    "exp_": True,
    "exp.out": True,
    "sin": True,
    "sin.out": True,
    "cos": True,
    "cos transposed": True,
    "tanh grad": True,
    "bitwise_not float raises": True,
    "bitwise_not int": True,
    "neg": True,
    "neg keeps a lazy input lazy": True,
    "exp keeps a lazy input lazy": True,
    "tril row-major": True,
    "embedding checks indices first": True,
    "autocast mm in bfloat16": True,
    "autocast exp in float32": True,
}


def _probe(plants: str) -> dict:
    result = run_python(PROBE, EMU_PLANT=plants)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_plants_are_off_in_this_process():
    assert torch_emu.planted_bugs() == dict.fromkeys(torch_emu.planted_bugs(), False)


@pytest.mark.slow
def test_unplanted_ops_are_correct():
    report = _probe("")
    assert not any(report["active"].values())
    assert report["checks"] == ALL_CORRECT


@pytest.mark.slow
def test_every_plant_breaks_exactly_its_ops():
    report = _probe(",".join(torch_emu.planted_bugs()))
    assert all(report["active"].values())
    broken = {name for name, ok in report["checks"].items() if not ok}
    assert broken == {
        "exp",
        "exp_",
        "exp.out",  # wrong_result
        "sin.out",  # ignores_out (functional sin stays right)
        "cos transposed",  # noncontiguous (contiguous input stays right)
        "tanh grad",  # wrong_grad
        "bitwise_not float raises",  # accepts_bad_dtype
        "neg keeps a lazy input lazy",  # materializes_cow (the result stays right)
        "exp keeps a lazy input lazy",  # wrong_result's hook runs on the CPU alias: it fails
        "tril row-major",  # column_major (the values stay right)
        "embedding checks indices first",  # device_check_first
        "autocast mm in bfloat16",  # no_autocast
        "autocast exp in float32",  # no_autocast
    }


def test_unknown_plant_is_an_error_naming_it():
    result = run_python(
        "import torch_emu", EMU_PLANT="wrong_result,bogus", TORCH_DEVICE_BACKEND_AUTOLOAD="0"
    )
    assert result.returncode != 0
    assert "EMU_PLANT: unknown planted bug(s) bogus" in result.stderr
