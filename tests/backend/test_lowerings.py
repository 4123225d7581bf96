"""The lowering registry, derived kernels (in-place, out=, results on the right device),
missing lowerings and the CPU fallback switch."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
import torch_emu
from torch_emu.lowering import LoweringError
from torch_emu.lowering.registry import lower, lowering

MISSING = re.compile(r"Could not run '([^']+)' with arguments from the '([^']+)' backend")


def test_registry_refuses_composite_implicit_ops():
    with pytest.raises(
        LoweringError, match=re.escape("aten::linear: is CompositeImplicitAutograd")
    ):
        lower("aten::linear")


def test_registry_refuses_view_ops():
    with pytest.raises(LoweringError, match=re.escape("aten::transpose.int: is a view op")):
        lower("aten::transpose.int")


def test_registry_refuses_duplicates_and_unknown_names():
    with pytest.raises(
        LoweringError, match=re.escape("aten::add.Tensor: already lowered at torch_emu/")
    ):
        lowering("aten::add.Tensor")(lambda *a: None)
    with pytest.raises(LoweringError, match=re.escape("'aten::no_such_op': no such ATen overload")):
        lower("aten::no_such_op")
    with pytest.raises(LoweringError, match="expected 'aten::name'"):
        lower("add.Tensor")


def test_functional_inplace_and_out_variants_agree_with_cpu():
    host = torch.randn(4, 5)
    dev = host.to("emu:1")
    assert torch.equal(torch.sigmoid(dev).cpu(), torch.sigmoid(host))
    assert torch.sigmoid(dev).device == torch.device("emu:1")
    inplace = dev.clone()
    returned = inplace.sigmoid_()
    assert returned is inplace and torch.equal(inplace.cpu(), torch.sigmoid(host))
    out = torch.empty(4, 5, device="emu:1")
    assert torch.sigmoid(dev, out=out) is out
    assert torch.equal(out.cpu(), torch.sigmoid(host))
    values, indices = (
        torch.empty(0, device="emu:1"),
        torch.empty(0, dtype=torch.long, device="emu:1"),
    )
    torch.max(dev, 1, out=(values, indices))
    expected = torch.max(host, 1)
    assert torch.equal(values.cpu(), expected.values) and torch.equal(
        indices.cpu(), expected.indices
    )


def test_out_resize_follows_upstream_semantics():
    x = torch.ones(5, device="emu")
    out = torch.empty(2, device="emu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.add(x, 1, out=out)
    assert out.shape == (5,) and out.cpu().tolist() == [2.0] * 5
    messages = [str(w.message) for w in caught]
    assert sum("An output with one or more elements was resized" in m for m in messages) == 1
    shrink = torch.empty(10, device="emu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.mul(x, 3, out=shrink)
    assert shrink.shape == (5,) and shrink.cpu().tolist() == [3.0] * 5
    with pytest.raises(RuntimeError, match="result type Float can't be cast"):
        torch.add(x, 1, out=torch.empty(5, dtype=torch.long, device="emu"))


def test_core_op_families_match_cpu(no_fallback):
    host = torch.randn(6, 5)
    dev = host.to("emu")
    idx = torch.tensor([0, 3, 5])
    checks = {
        "where": lambda t: torch.where(t > 0, t, -t),
        "clamp": lambda t: t.clamp(-0.5, 0.5),
        "cast": lambda t: t.to(torch.int32),
        "var": lambda t: t.var(1),
        "norm": lambda t: t.norm(),
        "cumsum": lambda t: t.cumsum(0),
        "argmax": lambda t: t.argmax(1),
        "bmm": lambda t: torch.bmm(t[None], t.t()[None]),
        "addmm": lambda t: torch.addmm(t[:, :1], t, t.t()[:, :1]),
        "mv": lambda t: torch.mv(t, t[0]),
        "dot": lambda t: torch.dot(t[0], t[1]),
        "index": lambda t: t[idx.to(t.device)],
        "index_put": lambda t: t.clone().index_put_((idx.to(t.device),), t[0, 0]),
        "gather": lambda t: t.gather(1, torch.zeros(6, 2, dtype=torch.long, device=t.device)),
        "scatter": lambda t: torch.zeros_like(t).scatter(
            0, torch.ones(1, 5, dtype=torch.long, device=t.device), t[:1]
        ),
        "index_select": lambda t: t.index_select(0, idx.to(t.device)),
        "masked_fill": lambda t: t.masked_fill(t > 0, 0.0),
        "cat": lambda t: torch.cat([t, t * 2]),
        "flip": lambda t: t.flip(0),
        "roll": lambda t: t.roll(2, 1),
        "sort": lambda t: t.sort(1).values,
        "topk": lambda t: t.topk(2).indices,
        "softmax": lambda t: t.softmax(1),
        "nonzero": lambda t: (t > 0).nonzero(),
    }
    for name, fn in checks.items():
        assert torch.equal(fn(dev).cpu(), fn(host)), name
    assert torch_emu.fallback_counts() == {}


def test_missing_lowering_raises_torch_standard_error(no_fallback):
    x = torch.ones(3, device="emu")
    with pytest.raises(NotImplementedError) as info:
        torch.special.erfcx(x)
    match = MISSING.match(str(info.value))
    assert match is not None
    assert match.groups() == ("aten::special_erfcx.out", "emu")


def test_cpu_fallback_switch_and_counters(no_fallback):
    x = torch.full((3,), 2.0, device="emu")
    assert not torch_emu.cpu_fallback_enabled()
    torch_emu.set_cpu_fallback(True)
    assert torch_emu.cpu_fallback_enabled()
    result = torch.special.erfcx(x)
    torch.special.erfcx(x)
    assert result.device.type == "emu"
    assert torch.allclose(result.cpu(), torch.special.erfcx(x.cpu()))
    torch.add(x, x)  # lowered: not counted
    assert torch_emu.fallback_counts() == {"aten::special_erfcx.out": 2}
    torch_emu.reset_fallback_counts()
    assert torch_emu.fallback_counts() == {}
    torch_emu.set_cpu_fallback(False)
    with pytest.raises(NotImplementedError, match="special_erfcx"):
        torch.special.erfcx(x)
    with pytest.raises(TypeError, match="expected a bool"):
        torch_emu.set_cpu_fallback(1)


def test_tensors_from_two_devices_are_rejected_like_cuda():
    a = torch.ones(3, device="emu:0")
    same_device = "Expected all tensors to be on the same device, but found at least two devices"
    with pytest.raises(RuntimeError, match=f"{same_device}, emu:0 and emu:1!"):
        a + torch.ones(3, device="emu:1")
    with pytest.raises(RuntimeError, match=f"{same_device}, emu:0 and cpu!"):
        a * torch.ones(3)
    with pytest.raises(RuntimeError, match=f"{same_device}, emu:0 and cpu!"):
        torch.sin(a, out=torch.empty(3))  # a hand-written lowering checks too
    # 0-dim CPU tensors act as scalars, and CPU index tensors are accepted, as on CUDA.
    assert (a + torch.tensor(2.0)).cpu().tolist() == [3.0] * 3
    assert a[torch.tensor([0, 2])].cpu().tolist() == [1.0, 1.0]
    # ... but never as what an op writes: a 0-dim out= on the CPU is refused too.
    with pytest.raises(RuntimeError, match=f"{same_device}, emu:0 and cpu!"):
        torch.amin(a, 0, out=torch.empty(()))
    with pytest.raises(RuntimeError, match=f"{same_device}, emu:0 and cpu!"):
        torch.exp(a, out=torch.empty(3))
    # A CPU tensor indexed with device indices: the index kernels' own check, as on CUDA.
    indices = torch.tensor([0, 2], device="emu")
    with pytest.raises(RuntimeError, match=r"indices should be either on cpu or .* \(cpu\)"):
        torch.ones(3)[indices]
    with pytest.raises(RuntimeError, match=r"indices should be either on cpu or .* \(emu:1\)"):
        torch.ones(3, device="emu:1")[indices]


def test_deterministic_mode_fills_new_memory_as_the_cpu_does():
    torch.use_deterministic_algorithms(True)
    try:
        floats = torch.empty(4, device="emu")
        ints = torch.empty_strided((2, 2), (1, 2), dtype=torch.int32, device="emu")
    finally:
        torch.use_deterministic_algorithms(False)
    assert floats.isnan().all()
    assert (ints.cpu() == torch.iinfo(torch.int32).max).all()


def test_ops_that_have_kernels_of_their_own_beyond_the_families(no_fallback):
    x = torch.arange(6, device="emu")
    assert (x << 2).cpu().tolist() == (torch.arange(6) << 2).tolist()
    assert (x >> 1).cpu().tolist() == (torch.arange(6) >> 1).tolist()
    weight = torch.randint(-8, 8, (3, 4), dtype=torch.int8)
    inputs, scales = torch.randn(2, 4), torch.rand(3)
    packed = torch._weight_int8pack_mm(inputs.to("emu"), weight.to("emu"), scales.to("emu"))
    torch.testing.assert_close(packed.cpu(), torch._weight_int8pack_mm(inputs, weight, scales))
    assert torch.isin(x, 3).cpu().tolist() == torch.isin(torch.arange(6), 3).tolist()
    assert bool(torch.isin(3, x)) and not bool(torch.isin(7, x))
    # mode's out= variant: torch's own entry refuses every device but CPU, CUDA and XPU.
    values, indices = torch.empty(0, device="emu"), torch.empty(0, dtype=torch.long, device="emu")
    data = torch.tensor([[1.0, 2.0, 2.0], [3.0, 3.0, 1.0]])
    torch.mode(data.to("emu"), 1, out=(values, indices))
    assert values.cpu().tolist() == torch.mode(data, 1).values.tolist()


def test_gradient_scaling_runs_on_the_device(no_fallback):
    model = torch.nn.Linear(3, 1).to("emu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.emu.amp.GradScaler()
    assert scaler.is_enabled() and isinstance(scaler, torch.amp.GradScaler)
    scaler.scale(model(torch.ones(2, 3, device="emu")).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 65536.0  # finite grads: the scale holds
    model.weight.grad.fill_(float("inf"))
    scaler.step(optimizer)  # skipped: an inf grad
    scaler.update()
    assert scaler.get_scale() == 32768.0


def test_addr_refuses_floating_scalars_for_integer_inputs_as_the_cpu_does(no_fallback):
    for device in ("cpu", "emu"):
        m = torch.ones(2, 2, dtype=torch.int32, device=device)
        v = torch.arange(2, dtype=torch.int32, device=device)
        with pytest.raises(RuntimeError, match="argument beta must not be a floating point"):
            torch.addr(m, v, v, beta=1.5)
        assert torch.addr(m, v, v, beta=2, alpha=3).cpu().tolist() == [[2, 2], [2, 5]]


def test_half_precision_fft_is_transformed_in_single_precision(no_fallback):
    # The CPU's FFT libraries refuse half precision; emu widens, transforms and rounds.
    signal = torch.randn(64, dtype=torch.complex64)
    half = signal.to(torch.complex32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "ComplexHalf support is experimental"
        spectrum = torch.fft.fft(half.to("emu"))
        assert spectrum.dtype == torch.complex32
        expected = torch.fft.fft(half.to(torch.complex64)).to(torch.complex32)
        torch.testing.assert_close(spectrum.cpu(), expected, atol=1e-2, rtol=1e-2)
        assert torch.fft.irfft(half.to("emu")).dtype == torch.float16
        real = torch._fft_r2c(torch.randn(16).half().to("emu"), [0], 0, True)
        assert real.dtype == torch.complex32 and real.shape == (9,)


def test_set_to_and_scalar_reads_behave_as_on_the_cpu(no_fallback):
    base = torch.empty(3, 4, device="emu")
    alias = torch.tensor([], device="emu").set_(base)
    assert base.is_set_to(alias) and alias.is_set_to(base)
    assert not base.is_set_to(torch.empty(3, 4, device="emu"))
    assert not base.is_set_to(base.view(4, 3))
    for device in ("cpu", "emu"):
        with pytest.raises(RuntimeError, match="Empty tensor not supported"):
            torch.ops.aten._local_scalar_dense(torch.ones(0, device=device))


def test_four_bit_weight_packing_and_matmul_match_the_cpu(no_fallback):
    torch.manual_seed(0)
    n, k, group, tiles = 16, 64, 32, 2
    values = torch.randint(0, 16, (n, k), dtype=torch.int32)
    scales_and_zeros = torch.rand(k // group, n, 2, dtype=torch.bfloat16)
    a = torch.rand(4, k, dtype=torch.bfloat16)
    cpu = torch._weight_int4pack_mm_for_cpu(
        a, torch._convert_weight_to_int4pack_for_cpu(values, tiles), group, scales_and_zeros
    )
    # An accelerator's input: two values a byte, high nibble first.
    pairs = (values[:, ::2] << 4 | values[:, 1::2]).to(torch.uint8).to("emu")
    packed = torch._convert_weight_to_int4pack(pairs, tiles)
    assert packed.dtype == torch.int32
    assert packed.shape == torch._convert_weight_to_int4pack(pairs.to("meta"), tiles).shape
    emu = torch._weight_int4pack_mm(a.to("emu"), packed, group, scales_and_zeros.to("emu"))
    torch.testing.assert_close(emu.cpu(), cpu)
