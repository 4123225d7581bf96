"""``torch.emu``: the device module of the emu backend.

Registered with ``torch._register_device_module("emu", ...)``; it mirrors the
parts of ``torch.cuda`` that torch's generic code and device-generic tests
call: device selection, synchronization, streams and events, seeding, RNG
state and memory statistics.  Execution on emu is synchronous, so
``synchronize`` only validates its argument, every stream is idle and every
event is complete once recorded.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from torch_emu import amp
from torch_emu import plants as _plants

__all__ = [
    "Event",
    "Stream",
    "amp",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "is_available",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "reset_max_memory_allocated",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
]


class _RuntimeOps:
    """emu's runtime ops (device selection, seeding, RNG state, memory statistics), called
    with torch function and torch dispatch handling off. They are the device's runtime, not
    tensor math: torch's generic code calls them under any mode (``freeze_rng_state`` saves
    every device's RNG state, inside refs mode for one; DTensor's local-tensor mode restores
    them inside a FakeTensorMode), and a mode must neither see nor refuse them, as it never
    sees CUDA's."""

    def __getattr__(self, name: str) -> Any:
        op = getattr(torch.ops.emu, name).default

        def call(*args: Any) -> Any:
            with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
                return op(*args)

        setattr(self, name, call)  # found once, then an attribute
        return call


_ops = _RuntimeOps()


def _index(device: Any = None) -> int:
    """Normalize None / int / "emu:1" / torch.device to a checked device index."""
    if device is None:
        return current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "emu":
            raise ValueError(f"expected an emu device, got {device}")
        return current_device() if device.index is None else _checked(device.index)
    if isinstance(device, int) and not isinstance(device, bool):
        return _checked(device)
    raise TypeError(f"expected an emu device index, string or torch.device, got {device!r}")


def _checked(index: int) -> int:
    count = device_count()
    if not 0 <= index < count:
        raise ValueError(
            f"emu device index {index} is out of range: this process has {count} emu devices "
            "(set EMU_DEVICE_COUNT to change it)"
        )
    return index


def is_available() -> bool:
    """Always True once torch_emu is imported: emu runs on host memory."""
    return True


def is_initialized() -> bool:
    """Always True: the native core initializes when it is loaded."""
    return True


def _lazy_init() -> None:
    """Nothing to do; present because torch's generic code calls it on device modules."""


def _is_in_bad_fork() -> bool:
    """emu keeps no state that a fork could corrupt."""
    return False


def device_count() -> int:
    """Number of emu devices in this process (EMU_DEVICE_COUNT, default 2)."""
    return int(_ops.device_count())


def current_device() -> int:
    """Index of the current emu device of this thread."""
    return int(_ops.current_device())


def set_device(device: Any) -> None:
    """Make ``device`` the current emu device of this thread."""
    _ops.set_device(_index(device))


class device:
    """Context manager that makes ``device`` current and restores the previous one on exit."""

    def __init__(self, device: Any) -> None:
        self.index = -1 if device is None else _index(device)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = current_device()
        if self.index >= 0:
            _ops.set_device(self.index)

    def __exit__(self, *exc_info: object) -> bool:
        _ops.set_device(self.previous)
        return False


def synchronize(device: Any = None) -> None:
    """Wait for all work on ``device``: a no-op, because emu executes synchronously."""
    _index(device)


_UINT64 = 1 << 64


def _seed_bits(seed: int) -> int:
    """A seed as the core takes it: the generator's 64-bit unsigned seed, its bits in an
    int64. torch.manual_seed accepts -2**63 to 2**64 - 1, negative seeds wrapping around
    as the CPU's generator wraps them."""
    value = int(seed) % _UINT64
    return value - _UINT64 if value >= _UINT64 // 2 else value


def manual_seed(seed: int) -> None:
    """Seed the default generator of the current emu device."""
    _ops.manual_seed(current_device(), _seed_bits(seed))


def manual_seed_all(seed: int) -> None:
    """Seed the default generators of all emu devices (``torch.manual_seed`` calls this)."""
    for index in range(device_count()):
        _ops.manual_seed(index, _seed_bits(seed))


def seed() -> int:
    """Seed the current device's generator non-deterministically; return the seed."""
    return int(_ops.seed(current_device())) % _UINT64


def seed_all() -> None:
    """Seed every device's generator with one non-deterministic seed."""
    manual_seed_all(int(_ops.seed(0)))


def initial_seed() -> int:
    """The seed of the current device's default generator (unsigned, as the CPU's)."""
    return int(_ops.initial_seed(current_device())) % _UINT64


def get_rng_state(device: Any = None) -> torch.Tensor:
    """The state of a device's default generator as a CPU ByteTensor."""
    return _ops.get_rng_state(_index(device))


def set_rng_state(new_state: torch.Tensor, device: Any = None) -> None:
    """Restore a state returned by :func:`get_rng_state`."""
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
        raise TypeError("set_rng_state: expected a torch.uint8 tensor from get_rng_state()")
    # As _RuntimeOps: no mode sees the copy.
    with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
        state = new_state.cpu()
    if _plants.is_active("rng_state_ignored"):
        return
    _ops.set_rng_state(_index(device), state)


def get_rng_state_all() -> list[torch.Tensor]:
    """The states of all devices' default generators."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    """Restore the states returned by :func:`get_rng_state_all`."""
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def memory_stats(device: Any = None) -> dict[str, int]:
    """Allocator statistics of a device, with CUDA-style key names."""
    values = _ops.memory_stats(_index(device))
    keys = (
        "allocated_bytes.all.current",
        "allocated_bytes.all.peak",
        "allocated_bytes.all.allocated",
        "allocated_bytes.all.freed",
        "allocation.all.current",
        "allocation.all.peak",
        "allocation.all.allocated",
        "allocation.all.freed",
    )
    return dict(zip(keys, (int(v) for v in values), strict=True))


def memory_allocated(device: Any = None) -> int:
    """Bytes currently allocated on a device by live tensors and storages."""
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: Any = None) -> int:
    """Peak of :func:`memory_allocated` since start or the last peak reset."""
    return memory_stats(device)["allocated_bytes.all.peak"]


def reset_peak_memory_stats(device: Any = None) -> None:
    """Restart peak tracking from the current allocation level."""
    _ops.reset_peak_memory_stats(_index(device))


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Low-precision dtypes ``torch.autocast(device_type="emu")`` may use."""
    return [torch.float16, torch.bfloat16]


# -- streams and events ---------------------------------------------------------------------


class Stream(torch.Stream):
    """A stream on an emu device (``torch.Stream`` with emu as its device type), as
    ``torch.cuda.Stream`` is for CUDA: ``Stream()`` is a new stream on the current device,
    ``Stream(device)`` one on ``device``. Work is ordered on emu whatever the stream, so
    a stream is always idle (``query()`` is True) and waiting on one returns at once."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
        if kwargs:  # stream_id, device_index, device_type: an existing stream
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device("emu", _index(device)), priority=priority)


class Event(torch.Event):
    """An event on emu (``torch.Event`` with emu as its device type), as
    ``torch.cuda.Event`` is for CUDA. Complete as soon as recorded; with
    ``enable_timing=True``, ``elapsed_time`` gives the host time between two records."""

    def __new__(
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> Event:
        return super().__new__(
            cls,
            device=torch.device("emu", current_device()),
            enable_timing=enable_timing,
            blocking=blocking,
            interprocess=interprocess,
        )


def _as_stream(stream: torch.Stream) -> Stream:
    return Stream(
        stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type
    )


def current_stream(device: Any = None) -> Stream:
    """The stream the current thread runs on for ``device`` (default: the current device)."""
    return _as_stream(torch.accelerator.current_stream(_index(device)))


def default_stream(device: Any = None) -> Stream:
    """The default stream of ``device``: stream 0."""
    current = torch.accelerator.current_stream(_index(device))
    return Stream(stream_id=0, device_index=current.device_index, device_type=current.device_type)


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` the current stream of its device for this thread."""
    if stream is not None:
        torch.accelerator.set_stream(stream)


@contextmanager
def stream(stream: torch.Stream | None) -> Iterator[None]:
    """Run the block on ``stream`` (None: leave the current stream), then restore."""
    if stream is None:
        yield
        return
    previous = torch.accelerator.current_stream(stream.device_index)
    torch.accelerator.set_stream(stream)
    try:
        yield
    finally:
        torch.accelerator.set_stream(previous)


# -- memory beyond the allocator's counters ---------------------------------------------------


def memory_reserved(device: Any = None) -> int:
    """Bytes held by the allocator: emu caches nothing, so what is allocated."""
    return memory_allocated(device)


def max_memory_reserved(device: Any = None) -> int:
    """Peak of :func:`memory_reserved`."""
    return max_memory_allocated(device)


def reset_max_memory_allocated(device: Any = None) -> None:
    """Restart the peak of :func:`memory_allocated` (``reset_peak_memory_stats`` does more)."""
    reset_peak_memory_stats(device)


def empty_cache() -> None:
    """Release cached memory: emu's allocator caches nothing, so there is none."""
