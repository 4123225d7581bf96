"""ATen overload names in one spelling: ``aten::add.Tensor``, ``aten::dot`` (default overload).

The dispatcher (``_dispatch_get_all_op_names``), the "Could not run 'aten::cumsum.out'" error
and backend registries use ``ns::name.overload`` with no suffix for the default overload;
Python spells the same overload ``aten.dot.default`` (``str(OpOverload)``). Everything in
this package compares names in the dispatcher's spelling.
"""

from __future__ import annotations

import re

from conformance.errors import ConfigError

__all__ = ["is_aten", "normalize_overload", "overload_of", "packet_of"]

_QUALIFIED = re.compile(r"^(?P<ns>[A-Za-z_]\w*)(?:::|\.)(?P<name>[A-Za-z_]\w*)(?:\.(?P<ov>\w+))?$")


def normalize_overload(text: str, *, where: str = "") -> str:
    """The dispatcher spelling of an overload name given in any of the usual spellings:
    ``aten::add.Tensor``, ``aten.add.Tensor``, ``aten::dot.default`` -> ``aten::dot``.

    Raises ConfigError (naming ``where``) for text that is not a qualified operator name.
    """
    match = _QUALIFIED.match(text.strip())
    if match is None:
        raise ConfigError(f"not an operator overload name: {text!r}", where=where)
    overload = match["ov"]
    if overload in (None, "default"):
        return f"{match['ns']}::{match['name']}"
    return f"{match['ns']}::{match['name']}.{overload}"


def overload_of(op: object) -> str:
    """The dispatcher spelling of a ``torch._ops.OpOverload`` (``aten::add.Tensor``)."""
    schema = op._schema  # type: ignore[attr-defined]
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def packet_of(overload: str) -> str:
    """The operator (packet) an overload belongs to: ``aten::add.Tensor`` -> ``aten::add``."""
    return overload.split(".", 1)[0]


def is_aten(overload: str) -> bool:
    """Whether the overload lives in the ``aten`` namespace."""
    return overload.startswith("aten::")
