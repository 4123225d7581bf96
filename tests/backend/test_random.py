"""Random numbers come from per-device generators that are reproducible under seeding."""

from __future__ import annotations

import pytest
import torch


def _draw(device="emu"):
    return torch.cat(
        [
            torch.randn(8, device=device),
            torch.rand(8, device=device),
            torch.randint(0, 100, (8,), device=device).float(),
            torch.randperm(8, device=device).float(),
            torch.empty(8, device=device).bernoulli_(0.5),
        ]
    ).cpu()


def test_manual_seed_reproduces_draws():
    torch.manual_seed(123)
    first = _draw()
    torch.manual_seed(123)
    assert torch.equal(_draw(), first)
    assert torch.emu.initial_seed() == 123


@pytest.mark.parametrize("seed", [2**63 - 1, 2**63, 2**64 - 1, -1, -(2**63), 0])
def test_every_seed_torch_accepts_seeds_emu_as_it_seeds_the_cpu(seed):
    # torch.manual_seed takes -2**63 to 2**64 - 1 and seeds every device with it.
    torch.manual_seed(seed)
    assert torch.emu.initial_seed() == torch.initial_seed() == seed % 2**64


def test_devices_have_separate_generators():
    torch.manual_seed(7)
    on_zero = torch.randn(4, device="emu:0").cpu()
    on_one = torch.randn(4, device="emu:1").cpu()
    assert torch.equal(on_zero, on_one)  # same seed, separate streams
    after = torch.randn(4, device="emu:0").cpu()
    assert not torch.equal(after, on_zero)


def test_rng_state_round_trip():
    torch.emu.manual_seed(5)
    state = torch.emu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    first = torch.randn(6, device="emu").cpu()
    torch.emu.set_rng_state(state)
    assert torch.equal(torch.randn(6, device="emu").cpu(), first)
    states = torch.emu.get_rng_state_all()
    assert len(states) == torch.emu.device_count()


def test_explicit_generator_is_used_and_advanced():
    gen_a = torch.Generator(device="emu").manual_seed(99)
    gen_b = torch.Generator(device="emu").manual_seed(99)
    assert gen_a.device.type == "emu"
    x = torch.rand(5, device="emu", generator=gen_a).cpu()
    assert torch.equal(x, torch.rand(5, device="emu", generator=gen_b).cpu())
    assert not torch.equal(x, torch.rand(5, device="emu", generator=gen_a).cpu())


def test_default_generator_is_not_the_cpu_one():
    torch.manual_seed(0)
    torch.randn(100)  # advance the CPU generator only
    emu_draw = torch.randn(3, device="emu").cpu()
    torch.manual_seed(0)
    assert torch.equal(torch.randn(3, device="emu").cpu(), emu_draw)


def test_dropout_draws_from_the_emu_generator():
    x = torch.ones(1000, device="emu")
    torch.manual_seed(11)
    first = torch.nn.functional.dropout(x, 0.5).cpu()
    torch.manual_seed(11)
    torch.randn(10)  # the CPU generator is not the one dropout uses on emu
    torch.manual_seed(11)
    assert torch.equal(torch.nn.functional.dropout(x, 0.5).cpu(), first)
    cpu_state = torch.get_rng_state()
    torch.nn.functional.dropout(x, 0.5)
    assert torch.equal(torch.get_rng_state(), cpu_state)


def test_random_out_variants_and_samplers_use_the_generator():
    draws = []
    for _ in range(2):
        gen = torch.Generator(device="emu").manual_seed(21)
        out = torch.empty(0, device="emu")
        torch.normal(0.0, 1.0, (6,), generator=gen, out=out)  # out= resized from empty
        picks = torch.multinomial(torch.ones(10, device="emu"), 4, generator=gen)
        ints = torch.empty(5, dtype=torch.int64, device="emu").random_(0, 50, generator=gen)
        draws.append(torch.cat([out, picks.float(), ints.float()]).cpu())
    assert draws[0].shape == (15,)
    assert torch.equal(draws[0], draws[1])


def test_the_device_runtime_works_under_a_mode_that_refuses_every_torch_call():
    # torch's freeze_rng_state saves and restores every device's RNG state, also inside
    # refs mode, which refuses any torch call it has no reference for.
    from torch._prims.context import TorchRefsMode
    from torch.testing._utils import freeze_rng_state

    torch.emu.manual_seed(3)
    expected = torch.rand(4, device="emu").cpu()
    torch.emu.manual_seed(3)
    with TorchRefsMode(strict=True):
        with freeze_rng_state():
            pass
        torch.emu.set_rng_state(torch.emu.get_rng_state())
        assert torch.emu.current_device() == 0 and torch.emu.device_count() >= 1
    assert torch.equal(torch.rand(4, device="emu").cpu(), expected)


def test_the_device_runtime_is_invisible_to_dispatch_modes():
    # DTensor's local-tensor mode restores every device's RNG state inside a FakeTensorMode,
    # which refuses real tensors; CUDA's runtime is never dispatched, and emu's must not be.
    from torch.utils._python_dispatch import TorchDispatchMode

    class Refuse(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            raise AssertionError(f"a dispatch mode saw {func}")

    state = torch.emu.get_rng_state()
    with Refuse():
        torch.emu.set_rng_state(torch.emu.get_rng_state())
        torch.emu.manual_seed(5)
        assert torch.emu.current_device() == 0 and torch.emu.memory_allocated() >= 0
    torch.emu.set_rng_state(state)
