"""emu's c10d backend: ``torch.distributed`` on emu tensors.

Two parts, as for a real accelerator:

- **The backend** ``emuccl``, registered with ``torch.distributed.Backend.register_backend``
  for the emu device, so it is emu's default (``get_default_backend_for_device("emu")``,
  and ``init_process_group()`` when emu is the accelerator). Its creator returns a gloo
  process group: emu's interconnect is gloo over host memory (TCP between the processes,
  addresses exchanged through the process group's store).
- **The device side**: emu's kernels for torch's c10d operators (``c10d::allreduce_``,
  ``c10d::_allgather_base_``, ``c10d::send``, ...) at emu's dispatch key. Every collective
  reaches them, whoever calls it: the ``torch.distributed`` functions, DDP's reducer (C++),
  the functional collectives of DTensor and FSDP2. torch's own kernels there hand emu
  tensors to the backend, which gloo refuses; emu's hand it CPU aliases of the emu tensors
  instead (emu memory is host memory, so no copy: results land in emu memory), as emu's
  lowerings do for ATen operators, and return the backend's own asynchronous ``Work``.

Where gloo lacks something, the kernel makes up for it and the returned ``Work`` completes
only after that: dtypes gloo does not move are moved as same-sized ones it does (bits are
bits); int16, uint16 and uint32 are reduced in int64 and written back; uint64 reduces as
int64 where two's complement gives the same bits (SUM, PRODUCT, bitwise); complex reduces
as pairs of reals (SUM, AVG: the reductions defined on complex numbers); AVG is SUM then a
division by the group size (floating and complex dtypes). Everything else is refused with
an error that names the dtype or the reduction: PREMUL_SUM (its factor does not reach a
backend's kernel), MIN and MAX on uint64, reductions in complex32 and float8.

The ``wrong_reduction`` plant makes ``all_reduce`` with SUM compute MAX; the ``dropped_rank``
plant makes the group's last rank contribute zeros to every all-gather.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d

from torch_emu import plants as _plants

__all__ = ["BACKEND", "register"]

#: The backend's name, as ``init_process_group(backend=...)`` takes it.
BACKEND = "emuccl"

_RedOp = dist.ReduceOp.RedOpType
_SUM, _AVG, _PRODUCT, _MIN, _MAX = _RedOp.SUM, _RedOp.AVG, _RedOp.PRODUCT, _RedOp.MIN, _RedOp.MAX
_BITWISE = (_RedOp.BAND, _RedOp.BOR, _RedOp.BXOR)

#: The dtypes gloo moves and reduces itself.
_GLOO_DTYPES = frozenset(
    {
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
    }
)
#: Same-sized dtypes gloo moves, for moving the others (by element size in bytes).
_CARRIER = {1: torch.uint8, 2: torch.float16, 4: torch.int32, 8: torch.int64}
#: Integer dtypes gloo cannot reduce that int64 holds exactly.
_WIDENED = frozenset({torch.int16, torch.uint16, torch.uint32})

_aliases = torch.ops.emu.cpu_aliases.default

# Collectives in flight: the backend writes through aliases that do not own emu's memory,
# so the emu tensors are held here until their Work completes.
_inflight: list[tuple[_c10d.Work, list[torch.Tensor]]] = []


def _refuse(what: str) -> RuntimeError:
    return RuntimeError(f"emu's c10d backend ({BACKEND}): {what}")


def _backend(process_group) -> _c10d.Backend:
    group = dist.ProcessGroup.unbox(process_group)
    try:
        return group._get_backend(torch.device("emu"))
    except RuntimeError:
        raise _refuse(
            f"this process group has no backend for emu tensors (it has one for "
            f"{', '.join(str(d) for d in group._device_types) or 'no device'}); create it with "
            f"backend={BACKEND!r}, or with no backend when emu is the accelerator"
        ) from None


def _timeout(options, timeout: int, async_op: bool | None = None):
    if timeout >= 0:
        options.timeout = timedelta(milliseconds=timeout)
    if async_op is not None:
        options.asyncOp = async_op
    return options


def _alias(tensors: list[torch.Tensor], written: bool) -> list[torch.Tensor]:
    """CPU aliases of emu tensors (CPU tensors stay as they are)."""
    emu = [i for i, t in enumerate(tensors) if t.device.type == "emu"]
    if not emu:
        return list(tensors)
    out = list(tensors)
    for i, alias in zip(
        emu, _aliases([tensors[i] for i in emu], [written] * len(emu)), strict=True
    ):
        out[i] = alias
    return out


# ---- moving data: any dtype ------------------------------------------------------------


def _carried(t: torch.Tensor) -> torch.Tensor:
    """``t`` (an alias) as a dtype gloo moves, over the same bytes."""
    if t.dtype in _GLOO_DTYPES:
        return t
    if t.dtype == torch.complex128:
        return torch.view_as_real(t)
    carrier = _CARRIER.get(t.element_size())
    if carrier is None:
        raise _refuse(f"unsupported dtype {t.dtype} (cannot move {t.element_size()}-byte elements)")
    return t.view(carrier)


def _moved(tensors: list[torch.Tensor], written: bool) -> list[torch.Tensor]:
    return [_carried(t) for t in _alias(tensors, written)]


# ---- reducing: what gloo reduces, and what emu makes up for --------------------------------


class _Reduction:
    """How one reduction runs: the op gloo is asked for, and what completes it.

    ``inputs(ts)`` and ``outputs(ts)`` turn emu tensors into what gloo reads and writes;
    ``finish()`` runs when gloo is done (write-backs of widened outputs, AVG's division).
    """

    def __init__(self, reduce_op, dtype: torch.dtype, group_size: int) -> None:
        kind = _RedOp(reduce_op.op()) if not isinstance(reduce_op, _RedOp) else reduce_op
        self.kind = kind
        self.group_size = group_size
        self._after: list[Callable[[], None]] = []
        if kind == _RedOp.PREMUL_SUM:
            raise _refuse(
                "unsupported feature 'ReduceOp.PREMUL_SUM' (its factor does not reach a "
                "backend's kernel)"
            )
        if dtype.is_complex:
            if dtype == torch.complex32:
                raise _refuse(f"unsupported dtype {dtype} for reductions")
            if kind not in (_SUM, _AVG):
                raise _refuse(
                    f"unsupported feature 'ReduceOp.{kind.name}' on complex dtypes ({dtype}): "
                    "only SUM and AVG are defined on complex numbers"
                )
        elif kind == _AVG and not dtype.is_floating_point:
            raise _refuse(
                f"unsupported feature 'ReduceOp.AVG' on integer dtypes ({dtype}): AVG is "
                "defined for floating and complex dtypes"
            )
        if dtype in _GLOO_DTYPES or dtype.is_complex:
            self._convert = self._direct
        elif dtype in _WIDENED:
            self._convert = self._widen
        elif dtype == torch.uint64 and kind in (_SUM, _PRODUCT, *_BITWISE):
            self._convert = self._as_int64
        else:
            raise _refuse(f"unsupported dtype {dtype} for ReduceOp.{kind.name}")
        gloo_kind = _SUM if kind == _AVG else kind
        self.op = dist.ReduceOp(gloo_kind)

    def plant(self) -> None:
        """The ``wrong_reduction`` plant: SUM computes MAX."""
        if self.kind == _SUM and _plants.is_active("wrong_reduction"):
            self.op = dist.ReduceOp(_MAX)

    def inputs(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        return [self._convert(t, written=False) for t in _alias(tensors, False)]

    def outputs(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        aliases = _alias(tensors, True)
        out = [self._convert(t, written=True) for t in aliases]
        if self.kind == _AVG:
            size = self.group_size
            for alias in aliases:
                real = torch.view_as_real(alias) if alias.is_complex() else alias
                self._after.append(lambda real=real: real.div_(size))
        return out

    def finish(self) -> None:
        for step in self._after:
            step()

    @property
    def completes_later(self) -> bool:
        return bool(self._after)

    def _direct(self, alias: torch.Tensor, written: bool) -> torch.Tensor:
        return torch.view_as_real(alias) if alias.is_complex() else alias

    def _as_int64(self, alias: torch.Tensor, written: bool) -> torch.Tensor:
        return alias.view(torch.int64)

    def _widen(self, alias: torch.Tensor, written: bool) -> torch.Tensor:
        wide = alias.to(torch.int64)
        if written:
            self._after.append(lambda: alias.copy_(wide))
        return wide


# ---- completing ---------------------------------------------------------------------------


def _prune() -> None:
    _inflight[:] = [(w, ts) for w, ts in _inflight if not w.is_completed()]


def _future_of(work: _c10d.Work) -> torch.futures.Future:
    """A future that completes with ``work`` (gloo gives some of its Works none: a thread
    waits for those)."""
    try:
        return work.get_future()
    except RuntimeError:
        pass
    future: torch.futures.Future = torch.futures.Future()

    def wait() -> None:
        try:
            work.wait()
        except Exception as error:
            future.set_exception(error)
        else:
            future.set_result([])

    threading.Thread(target=wait, name="emu-c10d-wait", daemon=True).start()
    return future


def _complete(
    work: _c10d.Work, held: list[torch.Tensor], reduction: _Reduction | None = None
) -> _c10d.Work:
    """The Work to return: the backend's own, or one that completes after ``reduction``'s
    finishing steps when it has any; the emu tensors stay alive until it completes."""
    _prune()
    if reduction is not None and reduction.completes_later:

        def finish(future):
            value = future.value()  # raises the backend's error, if any
            reduction.finish()
            return value

        work = _c10d._create_work_from_future(_future_of(work).then(finish))
    _inflight.append((work, held))
    return work


def _all_of(works: list[_c10d.Work]) -> _c10d.Work:
    """One Work for several (the coalesced collectives gloo offers no binding for)."""
    if len(works) == 1:
        return works[0]
    futures = [_future_of(w) for w in works]

    def done(all_done):
        for future in all_done.value():
            future.value()  # raises the first error
        return []

    return _c10d._create_work_from_future(torch.futures.collect_all(futures).then(done))


def _flat(lists: list[list[torch.Tensor]]) -> list[torch.Tensor]:
    return [t for inner in lists for t in inner]


def _dtype_of(tensors: list[torch.Tensor]) -> torch.dtype:
    return tensors[0].dtype if tensors else torch.float32


# ---- the kernels, one per c10d operator ------------------------------------------------------


def _allreduce_(tensors, process_group, reduce_op, sparse_indices=None, async_op=True, timeout=-1):
    if sparse_indices is not None:
        raise _refuse("unsupported feature 'sparse' (sparse all_reduce)")
    backend = _backend(process_group)
    reduction = _Reduction(reduce_op, _dtype_of(tensors), backend.size())
    reduction.plant()
    opts = _timeout(_c10d.AllreduceOptions(), timeout, async_op)
    opts.reduceOp = reduction.op
    work = backend.allreduce(reduction.outputs(tensors), opts)
    return tensors, _complete(work, list(tensors), reduction).boxed()


def _allreduce_coalesced_(tensors, process_group, reduce_op, async_op=True, timeout=-1):
    backend = _backend(process_group)
    reduction = _Reduction(reduce_op, _dtype_of(tensors), backend.size())
    opts = _timeout(_c10d.AllreduceCoalescedOptions(), timeout, async_op)
    opts.reduceOp = reduction.op
    work = backend.allreduce_coalesced(reduction.outputs(tensors), opts)
    return _complete(work, list(tensors), reduction).boxed()


def _reduce_(tensors, process_group, reduce_op, root_rank, root_tensor, async_op=True, timeout=-1):
    backend = _backend(process_group)
    reduction = _Reduction(reduce_op, _dtype_of(tensors), backend.size())
    opts = _timeout(_c10d.ReduceOptions(), timeout, async_op)
    opts.reduceOp, opts.rootRank, opts.rootTensor = reduction.op, root_rank, root_tensor
    work = backend.reduce(reduction.outputs(tensors), opts)
    return _complete(work, list(tensors), reduction).boxed()


def _broadcast_(tensors, process_group, root_rank, root_tensor, async_op=True, timeout=-1):
    backend = _backend(process_group)
    opts = _timeout(_c10d.BroadcastOptions(), timeout, async_op)
    opts.rootRank, opts.rootTensor = root_rank, root_tensor
    work = backend.broadcast(_moved(tensors, True), opts)
    return tensors, _complete(work, list(tensors)).boxed()


def _dropped(inputs: list[torch.Tensor], process_group) -> list[torch.Tensor]:
    """The ``dropped_rank`` plant: the group's last rank contributes zeros to all-gathers."""
    if _plants.is_active("dropped_rank") and process_group.rank() == process_group.size() - 1:
        return [torch.zeros_like(t) for t in inputs]
    return inputs


def _allgather_(output_tensors, input_tensors, process_group, async_op=True, timeout=-1):
    backend = _backend(process_group)
    opts = _timeout(_c10d.AllgatherOptions(), timeout, async_op)
    outputs = [_moved(inner, True) for inner in output_tensors]
    inputs = _dropped(_moved(input_tensors, False), process_group)
    work = backend.allgather(outputs, inputs, opts)
    held = _flat(output_tensors) + list(input_tensors)
    return output_tensors, _complete(work, held).boxed()


def _allgather_base_(output_tensor, input_tensor, process_group, async_op=True, timeout=-1):
    backend = _backend(process_group)
    opts = _timeout(_c10d.AllgatherOptions(), timeout, async_op)
    (out,), (inp,) = _moved([output_tensor], True), _moved([input_tensor], False)
    (inp,) = _dropped([inp], process_group)
    work = backend._allgather_base(out, inp, opts)
    return output_tensor, _complete(work, [output_tensor, input_tensor]).boxed()


def _allgather_coalesced_(output_lists, input_list, process_group, async_op=True):
    backend = _backend(process_group)
    opts = _timeout(_c10d.AllgatherOptions(), -1, async_op)
    outputs = [_moved(inner, True) for inner in output_lists]
    work = backend.allgather_coalesced(outputs, _moved(input_list, False), opts)
    return _complete(work, _flat(output_lists) + list(input_list)).boxed()


def _allgather_into_tensor_coalesced_(outputs, inputs, process_group, async_op=True):
    backend = _backend(process_group)
    works = []
    for output, input in zip(outputs, inputs, strict=True):
        opts = _timeout(_c10d.AllgatherOptions(), -1, async_op)
        (out,), (inp,) = _moved([output], True), _moved([input], False)
        (inp,) = _dropped([inp], process_group)
        works.append(backend._allgather_base(out, inp, opts))
    return _complete(_all_of(works), list(outputs) + list(inputs)).boxed()


def _gather_(output_tensors, input_tensors, process_group, root_rank, async_op=True, timeout=-1):
    backend = _backend(process_group)
    opts = _timeout(_c10d.GatherOptions(), timeout, async_op)
    opts.rootRank = root_rank
    outputs = [_moved(inner, True) for inner in output_tensors]
    work = backend.gather(outputs, _moved(input_tensors, False), opts)
    return _complete(work, _flat(output_tensors) + list(input_tensors)).boxed()


def _scatter_(output_tensors, input_tensors, process_group, root_rank, async_op=True, timeout=-1):
    backend = _backend(process_group)
    opts = _timeout(_c10d.ScatterOptions(), timeout, async_op)
    opts.rootRank = root_rank
    inputs = [_moved(inner, False) for inner in input_tensors]
    work = backend.scatter(_moved(output_tensors, True), inputs, opts)
    held = list(output_tensors) + _flat(input_tensors)
    return output_tensors, _complete(work, held).boxed()


def _reduce_scatter_(
    output_tensors, input_tensors, process_group, reduce_op, async_op=True, timeout=-1
):
    backend = _backend(process_group)
    reduction = _Reduction(reduce_op, _dtype_of(output_tensors), backend.size())
    opts = _timeout(_c10d.ReduceScatterOptions(), timeout, async_op)
    opts.reduceOp = reduction.op
    inputs = [reduction.inputs(inner) for inner in input_tensors]
    work = backend.reduce_scatter(reduction.outputs(output_tensors), inputs, opts)
    held = list(output_tensors) + _flat(input_tensors)
    return output_tensors, _complete(work, held, reduction).boxed()


def _reduce_scatter_base_(
    output_tensor, input_tensor, process_group, reduce_op, async_op=True, timeout=-1
):
    backend = _backend(process_group)
    reduction = _Reduction(reduce_op, output_tensor.dtype, backend.size())
    opts = _timeout(_c10d.ReduceScatterOptions(), timeout, async_op)
    opts.reduceOp = reduction.op
    (out,), (inp,) = reduction.outputs([output_tensor]), reduction.inputs([input_tensor])
    work = backend._reduce_scatter_base(out, inp, opts)
    return output_tensor, _complete(work, [output_tensor, input_tensor], reduction).boxed()


def _reduce_scatter_tensor_coalesced_(
    outputs, inputs, process_group, reduce_op, async_op=True, timeout=-1
):
    backend = _backend(process_group)
    reduction = _Reduction(reduce_op, _dtype_of(outputs), backend.size())
    works = []
    for output, input in zip(outputs, inputs, strict=True):
        opts = _timeout(_c10d.ReduceScatterOptions(), timeout, async_op)
        opts.reduceOp = reduction.op
        (out,), (inp,) = reduction.outputs([output]), reduction.inputs([input])
        works.append(backend._reduce_scatter_base(out, inp, opts))
    return _complete(_all_of(works), list(outputs) + list(inputs), reduction).boxed()


def _alltoall_(output_tensors, input_tensors, process_group, async_op=True, timeout=-1):
    backend = _backend(process_group)
    opts = _timeout(_c10d.AllToAllOptions(), timeout, async_op)
    work = backend.alltoall(_moved(output_tensors, True), _moved(input_tensors, False), opts)
    held = list(output_tensors) + list(input_tensors)
    return output_tensors, _complete(work, held).boxed()


def _alltoall_base_(
    output, input, process_group, output_split_sizes, input_split_sizes, async_op=True, timeout=-1
):
    backend = _backend(process_group)
    opts = _timeout(_c10d.AllToAllOptions(), timeout, async_op)
    (out,), (inp,) = _moved([output], True), _moved([input], False)
    work = backend.alltoall_base(out, inp, output_split_sizes, input_split_sizes, opts)
    return _complete(work, [output, input]).boxed()


def _barrier(tensor, process_group, device_ids, async_op=True, timeout=-1):
    backend = _backend(process_group)
    opts = _timeout(_c10d.BarrierOptions(), timeout, async_op)
    opts.device_ids = list(device_ids)
    return _complete(backend.barrier(opts), []).boxed()


def _send(tensors, process_group, dst, tag):
    backend = _backend(process_group)
    work = backend.send(_moved(tensors, False), dst, tag)
    return _complete(work, list(tensors)).boxed()


def _recv_(tensors, process_group, src, tag):
    backend = _backend(process_group)
    work = backend.recv(_moved(tensors, True), src, tag)
    return _complete(work, list(tensors)).boxed()


def _recv_any_source_(tensors, process_group, tag):
    backend = _backend(process_group)
    work = backend.recv_anysource(_moved(tensors, True), tag)
    return _complete(work, list(tensors)).boxed()


#: c10d operator -> emu's kernel.
KERNELS: dict[str, Callable] = {
    "allreduce_": _allreduce_,
    "allreduce_coalesced_": _allreduce_coalesced_,
    "reduce_": _reduce_,
    "broadcast_": _broadcast_,
    "allgather_": _allgather_,
    "_allgather_base_": _allgather_base_,
    "allgather_coalesced_": _allgather_coalesced_,
    "allgather_into_tensor_coalesced_": _allgather_into_tensor_coalesced_,
    "gather_": _gather_,
    "scatter_": _scatter_,
    "reduce_scatter_": _reduce_scatter_,
    "_reduce_scatter_base_": _reduce_scatter_base_,
    "reduce_scatter_tensor_coalesced_": _reduce_scatter_tensor_coalesced_,
    "alltoall_": _alltoall_,
    "alltoall_base_": _alltoall_base_,
    "barrier": _barrier,
    "send": _send,
    "recv_": _recv_,
    "recv_any_source_": _recv_any_source_,
}


def _create(store, group_rank: int, group_size: int, timeout: timedelta) -> dist.ProcessGroup:
    """A process group on emu: gloo over host memory as emu's backend.

    The creator returns the whole group rather than the backend alone so that the group's
    default backend is emu's whichever way it was asked for: ``init_process_group()`` with
    no backend named makes a group whose default backend type is gloo's, and torch calls
    that ask for the default backend (the group's name, DDP's logging) would find none."""
    gloo = dist.ProcessGroupGloo(store, group_rank, group_size, timeout)
    gloo._set_sequence_number_for_group()
    group = dist.ProcessGroup(store, group_rank, group_size)
    kind = dist.ProcessGroup.BackendType.CUSTOM
    group._set_default_backend(kind)
    group._register_backend(torch.device("emu"), kind, gloo)
    return group


_library: torch.library.Library | None = None


def register() -> None:
    """Register emu's kernels for the c10d operators and the ``emuccl`` backend (once)."""
    global _library
    if _library is not None or not dist.is_available() or not dist.is_gloo_available():
        return
    library = torch.library.Library("c10d", "IMPL")
    # torch registers a kernel for every c10d operator at the PrivateUse1 key, which hands
    # the tensors to the backend as they are; emu's replace them (torch warns once).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, kernel in KERNELS.items():
            library.impl(name, kernel, "PrivateUse1")
    _library = library
    dist.Backend.register_backend(BACKEND, _create, devices=["emu"])
