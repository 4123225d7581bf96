"""Runtime templates: the device's runtime through ``torch.accelerator`` and its device module.

What torch's generic code (DDP and FSDP2's streams, checkpointing's RNG state, the profiler,
data loaders' pinned memory) expects of any accelerator:

- ``test_runtime_device_selection``: ``torch.accelerator.device_count()`` agrees with the
  device module; each index holds tensors; ``device_index`` and ``set_device_index`` switch
  where new tensors go, and the previous device comes back.
- ``test_runtime_synchronize``: ``torch.accelerator.synchronize`` and the module's, for the
  current device and a named one, after work; results read afterwards are complete.
- ``test_runtime_streams``: a new stream is not the current one; a stream as a context
  manager and ``set_stream`` make it current and restore the previous; work issued on a
  side stream, ordered with ``wait_stream``, gives the results of the default stream; an
  idle stream reports ``query()`` True after ``synchronize()``.
- ``test_runtime_events``: events record on a stream, report ``query()`` True once
  synchronized, and ``elapsed_time`` orders them: from the first to the third is at least
  from the first to the second, and none is negative; a stream can wait on an event.
- ``test_runtime_memory``: ``memory_allocated`` grows by at least what a tensor holds and
  falls back when it is freed; the peak is at least the current level and a peak reset
  brings it down to the current level; ``memory_reserved`` holds what is allocated;
  ``empty_cache`` keeps live tensors intact.
- ``test_runtime_rng``: seeding repeats draws; a saved RNG state replays them; ``fork_rng``
  for the device type restores the state it found; a generator on the device draws
  independently of the default one; with two devices, seeding one leaves the other alone.
- ``test_runtime_serialization``: a saved device tensor loads back on the device, on the
  CPU with ``map_location="cpu"``, through a ``map_location`` function, and with views
  still sharing their storage.
- ``test_runtime_pinned_memory``: where the device pins host memory, ``pin_memory()``
  gives a tensor (and views of it) that ``is_pinned()``, with the same values, that copies
  to the device with ``non_blocking=True`` exactly; unpinned memory is not reported pinned.

The CPU is not an accelerator: device selection, streams and events skip there; the rest
run with torch's CPU counterparts where there are some. Compile mode skips the file.
"""

from __future__ import annotations

import io

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests

from conformance.embedded._samples import SEED, compiling


def _module(device_type: str):
    return torch.get_device_module(device_type)


class TestRuntime(TestCase):
    """The runtime of the device under test."""

    def setUp(self) -> None:
        super().setUp()
        if compiling():
            self.skipTest("runs eager only: this template checks the runtime, not compiled code")

    def _accelerator(self, device: str) -> str:
        """The device type, when it is the accelerator torch.accelerator speaks for."""
        device_type = torch.device(device).type
        current = torch.accelerator.current_accelerator()
        if device_type == "cpu" or current is None or current.type != device_type:
            self.skipTest(f"{device_type} is not the accelerator (torch.accelerator: {current})")
        return device_type

    def test_runtime_device_selection(self, device):
        device_type = self._accelerator(device)
        count = torch.accelerator.device_count()
        self.assertGreaterEqual(count, 1)
        self.assertEqual(count, _module(device_type).device_count())
        for index in range(count):
            x = torch.ones(3, device=f"{device_type}:{index}")
            self.assertEqual(x.device, torch.device(device_type, index))
        start = torch.accelerator.current_device_index()
        last = count - 1
        with torch.accelerator.device_index(last):
            self.assertEqual(torch.accelerator.current_device_index(), last)
            self.assertEqual(torch.empty(1, device=device_type).device.index, last)
        self.assertEqual(torch.accelerator.current_device_index(), start)
        torch.accelerator.set_device_index(last)
        try:
            self.assertEqual(_module(device_type).current_device(), last)
        finally:
            torch.accelerator.set_device_index(start)
        self.assertEqual(torch.accelerator.current_device_index(), start)

    def test_runtime_synchronize(self, device):
        device_type = torch.device(device).type
        x = torch.randn(64, 64, device=device)
        y = x @ x
        if device_type != "cpu":
            self._accelerator(device)
            torch.accelerator.synchronize()
            torch.accelerator.synchronize(torch.device(device).index or 0)
        _module(device_type).synchronize()
        self.assertEqual(y.cpu(), x.cpu() @ x.cpu(), atol=1e-4, rtol=1e-5)

    def test_runtime_streams(self, device):
        device_type = self._accelerator(device)
        index = torch.accelerator.current_device_index()
        start = torch.accelerator.current_stream(index)
        side = torch.Stream(device=torch.device(device_type, index))
        self.assertNotEqual(side, start)
        with side:
            self.assertEqual(torch.accelerator.current_stream(index), side)
        self.assertEqual(torch.accelerator.current_stream(index), start)
        torch.accelerator.set_stream(side)
        try:
            self.assertEqual(torch.accelerator.current_stream(index), side)
        finally:
            torch.accelerator.set_stream(start)
        self.assertEqual(torch.accelerator.current_stream(index), start)

        x = torch.randn(32, 32, device=device_type)
        expected = (x @ x).relu()
        side.wait_stream(start)
        with side:
            got = (x @ x).relu()
        start.wait_stream(side)
        side.synchronize()
        self.assertTrue(side.query())
        self.assertEqual(got, expected)

    def test_runtime_events(self, device):
        device_type = self._accelerator(device)
        stream = torch.accelerator.current_stream()
        first, second, third = (torch.Event(device_type, enable_timing=True) for _ in range(3))
        first.record(stream)
        x = torch.randn(128, 128, device=device_type)
        for _ in range(4):
            x = (x @ x).tanh()
        second.record(stream)
        x = (x @ x).tanh()
        third.record(stream)
        third.synchronize()
        self.assertTrue(all(e.query() for e in (first, second, third)))
        to_second, to_third = first.elapsed_time(second), first.elapsed_time(third)
        self.assertGreaterEqual(to_second, 0)
        self.assertGreaterEqual(to_third, to_second)
        self.assertGreaterEqual(second.elapsed_time(third), 0)
        other = torch.Stream(device=torch.device(device_type))
        other.wait_event(third)
        with other:
            y = x + 1
        other.synchronize()
        self.assertEqual(y.cpu(), x.cpu() + 1)

    def test_runtime_memory(self, device):
        device_type = self._accelerator(device)
        index = torch.device(device).index or 0
        torch.accelerator.synchronize()
        before = torch.accelerator.memory_allocated(index)
        nbytes = 1 << 20
        x = torch.empty(nbytes // 4, dtype=torch.float32, device=f"{device_type}:{index}")
        during = torch.accelerator.memory_allocated(index)
        self.assertGreaterEqual(during - before, nbytes)
        self.assertGreaterEqual(torch.accelerator.max_memory_allocated(index), during)
        self.assertGreaterEqual(torch.accelerator.memory_reserved(index), during)
        x.fill_(2.0)
        torch.accelerator.empty_cache()
        self.assertEqual(x[:4].cpu(), torch.full((4,), 2.0))
        del x
        after = torch.accelerator.memory_allocated(index)
        self.assertLessEqual(after, during - nbytes)
        torch.accelerator.reset_peak_memory_stats(index)
        self.assertEqual(torch.accelerator.max_memory_allocated(index), after)

    def _rng(self, device_type: str):
        if device_type == "cpu":
            return torch.manual_seed, torch.get_rng_state, torch.set_rng_state
        module = _module(device_type)
        return module.manual_seed, module.get_rng_state, module.set_rng_state

    def test_runtime_rng(self, device):
        device_type = torch.device(device).type
        manual_seed, get_state, set_state = self._rng(device_type)
        manual_seed(SEED)
        first = torch.randn(16, device=device)
        manual_seed(SEED)
        self.assertEqual(torch.randn(16, device=device), first)

        state = get_state()
        draws = torch.rand(16, device=device)
        torch.rand(16, device=device)
        set_state(state)
        self.assertEqual(torch.rand(16, device=device), draws, msg="the saved state did not replay")

        state = get_state()
        # fork_rng always saves the CPU's state; devices names the accelerator's to save.
        index = torch.device(device).index or 0
        forked = {"devices": []} if device_type == "cpu" else {"devices": [index]}
        with torch.random.fork_rng(**forked, device_type=device_type):
            torch.rand(64, device=device)
        self.assertEqual(get_state(), state, msg="fork_rng did not restore the device's state")

        generator = torch.Generator(device=device).manual_seed(SEED + 1)
        mine = torch.rand(8, device=device, generator=generator)
        generator.manual_seed(SEED + 1)
        self.assertEqual(torch.rand(8, device=device, generator=generator), mine)

        if device_type != "cpu" and _module(device_type).device_count() >= 2:
            module = _module(device_type)
            module.manual_seed_all(SEED)
            on_zero = torch.rand(8, device=f"{device_type}:0")
            module.manual_seed_all(SEED)
            with torch.accelerator.device_index(1):
                module.manual_seed(SEED + 7)
            self.assertEqual(torch.rand(8, device=f"{device_type}:0"), on_zero)

    def test_runtime_serialization(self, device):
        base = torch.arange(12.0, device=device).reshape(3, 4)
        view = base[1:]
        buffer = io.BytesIO()
        torch.save({"base": base, "view": view}, buffer)

        buffer.seek(0)
        loaded = torch.load(buffer)
        self.assertEqual(loaded["base"].device, base.device)
        self.assertEqual(loaded["base"], base)
        loaded["base"][1, 0] = -1.0
        self.assertEqual(loaded["view"][0, 0].item(), -1.0, msg="views lost their shared storage")

        buffer.seek(0)
        on_cpu = torch.load(buffer, map_location="cpu")
        self.assertEqual(on_cpu["base"].device, torch.device("cpu"))
        self.assertEqual(on_cpu["base"], base.cpu())

        buffer.seek(0)
        through = torch.load(buffer, map_location=lambda storage, location: storage)
        self.assertEqual(through["view"].device, torch.device("cpu"))
        self.assertEqual(through["view"], view.cpu())

        buffer.seek(0)
        back = torch.load(buffer, map_location=device)
        self.assertEqual(back["view"].device, view.device)

    def test_runtime_pinned_memory(self, device):
        device_type = self._accelerator(device)
        host = torch.arange(1024.0)
        self.assertFalse(host.is_pinned(), "unpinned host memory is reported pinned")
        try:
            pinned = host.pin_memory()
        except (RuntimeError, NotImplementedError) as exc:
            self.skipTest(f"{device_type} does not pin host memory: {exc}")
        self.assertTrue(pinned.is_pinned(), "pin_memory() returned memory that is not pinned")
        self.assertTrue(pinned[100:].is_pinned(), "a view into pinned memory is not pinned")
        self.assertEqual(pinned, host)
        on_device = pinned.to(device_type, non_blocking=True)
        torch.accelerator.synchronize()
        self.assertEqual(on_device.cpu(), host)
        self.assertTrue(torch.empty(16, pin_memory=True).is_pinned())


instantiate_device_type_tests(TestRuntime, globals())

if __name__ == "__main__":
    run_tests()
