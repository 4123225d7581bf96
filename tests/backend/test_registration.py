"""Registration: the emu name, the torch.emu device module, generated methods, accelerator,
and the torch.backends entry point."""

from __future__ import annotations

import pytest
import torch
import torch_emu

from tests.backend.conftest import run_python


def test_privateuse1_is_renamed_and_available():
    assert torch._C._get_privateuse1_backend_name() == "emu"
    assert torch.emu.is_available()
    assert torch.emu.device_count() == 2
    assert torch.accelerator.current_accelerator() == torch.device("emu")
    assert torch.accelerator.device_count() == 2


def test_set_device_and_device_context_manager():
    assert torch.emu.current_device() == 0
    with torch.emu.device(1):
        assert torch.emu.current_device() == 1
        assert torch.empty(1, device="emu").device == torch.device("emu:1")
    assert torch.emu.current_device() == 0
    torch.emu.set_device("emu:1")
    try:
        assert torch.accelerator.current_device_index() == 1
    finally:
        torch.emu.set_device(0)


def test_bad_device_index_names_the_count():
    with pytest.raises(ValueError, match="out of range: this process has 2 emu devices"):
        torch.emu.set_device(5)
    with pytest.raises(RuntimeError, match="device index 7 is out of range"):
        torch.empty(1, device="emu:7")


def test_generated_methods_on_tensors_modules_and_storages():
    t = torch.ones(3).emu()
    assert t.is_emu and t.device.type == "emu"
    module = torch.nn.Linear(2, 2).emu()
    assert all(p.device.type == "emu" for p in module.parameters())
    storage = torch.UntypedStorage(8).emu()
    assert storage.device.type == "emu"
    assert torch.ones(2).to("emu:1").device == torch.device("emu:1")


def test_streams_events_and_synchronize_are_coherent():
    stream = torch.Stream(device="emu")
    start, end = (
        torch.Event(device="emu", enable_timing=True),
        torch.Event(device="emu", enable_timing=True),
    )
    start.record(stream)
    torch.ones(10, device="emu").sum()
    end.record(stream)
    end.synchronize()
    assert stream.query() and end.query()
    assert start.elapsed_time(end) >= 0.0
    torch.emu.synchronize()
    torch.accelerator.synchronize()


def test_version_and_lowering_records():
    assert torch_emu.__version__
    records = torch_emu.lowerings()
    kinds = {r.kind for r in records}
    assert kinds == {"native", "python"}
    by_overload = {r.overload: r for r in records}
    assert by_overload["aten::empty.memory_format"].kind == "native"
    assert by_overload["aten::empty.memory_format"].source.startswith(
        "torch_emu/csrc/emu_core.cpp:"
    )
    assert by_overload["aten::add.Tensor"].kind == "python"
    assert by_overload["aten::add.Tensor"].source.startswith("torch_emu/lowering/pointwise.py:")
    assert len(by_overload) == len(records), "an overload is listed twice"


def test_strategies_and_dispatcher_sources_agree_with_the_registry():
    by_overload = {r.overload: r for r in torch_emu.lowerings()}
    assert by_overload["aten::view"].strategy == "structural"
    assert by_overload["aten::add.Tensor"].strategy == "derived"
    assert by_overload["aten::native_dropout"].strategy == "custom"
    # Derived kernels are registered under their declaration's file and line.
    for overload in ("aten::add.Tensor", "aten::mm"):
        table = torch._C._dispatch_dump_table(overload)
        line = next(x for x in table.splitlines() if x.startswith("PrivateUse1:"))
        assert by_overload[overload].source in line, line


def test_every_listed_lowering_is_registered_in_the_dispatcher():
    for record in torch_emu.lowerings():
        assert torch._C._dispatch_has_kernel_for_dispatch_key(record.overload, "PrivateUse1"), (
            record.overload
        )


def test_python_lowering_sources_point_at_their_declaration():
    import pathlib

    root = pathlib.Path(torch_emu.__file__).parent.parent
    for record in torch_emu.lowerings():
        if record.kind != "python":
            continue
        path, line = record.source.rsplit(":", 1)
        text = (root / path).read_text().splitlines()[int(line) - 1]
        name = record.overload.removeprefix("aten::")
        assert "lower" in text, record  # the lower(...) call or the @lowering decorator
        if "@lowering" in text:
            assert f'"{record.overload}"' in text, (record, text)
        else:
            assert name.split(".")[0] in (root / path).read_text(), record


@pytest.mark.slow
def test_import_torch_alone_registers_emu_before_common_device_type():
    result = run_python(
        """
        import torch
        print(torch.randn(3, device="emu").device)
        import torch.testing._internal.common_device_type as c
        print([b.__name__ for b in c.get_device_type_test_bases()])
        """
    )
    assert result.returncode == 0, result.stderr
    assert "emu:0" in result.stdout
    assert "PrivateUse1TestBase" in result.stdout


@pytest.mark.slow
def test_importing_torch_emu_first_is_safe_and_env_is_read():
    result = run_python(
        """
        import torch_emu, torch
        print(torch.emu.device_count(), torch_emu.cpu_fallback_enabled())
        """,
        EMU_DEVICE_COUNT="3",
        EMU_CPU_FALLBACK="1",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["3", "True"]
