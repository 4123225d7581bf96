"""emu's ``torch.compile`` backend, registered with Dynamo under the name ``emu``.

Dynamo captures the graph; AOTAutograd traces it into forward and backward graphs of ATen
ops, decomposing as it goes with emu's decomposition table: core ATen's decompositions, and
every decomposition torch has for an op emu does not run natively. The compiler then checks
every op of each graph against what emu runs (its lowering registry and the native core,
found through the dispatcher) and runs the graph on emu. So an op with no eager lowering
whose decomposition reaches lowered ops works compiled, and an op that still has no
lowering after decomposition is refused at compile time, naming the overload
(:class:`UnsupportedOpError`), instead of failing at run time.

The ``torch_dynamo_backends`` entry point ``emu`` makes the name known to Dynamo without
importing this module first. Use ``torch.compile(model, backend="emu")``, or name it once with
``torch.compiler.set_default_backend("emu")``. Compiled graphs are cached by Dynamo like any
backend's; recompilation is bounded by Dynamo's ``cache_size_limit``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["UnsupportedOpError", "decompositions", "emu_backend", "runs_natively"]

_DISPATCH_KEY = "PrivateUse1"
#: Kernels that run on any device: a graph op with one of these needs no emu lowering.
_DEVICE_INDEPENDENT = ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


class UnsupportedOpError(NotImplementedError):
    """A graph op emu has no lowering for, even after decomposition. Worded as other
    devices word a missing kernel, so classifiers read the overload from it."""

    def __init__(self, overload: str, graph: str) -> None:
        super().__init__(
            f"The operator '{overload}' is not currently implemented for the emu compiler: "
            f"no lowering, even after decomposition (in the {graph} graph)"
        )
        self.overload = overload


def _qualified(op: torch._ops.OpOverload) -> str:
    name = op._schema.name
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


def runs_natively(op: torch._ops.OpOverload) -> bool:
    """Whether emu runs ``op`` without decomposing it: a kernel for its dispatch key (a
    lowering or the native core) or a device-independent composite kernel."""
    name = op.name()
    return any(
        torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
        for key in (_DISPATCH_KEY, *_DEVICE_INDEPENDENT)
    )


@functools.cache
def decompositions() -> dict[Any, Callable]:
    """emu's decomposition table: core ATen's, plus torch's decomposition of every op emu
    does not run natively (built once; a lowering added later makes no difference)."""
    from torch._decomp import core_aten_decompositions, decomposition_table

    table = {
        op: fn
        for op, fn in decomposition_table.items()
        if isinstance(op, torch._ops.OpOverload) and not runs_natively(op)
    }
    table.update(core_aten_decompositions())
    return table


def _check(gm: torch.fx.GraphModule, graph: str) -> None:
    for node in gm.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        if target.namespace not in ("aten", "prims") or not _computes_tensors(target):
            continue  # sizes and strides (sym_size.int) are read from metadata, not run
        if not runs_natively(target):
            raise UnsupportedOpError(_qualified(target), graph)


def _computes_tensors(op: torch._ops.OpOverload) -> bool:
    returns = op._schema.returns
    return any(isinstance(r.type, (torch.TensorType, torch.ListType)) for r in returns)


def _compiler(graph: str) -> Callable:
    def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
        from torch._functorch.aot_autograd import make_boxed_func

        _check(gm, graph)
        return make_boxed_func(gm.forward)  # AOTAutograd passes arguments as one list

    return compile_graph


def emu_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
    """The Dynamo backend: AOTAutograd with emu's decompositions, graphs checked and run on emu."""
    from torch._dynamo.backends.common import aot_autograd

    backend = aot_autograd(
        fw_compiler=_compiler("forward"),
        bw_compiler=_compiler("backward"),
        decompositions=decompositions(),
    )
    return backend(gm, example_inputs)
