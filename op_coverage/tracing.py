"""Which ATen overloads a block of code dispatched on the device under test.

What is recorded, precisely: every ATen overload that reaches the ``Python`` dispatch key
while the block runs (so after autograd and after CompositeImplicitAutograd decompositions:
``matmul`` shows up as ``mm`` or ``dot``) and that has a tensor argument, a tensor result or
a ``device=`` argument on the traced device. Kernels that a backend kernel calls internally
(``sin`` → ``sin.out`` through a CompositeExplicitAutograd default kernel, the CPU ops inside
a Python lowering) are below the mode and are not recorded; the overload a missing-lowering
error names is in the run's ``detail`` instead. An op that raises is recorded when its
arguments name the device (it was dispatched there). Backward ops are recorded too: the
autograd engine carries the mode into its threads.

How: a ``TorchDispatchMode`` whose handler checks the device only for overloads it has not
yet recorded; once an overload is recorded, later calls cost one set lookup on top of the
mode's own dispatch. ``bench/op_coverage.py`` measures the overhead against untraced runs:
on emu's embedded smoke selection the time spent in tests grew 3% (166 s -> 172 s, same
outcomes); on a loop that does nothing but run OpInfo samples and compare them with CPU it
grows 30-45%, because the mode's own round trip through Python (15-25 us per op on a loaded
2-core machine) is paid by every op, CPU ops included. The profiler's RecordFunction hooks
were tried and rejected: no device filter, and far slower per op with input recording on.

The mode must not change what it observes. A dispatch mode's handler runs below every key
above ``Python``, with those keys excluded, and so do the calls it makes. For ATen ops that
is harmless: their ``ADInplaceOrView`` and autocast kernels already ran above. Ops of other
namespaces (``prims``, custom ops written in Python) have none of their own there: without
the mode, the ATen ops *inside* their kernels make the views, bump version counters and
autocast. So the handler runs such an op with those keys let through again, as the op would
run untraced (``_untraced_call``); without this, ``torch._refs.expand`` under strict refs
mode returned a tensor that was not a view of its input when traced, and one when not.

Ops that ran on the backend's CPU fallback come from the backend itself
(``fallback_counts()``), compared before and after the block.

A test may run ops in other processes (the ranks of a distributed test): those trace their
own part with :func:`trace_ops` for the device :func:`tracing_device` names, and the test
process adds what they saw to its trace with :func:`note_ops`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from op_coverage.names import normalize_overload, overload_of

__all__ = ["OpTrace", "note_ops", "trace_ops", "tracing_device"]

_NOT_TRACED_BY_DEFAULT = ("cpu", "meta")


@dataclass
class OpTrace:
    """What :func:`trace_ops` saw. Filled in when the block ends (also when it raises)."""

    device_type: str | None
    ops: list[str] = field(default_factory=list)  # sorted ATen overloads, "aten::add.Tensor"
    fallback: list[str] = field(default_factory=list)  # sorted overloads that fell back to CPU


def _make_mode(device_type: str | None) -> Any:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    Tensor = torch.Tensor
    renamed = _known_devices()

    # Tensor.is_cpu / is_meta are C properties; building a torch.device per check is not.
    if device_type is None:

        def on_device(value: Any) -> bool:
            return not (value.is_cpu or value.is_meta)

    elif device_type == "cpu":

        def on_device(value: Any) -> bool:
            return value.is_cpu

    elif device_type == "meta":

        def on_device(value: Any) -> bool:
            return value.is_meta

    else:

        def on_device(value: Any) -> bool:
            return value.device.type == device_type

    def names_device(values: Any) -> bool:
        for value in values:
            if isinstance(value, Tensor):
                if on_device(value):
                    return True
            elif isinstance(value, (list, tuple)):
                if names_device(value):
                    return True
            elif isinstance(value, torch.device):
                if device_type is None and value.type not in _NOT_TRACED_BY_DEFAULT:
                    return True
                if value.type == device_type:
                    return True
            elif isinstance(value, str) and value:
                # device="emu:0" arrives as a string in factory kwargs
                kind = value.split(":", 1)[0]
                if kind == device_type or (device_type is None and kind in renamed):
                    return True
        return False

    seen: set[Any] = set()
    calls: dict[Any, Callable[..., Any]] = {}

    class _Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
            if kwargs is None:
                kwargs = {}
            call = calls.get(func)
            if call is None:
                call = calls[func] = func if func.namespace == "aten" else _untraced_call(func)
            if func in seen:  # the common case: one set lookup
                return call(*args, **kwargs)
            if names_device(args) or (kwargs and names_device(kwargs.values())):
                seen.add(func)
                return call(*args, **kwargs)
            result = call(*args, **kwargs)
            # With a tensor argument the result lives where the arguments do (a move to
            # the device names it in device=); only tensor-free calls need their result read.
            if not any(isinstance(arg, Tensor) for arg in args) and names_device(
                result if isinstance(result, (list, tuple)) else (result,)
            ):
                seen.add(func)
            return result

    recorder = _Recorder()
    recorder.seen = seen
    recorder.device_type = device_type
    recorder.noted = set()  # overloads other processes of the test dispatched (note_ops)
    return recorder


#: The recorders of the traces open in this process, innermost last.
_open: list[Any] = []


def tracing_device() -> tuple[bool, str | None]:
    """(whether a trace is open in this process, the device type it traces)."""
    return (True, _open[-1].device_type) if _open else (False, None)


def note_ops(overloads: Iterable[str]) -> None:
    """Add ATen overloads another process of the test dispatched on the traced device (as
    its own trace named them) to every trace open here."""
    names = {normalize_overload(name) for name in overloads}
    for recorder in _open:
        recorder.noted.update(names)


def _untraced_call(func: Any) -> Callable[..., Any]:
    """``func`` called as it runs without the mode: the keys above ``Python`` that the op
    has no kernel of its own for (``ADInplaceOrView``, autocast) are let through for the
    ATen ops its kernel calls, which would otherwise run with them excluded."""
    import torch

    keys = torch._C.DispatchKey
    candidates = [keys.ADInplaceOrView] + [
        key for name, key in keys.__members__.items() if name.startswith("Autocast")
    ]
    name = func.name()
    try:
        lifted = [
            key
            for key in candidates
            if not torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
        ]
    except RuntimeError:  # not a dispatcher operator (prim::device, a TorchScript op)
        return func
    if not lifted:
        return func

    def call(*args: Any, **kwargs: Any) -> Any:
        exclude = torch._C._dispatch_tls_local_exclude_set()
        for key in lifted:
            exclude = exclude.remove(key)
        include = torch._C._dispatch_tls_local_include_set()
        with torch._C._ForceDispatchKeyGuard(include, exclude):
            return func(*args, **kwargs)

    return call


def _known_devices() -> tuple[str, ...]:
    import torch

    name = torch._C._get_privateuse1_backend_name()
    return (name,) if name not in _NOT_TRACED_BY_DEFAULT else ()


def _fallback_snapshot(counts: Callable[[], Any] | None) -> dict[str, int]:
    if counts is None:
        return {}
    value = counts() or {}
    if isinstance(value, Mapping):
        return {str(k): int(v) for k, v in value.items()}
    return {str(k): 1 for k in value}


@contextmanager
def trace_ops(
    device_type: str | None = None,
    *,
    fallback_counts: Callable[[], Any] | None = None,
) -> Iterator[OpTrace]:
    """Record the ATen overloads dispatched on ``device_type`` inside the block.

    ``device_type`` None traces every device but ``cpu`` and ``meta`` (what a PrivateUse1
    run wants); pass ``"cpu"`` to trace a CPU baseline run. ``fallback_counts`` is the
    backend's counter (a mapping overload -> count, or a list of overloads); the overloads
    whose count grew inside the block are reported in ``fallback``. The yielded
    :class:`OpTrace` is complete when the block has ended, whether or not it raised.
    """
    trace = OpTrace(device_type)
    before = _fallback_snapshot(fallback_counts)
    mode = _make_mode(device_type)
    _open.append(mode)
    try:
        with mode:
            yield trace
    finally:
        _open.remove(mode)
        seen = {overload_of(func) for func in mode.seen if func.namespace == "aten"}
        trace.ops = sorted(seen | mode.noted)
        after = _fallback_snapshot(fallback_counts)
        trace.fallback = sorted(
            normalize_overload(op) for op, count in after.items() if count > before.get(op, 0)
        )
