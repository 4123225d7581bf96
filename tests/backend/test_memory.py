"""Memory semantics: views and aliasing, resize_, storages, copies between devices,
serialization, zero-size tensors and allocator statistics."""

from __future__ import annotations

import contextlib
import copy
import gc
import io

import torch


@contextlib.contextmanager
def _collector_paused():
    """Collect garbage left by earlier tests, then keep Python's collector from
    freeing device memory between readings of the allocator's statistics."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_views_share_storage_and_in_place_ops_on_views_reach_the_base():
    base = torch.arange(12.0, device="emu")
    row = base.view(3, 4)[1]
    assert row._base is base
    assert row.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    row.add_(100)
    base.view(3, 4).t()[0].mul_(-1)  # a strided view
    expected = torch.arange(12.0).view(3, 4)
    expected[1] += 100
    expected[:, 0] *= -1
    assert torch.equal(base.cpu(), expected.flatten())


def test_all_backend_view_ops_alias():
    z = torch.tensor([1 + 2j, 3 - 4j], device="emu")
    real = torch.view_as_real(z)
    real[0, 0] = 10
    assert z.cpu()[0] == 10 + 2j
    back = torch.view_as_complex(real)
    assert back._base is not None and back.cpu()[1] == 3 - 4j
    x = torch.arange(6.0, device="emu")
    windows = x.unfold(0, 2, 2)
    windows[0, 1] = -1
    assert x.cpu()[1] == -1
    strided = x.as_strided((2,), (3,), 1)
    strided.zero_()
    assert x.cpu().tolist() == [0.0, 0.0, 2.0, 3.0, 0.0, 5.0]


def test_conj_and_neg_views_keep_their_meaning():
    a = torch.tensor([[1 + 1j, 2 - 1j], [0.5j, 3]], device="emu")
    ca = a.cpu()
    assert torch.equal(a.conj().cpu(), ca.conj())
    assert torch.equal(torch._neg_view(a).cpu(), -ca)
    assert torch.allclose(torch.mm(a.conj(), a).cpu(), torch.mm(ca.conj(), ca))
    dst = torch.empty(2, 2, dtype=torch.complex64, device="emu")
    dst.conj().copy_(ca)
    assert torch.equal(dst.cpu(), ca.conj())


def test_resize_growing_keeps_views_aliased():
    x = torch.arange(4.0, device="emu")
    view = x[1:3]
    x.resize_(1000)
    assert x.untyped_storage().data_ptr() == view.untyped_storage().data_ptr()
    x[1] = 42
    assert view.cpu()[0] == 42
    assert torch.equal(x[:4].cpu(), torch.tensor([0.0, 42.0, 2.0, 3.0]))


def test_storages():
    storage = torch.UntypedStorage(16, device="emu")
    assert storage.device.type == "emu" and storage.nbytes() == 16
    storage.resize_(64)
    assert storage.nbytes() == 64
    t = torch.empty(0, device="emu")
    t.set_(storage, 0, (4,), (1,))
    t.fill_(2.5)
    assert torch.equal(t.cpu(), torch.full((4,), 2.5))
    other = torch.empty(0, device="emu").set_(t)
    assert other.data_ptr() == t.data_ptr()
    assert torch.ones(3, device="emu").untyped_storage().cpu().nbytes() == 12


def test_deepcopy_and_save_load():
    x = torch.randn(3, 4, device="emu")
    clone = copy.deepcopy(x)
    assert clone.device == x.device and clone.data_ptr() != x.data_ptr()
    assert torch.equal(clone.cpu(), x.cpu())
    buffer = io.BytesIO()
    torch.save({"whole": x, "view": x[1]}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded["whole"].device == torch.device("emu:0")
    assert torch.equal(loaded["view"].cpu(), x[1].cpu())
    buffer.seek(0)
    assert torch.load(buffer, map_location="cpu")["whole"].device.type == "cpu"


def test_two_devices_and_copies_between_them():
    a = torch.arange(5.0, device="emu:1")
    assert a.device == torch.device("emu:1")
    assert (a * 2).device == torch.device("emu:1")
    b = a.to("emu:0")
    assert b.device == torch.device("emu:0")
    c = torch.empty(5, device="emu:1")
    c.copy_(b)
    assert torch.equal(c.cpu(), a.cpu())
    with _collector_paused():
        allocated_before = torch.emu.memory_allocated(1)
        d = torch.empty(256, device="emu:1")
        assert torch.emu.memory_allocated(1) - allocated_before == 1024
    del d


def test_zero_size_tensors():
    empty = torch.empty(0, 3, device="emu")
    assert empty.sum(0).cpu().tolist() == [0.0, 0.0, 0.0]
    assert torch.cat([empty, torch.ones(1, 3, device="emu")]).shape == (1, 3)
    assert empty.cpu().shape == (0, 3)
    assert torch.zeros(0, device="emu").mean().isnan().item()
    out = torch.empty(0, device="emu")
    torch.add(torch.ones(4, device="emu"), 1, out=out)  # zero-size out: resized silently
    assert out.cpu().tolist() == [2.0] * 4


def test_allocator_statistics_return_to_baseline():
    torch.emu.synchronize()
    with _collector_paused():
        baseline = torch.emu.memory_allocated()
        for _ in range(50):
            x = torch.randn(100, device="emu")
            y = (x * 2 + 1)[10:20].clone()
            y.resize_(500)
            z = torch.mm(x.view(10, 10), x.view(10, 10).t())
            del x, y, z
        assert torch.emu.memory_allocated() == baseline
    stats = torch.emu.memory_stats()
    assert (
        stats["allocation.all.allocated"] - stats["allocation.all.freed"]
        == stats["allocation.all.current"]
    )


def test_peak_statistics_reset():
    torch.emu.reset_peak_memory_stats()
    base = torch.emu.memory_allocated()
    big = torch.empty(10_000, device="emu")
    del big
    assert torch.emu.max_memory_allocated() >= base + 40_000
    with _collector_paused():
        torch.emu.reset_peak_memory_stats()
        assert torch.emu.max_memory_allocated() == torch.emu.memory_allocated()
        assert torch.accelerator.memory_allocated(0) == torch.emu.memory_allocated(0)


def _overlap_error(device: str, write) -> str:
    x = torch.arange(10.0, device=device)
    index = torch.tensor([0, 1], device=device)
    try:
        write(x, index)
    except RuntimeError as exc:
        return str(exc).split("\n")[0]
    return "no error"


def _cat_into_first(empty: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.cat((empty, x), out=empty)


def test_writes_whose_inputs_overlap_their_output_are_refused_as_on_the_cpu():
    """Kernels see overlapping emu tensors as overlapping, so the CPU kernels' checks fire."""
    writes = {
        "copy_": lambda x, i: x[1:6].copy_(x[0:5]),
        "index_add_": lambda x, i: x[:5].index_add_(0, i, x[1:3]),
        "index_copy_": lambda x, i: x[:5].index_copy_(0, i, x[1:3]),
        "mul out=": lambda x, i: torch.mul(x[:5], x[:5], out=x[2:7]),
        "exp out=": lambda x, i: torch.exp(x[:5], out=x[2:7]),
        "add_ of itself": lambda x, i: x.add_(x),  # full overlap is allowed
        # The same tensor as an input and as out=, where it has no elements: the kernel
        # tells them apart by identity, not by memory.
        "cat out= an empty input": lambda x, i: _cat_into_first(torch.zeros(0, device=x.device), x),
        "cat out= an input": lambda x, i: torch.cat((x[5:], x), out=x),
    }
    got = {name: _overlap_error("emu", write) for name, write in writes.items()}
    want = {name: _overlap_error("cpu", write) for name, write in writes.items()}
    assert got == want
    assert sum("unsupported operation" in error for error in got.values()) == 7


def test_pinned_host_memory_is_pinned_and_other_host_memory_is_not():
    host = torch.arange(64.0)
    pinned = host.pin_memory()
    assert pinned.is_pinned() and pinned[10:].is_pinned()
    assert not host.is_pinned() and not torch.empty(8).is_pinned()
    assert torch.empty(8, pin_memory=True).is_pinned()
    assert torch.equal(pinned, host)
    assert torch.equal(pinned.to("emu", non_blocking=True).cpu(), host)


def test_the_device_module_has_streams_events_and_the_reserved_memory_api():
    stream = torch.emu.Stream()
    assert (
        isinstance(stream, torch.Stream)
        and stream.device_type == torch.emu.current_stream().device_type
    )
    default = torch.emu.default_stream()
    assert default.stream_id == 0 and torch.emu.current_stream() == default
    with torch.emu.stream(stream):
        assert torch.emu.current_stream() == stream
        assert torch.accelerator.current_stream() == stream
    assert torch.emu.current_stream() == default
    torch.emu.set_stream(stream)
    try:
        assert torch.emu.current_stream() == stream
    finally:
        torch.emu.set_stream(default)
    event = torch.emu.Event(enable_timing=True)
    event.record()
    assert event.query() and event.device.type == "emu"
    x = torch.empty(1024, device="emu")
    with _collector_paused():
        assert torch.emu.memory_reserved() == torch.emu.memory_allocated() >= x.nbytes
        assert torch.emu.max_memory_reserved() >= torch.emu.memory_reserved()
        torch.emu.empty_cache()
        torch.emu.reset_max_memory_allocated()
        assert torch.emu.max_memory_allocated() == torch.emu.memory_allocated()
