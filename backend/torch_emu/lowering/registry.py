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
    """One registered kernel: ``overload`` like ``"aten::add.Tensor"``, ``kind`` ``"native"``
    (C++ in the core) or ``"python"``, and ``source`` as ``"torch_emu/lowering/x.py:LINE"``."""

    overload: str
    kind: str
    source: str


_records: dict[str, Lowering] = {}
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


def _register(overload: str, kernel: Callable, source: str) -> None:
    global _library
    op = resolve(overload)
    _check_lowerable(overload, op)
    if _library is None:
        _library = torch.library.Library("aten", "IMPL")
    _library.impl(
        op._schema.name.partition("::")[2]
        + (f".{op._overloadname}" if op._overloadname != "default" else ""),
        kernel,
        "PrivateUse1",
    )
    _records[overload] = Lowering(overload, "python", source)


def lower(*overloads: str, pre: Callable | None = None, post: Callable | None = None) -> None:
    """Declare lowerings whose kernels are derived from each overload's schema.

    ``pre(cpu_args, cpu_kwargs)`` may rewrite the CPU-side arguments before the CPU kernel
    runs; ``post(cpu_outputs)`` may modify the CPU-side outputs in place afterwards.
    Both exist for the planted bugs; regular lowerings pass neither.
    """
    from torch_emu.lowering.kernels import derived_kernel

    source = _caller_source(2)
    for overload in overloads:
        _register(overload, derived_kernel(resolve(overload), pre=pre, post=post), source)


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
