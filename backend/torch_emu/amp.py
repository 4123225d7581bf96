"""``torch.emu.amp``: gradient scaling and autocast with emu as their device, as
``torch.cuda.amp`` offers them for CUDA (generic code and tests reach them through the
device module)."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["GradScaler", "autocast"]


class GradScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler("emu", ...)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__("emu", *args, **kwargs)


class autocast(torch.amp.autocast):
    """``torch.autocast("emu", ...)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__("emu", *args, **kwargs)
