"""emu's torch.compile backend: decompositions reach lowered ops, the rest is refused."""

from __future__ import annotations

import pytest
import torch

from conformance.classify import classify_failure
from tests.backend.test_training import _cnn, _mlp, _train


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_an_op_with_no_eager_lowering_runs_compiled_through_its_decomposition(no_fallback):
    a, b = torch.randn(6), torch.randn(6)
    ea, eb = a.to("emu"), b.to("emu")
    with pytest.raises(NotImplementedError, match=r"aten::rsub\.Tensor"):
        torch.rsub(ea, eb)  # eager: no lowering
    compiled = torch.compile(lambda x, y: torch.rsub(x, y, alpha=2), backend="emu")
    got = compiled(ea, eb)
    assert got.device.type == "emu"
    torch.testing.assert_close(got.cpu(), torch.rsub(a, b, alpha=2))


def test_an_op_with_no_lowering_even_decomposed_is_refused_naming_the_overload(no_fallback):
    compiled = torch.compile(torch.angle, backend="emu", fullgraph=True)
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as raised:
        compiled(torch.randn(4, device="emu"))
    text = f"{type(raised.value).__name__}: {raised.value}"
    assert "The operator 'aten::angle' is not currently implemented for the emu compiler" in text
    assert classify_failure(raised.value, text) == ("missing_lowering", "aten::angle")


def test_set_default_backend_names_emu_once(no_fallback):
    torch.compiler.set_default_backend("emu")
    try:
        with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="emu compiler"):
            torch.compile(torch.angle)(torch.randn(4, device="emu"))
    finally:
        torch.compiler.set_default_backend(None)
    assert torch.compiler.get_default_backend() == "inductor"


def test_graphs_are_cached_and_reused(no_fallback):
    calls = []

    def counting(gm, example_inputs):
        from torch_emu.compiler import emu_backend

        calls.append(gm)
        return emu_backend(gm, example_inputs)

    compiled = torch.compile(lambda x: (x * 2).sin(), backend=counting, dynamic=False)
    x = torch.randn(5, device="emu")
    for _ in range(3):
        torch.testing.assert_close(compiled(x).cpu(), (x.cpu() * 2).sin())
    assert len(calls) == 1


@pytest.mark.parametrize(
    "make_model, shape, target",
    [(_mlp, (5, 8), [0, 1, 2, 3, 0]), (_cnn, (2, 3, 8, 8), [0, 2])],
    ids=["mlp", "cnn"],
)
def test_compiled_training_on_emu_equals_eager_cpu(no_fallback, make_model, shape, target):
    data = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    target = torch.tensor(target)
    cpu_losses, cpu_params = _train(make_model, lambda: data, target, "cpu")
    compiled = lambda model: torch.compile(model, backend="emu")  # noqa: E731
    emu_losses, emu_params = _train(make_model, lambda: data, target, "emu", wrap=compiled)
    # Compiled graphs run decompositions (layer_norm, gelu, ...) where the CPU has fused
    # kernels: equal up to rounding, forward (losses) and backward (the updated parameters).
    torch.testing.assert_close(emu_losses, cpu_losses, rtol=1e-5, atol=1e-6)
    for cpu_p, emu_p in zip(cpu_params, emu_params, strict=True):
        torch.testing.assert_close(emu_p, cpu_p, rtol=1e-5, atol=1e-6)
    import torch_emu

    assert torch_emu.fallback_counts() == {}  # nothing ran on the CPU
