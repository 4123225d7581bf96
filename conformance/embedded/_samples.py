"""Samples and results shared by the embedded suite's templates.

Samples are generated on the CPU from a fixed seed and then copied to the device under
test, so the device and the CPU reference see exactly the same values, and sample
generation does not depend on the device's random number generator.

In compile mode (``CONFORMANCE_MODE=compile``, set by ``conformance run --mode compile``)
:func:`call` runs the op under ``torch.compile`` with the device's compile backend
(``fullgraph=True``, static shapes, a fresh compilation per call) whenever the sample is
on the device under test, that is, came from :func:`to_device`; references computed from
the CPU samples stay eager. Templates that test no op call (error inputs, forward-mode
AD, optimizers) skip with ``runs eager only``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from typing import Any

import torch
from torch.testing._internal.opinfo.core import SampleInput
from torch.utils._pytree import tree_flatten, tree_map

from conformance.embedded import MODE_ENV, SAMPLE_INDEX_ENV
from conformance.embedded.selection import max_samples

__all__ = [
    "MODE_ENV",
    "SAMPLE_INDEX_ENV",
    "SEED",
    "backward_grads",
    "call",
    "compiled",
    "compiling",
    "cpu_reference_inputs",
    "cpu_samples",
    "device_tensors",
    "error_inputs",
    "grad_inputs",
    "indexed",
    "noting",
    "skip_in_compile_mode",
    "tensor_outputs",
    "to_cpu",
    "to_device",
    "under_test",
]

#: Seed for sample generation and for every op call that draws random numbers.
SEED = 1234


def _limited(samples, limit: int | None) -> list:
    return list(samples if limit is None else itertools.islice(samples, limit))


def cpu_samples(op, dtype: torch.dtype, *, requires_grad: bool = False, reference: bool = False):
    """The op's samples for ``dtype``, generated on the CPU from :data:`SEED`.

    ``reference=True`` adds the OpInfo's reference inputs to the samples. At most
    :func:`~conformance.embedded.selection.max_samples` are returned.

    The OpInfo's sample functions are called directly: ``OpInfo.sample_inputs`` wraps them
    in a tracker that walks the interpreter stack with source context on every call, which
    costs about a third of a second per call under pytest.
    """
    torch.manual_seed(SEED)
    samples = op.sample_inputs_func(op, "cpu", dtype, requires_grad)
    if reference and op.reference_inputs_func is not None:
        extra = op.reference_inputs_func(op, "cpu", dtype, requires_grad)
        samples = itertools.chain(samples, extra)
    return _limited(samples, max_samples())


def cpu_reference_inputs(op, dtype: torch.dtype):
    """The op's reference inputs for ``dtype`` (its samples when it has none), as upstream's
    ``OpInfo.reference_inputs`` gives them, generated on the CPU from :data:`SEED`."""
    torch.manual_seed(SEED)
    make = op.reference_inputs_func or op.sample_inputs_func
    return _limited(make(op, "cpu", dtype, False), max_samples())


def error_inputs(op, device: str):
    """The OpInfo's error inputs, built on ``device`` (several are about device placement)."""
    torch.manual_seed(SEED)
    return list(op.error_inputs_func(op, device))


def indexed(samples) -> Iterator[tuple[int, Any]]:
    """``(index, sample)`` for each sample, or only the one :data:`SAMPLE_INDEX_ENV` names
    (indices stay those of the whole list, so a recorded index runs its sample alone)."""
    only = os.environ.get(SAMPLE_INDEX_ENV, "").strip()
    for index, sample in enumerate(samples):
        if not only or index == int(only):
            yield index, sample


@contextlib.contextmanager
def noting(index: int, sample, kind: str = "sample") -> Iterator[None]:
    """Adds the failing sample's index and summary to any exception, keeping its type.

    The note (``while testing sample 3: ...``) is how the harness records the index."""
    try:
        yield
    except Exception as exc:
        summary = sample.summary() if hasattr(sample, "summary") else str(sample)
        exc.add_note(f"while testing {kind} {index}: {summary}")
        raise


def to_device(sample, device: str | torch.device, *, reference: bool = False):
    """A copy of ``sample`` with every tensor moved to ``device`` (leaves keep requires_grad),
    and a ``device=`` keyword (factory functions: arange, full, randn, ...) naming it."""

    def move(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            return t.detach().to(device).requires_grad_(t.requires_grad)
        return t

    moved = sample.transform(move)
    named = moved.kwargs.get("device")
    if isinstance(named, torch.device):
        moved.kwargs["device"] = torch.device(device)
    elif isinstance(named, str):
        moved.kwargs["device"] = str(device)
    # A reference copy (the CPU computing what the device should) is never compiled.
    return moved if reference else under_test(moved, device)


class _UnderTest(SampleInput):
    """A sample on the device under test: compile mode compiles calls on it. (SampleInput
    has slots, so the mark is a subclass with one more.)"""

    __slots__ = ("device_under_test",)


def under_test(sample, device: str | torch.device):
    """``sample`` marked as the device-under-test's (what :func:`to_device` returns is)."""
    marked = _UnderTest.__new__(_UnderTest)
    for slot in SampleInput.__slots__:
        setattr(marked, slot, getattr(sample, slot))
    marked.device_under_test = torch.device(device).type
    return marked


def compiling() -> bool:
    """Whether the suite runs in compile mode."""
    return os.environ.get(MODE_ENV, "eager") == "compile"


def skip_in_compile_mode(test) -> None:
    """Skip ``test`` (a TestCase) in compile mode: its checks call no op to compile."""
    if compiling():
        test.skipTest("runs eager only: this template calls no op under torch.compile")


def call(fn, sample, **extra):
    """Call ``fn`` on the sample, seeding first so random ops draw the same numbers.

    In compile mode, a call on the device under test runs compiled."""
    torch.manual_seed(SEED)
    run = fn
    if isinstance(sample, _UnderTest) and compiling():
        run = compiled(lambda *args, **kwargs: fn(*args, **kwargs), sample.device_under_test)
    return run(sample.input, *sample.args, **sample.kwargs, **extra)


def compiled(fn, device_type: str):
    """``fn`` (a function or a module) under torch.compile with the device's compile
    backend, as compile mode runs it: a fresh compilation (no cache limit reached, no
    stale guards), the whole graph, static shapes."""
    from conformance.backends import compile_backend

    torch._dynamo.reset()
    return torch.compile(fn, backend=compile_backend(device_type), fullgraph=True, dynamic=False)


def to_cpu(result: Any) -> Any:
    """A snapshot of ``result`` on the CPU: every tensor detached and copied, structure kept.

    Always a copy, also for CPU tensors, so later in-place updates do not reach it.
    """
    return tree_map(
        lambda x: x.detach().to("cpu", copy=True) if isinstance(x, torch.Tensor) else x, result
    )


def tensor_outputs(result: Any) -> list[torch.Tensor]:
    """The tensors in a (possibly nested) result, in order."""
    return [x for x in tree_flatten(result)[0] if isinstance(x, torch.Tensor)]


def device_tensors(sample) -> Iterator[torch.Tensor]:
    """Every tensor of a sample: input, args, kwargs, including ones inside lists."""
    leaves = tree_flatten((sample.input, sample.args, sample.kwargs))[0]
    return (x for x in leaves if isinstance(x, torch.Tensor))


def grad_inputs(sample) -> list[torch.Tensor]:
    """The sample's tensors that require grad (the leaves a backward pass differentiates)."""
    return [t for t in device_tensors(sample) if t.requires_grad]


def backward_grads(result, sample) -> list:
    """Grads of the sample's leaves for a seeded random cotangent, copied to the CPU.

    Differentiates the result's outputs that require grad, after the OpInfo's
    ``output_process_fn_grad``; leaves an output does not reach get ``None``. Returns ``[]``
    when nothing is differentiable. The cotangent is drawn on the CPU, so a device and the
    CPU get the same one.
    """
    inputs = grad_inputs(sample)
    outputs = [t for t in tensor_outputs(sample.output_process_fn_grad(result)) if t.requires_grad]
    if not inputs or not outputs:
        return []
    generator = torch.Generator().manual_seed(SEED)
    cotangents = [
        torch.randn(t.shape, dtype=t.dtype, generator=generator).to(t.device) for t in outputs
    ]
    grads = torch.autograd.grad(outputs, inputs, cotangents, allow_unused=True, retain_graph=True)
    return [to_cpu(g) for g in grads]
