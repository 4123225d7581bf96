"""The lowering registry: every Python lowering of emu is declared here once.

A lowering is an ATen overload plus the kernel that runs it on emu tensors.
``lower()`` declares lowerings whose kernel is derived from the schema (run the
CPU kernel on zero-copy CPU aliases, see ``kernels.py``); ``lowering()`` is the
decorator for hand-written kernels.  Both record where the declaration is, so
that ``torch_emu.lowerings()`` can list each lowering with its source line
without importing any test code.

The registry refuses two kinds of ops, because a backend kernel for them is
always wrong: CompositeImplicitAutograd ops (a kernel would bypass their
decomposition, and with it autograd) and view ops (the kernel would return a
copy, breaking aliasing; the native core implements the few views that need
a backend kernel).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["Lowering", "LoweringError", "lower", "lowering", "records", "resolve"]

_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class LoweringError(ValueError):
    """A lowering declaration that cannot be registered (unknown, CIA, view, duplicate)."""


@dataclass(frozen=True)
class Lowering:
    """One registered kernel: ``overload`` like ``"aten::add.Tensor"``; ``kind`` ``"native"``
    for the structural C++ kernels of the core or ``"python"`` for a lowering declared in
    ``torch_emu/lowering/``; ``source`` as ``"torch_emu/lowering/x.py:LINE"``; ``strategy``
    ``"structural"`` (native), ``"derived"`` (the core's generic CPU-alias kernel, derived
    from the schema) or ``"custom"`` (a hand-written Python kernel)."""

    overload: str
    kind: str
    source: str
    strategy: str = "derived"


_records: dict[str, Lowering] = {}
_register_derived = torch.ops.emu.register_derived.default
_library: torch.library.Library | None = None


def resolve(overload: str) -> torch._ops.OpOverload:
    """Return the OpOverload for ``"aten::name.overload"`` (``"aten::name"`` = default)."""
    namespace, sep, rest = overload.partition("::")
    if not sep or namespace != "aten":
        raise LoweringError(f"{overload!r}: expected 'aten::name' or 'aten::name.overload'")
    name, _, overload_name = rest.partition(".")
    try:
        packet = getattr(torch.ops.aten, name)
        return getattr(packet, overload_name or "default")
    except (AttributeError, RuntimeError) as exc:
        raise LoweringError(f"{overload!r}: no such ATen overload") from exc


def _check_lowerable(overload: str, op: torch._ops.OpOverload) -> None:
    qualified = op.name()
    if torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CompositeImplicitAutograd"):
        raise LoweringError(
            f"{overload}: is CompositeImplicitAutograd; a backend kernel would bypass its "
            "decomposition and autograd. Lower the ops it decomposes into instead."
        )
    for ret in op._schema.returns:
        if ret.alias_info is not None and not ret.alias_info.is_write:
            raise LoweringError(
                f"{overload}: is a view op; a lowering would return a copy instead of an alias. "
                "View ops belong in the native core."
            )
    if overload in _records:
        raise LoweringError(f"{overload}: already lowered at {_records[overload].source}")


@functools.cache
def _relative(filename: str) -> str:
    return os.path.relpath(os.path.abspath(filename), _PACKAGE_ROOT)


def _caller_source(depth: int) -> str:
    frame = sys._getframe(depth)
    return f"{_relative(frame.f_code.co_filename)}:{frame.f_lineno}"


def _register(overload: str, kernel: Callable | None, source: str) -> None:
    """Register ``kernel`` for PrivateUse1, or the core's derived C++ kernel when it is None."""
    global _library
    op = resolve(overload)
    _check_lowerable(overload, op)
    if kernel is None:
        path, _, line = source.rpartition(":")
        _register_derived(overload, path, int(line))
        strategy = "derived"
    else:
        if _library is None:
            _library = torch.library.Library("aten", "IMPL")
        name = overload.removeprefix("aten::")
        _library.impl(name, kernel, "PrivateUse1")
        strategy = "custom"
    _records[overload] = Lowering(overload, "python", source, strategy)


def lower(*overloads: str, pre: Callable | None = None, post: Callable | None = None) -> None:
    """Declare lowerings whose kernels are derived from each overload's schema.

    The kernel runs the CPU kernel on zero-copy CPU aliases of the emu arguments
    (see ``kernels.py``); the native core provides it in C++.  ``pre(cpu_args,
    cpu_kwargs)`` may rewrite the CPU-side arguments before the CPU kernel runs and
    ``post(cpu_outputs)`` may modify its outputs in place; both exist for the planted
    bugs and switch the lowering to the Python version of the derived kernel.
    """
    source = _caller_source(2)
    for overload in overloads:
        kernel = None
        if pre is not None or post is not None:
            from torch_emu.lowering.kernels import derived_kernel

            kernel = derived_kernel(resolve(overload), pre=pre, post=post)
        _register(overload, kernel, source)


def lowering(overload: str) -> Callable[[Callable], Callable]:
    """Decorator: register the decorated function as the emu kernel of ``overload``."""
    source = _caller_source(2)

    def decorate(kernel: Callable) -> Callable:
        _register(overload, kernel, source)
        return kernel

    return decorate


def records() -> list[Lowering]:
    """The Python lowerings registered so far, in declaration order."""
    return list(_records.values())
