"""Static status of every ATen overload for a backend: native, composite, fallback, missing.

The dispatcher decides the status, because it is what runs (:mod:`op_coverage.dispatcher`).
When the backend offers a lowering registry (``lowerings()``, docs/architecture.md), the
registry supplies the kind (``native`` for C++, ``python``) and the source of each native
lowering, and the two are cross-checked: an op the registry lists but the dispatcher does not
run natively, an op the dispatcher runs natively but the registry does not list, and a kind
that contradicts the file the dispatcher names are all reported as disagreements.

A backend may also register kernels that only refuse an unsupported feature (emu's
``unsupported_features()``: feature -> overloads). Such an op is not lowered: its status
is ``missing`` with kind ``unsupported:<feature>``, not ``native``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from conformance.errors import ConfigError
from op_coverage.dispatcher import aten_overloads, dispatch_key_for, dispatcher_view
from op_coverage.names import is_aten, normalize_overload

__all__ = ["Disagreement", "Lowering", "OpStatus", "StaticTable", "static_table"]


@dataclass(frozen=True)
class Lowering:
    """One entry of a backend's lowering registry."""

    overload: str
    kind: str  # "native" (C++) or "python"
    source: str = ""  # "file.py:LINE"


@dataclass(frozen=True)
class OpStatus:
    """The static status of one ATen overload for one backend."""

    op: str
    status: str  # native | composite | fallback | missing
    kind: str = (
        ""  # native | python | CompositeImplicitAutograd | CompositeExplicitAutograd... | fallback
    )
    source: str = ""
    in_core: bool = False


@dataclass(frozen=True)
class Disagreement:
    """A lowering the registry and the dispatcher see differently."""

    op: str
    registry: str  # what the registry says ("python lowering at x.py:3", "not listed")
    dispatcher: str  # what the dispatcher says
    problem: str


@dataclass
class StaticTable:
    """Every ATen overload of the installed torch with its status for ``device``."""

    device: str
    dispatch_key: str
    ops: dict[str, OpStatus]
    has_registry: bool = False
    disagreements: list[Disagreement] = field(default_factory=list)
    #: Registry entries outside the aten namespace (the backend's own ops), not counted.
    other_namespaces: list[str] = field(default_factory=list)
    backend_version: str = ""  # where the backend was loaded by load_static_table

    def counts(self) -> dict[str, int]:
        """How many overloads have each status."""
        totals = dict.fromkeys(("native", "composite", "fallback", "missing"), 0)
        for row in self.ops.values():
            totals[row.status] += 1
        return totals


def _as_lowering(item: Any, position: int) -> Lowering:
    where = f"lowerings()[{position}]"
    get = (
        item.get
        if isinstance(item, dict)
        else lambda name, default=None: getattr(item, name, default)
    )
    overload, kind = get("overload"), get("kind")
    if not isinstance(overload, str) or not overload:
        raise ConfigError("lowering has no 'overload' name", where=where)
    if kind not in ("native", "python"):
        raise ConfigError(
            f"lowering {overload} has kind {kind!r}, expected 'native' or 'python'", where=where
        )
    return Lowering(normalize_overload(overload, where=where), kind, str(get("source", "") or ""))


def _declined(unsupported: Mapping[str, Iterable[str]] | None) -> dict[str, str]:
    declined: dict[str, str] = {}
    for feature, targets in (unsupported or {}).items():
        for target in targets:
            if "::" in target:  # "fallback:<DispatchKey>" entries are not per-op kernels
                declined[
                    normalize_overload(target, where=f"unsupported_features()[{feature!r}]")
                ] = feature
    return declined


def static_table(
    device_type: str,
    lowerings: Iterable[Any] | None = None,
    unsupported: Mapping[str, Iterable[str]] | None = None,
) -> StaticTable:
    """The status of every ATen overload for ``device_type`` in this process.

    ``lowerings`` is the backend's registry (objects or dicts with ``overload``, ``kind``,
    ``source``), or None for a backend without one (then the dispatcher alone decides kind
    and source). ``unsupported`` maps a feature to the overloads whose backend kernel only
    refuses it. Raises ConfigError for a malformed registry entry.
    """
    key = dispatch_key_for(device_type)
    # Check the registry before the (slower) dispatcher scan, so bad entries fail fast.
    listed = [_as_lowering(item, position) for position, item in enumerate(lowerings or ())]
    declined = _declined(unsupported)
    overloads = aten_overloads()
    view = dispatcher_view(key, list(overloads))
    registry: dict[str, Lowering] = {}
    other: list[str] = []
    disagreements: list[Disagreement] = []
    for lowering in listed:
        if not is_aten(lowering.overload):
            other.append(lowering.overload)
        elif lowering.overload not in overloads:
            disagreements.append(
                Disagreement(
                    lowering.overload,
                    f"{lowering.kind} lowering",
                    "no such overload",
                    "the registry lowers an overload this torch does not define",
                )
            )
        else:
            registry[lowering.overload] = lowering

    ops: dict[str, OpStatus] = {}
    for name, tags in overloads.items():
        entry = view[name]
        kind, source = entry.kind, entry.source
        lowering = registry.get(name)
        if name in declined and lowering is None and entry.status == "native":
            ops[name] = OpStatus(
                name, "missing", f"unsupported:{declined[name]}", source, "core" in tags
            )
            continue
        if lowering is not None:
            said = f"{lowering.kind} lowering at {lowering.source or '?'}"
            if entry.status != "native":
                disagreements.append(
                    Disagreement(
                        name,
                        said,
                        f"{entry.status} {entry.kind}".strip(),
                        "listed in the registry, but the dispatcher runs no kernel of the backend",
                    )
                )
            elif lowering.kind != entry.kind:
                disagreements.append(
                    Disagreement(
                        name,
                        said,
                        f"{entry.kind} kernel at {entry.source}",
                        "the registry's kind contradicts the file the dispatcher names",
                    )
                )
            else:
                kind, source = lowering.kind, lowering.source or entry.source
        elif lowerings is not None and entry.status == "native":
            disagreements.append(
                Disagreement(
                    name,
                    "not listed",
                    f"{entry.kind} kernel at {entry.source}",
                    "the dispatcher runs a backend kernel the registry does not list",
                )
            )
        ops[name] = OpStatus(name, entry.status, kind, source, in_core="core" in tags)
    return StaticTable(
        device=device_type,
        dispatch_key=key,
        ops=ops,
        has_registry=lowerings is not None,
        disagreements=disagreements,
        other_namespaces=sorted(other),
    )


def load_static_table(device_type: str, module_name: str | None = None) -> StaticTable:
    """Load the backend for ``device_type`` (``conformance.backends.load_backend``) and build
    its static table, using its lowering registry when it offers one."""
    import importlib

    from conformance.backends import load_backend

    backend = load_backend(device_type, module_name)
    package = backend.module
    lowerings = backend.lowerings
    if lowerings is None and package is not None and "." in package.__name__:
        # The entry point may name a submodule (torch_emu._autoload): the hooks live on
        # the top-level package.
        package = importlib.import_module(package.__name__.split(".", 1)[0])
        lowerings = getattr(package, "lowerings", None)
    unsupported = getattr(package, "unsupported_features", None)
    table = static_table(
        device_type,
        lowerings() if callable(lowerings) else None,
        unsupported() if callable(unsupported) else None,
    )
    table.backend_version = backend.version
    return table
