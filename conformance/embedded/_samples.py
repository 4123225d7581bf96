"""Samples and results shared by the embedded suite's templates.

Samples are generated on the CPU from a fixed seed and then copied to the device under
test, so the device and the CPU reference see exactly the same values, and sample
generation does not depend on the device's random number generator.

In compile mode (``CONFORMANCE_MODE=compile``, set by ``conformance run --mode compile``)
:func:`call` runs the op under ``torch.compile`` with the device's compile backend
(``fullgraph=True``, static shapes) whenever the sample is on the device under test, that
is, came from :func:`to_device`; references computed from the CPU samples stay eager.
Templates that test no op call (error inputs, forward-mode AD, optimizers) skip with
``runs eager only``.

Each function called so keeps one compiled callable for the worker's life (see
:class:`_CompiledCalls`): Dynamo compiles it on the first call and again whenever its
guards (dtypes, shapes, strides, requires_grad, constants, global state) reject every
graph compiled so far, so a call with the inputs of an earlier one (a template after
another on the same op and samples) runs the earlier graph instead of compiling anew.
Every call still runs compiled: Dynamo's recompile limits are lifted, and reaching one
anyway fails the call instead of running it eagerly.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.testing._internal.opinfo.core import OpInfo, SampleInput
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map

from conformance.embedded import MODE_ENV, SAMPLE_INDEX_ENV
from conformance.embedded.selection import max_samples

__all__ = [
    "MODE_ENV",
    "SAMPLE_INDEX_ENV",
    "SEED",
    "backward_grads",
    "call",
    "compile_settings",
    "compiled",
    "compiled_calls",
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

    In compile mode, a call on the device under test runs compiled (through the worker's
    :data:`compiled_calls`)."""
    torch.manual_seed(SEED)
    if isinstance(sample, _UnderTest) and compiling():
        args, kwargs = _arguments(sample.input, *sample.args, **sample.kwargs, **extra)
        return compiled_calls.call(fn, sample.device_under_test, args, kwargs)
    return fn(sample.input, *sample.args, **sample.kwargs, **extra)


def _arguments(*args, **kwargs) -> tuple[tuple, dict]:
    return args, kwargs


def compiled(fn, device_type: str):
    """``fn`` (a function or a module) under torch.compile with the device's compile
    backend, as compile mode runs it: a fresh compilation (no cache limit reached, no
    stale guards), the whole graph, static shapes."""
    from conformance.backends import compile_backend

    torch._dynamo.reset()
    return torch.compile(fn, backend=compile_backend(device_type), fullgraph=True, dynamic=False)


#: Dynamo's recompile limits while compile mode calls an op: no op's calls come near them.
RECOMPILE_LIMIT = 1_000_000


def _forwarding(fn) -> Callable:
    """A function calling ``fn``, with a code object of its own: Dynamo keeps compiled
    graphs (and counts recompiles) per code object, so a closure's shared code would
    pool every op's graphs in one cache."""

    def forward(*args, **kwargs):
        return fn(*args, **kwargs)

    forward.__code__ = forward.__code__.replace(co_name="compiled_call")
    return forward


def _callee(fn):
    """The function an OpInfo calls (``OpInfo.__call__`` is ``self.op(*args, **kwargs)``),
    else ``fn``. Compiling it directly spares Dynamo tracing into the OpInfo and guarding
    the object: a third of an op's compile time."""
    if isinstance(fn, OpInfo) and type(fn).__call__ is OpInfo.__call__:
        return fn.op
    return fn


def _unguarded(args: tuple, kwargs: dict) -> tuple:
    """What the compiler sees of the tensors in a call that Dynamo's guards leave out:
    whether each is a leaf (in-place ops on a leaf that requires grad fail while tracing)
    and a view, and its storage offset. Calls that differ in these get compiled callables
    of their own, so each compiles as it would have alone."""
    return tuple(
        (t.is_leaf, t._is_view(), t.storage_offset() if t.layout == torch.strided else None)
        for t in tree_leaves((args, kwargs))
        if isinstance(t, torch.Tensor)
    )


class _CompiledCalls:
    """The compiled callables of a worker's compile-mode op calls.

    One per function called (an OpInfo's op, a method or operator variant), compile backend
    and :func:`_unguarded` key, kept across the worker's tests: the templates call the same
    ops on the same samples (the gradient template's calls are the variant template's, the
    ``out=`` templates start with the forward template's), so a template's calls often find
    their graphs compiled. Dynamo's guards decide when a callable compiles again.

    A call Dynamo cannot compile raises as a fresh compilation does (``fullgraph=True``),
    and its callable is dropped, so nothing a failed compilation left behind reaches a later
    call. Once the callables have compiled :attr:`max_graphs` graphs (about 250 KB each),
    Dynamo is reset and they are dropped, which bounds a long run's memory.
    """

    def __init__(self, max_graphs: int = 2000) -> None:
        self.max_graphs = max_graphs
        #: Graphs compiled by the callables held (counted by Dynamo's ``unique_graphs``).
        self.graphs = 0
        self._callables: dict[tuple, tuple[Any, Callable]] = {}
        self._backends: dict[tuple[str, str], str] = {}

    def __len__(self) -> int:
        return len(self._callables)

    def clear(self) -> None:
        """Drops every callable and resets Dynamo (what the callables compiled goes too)."""
        torch._dynamo.reset()
        self._callables.clear()
        self.graphs = 0

    def _backend(self, device_type: str) -> str:
        from conformance.backends import COMPILE_BACKEND_ENV, compile_backend

        key = (device_type, os.environ.get(COMPILE_BACKEND_ENV, ""))
        if key not in self._backends:
            self._backends[key] = compile_backend(device_type)
        return self._backends[key]

    def compiled(self, fn, device_type: str, args: tuple, kwargs: dict) -> Callable:
        """The compiled callable a call of ``fn`` on ``args`` and ``kwargs`` runs."""
        if self.graphs >= self.max_graphs:
            self.clear()
        backend = self._backend(device_type)
        # The function is held with its callable, so its id is not reused while it is.
        key = (id(fn), backend, _unguarded(args, kwargs))
        held = self._callables.get(key)
        if held is None or held[0] is not fn:
            run = torch.compile(_forwarding(fn), backend=backend, fullgraph=True, dynamic=False)
            held = self._callables[key] = (fn, run)
        return held[1]

    def call(self, fn, device_type: str, args: tuple, kwargs: dict) -> Any:
        """``fn(*args, **kwargs)`` compiled."""
        if torch._C._len_torch_dispatch_stack():
            # Dynamo compiles no frame under a dispatch mode, and marks the code to skip
            # for good: a throwaway compilation keeps that to this call.
            return compiled(fn, device_type)(*args, **kwargs)
        from torch._dynamo.utils import counters

        run = self.compiled(_callee(fn), device_type, args, kwargs)
        graphs = counters["stats"]["unique_graphs"]
        try:
            with compile_settings():
                return run(*args, **kwargs)
        except Exception as exc:
            if _from_compiler(exc):
                self._drop(run)
            raise
        finally:
            self.graphs += max(0, counters["stats"]["unique_graphs"] - graphs)

    def _drop(self, run: Callable) -> None:
        for key, (_, held) in list(self._callables.items()):
            if held is run:
                del self._callables[key]


@contextlib.contextmanager
def compile_settings() -> Iterator[None]:
    """How compile mode runs Dynamo: recompile limits lifted, with a hard failure should
    one be reached anyway (never a silent eager run), and without the diagnostics nothing
    here reads (:func:`_guard_latency_unmeasured`, :func:`_structured_trace_to_torch_only`).
    """
    with (
        torch._dynamo.config.patch(
            recompile_limit=RECOMPILE_LIMIT,
            accumulated_recompile_limit=RECOMPILE_LIMIT,
            fail_on_recompile_limit_hit=True,
        ),
        _guard_latency_unmeasured(),
        _structured_trace_to_torch_only(),
    ):
        yield


@contextlib.contextmanager
def _guard_latency_unmeasured() -> Iterator[None]:
    """Dynamo without its guard latency measurement, a compile metric nothing here reads.

    After building a graph's guards, Dynamo times one evaluation of them for its compile
    metrics, first evicting the CPU caches by writing a fresh 32 MB buffer: 8,000 page
    faults, about 16 ms of each compile on 2 cores, a third of what an op's compilation
    costs. Compile mode runs thousands of compilations and reads no compile metrics; the
    guards themselves are built, checked against the frame and evaluated as always.
    """
    from torch._dynamo import guards

    measure = getattr(guards, "profile_guard_manager", None)
    if measure is None:  # another torch: nothing to leave out
        yield
        return
    guards.profile_guard_manager = _unmeasured
    try:
        yield
    finally:
        guards.profile_guard_manager = measure


def _unmeasured(*args: Any) -> float:
    return 0.0


@contextlib.contextmanager
def _structured_trace_to_torch_only() -> Iterator[None]:
    """torch's structured trace (``torch.__trace``, what ``TORCH_TRACE`` writes for tlparse)
    without the handlers pytest's log capture attaches to it.

    torch computes a trace event (JSON metadata, graph listings) only when the trace
    logger has a handler, and pytest attaches its capture handlers to every logger that
    does not propagate, this one included: each compilation then renders some forty
    events (about a tenth of its time) into the test's captured log, which no report
    shows. torch's own handler (``TORCH_TRACE``) stays.
    """
    trace = logging.getLogger("torch.__trace")
    foreign = [h for h in trace.handlers if not type(h).__module__.startswith("torch.")]
    for handler in foreign:
        trace.removeHandler(handler)
    try:
        yield
    finally:
        for handler in foreign:
            trace.addHandler(handler)


def _from_compiler(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by torch.compile (Dynamo or the backend's compiler)."""
    return type(exc).__module__.startswith(("torch._dynamo", "torch._inductor"))


#: The worker's compiled op calls (compile mode).
compiled_calls = _CompiledCalls()


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
