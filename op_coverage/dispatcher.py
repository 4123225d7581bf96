"""What PyTorch's dispatcher says about a dispatch key, op by op.

This is the view that works for every backend, with no help from the backend package: for
each ATen overload, the kernel the dispatcher would run for the backend's dispatch key, read
from the key's line of ``torch._C._dispatch_dump_table(op)``::

    PrivateUse1: registered at .../lowering/pointwise.py:12 [kernel]        -> native (python)
    PrivateUse1: registered at .../csrc/emu_core.cpp:212 [kernel]           -> native (C++)
    PrivateUse1: registered at .../RegisterCompositeImplicitAutograd_0.cpp:5570 [math kernel]
                                                                            -> composite
    PrivateUse1: registered at .../RegisterCompositeExplicitAutograd_0.cpp:11641
                 [default backend kernel]                                   -> composite
    PrivateUse1: registered at .../fallback.py:14 [backend fallback]        -> fallback
    (no line, or a fallthrough)                                             -> missing

The parse is checked against the boolean queries (``_dispatch_has_kernel_for_dispatch_key``
for a direct kernel, ``_dispatch_has_computed_kernel_for_dispatch_key`` for any kernel);
:func:`dispatcher_view` raises if they ever disagree, so a change in torch's dump format
cannot silently turn every op into "missing". A scan of all ~3,100 ATen overloads takes
about 0.1 s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from conformance.errors import ConfigError, ConformanceError

__all__ = [
    "STATUSES",
    "DispatchEntry",
    "aten_overloads",
    "dispatch_key_for",
    "dispatcher_view",
]

#: Static status of an op for a backend, best first.
STATUSES = ("native", "composite", "fallback", "missing")

_LINE = re.compile(
    r"^(?P<key>\w+): (?P<fallthrough>fallthrough )?registered at (?P<source>.*?) \[(?P<marker>[^\]]+)\]\s*$"
)
# C++ registrations carry __FILE__; anything else was registered from Python.
_CPP_SOURCE = re.compile(r"\.(cpp|cc|cxx|c|h|hpp|cu|mm):\d+$")


@dataclass(frozen=True)
class DispatchEntry:
    """The dispatcher's answer for one overload and one dispatch key.

    ``kind`` says which kind of kernel: ``native`` (C++ kernel registered for the key),
    ``python`` (Python kernel registered for the key), ``CompositeImplicitAutograd``,
    ``CompositeExplicitAutograd``, ``CompositeExplicitAutogradNonFunctional``,
    ``fallback`` (the key's boxed backend fallback), or ``""`` when missing. ``source`` is
    where the kernel was registered (``file:line``), as the dispatcher records it.
    """

    overload: str
    status: str
    kind: str = ""
    source: str = ""


def dispatch_key_for(device_type: str) -> str:
    """The dispatch key whose kernels run for tensors on ``device_type``: ``CPU`` for cpu,
    ``PrivateUse1`` for the backend PrivateUse1 is renamed to (or ``privateuseone``)."""
    import torch

    if device_type in ("privateuse1", "privateuseone", torch._C._get_privateuse1_backend_name()):
        return "PrivateUse1"
    try:
        return torch._C._dispatch_key_for_device(device_type)
    except RuntimeError as exc:
        raise ConfigError(
            f"unknown device type {device_type!r}: not a torch device type and not the "
            f"registered PrivateUse1 backend ({torch._C._get_privateuse1_backend_name()!r})",
            where="--device",
        ) from exc


def aten_overloads() -> dict[str, tuple[str, ...]]:
    """Every ATen overload the installed torch defines a schema for, with its tags
    (``"core"``, ``"pointwise"``, ...), sorted by name. Names in dispatcher spelling."""
    import torch

    table: dict[str, tuple[str, ...]] = {}
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        base, _, overload = name[len("aten::") :].partition(".")
        try:
            op = getattr(getattr(torch.ops.aten, base), overload or "default")
        except (AttributeError, RuntimeError):
            continue  # an implementation registered for an op with no schema
        table[name] = tuple(sorted(tag.name for tag in op.tags))
    return dict(sorted(table.items()))


def _classify(overload: str, line: str | None, key: str) -> DispatchEntry:
    if line is None:
        return DispatchEntry(overload, "missing")
    match = _LINE.match(line)
    if match is None:
        raise ConformanceError(f"cannot read the dispatcher's {key} entry for {overload}: {line!r}")
    source, marker = match["source"], match["marker"]
    if match["fallthrough"]:
        # A fallthrough skips the key: the dispatcher goes on to a key that has nothing.
        return DispatchEntry(overload, "missing", "", source)
    if marker == "kernel":
        kind = "native" if _CPP_SOURCE.search(source) else "python"
        return DispatchEntry(overload, "native", kind, source)
    if marker == "math kernel":
        return DispatchEntry(overload, "composite", "CompositeImplicitAutograd", source)
    if marker == "default backend kernel":
        kind = (
            "CompositeExplicitAutogradNonFunctional"
            if "NonFunctional" in source
            else "CompositeExplicitAutograd"
        )
        return DispatchEntry(overload, "composite", kind, source)
    if marker == "backend fallback":
        return DispatchEntry(overload, "fallback", "fallback", source)
    raise ConformanceError(f"unknown dispatcher entry kind [{marker}] for {overload} at {key}")


def dispatcher_view(key: str, overloads: list[str] | None = None) -> dict[str, DispatchEntry]:
    """The dispatcher's entry for ``key`` for each overload (default: every ATen overload).

    Raises ConformanceError when the parsed dump and the dispatcher's boolean queries
    disagree about an op, naming the op.
    """
    import torch

    names = list(aten_overloads()) if overloads is None else overloads
    prefix = f"{key}:"
    view: dict[str, DispatchEntry] = {}
    for name in names:
        line = next(
            (
                row
                for row in torch._C._dispatch_dump_table(name).splitlines()
                if row.startswith(prefix)
            ),
            None,
        )
        entry = _classify(name, line, key)
        direct = torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
        computed = torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, key)
        if direct != (entry.status == "native") or computed != (entry.status != "missing"):
            raise ConformanceError(
                f"dispatcher disagrees with itself about {name} at {key}: dump says "
                f"{entry.status!r}, has_kernel={direct}, has_computed_kernel={computed}"
            )
        view[name] = entry
    return view
