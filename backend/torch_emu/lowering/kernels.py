"""Kernels derived from an op's schema, in Python: run the CPU kernel on CPU aliases.

This is the Python twin of the core's ``DerivedKernel`` (csrc/emu_core.cpp), which
runs every plain ``lower(...)`` declaration.  The Python version serves the
lowerings that need Python around the same steps: hand-written kernels that
delegate to it, and lowerings with the planted bugs' ``pre``/``post`` hooks.

emu memory is host memory, so an emu tensor can be viewed as a CPU tensor
without copying (``torch.ops.emu.cpu_aliases``; read-only for arguments the kernel
only reads, so lazy copy-on-write inputs stay lazy).  A derived kernel swaps every
emu tensor argument for its alias and calls the CPU kernel, then:

- arguments the schema marks as written (in-place ``self``, ``out=``) already
  hold the result, because the aliases share their memory; the kernel returns
  the emu tensors themselves, as the schema's alias annotations promise;
- fresh results are copied onto the device of the first emu argument;
- ``out=`` tensors that must be resized follow upstream's ``resize_output``
  semantics (and warning): the CPU kernel resizes the alias, which the core
  made resizable through the CPU allocator, and the emu tensor follows;
- a ``Generator`` argument (or the device's default generator when none is
  given) is swapped for a CPU generator carrying the same state, and the
  advanced state is written back, so draws come from the emu generator;
- tensors from two devices are rejected as on CUDA (0-dim CPU tensors are scalars).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["derived_kernel", "device_generator_state", "on_device"]


class _Plan:
    """What the schema says about arguments and results, computed once per op."""

    def __init__(self, op: torch._ops.OpOverload) -> None:
        schema = op._schema
        self.op = op
        self.written: list[tuple[int, str]] = []  # (position, name) of mutated arguments
        self.generator: tuple[int, str] | None = None
        self.tensor_positions: list[int] = []  # positional Tensor / Tensor? arguments
        self.tensor_names: list[str] = []  # keyword-only Tensor arguments (out=)
        self.list_positions: list[int] = []  # Tensor[] / Tensor?[] arguments
        for i, arg in enumerate(schema.arguments):
            kind = str(arg.type)
            if kind in ("Tensor", "Optional[Tensor]"):
                (self.tensor_names if arg.kwarg_only else self.tensor_positions).append(
                    i if not arg.kwarg_only else arg.name
                )
            elif kind in ("List[Tensor]", "List[Optional[Tensor]]"):
                self.list_positions.append(i)
            if arg.alias_info is not None and arg.alias_info.is_write:
                self.written.append((i, arg.name))
            if "Generator" in str(arg.type):
                self.generator = (i, arg.name)
        # Only written arguments get writable aliases: a copy-on-write input that is
        # only read stays lazy (see cpu_alias in the core).
        # native_batch_norm updates its running stats without marking them written.
        unannotated = [
            (i, a.name)
            for i, a in enumerate(schema.arguments)
            if a.name in ("running_mean", "running_var")
        ]
        self.written_at = frozenset(i for i, _ in self.written + unannotated)
        self.written_names = frozenset(name for _, name in self.written + unannotated)
        written_sets = {
            frozenset(schema.arguments[i].alias_info.before_set): (i, name)
            for i, name in self.written
        }
        # For each return: the mutated argument it aliases, or None for a fresh result.
        self.returns: list[tuple[int, str] | None] = [
            written_sets.get(frozenset(r.alias_info.before_set)) if r.alias_info else None
            for r in schema.returns
        ]


# The raw C++ entry points (``OpOverload._op``) skip a Python call layer: these
# run on every lowered call.
_aliases = torch.ops.emu.cpu_aliases.default._op
_to_device = torch.ops.emu.to_device.default._op
_current_device = torch.ops.emu.current_device.default._op
_get_rng_state = torch.ops.emu.get_rng_state.default._op
_set_rng_state = torch.ops.emu.set_rng_state.default._op
_set_storage = torch.ops.aten.set_.source_Storage_storage_offset._op
_Tensor = torch.Tensor


def _alias_args(plan: _Plan, args: tuple, kwargs: dict) -> tuple[list, dict, int]:
    """Replace emu tensors (also inside tensor lists) by CPU aliases; also return the index
    of the first emu device seen, or -1 when every tensor is on the CPU."""
    new_args = list(args)
    # Tensor-typed arguments can arrive as None or, for wrapped numbers, as Python scalars.
    positions = [
        i
        for i in plan.tensor_positions
        if i < len(args) and isinstance(args[i], _Tensor) and not args[i].is_cpu
    ]
    names = (
        [
            n
            for n in plan.tensor_names
            if isinstance(kwargs.get(n), _Tensor) and not kwargs[n].is_cpu
        ]
        if kwargs
        else ()
    )
    device = -1
    if positions or names:
        first = args[positions[0]] if positions else kwargs[names[0]]
        device = first.device.index
        _check_one_device(device, args, kwargs, plan)
        written = [i in plan.written_at for i in positions]
        written += [n in plan.written_names for n in names]
        aliases = _aliases([args[i] for i in positions] + [kwargs[n] for n in names], written)
        for i, alias in zip(positions, aliases[: len(positions)], strict=True):
            new_args[i] = alias
        if names:
            kwargs = dict(kwargs)
            for n, alias in zip(names, aliases[len(positions) :], strict=True):
                kwargs[n] = alias
    for i in plan.list_positions:
        if i < len(args) and any(t is not None and not t.is_cpu for t in args[i]):
            items = args[i]
            emu = [t for t in items if t is not None and not t.is_cpu]
            if device < 0:
                device = emu[0].device.index
            it = iter(_aliases(emu, [i in plan.written_at] * len(emu)))
            new_args[i] = [t if t is None or t.is_cpu else next(it) for t in items]
    return new_args, kwargs, device


def _check_one_device(device: int, args: tuple, kwargs: dict, plan: _Plan) -> None:
    """Like CUDA (and the core's derived kernel): tensors from one device only, except
    0-dim CPU tensors the op only reads, which act as scalars (never a CPU out=)."""
    tensors = [(args[i], i in plan.written_at) for i in plan.tensor_positions if i < len(args)]
    tensors += [(kwargs.get(n), n in plan.written_names) for n in plan.tensor_names]
    for t, written in tensors:
        if isinstance(t, _Tensor) and (
            (t.is_cpu and (t.dim() > 0 or written)) or (not t.is_cpu and t.device.index != device)
        ):
            other = "cpu" if t.is_cpu else str(t.device)
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two "
                f"devices, emu:{device} and {other}!"
            )


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


def _arg(args: tuple | list, kwargs: dict, where: tuple[int, str]) -> Any:
    pos, name = where
    return args[pos] if pos < len(args) else kwargs.get(name)


def _set_arg(args: list, kwargs: dict, where: tuple[int, str], value: Any) -> None:
    pos, name = where
    if pos < len(args):
        args[pos] = value
    else:
        kwargs[name] = value


def _sync_out(target: torch.Tensor, alias: torch.Tensor) -> None:
    """Make an emu ``out`` match what the CPU kernel made of its alias.

    Aliases are resizable through the CPU allocator: if the kernel had to grow
    one, the result now lives in fresh CPU memory, and the emu tensor is resized
    (upstream's ``resize_output`` already warned) and filled from it.  If it only
    shrank or restrided the alias, the data is in place and only the shape moves.
    """
    if alias.data_ptr() != target.data_ptr():
        if target.shape != alias.shape:
            target.resize_(alias.shape)
        if target.stride() != alias.stride():
            _set_storage(
                target,
                target.untyped_storage(),
                target.storage_offset(),
                alias.shape,
                alias.stride(),
            )
        target.copy_(alias)
    elif target.shape != alias.shape or target.stride() != alias.stride():
        _set_storage(
            target, target.untyped_storage(), target.storage_offset(), alias.shape, alias.stride()
        )


def derived_kernel(
    op: torch._ops.OpOverload, *, pre: Callable | None = None, post: Callable | None = None
) -> Callable:
    """Build the emu kernel of ``op`` from its schema (see the module docstring)."""
    plan: _Plan | None = None
    call = op._op

    def kernel(*args: Any, **kwargs: Any) -> Any:
        nonlocal plan
        if plan is None:  # built on first use: most lowerings never run in a given process
            plan = _Plan(op)
        cargs, ckwargs, device = _alias_args(plan, args, kwargs)
        if device < 0:  # only CPU tensors (a factory routed here by device=): current device
            device = _current_device()
        if pre is not None:
            pre(cargs, ckwargs)
        write_back = None
        if plan.generator is not None:
            cpu_gen, write_back = device_generator_state(_arg(args, kwargs, plan.generator), device)
            _set_arg(cargs, ckwargs, plan.generator, cpu_gen)
        result = call(*cargs, **ckwargs)
        if post is not None:
            post(result)
        for where in plan.written:
            original = _arg(args, kwargs, where)
            alias = _arg(cargs, ckwargs, where)
            if original is not None and alias is not original:
                _sync_out(original, alias)
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
