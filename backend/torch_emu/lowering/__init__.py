"""Python lowerings of emu, one module per op family.

Importing this package registers nothing; ``register_all()`` imports the
family modules, whose declarations register the lowerings.  The package
calls it once, after planted bugs are configured.
"""

from __future__ import annotations

import importlib

from torch_emu.lowering.registry import Lowering, LoweringError, records

__all__ = ["FAMILIES", "Lowering", "LoweringError", "records", "register_all"]

FAMILIES = (
    "pointwise",
    "reduction",
    "linalg",
    "indexing",
    "shape",
    "nn",
    "rnn",
    "factory",
    "optim",
)


def register_all() -> None:
    """Import every family module (idempotent: a module registers on first import only)."""
    for family in FAMILIES:
        importlib.import_module(f"torch_emu.lowering.{family}")
