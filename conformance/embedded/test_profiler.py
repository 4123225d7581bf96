"""Profiler templates: ``torch.profiler`` sees what ran on the device.

Per workload (a small program of a few ops on the device: a matmul, a pointwise op, a
reduction, a softmax, a convolution, a copy to the host, a backward pass), profiled with the
CPU activity and the device's own (``ProfilerActivity.PrivateUse1`` for a PrivateUse1
backend, ``CUDA``, ``XPU``, ...):

- ``test_profiler_device_events``: the workload's ATen op is recorded, and on an
  accelerator it has device time: events with the device's type and a positive duration,
  linked to the op (its ``device_time_total`` is positive). A backend that runs its kernels
  without telling the profiler fails here.
- ``test_profiler_input_shapes``: with ``record_shapes=True`` the op's event carries the
  shapes of the tensors it was called with.
- ``test_profiler_with_stack``: with ``with_stack=True`` the op's event has the Python
  frames it was called from, this file's line among them.
- ``test_profiler_chrome_trace``: ``export_chrome_trace`` writes a JSON trace holding the
  op, and on an accelerator the device's events (``kernel`` or ``gpu_memcpy``) with a
  positive duration.
- ``test_profiler_memory``: with ``profile_memory=True`` an op that allocates on the device
  reports that memory on the device (the CPU: as CPU memory).

On the CPU there is no device activity: the device-time checks do not apply, the others run.
Compile mode skips the file: it checks the profiler, not compiled code.
"""

from __future__ import annotations

import inspect
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, parametrize, run_tests

from conformance.embedded._samples import SEED, compiling
from conformance.profile import device_activities


@dataclass(frozen=True)
class Workload:
    """A few ops on the device: ``inputs(device)`` makes the tensors, ``run(*inputs)`` is
    profiled, and ``op`` is the profiler event it must produce (the outermost ATen op)."""

    name: str
    op: str
    inputs: Callable[[str], tuple[torch.Tensor, ...]]
    run: Callable[..., object]


def _randn(*shapes: tuple[int, ...], grad: bool = False) -> Callable[[str], tuple]:
    def make(device: str) -> tuple[torch.Tensor, ...]:
        generator = torch.Generator().manual_seed(SEED)
        return tuple(
            torch.randn(shape, generator=generator).to(device).requires_grad_(grad)
            for shape in shapes
        )

    return make


def _backward(x: torch.Tensor, w: torch.Tensor) -> None:
    torch.mm(x, w).sum().backward()


WORKLOADS = (
    Workload("mm", "aten::mm", _randn((32, 48), (48, 16)), torch.mm),
    Workload("add", "aten::add", _randn((8, 128), (8, 128)), torch.add),
    Workload("sum", "aten::sum", _randn((64, 64)), lambda x: x.sum(dim=1)),
    Workload("softmax", "aten::softmax", _randn((16, 40)), lambda x: torch.softmax(x, dim=-1)),
    Workload("conv2d", "aten::conv2d", _randn((2, 3, 12, 12), (4, 3, 3, 3)), F.conv2d),
    Workload("to_cpu", "aten::to", _randn((64, 32)), lambda x: x.to("cpu")),
    Workload(
        "backward",
        "autograd::engine::evaluate_function: MmBackward0",
        _randn((16, 24), (24, 8), grad=True),
        _backward,
    ),
)

_workloads = parametrize("workload", WORKLOADS, name_fn=lambda w: w.name)


def _kernel_type(device: str):
    """The DeviceType of the device's own events (the profiler's mapping, which
    ``--profile`` uses too), or None for the CPU, whose ops are the CPU activity's."""
    return device_activities(torch.device(device).type)[1]


def _python_frames(event) -> list[str]:
    """The Python frames an event was called from, innermost first: its recorded stack,
    or the Python function events above it (torch's Python tracer records those)."""
    frames = list(event.stack or [])
    parent = event.cpu_parent
    while parent is not None:
        frames.append(parent.name)
        parent = parent.cpu_parent
    return frames


class TestProfiler(TestCase):
    """``torch.profiler`` on the device under test."""

    def setUp(self) -> None:
        super().setUp()
        if compiling():
            self.skipTest("runs eager only: this template checks the profiler, not compiled code")

    def _activities(self, device: str) -> list[ProfilerActivity]:
        return device_activities(torch.device(device).type)[0]

    def _profile(self, device: str, workload: Workload, **options) -> profile:
        inputs = workload.inputs(device)
        with profile(activities=self._activities(device), **options) as prof:
            workload.run(*inputs)
        return prof

    def _events(self, prof: profile, name: str) -> list:
        found = [e for e in prof.events() if e.name == name]
        self.assertTrue(found, f"the profile holds no {name} event")
        return found

    @_workloads
    def test_profiler_device_events(self, device, workload):
        prof = self._profile(device, workload)
        events = self._events(prof, workload.op)
        self.assertGreater(sum(e.cpu_time_total for e in events), 0)
        device_type = _kernel_type(device)
        if device_type is None:
            return
        on_device = [e for e in prof.events() if e.device_type == device_type]
        self.assertTrue(
            on_device,
            f"no event with device type {device_type} in the profile: the backend reports "
            "nothing it ran to the profiler",
        )
        self.assertTrue(all(e.device_time_total > 0 for e in on_device))
        self.assertGreater(
            sum(e.device_time_total for e in events),
            0,
            f"{workload.op} has no device time: its device events are not linked to it",
        )

    @_workloads
    def test_profiler_input_shapes(self, device, workload):
        if workload.name == "backward":
            self.skipTest("autograd's events record no input shapes")
        inputs = workload.inputs(device)
        with profile(activities=self._activities(device), record_shapes=True) as prof:
            workload.run(*inputs)
        shapes = [list(t.shape) for t in inputs]
        recorded = [e.input_shapes for e in self._events(prof, workload.op)]
        self.assertTrue(
            any(r[: len(shapes)] == shapes for r in recorded),
            f"{workload.op} recorded input shapes {recorded}, expected {shapes} first",
        )

    @_workloads
    def test_profiler_with_stack(self, device, workload):
        if workload.name == "backward":
            self.skipTest("autograd's engine runs backward ops without a Python stack")
        inputs = workload.inputs(device)
        first = inspect.currentframe().f_lineno + 1
        with profile(activities=self._activities(device), with_stack=True) as prof:
            workload.run(*inputs)
        # The Python tracer names a frame that was running when profiling started by the
        # line it was on then (the with statement), a frame entered later by its call.
        here = {f"{os.path.basename(__file__)}({line})" for line in (first, first + 1)}
        frames = [_python_frames(e) for e in self._events(prof, workload.op)]
        self.assertTrue(
            any(any(h in frame for h in here for frame in chain) for chain in frames),
            f"no {workload.op} event's Python stack names {sorted(here)}: {frames}",
        )

    @_workloads
    def test_profiler_chrome_trace(self, device, workload):
        prof = self._profile(device, workload)
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                trace = json.load(f)
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        self.assertTrue(
            any(e.get("name") == workload.op for e in events),
            f"the exported trace holds no {workload.op} event",
        )
        if _kernel_type(device) is None:
            return
        device_events = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy")]
        self.assertTrue(device_events, "the exported trace holds no device event")
        self.assertTrue(all(e.get("dur", 0) > 0 for e in device_events))

    def test_profiler_memory(self, device):
        accelerator = _kernel_type(device)
        nbytes = 256 * 256 * 4
        with profile(activities=self._activities(device), profile_memory=True) as prof:
            x = torch.empty(256, 256, device=device)
        del x
        events = self._events(prof, "aten::empty")
        if accelerator is None:
            reported = max(e.cpu_memory_usage for e in events)
        else:
            reported = max(e.device_memory_usage for e in events)
        self.assertGreaterEqual(
            reported, nbytes, f"an allocation of {nbytes} bytes reported {reported}"
        )


instantiate_device_type_tests(TestProfiler, globals())

if __name__ == "__main__":
    run_tests()
