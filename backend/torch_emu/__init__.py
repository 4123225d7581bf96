"""emu: a PrivateUse1 accelerator emulated on host memory, the harness's reference backend.

Importing this package (or just ``import torch``, through the ``torch.backends``
entry point) renames PrivateUse1 to ``emu``, registers the ``torch.emu`` device
module and the ``.emu()``/``.to("emu")`` methods, loads the native core
(allocator, device guard, generators, structural kernels) and registers the
Python lowerings.  See README.md for the environment variables and the API.
"""

from __future__ import annotations

import torch

from torch_emu import config as _config

__version__ = "0.1.0"

__all__ = [
    "Lowering",
    "__version__",
    "cpu_fallback_enabled",
    "fallback_counts",
    "lowerings",
    "planted_bugs",
    "reset_fallback_counts",
    "set_cpu_fallback",
    "unsupported_features",
]

_settings = _config.read_settings()

try:
    from torch_emu import _C  # noqa: F401  (loading the library runs its registrations)
except ImportError as _exc:
    raise ImportError(
        "torch_emu: the native core torch_emu._C is missing or was built against another "
        f"torch (installed: {torch.__version__}). Rebuild it with "
        "`pip install --no-build-isolation ./backend` (needs a C++ compiler)."
    ) from _exc

from torch_emu import device as _device  # noqa: E402
from torch_emu import distributed as _distributed  # noqa: E402
from torch_emu import plants as _plants  # noqa: E402
from torch_emu import unsupported as _unsupported  # noqa: E402
from torch_emu.fallback import (  # noqa: E402
    cpu_fallback_enabled,
    fallback_counts,
    reset_fallback_counts,
    set_cpu_fallback,
)
from torch_emu.lowering import Lowering, records, register_all  # noqa: E402


def _register_backend() -> None:
    current = torch._C._get_privateuse1_backend_name()
    if current == "emu":
        return  # already registered in this process
    if current != "privateuseone":
        raise RuntimeError(
            f"torch_emu: PrivateUse1 is already taken by backend {current!r} in this process; "
            "only one PrivateUse1 backend can be loaded at a time"
        )
    torch.utils.rename_privateuse1_backend("emu")
    torch._register_device_module("emu", _device)
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    # Ops outside the autocast policy pass through the Autocast key unchanged (without a
    # kernel there every op under torch.autocast("emu") would fail); the policy's own ops
    # get the native core's kernels (_register_autocast).
    _autocast_library.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")


def _register_autocast() -> None:
    """torch's autocast policy for accelerators on emu (csrc/emu_autocast.cpp), unless the
    ``no_autocast`` plant leaves emu without it."""
    if not _plants.is_active("no_autocast"):
        torch.ops.emu.register_autocast()


def _register_profiler() -> None:
    """emu's kernels and copies as device events in torch.profiler (csrc/emu_profiler.cpp),
    unless the ``no_profiler`` plant leaves emu without them."""
    if not _plants.is_active("no_profiler"):
        torch.ops.emu.register_profiler()


_autocast_library = torch.library.Library("_", "IMPL")


_register_backend()
_plants.activate(_settings.plants)  # before the lowerings, which ask for the plants' hooks
_register_autocast()
_register_profiler()
register_all()
_distributed.register()
_unsupported.install()
if _settings.cpu_fallback:
    set_cpu_fallback(True)


def lowerings() -> list[Lowering]:
    """All lowerings of emu: the C++ kernels of the native core (``kind="native"``) followed by
    the Python lowerings (``kind="python"``), each with its ATen overload and source line."""
    names, lines = torch.ops.emu.native_kernels()
    native = [
        Lowering(name, "native", f"torch_emu/csrc/emu_core.cpp:{line}", "structural")
        for name, line in zip(names, lines, strict=True)
    ]
    return native + records()


def unsupported_features() -> dict[str, list[str]]:
    """Feature name -> where it is caught (overloads, or ``fallback:<DispatchKey>``)."""
    out: dict[str, list[str]] = {name: [] for name in _unsupported.FEATURES}
    for reg in _unsupported.registrations():
        out[reg.feature].append(reg.target)
    return out


def planted_bugs() -> dict[str, bool]:
    """Planted bug name -> whether EMU_PLANT switched it on in this process."""
    return {name: _plants.is_active(name) for name in _config.PLANTS}
