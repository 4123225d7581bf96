"""Target of the ``torch.backends`` entry point: ``import torch`` calls :func:`load`.

A separate module so that the entry point resolves even while ``torch_emu``
itself is half-imported (``import torch_emu`` first imports torch, whose
autoload then comes back here): importing the package is all that ``load``
does, and a package already being imported is simply returned.
"""

from __future__ import annotations

import importlib


def load() -> None:
    """Register emu by importing torch_emu (a no-op when it is already imported)."""
    importlib.import_module("torch_emu")
