"""Distributed templates: ``torch.distributed`` on the device, two processes per test.

Each test of ``TestDistributed`` runs on two ranks (:mod:`conformance.embedded._multiprocess`: torch's
``MultiProcessTestCase``, a ``FileStore`` in a fresh temporary file, rank ``r`` on device
index ``r`` modulo the device count), in a process group made with the device's default
backend, ``torch.distributed.get_default_backend_for_device(device)`` (gloo for cpu; a
PrivateUse1 backend registers its own with ``torch.distributed.Backend.register_backend``).

Collectives, each against a single-process reference on the CPU, per dtype, and per
reduction where there is one (every rank draws every rank's input from the same seeds, so
each can compute the expected result alone; inputs are small integers, exact in every dtype,
so results must be exact):

- ``test_all_reduce``, ``test_reduce_scatter_tensor``: every ``ReduceOp`` (SUM, AVG, PRODUCT,
  MIN, MAX, BAND, BOR, BXOR, PREMUL_SUM) on the dtypes torch defines it for; synchronous and
  asynchronous (``async_op=True``: the ``Work`` completes, and only then is the result read);
- ``test_reduce_scatter`` (tensor lists, SUM), ``test_all_gather`` (lists),
  ``test_all_gather_into_tensor``, ``test_broadcast`` (from each rank), ``test_all_to_all``
  (lists), ``test_all_to_all_single`` (uneven splits), ``test_send_recv`` (blocking and
  ``isend``/``irecv`` both ways), ``test_barrier`` (nothing passes it early);
- ``test_default_backend``: the device's default backend is registered, and
  ``init_process_group()`` with no backend named picks it when the device is the
  accelerator (cpu: when there is none).

``test_ddp``: a few SGD steps of a small MLP under ``DistributedDataParallel`` on the
device, each rank with half of each batch, equal (to the dtype's tolerance) after every step
to single-process training on the CPU with the whole batch: parameters broadcast from rank 0
at construction (each rank starts from its own), gradients averaged over one bucket or one
per parameter (a tiny ``bucket_cap_mb``), and a step that accumulates two micro-batches
under ``no_sync()``.

``TestDistributedFourRanks`` runs the same checks of all_reduce, reduce_scatter_tensor,
all_gather_into_tensor, broadcast, all_to_all_single, the barrier and DDP on four ranks, in
float32 and int64: reductions over more than a pair and splits among several peers.

A backend that refuses a dtype or reduction (an error that says so: ``unsupported``, ``not
supported``, gloo's ``Invalid scalar type`` and ``Cannot use ReduceOp``) on every rank skips
the test, naming the refusal; any other error fails it (a missing kernel too), and so does a
rank that crashes or hangs.
Combinations torch itself does not define (bitwise reductions of floating-point tensors,
MIN on complex ones, ...) are skipped before any rank starts. Compile mode skips the file.
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import parametrize, run_tests

from conformance.embedded._multiprocess import WORLD_SIZE, RankTestCase, on_ranks
from conformance.embedded._samples import SEED, compiling
from conformance.embedded.selection import dtypes_for

#: The reductions, by the names the tests carry.
REDUCE_OPS = ("sum", "avg", "product", "min", "max", "band", "bor", "bxor", "premul_sum")
#: PREMUL_SUM's factor.
_PREMUL_FACTOR = 2.0
#: What a backend's refusal says (gloo names no dtype: ``Invalid scalar type``).
_REFUSAL = re.compile(r"unsupported|not supported|Invalid scalar type|Cannot use ReduceOp", re.I)


#: A refusal that is about the dtype.
_NAMES_DTYPE = re.compile(r"dtype|scalar type", re.I)


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _allowed(template: str) -> tuple[torch.dtype, ...]:
    return dtypes_for(template)["allowed_dtypes"]


def _is_integral(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex


def _eager(device: str, **params) -> str | None:
    return "runs eager only: collectives are not compiled by this template" if compiling() else None


def _reduction_applies(device: str, dtype: torch.dtype, reduce_op: str) -> str | None:
    """Why torch.distributed does not define ``reduce_op`` on ``dtype`` (None: it does)."""
    reason = _eager(device)
    if reason:
        return reason
    name, short = f"ReduceOp.{reduce_op.upper()}", _short(dtype)
    if reduce_op in ("band", "bor", "bxor") and not _is_integral(dtype):
        return f"{name} doesn't run on {short} tensors: it is defined on integer and bool ones"
    if reduce_op == "avg" and _is_integral(dtype):
        return f"{name} doesn't run on {short} tensors: it is defined on floating and complex ones"
    if reduce_op == "premul_sum" and not dtype.is_floating_point:
        return f"{name} doesn't run on {short} tensors: it is defined on floating ones"
    if reduce_op in ("product", "min", "max") and dtype.is_complex:
        return f"{name} doesn't run on {short} tensors: torch.distributed refuses it on complex"
    return None


def _reduce_op(name: str):
    if name == "premul_sum":
        return dist._make_nccl_premul_sum(_PREMUL_FACTOR)
    return getattr(dist.ReduceOp, name.upper())


def _input(rank: int, shape: tuple[int, ...], dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    """Rank ``rank``'s input on the CPU: small integers, exact in every dtype."""
    generator = torch.Generator().manual_seed(SEED + 1000 * rank + salt)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    low = 0 if dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64) else -3
    values = torch.randint(low, 4, shape, generator=generator)
    if dtype.is_complex:
        imag = torch.randint(low, 4, shape, generator=generator)
        return torch.complex(values.double(), imag.double()).to(dtype)
    return values.to(dtype)


def _reference(inputs: list[torch.Tensor], reduce_op: str, dtype: torch.dtype) -> torch.Tensor:
    """The reduction of the ranks' inputs, computed on the CPU in a wide dtype."""
    if dtype == torch.bool:
        stack = torch.stack(inputs)
        if reduce_op in ("sum", "max", "bor"):
            return stack.any(0)
        if reduce_op in ("product", "min", "band"):
            return stack.all(0)
        return stack.sum(0) % 2 == 1  # bxor
    wide = torch.complex128 if dtype.is_complex else torch.float64
    wide = torch.int64 if _is_integral(dtype) else wide
    stack = torch.stack([t.to(wide) for t in inputs])
    bitwise = {"band": torch.bitwise_and, "bor": torch.bitwise_or, "bxor": torch.bitwise_xor}
    if reduce_op in bitwise:
        result = functools.reduce(bitwise[reduce_op], list(stack))
    elif reduce_op == "product":
        result = stack.prod(0)
    elif reduce_op == "min":
        result = stack.amin(0)
    elif reduce_op == "max":
        result = stack.amax(0)
    else:
        result = stack.sum(0)
        if reduce_op == "avg":
            result = result / len(inputs)
        elif reduce_op == "premul_sum":
            result = result * _PREMUL_FACTOR
    return result.to(dtype)


class _Collectives(RankTestCase):
    """What the collective and DDP templates check, for any number of ranks."""

    def _refused(
        self,
        collective: str,
        dtype: torch.dtype,
        run: Callable[[], object],
        reduce_op: str | None = None,
    ) -> object:
        """Run one collective; a refusal that says so skips the test, naming what was
        refused: the reduction when the backend's message names it and no dtype, else the
        dtype."""
        try:
            return run()
        except (RuntimeError, ValueError, TypeError, NotImplementedError) as error:
            text = str(error).strip()
            if not _REFUSAL.search(text):
                raise
            backend = dist.get_default_backend_for_device(self.rank_device.type)
            first = text.splitlines()[0]
            name = _short(dtype)
            if reduce_op and "ReduceOp" in text and not _NAMES_DTYPE.search(text):
                self.skipTest(
                    f"{backend}: unsupported feature 'ReduceOp.{reduce_op.upper()}' in "
                    f"{collective} on {name}: {first}"
                )
            with_op = f" with ReduceOp.{reduce_op.upper()}" if reduce_op else ""
            self.skipTest(f"{backend} does not support {name} in {collective}{with_op}: {first}")

    def _exact(self, actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
        self.assertEqual(actual.device, self.rank_device, msg=f"{what}: device")
        self.assertEqual(actual.cpu(), expected, atol=0, rtol=0, exact_dtype=True, msg=what)

    def _all(self, shape, dtype, salt: int = 0) -> list[torch.Tensor]:
        return [_input(r, shape, dtype, salt) for r in range(self.world_size)]

    def check_all_reduce(self, dtype, reduce_op):
        inputs = self._all((3, 4), dtype)
        expected = _reference(inputs, reduce_op, dtype)
        tensor = inputs[self.rank].to(self.rank_device, copy=True)
        self._refused(
            "all_reduce",
            dtype,
            lambda: dist.all_reduce(tensor, op=_reduce_op(reduce_op)),
            reduce_op,
        )
        self._exact(tensor, expected, "all_reduce")
        tensor = inputs[self.rank].to(self.rank_device, copy=True)
        work = dist.all_reduce(tensor, op=_reduce_op(reduce_op), async_op=True)
        work.wait()
        self.assertTrue(work.is_completed())
        self._exact(tensor, expected, "all_reduce(async_op=True)")

    def check_reduce_scatter_tensor(self, dtype, reduce_op):
        inputs = self._all((2 * self.world_size, 3), dtype, salt=1)
        expected = _reference(inputs, reduce_op, dtype).chunk(self.world_size)[self.rank]
        source = inputs[self.rank].to(self.rank_device, copy=True)
        output = torch.full((2, 3), 1, dtype=dtype, device=self.rank_device)
        self._refused(
            "reduce_scatter_tensor",
            dtype,
            lambda: dist.reduce_scatter_tensor(output, source, op=_reduce_op(reduce_op)),
            reduce_op,
        )
        self._exact(output, expected, "reduce_scatter_tensor")
        output = torch.full((2, 3), 1, dtype=dtype, device=self.rank_device)
        work = dist.reduce_scatter_tensor(output, source, op=_reduce_op(reduce_op), async_op=True)
        work.wait()
        self._exact(output, expected, "reduce_scatter_tensor(async_op=True)")
        self._exact(source, inputs[self.rank], "reduce_scatter_tensor's input, left unchanged")

    def check_all_gather_into_tensor(self, dtype):
        inputs = self._all((2, 3), dtype, salt=4)
        output = torch.empty((2 * self.world_size, 3), dtype=dtype, device=self.rank_device)
        source = inputs[self.rank].to(self.rank_device, copy=True)
        self._refused(
            "all_gather_into_tensor",
            dtype,
            lambda: dist.all_gather_into_tensor(output, source),
        )
        self._exact(output, torch.cat(inputs), "all_gather_into_tensor")
        output.zero_()
        dist.all_gather_into_tensor(output, source, async_op=True).wait()
        self._exact(output, torch.cat(inputs), "all_gather_into_tensor(async_op=True)")

    def check_broadcast(self, dtype):
        inputs = self._all((3, 2), dtype, salt=5)
        for root in range(self.world_size):
            tensor = inputs[self.rank].to(self.rank_device, copy=True)
            self._refused("broadcast", dtype, lambda t=tensor, r=root: dist.broadcast(t, r))
            self._exact(tensor, inputs[root], f"broadcast from rank {root}")

    def check_all_to_all_single(self, dtype):
        # Rank r sends r + 1 + d rows to rank d: uneven splits both ways.
        def rows(source: int, destination: int) -> int:
            return source + 1 + destination

        inputs = [
            _input(r, (sum(rows(r, d) for d in range(self.world_size)), 2), dtype, salt=7)
            for r in range(self.world_size)
        ]
        sent = [
            list(inputs[r].split([rows(r, d) for d in range(self.world_size)]))
            for r in range(self.world_size)
        ]
        expected = torch.cat([sent[r][self.rank] for r in range(self.world_size)])
        output = torch.empty_like(expected, device=self.rank_device)
        source = inputs[self.rank].to(self.rank_device, copy=True)
        self._refused(
            "all_to_all_single",
            dtype,
            lambda: dist.all_to_all_single(
                output,
                source,
                output_split_sizes=[rows(r, self.rank) for r in range(self.world_size)],
                input_split_sizes=[rows(self.rank, d) for d in range(self.world_size)],
            ),
        )
        self._exact(output, expected, "all_to_all_single")

    def check_barrier(self):
        # The last rank arrives late; no rank may leave the barrier before it reached it.
        store = dist.distributed_c10d._get_default_store()
        if self.rank == self.world_size - 1:
            time.sleep(0.5)
            store.set("the last rank reached the barrier", "1")
        dist.barrier()
        self.assertTrue(store.check(["the last rank reached the barrier"]))
        dist.barrier(async_op=True).wait()

    def check_ddp(self, dtype, buckets):
        torch.manual_seed(SEED)
        reference = torch.nn.Sequential(
            torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)
        ).to(dtype)
        # Rank 0 starts from the reference's parameters, the others elsewhere: DDP
        # broadcasts rank 0's.
        torch.manual_seed(SEED if self.rank == 0 else SEED + 1 + self.rank)
        model = torch.nn.Sequential(
            torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)
        ).to(dtype=dtype, device=self.rank_device)
        cap_mb = 25 if buckets == "one_bucket" else 1 / 2**20  # 1 byte: each parameter alone
        ddp = torch.nn.parallel.DistributedDataParallel(
            model,
            device_ids=[self.rank_device] if self.rank_device.type != "cpu" else None,
            bucket_cap_mb=cap_mb,
        )
        for name, param in model.named_parameters():
            self.assertEqual(param.cpu(), dict(reference.named_parameters())[name], msg=name)
        ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        generator = torch.Generator().manual_seed(SEED + 7)
        share = 8 // self.world_size  # this rank's part of a batch of 8
        part = slice(share * self.rank, share * (self.rank + 1))

        def batch():
            x = torch.randn(8, 6, generator=generator).to(dtype)
            y = torch.randn(8, 3, generator=generator).to(dtype)
            return x, y

        for step in range(3):
            micro_batches = [batch(), batch()] if step == 1 else [batch()]
            ref_optimizer.zero_grad()
            optimizer.zero_grad()
            for i, (x, y) in enumerate(micro_batches):
                torch.nn.functional.mse_loss(reference(x), y).backward()
                last = i == len(micro_batches) - 1
                with contextlib.nullcontext() if last else ddp.no_sync():
                    out = ddp(x[part].to(self.rank_device, copy=True))
                    torch.nn.functional.mse_loss(
                        out, y[part].to(self.rank_device, copy=True)
                    ).backward()
            ref_optimizer.step()
            optimizer.step()
            for name, param in model.named_parameters():
                expected = dict(reference.named_parameters())[name]
                self.assertEqual(param.grad.cpu(), expected.grad, msg=f"step {step}: {name}.grad")
                self.assertEqual(
                    param.detach().cpu(), expected.detach(), msg=f"step {step}: {name}"
                )
        sizes = ddp._get_ddp_logging_data().get("rebuilt_bucket_sizes", "")
        count = len([s for s in str(sizes).split(",") if s.strip()])
        if buckets == "one_bucket":
            self.assertEqual(count, 1, msg=f"bucket sizes {sizes}")
        else:
            self.assertEqual(count, len(list(model.parameters())), msg=f"bucket sizes {sizes}")


class TestDistributed(_Collectives):
    """Collectives and DDP on the device, two ranks per test."""

    # -- reductions ---------------------------------------------------------------------

    @on_ranks(_reduction_applies)
    @parametrize("reduce_op", REDUCE_OPS)
    @dtypes(*_allowed("test_all_reduce"))
    def test_all_reduce(self, device, dtype, reduce_op):
        self.check_all_reduce(dtype, reduce_op)

    @on_ranks(_reduction_applies)
    @parametrize("reduce_op", REDUCE_OPS)
    @dtypes(*_allowed("test_reduce_scatter_tensor"))
    def test_reduce_scatter_tensor(self, device, dtype, reduce_op):
        self.check_reduce_scatter_tensor(dtype, reduce_op)

    @on_ranks(_eager)
    @dtypes(*_allowed("test_reduce_scatter"))
    def test_reduce_scatter(self, device, dtype):
        inputs = self._all((self.world_size, 2, 3), dtype, salt=2)  # [rank][destination]
        expected = _reference(inputs, "sum", dtype)[self.rank]
        output = torch.full((2, 3), 1, dtype=dtype, device=self.rank_device)
        sources = [t.to(self.rank_device, copy=True) for t in inputs[self.rank]]
        self._refused("reduce_scatter", dtype, lambda: dist.reduce_scatter(output, sources))
        self._exact(output, expected, "reduce_scatter")

    # -- moving data --------------------------------------------------------------------

    @on_ranks(_eager)
    @dtypes(*_allowed("test_all_gather"))
    def test_all_gather(self, device, dtype):
        inputs = self._all((2, 3), dtype, salt=3)
        outputs = [torch.empty((2, 3), dtype=dtype, device=self.rank_device) for _ in inputs]
        source = inputs[self.rank].to(self.rank_device, copy=True)
        self._refused("all_gather", dtype, lambda: dist.all_gather(outputs, source))
        for rank, (output, expected) in enumerate(zip(outputs, inputs, strict=True)):
            self._exact(output, expected, f"all_gather: rank {rank}'s tensor")

    @on_ranks(_eager)
    @dtypes(*_allowed("test_all_gather_into_tensor"))
    def test_all_gather_into_tensor(self, device, dtype):
        self.check_all_gather_into_tensor(dtype)

    @on_ranks(_eager)
    @dtypes(*_allowed("test_broadcast"))
    def test_broadcast(self, device, dtype):
        self.check_broadcast(dtype)

    @on_ranks(_eager)
    @dtypes(*_allowed("test_all_to_all"))
    def test_all_to_all(self, device, dtype):
        inputs = self._all((self.world_size, 2, 2), dtype, salt=6)  # [rank][destination]
        sources = [t.to(self.rank_device, copy=True) for t in inputs[self.rank]]
        outputs = [torch.empty((2, 2), dtype=dtype, device=self.rank_device) for _ in sources]
        self._refused("all_to_all", dtype, lambda: dist.all_to_all(outputs, sources))
        for rank, output in enumerate(outputs):
            self._exact(output, inputs[rank][self.rank], f"all_to_all: from rank {rank}")

    @on_ranks(_eager)
    @dtypes(*_allowed("test_all_to_all_single"))
    def test_all_to_all_single(self, device, dtype):
        self.check_all_to_all_single(dtype)

    @on_ranks(_eager)
    @dtypes(*_allowed("test_send_recv"))
    def test_send_recv(self, device, dtype):
        inputs = self._all((2, 3), dtype, salt=8)
        peer = 1 - self.rank
        mine = inputs[self.rank].to(self.rank_device, copy=True)
        received = torch.empty((2, 3), dtype=dtype, device=self.rank_device)
        if self.rank == 0:  # blocking, rank 0 to rank 1 and back
            self._refused("send", dtype, lambda: dist.send(mine, peer))
            dist.recv(received, peer)
        else:
            self._refused("recv", dtype, lambda: dist.recv(received, peer))
            dist.send(mine, peer)
        self._exact(received, inputs[peer], "recv")
        received = torch.empty((2, 3), dtype=dtype, device=self.rank_device)
        works = [dist.isend(mine, peer), dist.irecv(received, peer)]
        for work in works:
            work.wait()
        self._exact(received, inputs[peer], "irecv")

    @on_ranks(_eager)
    def test_barrier(self, device):
        self.check_barrier()

    def test_default_backend(self, device):
        """The device's default backend is registered, and init_process_group() picks it."""
        if compiling():
            self.skipTest("runs eager only: collectives are not compiled by this template")
        device_type = torch.device(device).type
        try:
            backend = dist.get_default_backend_for_device(device_type)
        except ValueError as error:
            self.fail(
                f"{device_type} has no default c10d backend ({error}): a PrivateUse1 backend "
                f"registers one with torch.distributed.Backend.register_backend(name, creator, "
                f'devices=["{device_type}"])'
            )
        self.assertIn(backend, dist.Backend.backend_list)
        self.assertIn(device_type, dist.Backend.backend_capability[backend])
        accelerator = torch.accelerator.current_accelerator()
        if (accelerator.type if accelerator else "cpu") != device_type:
            self.skipTest(
                f"init_process_group() picks the accelerator's backend; {device_type} is not "
                f"the accelerator here ({accelerator.type}): doesn't run on {device_type}"
            )
        self._default_backend_ranks(device)

    @on_ranks(make_group=False)
    def _default_backend_ranks(self, device):
        device_type = self.rank_device.type
        store = dist.FileStore(self.file_name, self.world_size)
        dist.init_process_group(store=store, rank=self.rank, world_size=self.world_size)
        backend = dist.get_default_backend_for_device(device_type)
        self.assertIn(f"{device_type}:{backend}", dist.get_backend_config())
        tensor = torch.full((2,), self.rank + 1.0, device=self.rank_device)
        dist.all_reduce(tensor)
        self._exact(tensor, torch.full((2,), 3.0), "all_reduce in the default group")

    # -- DistributedDataParallel ------------------------------------------------------------

    @on_ranks(_eager)
    @parametrize("buckets", ("one_bucket", "bucket_per_parameter"))
    @dtypes(*_allowed("test_ddp"))
    def test_ddp(self, device, dtype, buckets):
        self.check_ddp(dtype, buckets)

    # -- FSDP2, tensor and pipeline parallelism ---------------------------------------------

    def _mesh(self):
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh(self.rank_device.type, (WORLD_SIZE,))

    def _batches(self, steps: int):
        generator = torch.Generator().manual_seed(SEED + 7)
        return [
            (torch.randn(8, 6, generator=generator), torch.randn(8, 3, generator=generator))
            for _ in range(steps)
        ]

    @on_ranks(_eager)
    def test_fsdp2(self, device):
        """fully_shard per layer and at the root: three SGD steps, each rank with half of each
        batch, equal to unsharded training on the CPU; the sharded state dict holds DTensors
        whose full tensors are the reference's, and loads back."""
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor import DTensor

        reference = _mlp()
        model = _mlp().to(self.rank_device)
        # The mesh is named: fully_shard's default is the accelerator's, whatever the device.
        mesh = self._mesh()
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        half = slice(4 * self.rank, 4 * (self.rank + 1))
        for step, (x, y) in enumerate(self._batches(3)):
            ref_optimizer.zero_grad()
            torch.nn.functional.mse_loss(reference(x), y).backward()
            ref_optimizer.step()
            optimizer.zero_grad()
            out = model(x[half].to(self.rank_device))
            torch.nn.functional.mse_loss(out, y[half].to(self.rank_device)).backward()
            optimizer.step()
            state = model.state_dict()
            for name, expected in reference.state_dict().items():
                self.assertIsInstance(state[name], DTensor, msg=name)
                self.assertEqual(state[name].device.type, self.rank_device.type, msg=name)
                self.assertEqual(
                    state[name].full_tensor().cpu(), expected, msg=f"step {step}: {name}"
                )
        saved = {name: t.full_tensor().cpu() for name, t in model.state_dict().items()}
        fresh = _mlp(seed_offset=1).to(self.rank_device)
        for layer in fresh:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(fresh, mesh=mesh)
        fresh.load_state_dict(model.state_dict())
        for name, tensor in fresh.state_dict().items():
            self.assertEqual(tensor.full_tensor().cpu(), saved[name], msg=f"reloaded {name}")

    @on_ranks(_eager)
    def test_tensor_parallel(self, device):
        """parallelize_module with a column-wise then a row-wise plan on a two-layer MLP: the
        output and the gradients equal the unsplit model's on the CPU."""
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )

        reference = _mlp()
        model = _mlp().to(self.rank_device)
        parallelize_module(model, self._mesh(), {"0": ColwiseParallel(), "2": RowwiseParallel()})
        for x, y in self._batches(2):
            reference.zero_grad()
            model.zero_grad()
            expected = reference(x)
            torch.nn.functional.mse_loss(expected, y).backward()
            out = model(x.to(self.rank_device))
            self.assertEqual(out.cpu(), expected, msg="output")
            torch.nn.functional.mse_loss(out, y.to(self.rank_device)).backward()
            for name, param in model.named_parameters():
                expected_grad = dict(reference.named_parameters())[name].grad
                self.assertEqual(param.grad.full_tensor().cpu(), expected_grad, msg=name)

    @on_ranks(_eager)
    def test_dtensor_redistribute(self, device):
        """A DTensor moves between Shard(0), Shard(1) and Replicate placements with each
        rank holding its slice, and Partial sums reduce to the sum."""
        from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

        mesh = self._mesh()
        full = torch.arange(24.0).reshape(4, 6)
        rows, cols = full.shape[0] // WORLD_SIZE, full.shape[1] // WORLD_SIZE
        sharded = distribute_tensor(full.to(self.rank_device), mesh, [Shard(0)])
        self.assertEqual(sharded.to_local().cpu(), full[self.rank * rows : (self.rank + 1) * rows])
        replicated = sharded.redistribute(mesh, [Replicate()])
        self.assertEqual(replicated.to_local().cpu(), full)
        by_column = replicated.redistribute(mesh, [Shard(1)])
        self.assertEqual(
            by_column.to_local().cpu(), full[:, self.rank * cols : (self.rank + 1) * cols]
        )
        self.assertEqual(
            by_column.redistribute(mesh, [Shard(0)]).to_local().cpu(), sharded.to_local().cpu()
        )
        mine = torch.full((2, 3), float(self.rank + 1), device=self.rank_device)
        partial = DTensor.from_local(mine, mesh, [Partial()])
        total = sum(range(1, WORLD_SIZE + 1))
        self.assertEqual(
            partial.redistribute(mesh, [Replicate()]).to_local().cpu(),
            torch.full((2, 3), float(total)),
        )

    @on_ranks(_eager)
    @parametrize("schedule", ("gpipe", "1f1b"))
    def test_pipeline(self, device, schedule):
        """torch.distributed.pipelining with the MLP split in two stages (one per rank) and
        four micro-batches: the last stage's output and loss, and every stage's gradients,
        equal the unsplit model's on the CPU (gradients averaged over the micro-batches)."""
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        reference = _mlp()
        stages = (_mlp()[:2], _mlp()[2:])
        stage = PipelineStage(
            stages[self.rank].to(self.rank_device), self.rank, WORLD_SIZE, self.rank_device
        )
        schedule_class = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
        loss_fn = torch.nn.functional.mse_loss
        runner = schedule_class(stage, n_microbatches=4, loss_fn=loss_fn)
        ((x, y),) = self._batches(1)
        expected = reference(x)
        # Each micro-batch's loss is back-propagated alone, and the schedule scales the
        # gradients by 1 / micro-batches (scale_grads, its default).
        for part_x, part_y in zip(x.chunk(4), y.chunk(4), strict=True):
            (loss_fn(reference(part_x), part_y) / 4).backward()
        if self.rank == 0:
            runner.step(x.to(self.rank_device))
        else:
            losses: list[torch.Tensor] = []
            out = runner.step(target=y.to(self.rank_device), losses=losses)
            self.assertEqual(out.cpu(), expected, msg="output")
            expected_losses = [
                loss_fn(reference(a), b) for a, b in zip(x.chunk(4), y.chunk(4), strict=True)
            ]
            self.assertEqual([loss.cpu() for loss in losses], expected_losses, msg="losses")
        for name, param in stage.submod.named_parameters():  # a slice keeps its layers' names
            index, _, leaf = name.partition(".")
            expected_grad = getattr(reference[int(index)], leaf).grad
            self.assertEqual(param.grad.cpu(), expected_grad, msg=name)


def _mlp(seed_offset: int = 0) -> torch.nn.Sequential:
    """The small MLP the parallelism templates train: the same parameters on every rank."""
    torch.manual_seed(SEED + seed_offset)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


class TestDistributedFourRanks(_Collectives):
    """The collectives, a barrier and DDP on four ranks (rank r on device index r modulo
    the device count: two ranks per device on a two-device backend), in a float and an
    integer dtype: what two ranks cannot show (a reduction over more than a pair, uneven
    splits among several peers, a ring or tree of four)."""

    ranks = 4

    @on_ranks(_reduction_applies)
    @parametrize("reduce_op", ("sum", "product", "max", "band"))
    @dtypes(torch.float32, torch.int64)
    def test_all_reduce(self, device, dtype, reduce_op):
        self.check_all_reduce(dtype, reduce_op)

    @on_ranks(_reduction_applies)
    @parametrize("reduce_op", ("sum", "max"))
    @dtypes(torch.float32, torch.int64)
    def test_reduce_scatter_tensor(self, device, dtype, reduce_op):
        self.check_reduce_scatter_tensor(dtype, reduce_op)

    @on_ranks(_eager)
    @dtypes(torch.float32, torch.int64)
    def test_all_gather_into_tensor(self, device, dtype):
        self.check_all_gather_into_tensor(dtype)

    @on_ranks(_eager)
    @dtypes(torch.float32)
    def test_broadcast(self, device, dtype):
        self.check_broadcast(dtype)

    @on_ranks(_eager)
    @dtypes(torch.float32, torch.int64)
    def test_all_to_all_single(self, device, dtype):
        self.check_all_to_all_single(dtype)

    @on_ranks(_eager)
    def test_barrier(self, device):
        self.check_barrier()

    @on_ranks(_eager)
    @parametrize("buckets", ("one_bucket",))
    @dtypes(torch.float32)
    def test_ddp(self, device, dtype, buckets):
        self.check_ddp(dtype, buckets)


instantiate_device_type_tests(TestDistributed, globals())
instantiate_device_type_tests(TestDistributedFourRanks, globals())

if __name__ == "__main__":
    run_tests()
