"""The optional CPU fallback: ops without a lowering run on the CPU and are counted.

Off by default, so a missing lowering raises torch's standard
``NotImplementedError: Could not run 'aten::X' with arguments from the 'emu' backend``.
When on, the native core's boxed fallback copies the arguments to the CPU, runs
the CPU kernel, copies the results back and counts the overload, so that a
report can tell "passed natively" from "passed via fallback".
"""

from __future__ import annotations

import torch

__all__ = ["cpu_fallback_enabled", "fallback_counts", "reset_fallback_counts", "set_cpu_fallback"]


def set_cpu_fallback(enabled: bool) -> None:
    """Turn the CPU fallback on or off for the whole process; takes effect immediately."""
    if not isinstance(enabled, bool):
        raise TypeError(f"set_cpu_fallback: expected a bool, got {type(enabled).__name__}")
    torch.ops.emu.set_cpu_fallback(enabled)


def cpu_fallback_enabled() -> bool:
    """Whether ops without a lowering currently run on the CPU fallback."""
    return bool(torch.ops.emu.cpu_fallback_enabled())


def fallback_counts() -> dict[str, int]:
    """ATen overload (``"aten::cumsum.out"``) -> calls that ran on the CPU fallback since the
    last reset."""
    names, counts = torch.ops.emu.fallback_counts()
    return dict(zip(names, counts, strict=True))


def reset_fallback_counts() -> None:
    """Forget all counted fallback calls."""
    torch.ops.emu.reset_fallback_counts()
