"""Planted bugs: deliberate defects the conformance suite must catch (its self-test).

All are off unless named in ``EMU_PLANT`` (read at import).  Each is a hook on
an otherwise correct lowering, so with no plant active the lowering is the
plain derived kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["hooks"]

_active: frozenset[str] = frozenset()


def activate(plants: frozenset[str]) -> None:
    """Switch on the named plants; called once by the package before lowerings load."""
    global _active
    _active = frozenset(plants)


def _scale(factor: float) -> Callable[[Any], None]:
    def post(result: Any) -> None:
        first = result[0] if isinstance(result, tuple) else result
        first.mul_(factor)

    return post


def _read_memory_order(args: list, kwargs: dict) -> None:
    # Reinterpret the input's memory as if it were contiguous: right for
    # contiguous inputs, wrong for transposed or strided ones.
    x = args[0]
    args[0] = x.as_strided(x.shape, torch.empty(x.shape, device="meta").stride())


def _column_major(result: Any) -> None:
    # The same values in column-major memory.
    if isinstance(result, torch.Tensor) and result.dim() == 2 and result.numel() > 1:
        data = result.t().contiguous()
        result.set_(data.untyped_storage(), 0, result.shape, (1, result.shape[0]))


def hooks(plant: str) -> dict[str, Callable]:
    """The ``pre``/``post`` hooks for ``plant`` when it is active, else an empty dict."""
    if plant not in _active:
        return {}
    if plant == "wrong_result":
        return {"post": _scale(1.01)}
    if plant == "wrong_grad":
        return {"post": _scale(2.0)}
    if plant == "noncontiguous":
        return {"pre": _read_memory_order}
    if plant == "column_major":
        return {"post": _column_major}
    raise KeyError(f"plant {plant!r} has no generic hooks")


def is_active(plant: str) -> bool:
    """Whether ``plant`` was named in EMU_PLANT."""
    return plant in _active
