"""Autograd on emu, and small models whose training matches the CPU exactly."""

from __future__ import annotations

import torch


def test_autograd_through_views_and_in_place_ops():
    x = torch.randn(4, 3, device="emu", requires_grad=True)
    y = x * 2
    y[1].mul_(3)  # in-place on a view of a non-leaf
    y.t().sum().backward()
    expected = torch.full((4, 3), 2.0)
    expected[1] = 6.0
    assert torch.equal(x.grad.cpu(), expected)
    (grad,) = torch.autograd.grad((x.t() ** 2).sum(), x)
    assert torch.allclose(grad.cpu(), 2 * x.detach().cpu())


def _mlp():
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16),
        torch.nn.ReLU(),
        torch.nn.Linear(16, 16),
        torch.nn.GELU(),
        torch.nn.LayerNorm(16),
        torch.nn.Tanh(),
        torch.nn.Linear(16, 4),
    )


def _cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(4, 4, 3),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(4, 3),
    )


def _train(make_model, make_input, target, device, steps=3, wrap=lambda model: model):
    """Losses and final parameters of ``steps`` SGD steps; ``wrap`` makes the callable the
    steps run the model through (``torch.compile``, say)."""
    torch.manual_seed(0)
    model = make_model().to(device)
    forward = wrap(model)
    x, y = make_input().to(device), target.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(forward(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def _assert_same_training(make_model, make_input, target):
    generator = torch.Generator().manual_seed(1)
    data = make_input(generator)
    cpu_losses, cpu_params = _train(make_model, lambda: data, target, "cpu")
    emu_losses, emu_params = _train(make_model, lambda: data, target, "emu", steps=3)
    assert emu_losses == cpu_losses
    for cpu_p, emu_p in zip(cpu_params, emu_params, strict=True):
        assert torch.equal(cpu_p, emu_p)


def test_mlp_training_equals_cpu(no_fallback):
    _assert_same_training(
        _mlp, lambda g: torch.randn(5, 8, generator=g), torch.tensor([0, 1, 2, 3, 0])
    )
    assert torch_emu_fallbacks() == {}


def test_cnn_training_equals_cpu(no_fallback):
    _assert_same_training(
        _cnn, lambda g: torch.randn(2, 3, 8, 8, generator=g), torch.tensor([0, 2])
    )
    assert torch_emu_fallbacks() == {}


def test_embedding_nll_and_adam_step_equal_cpu(no_fallback):
    def run(device):
        torch.manual_seed(0)
        emb = torch.nn.Embedding(10, 6).to(device)
        head = torch.nn.Linear(6, 5).to(device)
        opt = torch.optim.Adam([*emb.parameters(), *head.parameters()], lr=0.01)
        idx = torch.tensor([1, 4, 4, 9], device=device)
        logp = torch.log_softmax(head(emb(idx)), dim=1)
        loss = torch.nn.functional.nll_loss(logp, torch.tensor([0, 1, 2, 3], device=device))
        loss.backward()
        opt.step()
        return [p.detach().cpu() for p in (*emb.parameters(), *head.parameters())]

    for cpu_p, emu_p in zip(run("cpu"), run("emu"), strict=True):
        assert torch.equal(cpu_p, emu_p)


def test_silu_gradient_uses_the_decomposition(no_fallback):
    # silu_backward is CompositeImplicitAutograd, so under autograd emu runs its
    # decomposition (as XLA and Lazy do) while the CPU has a fused kernel: equal
    # up to rounding, not bitwise.
    x = torch.randn(64, requires_grad=True)
    xe = x.detach().to("emu").requires_grad_()
    torch.nn.functional.silu(x).sum().backward()
    torch.nn.functional.silu(xe).sum().backward()
    torch.testing.assert_close(xe.grad.cpu(), x.grad, rtol=1e-6, atol=1e-6)


def torch_emu_fallbacks():
    import torch_emu

    return torch_emu.fallback_counts()


def test_transformer_inference_fast_path_equals_cpu(no_fallback):
    # In eval mode without grad, TransformerEncoderLayer and MultiheadAttention take their
    # fused kernels (_transformer_encoder_layer_fwd, _native_multi_head_attention).
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()
    attention = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(2, 3, 8)
    padding = torch.tensor([[False, False, True], [False, False, False]])
    with torch.no_grad():
        expected = layer(x, src_key_padding_mask=padding)
        expected_attention = attention(x, x, x)[0]
        layer.to("emu")
        attention.to("emu")
        device_x = x.to("emu")
        actual = layer(device_x, src_key_padding_mask=padding.to("emu"))
        actual_attention = attention(device_x, device_x, device_x)[0]
    assert actual.device.type == "emu"
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True)
    torch.testing.assert_close(actual_attention.cpu(), expected_attention)
