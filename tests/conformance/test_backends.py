"""Loading a backend by device type."""

from __future__ import annotations

import pytest

from conformance.backends import load_backend
from conformance.errors import ConfigError


def test_cpu_needs_nothing_and_reports_torch_as_its_version():
    import torch

    backend = load_backend("cpu")
    assert backend.name == "cpu"
    assert backend.version == torch.__version__
    assert backend.device_names == ("cpu",)
    assert backend.fallback_ops() == []


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("nosuchdev", "unknown device 'nosuchdev': no installed backend registers it"),
        ("cuda", "built into torch, not a PrivateUse1 backend"),
        ("emu:0", "invalid device type"),
    ],
)
def test_devices_that_cannot_be_loaded_are_named(device, message):
    with pytest.raises(ConfigError, match=message):
        load_backend(device)


def test_a_backend_module_that_does_not_import_is_named():
    with pytest.raises(ConfigError, match="--backend-module: cannot import 'no_such_backend_pkg'"):
        load_backend("nosuchdev", "no_such_backend_pkg")


def test_emu_hooks_are_found_on_its_package_behind_the_autoload_module():
    pytest.importorskip("torch_emu")
    backend = load_backend("emu")
    assert backend.module.__name__ == "torch_emu"
    assert backend.version
    assert any(low.overload == "aten::add.Tensor" for low in backend.lowerings())
    backend.reset_fallback_counts()
    assert backend.fallback_ops() == []
