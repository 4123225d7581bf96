"""Kernels derived from an op's schema: run the CPU kernel on zero-copy CPU aliases.

emu memory is host memory, so an emu tensor can be viewed as a CPU tensor
without copying (``torch.ops.emu.cpu_aliases``).  A derived kernel swaps every
emu tensor argument for its alias and calls the CPU kernel, then:

- arguments the schema marks as written (in-place ``self``, ``out=``) already
  hold the result, because the aliases share their memory; the kernel returns
  the emu tensors themselves, as the schema's alias annotations promise;
- fresh results are copied onto the device of the first emu argument;
- ``out=`` tensors that must be resized follow upstream's ``resize_output``
  semantics: the CPU kernel runs into CPU temporaries shaped like ``out`` (so it
  emits upstream's warning), then the emu tensor is resized and filled;
- a ``Generator`` argument (or the device's default generator when none is
  given) is swapped for a CPU generator carrying the same state, and the
  advanced state is written back, so draws come from the emu generator.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["derived_kernel", "device_generator_state", "on_device"]

_aliases = torch.ops.emu.cpu_aliases.default
_to_device = torch.ops.emu.to_device.default
_to_device_list = torch.ops.emu.to_device_list.default
_get_rng_state = torch.ops.emu.get_rng_state.default
_set_rng_state = torch.ops.emu.set_rng_state.default
_set_storage = torch.ops.aten.set_.source_Storage_storage_offset
_Tensor = torch.Tensor


def _alias_args(args: tuple, kwargs: dict) -> tuple[list, dict, int]:
    """Replace emu tensors (also inside lists) by CPU aliases; return the device index too."""
    device = -1
    new_args = list(args)
    for i, a in enumerate(new_args):
        if isinstance(a, _Tensor):
            if not a.is_cpu:
                if device < 0:
                    device = a.device.index
                new_args[i] = _aliases([a])[0]
        elif isinstance(a, (list, tuple)) and a and isinstance(a[0], _Tensor | None):
            if any(t is not None and not t.is_cpu for t in a):
                if device < 0:
                    device = next(t for t in a if t is not None and not t.is_cpu).device.index
                new_args[i] = [None if t is None else _aliases([t])[0] for t in a]
    new_kwargs = kwargs
    if kwargs:
        new_kwargs = {}
        for k, a in kwargs.items():
            if isinstance(a, _Tensor) and not a.is_cpu:
                if device < 0:
                    device = a.device.index
                a = _aliases([a])[0]
            new_kwargs[k] = a
    return new_args, new_kwargs, device


def on_device(value: Any, device: int) -> Any:
    """Copy CPU tensors (also inside tuples and lists) onto emu device ``device``."""
    if isinstance(value, _Tensor):
        return _to_device(value, device)
    if isinstance(value, (tuple, list)):
        return type(value)(on_device(v, device) for v in value)
    return value


def device_generator_state(generator: torch.Generator | None, device: int):
    """Return (cpu_generator, write_back) for drawing from an emu generator on the CPU."""
    state = _get_rng_state(device) if generator is None else generator.get_state()
    cpu = torch.Generator()
    cpu.set_state(state)

    def write_back() -> None:
        if generator is None:
            _set_rng_state(device, cpu.get_state())
        else:
            generator.set_state(cpu.get_state())

    return cpu, write_back


class _Plan:
    """What the schema says about arguments and results, computed once per op."""

    def __init__(self, op: torch._ops.OpOverload) -> None:
        schema = op._schema
        self.op = op
        self.written: list[tuple[int, str]] = []  # (position, name) of mutated arguments
        self.generator: tuple[int, str] | None = None
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is not None and arg.alias_info.is_write:
                self.written.append((i, arg.name))
            if "Generator" in str(arg.type):
                self.generator = (i, arg.name)
        written_sets = {
            frozenset(schema.arguments[i].alias_info.before_set): (i, name)
            for i, name in self.written
        }
        # For each return: the mutated argument it aliases, or None for a fresh result.
        self.returns: list[tuple[int, str] | None] = [
            written_sets.get(frozenset(r.alias_info.before_set)) if r.alias_info else None
            for r in schema.returns
        ]
        self.is_out = bool(self.written) and all(
            schema.arguments[i].kwarg_only for i, _ in self.written
        )


def _arg(args: tuple | list, kwargs: dict, where: tuple[int, str]) -> Any:
    pos, name = where
    return args[pos] if pos < len(args) else kwargs.get(name)


def _set_arg(args: list, kwargs: dict, where: tuple[int, str], value: Any) -> None:
    pos, name = where
    if pos < len(args):
        args[pos] = value
    else:
        kwargs[name] = value


def _sync_metadata(target: torch.Tensor, alias: torch.Tensor) -> None:
    """The CPU kernel resized an alias within its memory: give the emu tensor the same shape."""
    if target.shape != alias.shape or target.stride() != alias.stride():
        _set_storage(
            target, target.untyped_storage(), target.storage_offset(), alias.shape, alias.stride()
        )


def _run_out_via_temporaries(
    op, args: list, kwargs: dict, plan: _Plan, originals: list, post: Callable | None
) -> Any:
    """Run into CPU temporaries shaped like each ``out``, then resize and fill the emu outs."""
    temporaries = []
    for where, original in zip(plan.written, originals, strict=True):
        tmp = torch.empty_strided(original.shape, original.stride(), dtype=original.dtype)
        _set_arg(args, kwargs, where, tmp)
        temporaries.append(tmp)
    with warnings.catch_warnings():
        # The first attempt already emitted upstream's resize warning.
        warnings.simplefilter("ignore")
        result = op(*args, **kwargs)
    if post is not None:
        post(result)
    for original, tmp in zip(originals, temporaries, strict=True):
        if original.shape != tmp.shape:
            original.resize_(tmp.shape)
        if original.stride() != tmp.stride():
            _set_storage(
                original, original.untyped_storage(), original.storage_offset(),
                tmp.shape, tmp.stride(),
            )
        original.copy_(tmp)
    return result


def derived_kernel(
    op: torch._ops.OpOverload, *, pre: Callable | None = None, post: Callable | None = None
) -> Callable:
    """Build the emu kernel of ``op`` from its schema (see the module docstring)."""
    plan = _Plan(op)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        cargs, ckwargs, device = _alias_args(args, kwargs)
        if device < 0:  # only CPU tensors (a factory routed here by device=): current device
            device = torch.ops.emu.current_device.default()
        if pre is not None:
            pre(cargs, ckwargs)
        write_back = None
        if plan.generator is not None:
            cpu_gen, write_back = device_generator_state(_arg(args, kwargs, plan.generator), device)
            _set_arg(cargs, ckwargs, plan.generator, cpu_gen)
        try:
            result = op(*cargs, **ckwargs)
        except RuntimeError as exc:
            if not plan.is_out or "not resizable" not in str(exc):
                raise
            originals = [_arg(args, kwargs, w) for w in plan.written]
            if write_back is not None:
                cpu_gen, write_back = device_generator_state(
                    _arg(args, kwargs, plan.generator), device
                )
                _set_arg(cargs, ckwargs, plan.generator, cpu_gen)
            result = _run_out_via_temporaries(op, cargs, ckwargs, plan, originals, post)
        else:
            if post is not None:
                post(result)
            for where in plan.written:
                original = _arg(args, kwargs, where)
                alias = _arg(cargs, ckwargs, where)
                if original is not None and alias is not original:
                    _sync_metadata(original, alias)
        if write_back is not None:
            write_back()
        if not plan.written:
            return on_device(result, device)
        if not plan.returns:
            return None
        outs = [
            _arg(args, kwargs, where) if where is not None else on_device(r, device)
            for where, r in zip(
                plan.returns, result if isinstance(result, tuple) else (result,), strict=True
            )
        ]
        return outs[0] if len(plan.returns) == 1 else tuple(outs)

    kernel.__name__ = f"emu_{op._schema.name.partition('::')[2]}_{op._overloadname}"
    return kernel
