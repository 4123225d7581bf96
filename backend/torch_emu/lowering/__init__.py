"""Python lowerings of emu, one module per op family; importing this package registers them."""

from __future__ import annotations

from torch_emu.lowering import (  # noqa: F401  (imported for their registrations)
    factory,
    indexing,
    linalg,
    nn,
    pointwise,
    reduction,
    shape,
)
from torch_emu.lowering.registry import Lowering, records

__all__ = ["Lowering", "records"]
