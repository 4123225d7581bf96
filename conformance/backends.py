"""Finding and describing the backend a run targets, by device type alone.

``cpu`` needs nothing. Any other device type must be registered as the PrivateUse1 backend
before PyTorch's test modules are imported, by one of (in this order):

1. torch's own autoload: ``import torch`` loads every ``torch.backends`` entry point unless
   ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``;
2. the ``torch.backends`` entry points loaded explicitly (when autoload is off);
3. a module named by the user (``--backend-module``), imported.

What the harness reads from the backend package is optional (docs/architecture.md, "What a
backend package may offer"): ``__version__``, ``lowerings()``, ``fallback_counts()``,
``reset_fallback_counts()``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from conformance.errors import ConfigError

__all__ = [
    "Backend",
    "backend_package_name",
    "compile_backend",
    "describe_backend",
    "load_backend",
    "registered_backend_name",
    "torch_build",
]

_ENTRY_POINT_GROUP = "torch.backends"
#: Optional functions a backend package may offer (docs/architecture.md).
_HOOKS = ("lowerings", "fallback_counts", "reset_fallback_counts")


@dataclass
class Backend:
    """A loaded backend: who it is, and the optional hooks its package offers."""

    name: str  # the device type, as in torch.device(name)
    module: ModuleType | None  # the backend's package, where known
    version: str = ""
    git: str = ""
    #: Spellings of the device in test class and test names (class suffix PRIVATEUSE1 or name).
    device_names: tuple[str, ...] = ()
    lowerings: Callable[[], Any] | None = field(default=None, repr=False)
    fallback_counts: Callable[[], Any] | None = field(default=None, repr=False)
    reset_fallback_counts: Callable[[], Any] | None = field(default=None, repr=False)

    def fallback_ops(self) -> list[str]:
        """The ATen overloads that ran on the CPU fallback since the last reset, sorted."""
        if self.fallback_counts is None:
            return []
        counts = self.fallback_counts()
        if isinstance(counts, dict):
            return sorted(op for op, count in counts.items() if count)
        return sorted(set(counts or ()))


def registered_backend_name() -> str:
    """The name PrivateUse1 is renamed to (``privateuse1`` when no backend renamed it)."""
    import torch

    return torch._C._get_privateuse1_backend_name()


#: How a dynamic loader says a library needs a symbol no loaded library defines (glibc's
#: dlopen, its lazy binding, macOS's dyld).
_MISSING_SYMBOL = re.compile(r"undefined symbol|symbol not found|symbol lookup error", re.I)


@contextlib.contextmanager
def _backend_code(what: str, where: str) -> Iterator[None]:
    """Turns an exception raised by a backend's own code (its import, its registration)
    into a ConfigError naming what failed, the exception, its root cause when it was
    raised from another one, and the line that raised the root cause."""
    try:
        yield
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"{what}: {_load_failure(exc)}", where=where) from exc


def _load_failure(exc: BaseException) -> str:
    """``Type: message (at file:line)`` for ``exc``; when it was raised from (or while
    handling) another exception, the innermost one of the chain is named as the root cause,
    with the line that raised it, and a missing C++ symbol gets its likely reason: an
    extension built against another torch release."""
    chain = _exception_chain(exc)
    root = chain[-1]
    text = f"{type(exc).__name__}: {exc}"
    if root is not exc:
        text += f"; root cause: {type(root).__name__}: {root}"
    # Where the root cause was raised (or, when it never was, the innermost that was).
    for raised in reversed(chain):
        frames = traceback.extract_tb(raised.__traceback__)
        # importlib's own frames say nothing about the backend.
        frames = [f for f in frames if not f.filename.startswith("<frozen ")] or frames
        if frames:
            text += f" (at {frames[-1].filename}:{frames[-1].lineno})"
            break
    if _MISSING_SYMBOL.search(str(root)):
        try:
            installed = f"the installed torch {torch_build()[0]}"
        except Exception:  # torch itself is what cannot be imported
            installed = "the installed one"
        text += (
            "; the extension was likely built against another torch release than "
            f"{installed}: rebuild it against this torch "
            "(for emu: pip install --no-build-isolation ./backend)"
        )
    return text


def _exception_chain(exc: BaseException) -> list[BaseException]:
    """``exc``, then each exception it was raised from: its explicit ``__cause__``, else the
    ``__context__`` it was raised in unless that was suppressed (``raise ... from None``),
    to the innermost (or to where the chain loops back on itself)."""
    chain = [exc]
    seen = {id(exc)}
    while True:
        inner = exc.__cause__
        if inner is None and not exc.__suppress_context__:
            inner = exc.__context__
        if inner is None or id(inner) in seen:
            return chain
        chain.append(inner)
        seen.add(id(inner))
        exc = inner


def load_backend(device_type: str, module_name: str | None = None) -> Backend:
    """Load the backend for ``device_type`` so that its device can be used and its test
    classes instantiated; ConfigError (naming the device and what was tried) when no
    installed backend provides it, or when loading it raises."""
    # torch imports every installed backend (torch.backends entry points) as it loads.
    with _backend_code("import torch failed while it loaded the installed backends", "torch"):
        import torch

    if not device_type or not device_type.isidentifier():
        raise ConfigError(f"invalid device type {device_type!r}", where="--device")
    if device_type == "cpu":
        return Backend(
            name="cpu",
            module=torch,
            version=str(torch.__version__),
            git=torch.version.git_version,
            device_names=("cpu",),
        )
    if device_type in ("cuda", "xpu", "mps", "meta"):
        raise ConfigError(
            f"device {device_type!r} is built into torch, not a PrivateUse1 backend",
            where="--device",
        )

    package: ModuleType | None = None
    if module_name:
        with _backend_code(f"cannot import {module_name!r}", "--backend-module"):
            package = importlib.import_module(module_name)
    entry_point = _entry_point_for(device_type, registered=registered_backend_name() == device_type)
    if registered_backend_name() != device_type and entry_point is not None:
        # Autoload was off (TORCH_DEVICE_BACKEND_AUTOLOAD=0): load the entry point ourselves.
        with _backend_code(
            f"loading {entry_point.value!r} failed",
            f"torch.backends entry point {entry_point.name!r}",
        ):
            entry_point.load()()
    if registered_backend_name() != device_type:
        installed = sorted(
            ep.name for ep in importlib.metadata.entry_points(group=_ENTRY_POINT_GROUP)
        )
        raise ConfigError(
            f"unknown device {device_type!r}: no installed backend registers it "
            f"(torch.backends entry points: {', '.join(installed) or 'none'}; "
            f"PrivateUse1 is named {registered_backend_name()!r}); "
            "install the backend or name its module with --backend-module",
            where="--device",
        )
    if package is None and entry_point is not None:
        package = _package_of(entry_point)
    if package is None:
        package = getattr(torch, device_type, None)
    return _describe(device_type, package, entry_point)


def describe_backend(device_type: str, module_name: str | None = None) -> Backend:
    """The backend for ``device_type`` as far as it is known without importing torch or the
    backend: what an xdist controller needs (the workers load the backend itself), which
    saves the controller torch's start-up on the run's critical path.

    Checks what can be checked without importing: the device type, that ``--backend-module``
    exists, and that an installed ``torch.backends`` entry point or that module provides
    the device. ConfigError otherwise, as load_backend."""
    if not device_type or not device_type.isidentifier():
        raise ConfigError(f"invalid device type {device_type!r}", where="--device")
    if device_type == "cpu":
        version, git = torch_build()
        return Backend(name="cpu", module=None, version=version, git=git, device_names=("cpu",))
    if device_type in ("cuda", "xpu", "mps", "meta"):
        raise ConfigError(
            f"device {device_type!r} is built into torch, not a PrivateUse1 backend",
            where="--device",
        )
    version = ""
    if module_name:
        try:
            found = importlib.util.find_spec(module_name)
        except (ImportError, ValueError) as exc:
            raise ConfigError(
                f"cannot import {module_name!r}: {exc}", where="--backend-module"
            ) from exc
        if found is None:
            raise ConfigError(
                f"cannot import {module_name!r}: no such module", where="--backend-module"
            )
        version = _distribution_version(module_name.partition(".")[0])
    entry_point = _entry_point_for(device_type, registered=False)
    if entry_point is None and not module_name:
        installed = sorted(
            ep.name for ep in importlib.metadata.entry_points(group=_ENTRY_POINT_GROUP)
        )
        raise ConfigError(
            f"unknown device {device_type!r}: no installed backend provides it "
            f"(torch.backends entry points: {', '.join(installed) or 'none'}); "
            "install the backend or name its module with --backend-module",
            where="--device",
        )
    if not version and entry_point is not None and entry_point.dist is not None:
        version = entry_point.dist.version
    return Backend(
        name=device_type, module=None, version=version, device_names=(device_type, "privateuse1")
    )


#: Names the torch.compile backend compile mode uses, over the device's default.
COMPILE_BACKEND_ENV = "CONFORMANCE_COMPILE_BACKEND"


def compile_backend(device_type: str) -> str:
    """The torch.compile backend for ``device_type`` in compile mode: the one
    ``CONFORMANCE_COMPILE_BACKEND`` names, ``inductor`` for cpu, else the Dynamo backend
    registered under the device's name (emu registers ``emu``); ConfigError otherwise."""
    named = os.environ.get(COMPILE_BACKEND_ENV, "").strip()
    if named:
        return named
    if device_type == "cpu":
        return "inductor"
    from torch._dynamo import list_backends

    if device_type in list_backends(exclude_tags=()):
        return device_type
    raise ConfigError(
        f"no torch.compile backend is registered as {device_type!r} (a torch_dynamo_backends "
        f"entry point); name one with {COMPILE_BACKEND_ENV}",
        where="--mode compile",
    )


def backend_package_name(device_type: str) -> str:
    """The top-level package of the installed backend for ``device_type``, found from its
    ``torch.backends`` entry point without importing it; ConfigError when none is installed."""
    entry_point = _entry_point_for(device_type, registered=False)
    if entry_point is None:
        raise ConfigError(f"no installed backend provides device {device_type!r}", where="--device")
    return entry_point.module.partition(".")[0]


def torch_build() -> tuple[str, str]:
    """The installed torch's version and git commit, read from its metadata and its
    generated ``torch/version.py`` rather than by importing it (seconds)."""
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        return str(torch.__version__), torch.version.git_version
    spec = importlib.util.find_spec("torch")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            text = (Path(folder) / "version.py").read_text(encoding="utf-8")
        except OSError:
            continue
        values = dict(re.findall(r"^(__version__|git_version)\s*=\s*'([^']*)'", text, re.M))
        if "__version__" in values:
            return values["__version__"], values.get("git_version", "")
    import torch

    return str(torch.__version__), torch.version.git_version


def _distribution_version(top_level: str) -> str:
    for name in importlib.metadata.packages_distributions().get(top_level, ()):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def _package_of(entry_point: importlib.metadata.EntryPoint) -> ModuleType:
    """The module holding the backend's hooks: the entry point's module, or else its
    top-level package (an entry point often lives in a small loader module, such as
    ``torch_emu._autoload``, while the hooks live on ``torch_emu``)."""
    module = importlib.import_module(entry_point.module)
    if any(hasattr(module, hook) for hook in _HOOKS):
        return module
    top = importlib.import_module(entry_point.module.partition(".")[0])
    return top if any(hasattr(top, hook) for hook in _HOOKS) else module


def _entry_point_for(device_type: str, *, registered: bool) -> importlib.metadata.EntryPoint | None:
    """The ``torch.backends`` entry point that provides ``device_type``: one whose name or
    module names the device (``emu``, ``torch_npu`` for ``npu``); once the device is known to
    be registered, also the only one installed."""
    entry_points: Sequence[importlib.metadata.EntryPoint] = list(
        importlib.metadata.entry_points(group=_ENTRY_POINT_GROUP)
    )
    for entry_point in entry_points:
        if entry_point.name == device_type:
            return entry_point
    for entry_point in entry_points:
        if device_type in entry_point.name or device_type in entry_point.module.split("."):
            return entry_point
    if registered and len(entry_points) == 1:
        return entry_points[0]
    return None


def _describe(
    device_type: str,
    package: ModuleType | None,
    entry_point: importlib.metadata.EntryPoint | None,
) -> Backend:
    version = str(getattr(package, "__version__", "") or "")
    if not version and entry_point is not None and entry_point.dist is not None:
        version = entry_point.dist.version
    git = str(getattr(package, "__git_version__", "") or getattr(package, "git_version", "") or "")

    def optional(name: str) -> Callable[[], Any] | None:
        hook = getattr(package, name, None)
        return hook if callable(hook) else None

    return Backend(
        name=device_type,
        module=package,
        version=version,
        git=git,
        device_names=(device_type, "privateuse1"),
        lowerings=optional("lowerings"),
        fallback_counts=optional("fallback_counts"),
        reset_fallback_counts=optional("reset_fallback_counts"),
    )
