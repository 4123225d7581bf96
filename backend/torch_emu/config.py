"""Environment settings of the emu backend, read and validated once at import.

``EMU_DEVICE_COUNT``  number of emulated devices (1-16, default 2).
``EMU_CPU_FALLBACK``  ``1`` turns the counting CPU fallback on at import (default off).
``EMU_PLANT``         comma-separated planted bugs to switch on (see ``plants.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["MAX_DEVICES", "PLANTS", "Settings", "read_settings"]

MAX_DEVICES = 16

PLANTS = {
    "wrong_result": "aten::exp, exp.out and exp_ return exp(x) * 1.01",
    "ignores_out": "aten::sin.out computes the result but never writes into out",
    "noncontiguous": "aten::cos and cos.out read the input's memory in order, ignoring strides",
    "wrong_grad": "aten::tanh_backward returns twice the right gradient",
    "accepts_bad_dtype": "aten::bitwise_not on floating-point input returns -x - 1",
    "materializes_cow": "aten::neg takes a writable alias of its input, materializing a "
    "lazy copy-on-write input it only reads",
    "column_major": "aten::tril returns 2-D results in column-major memory, a layout torch's "
    "meta function (and so fake tensors and compiled code) does not predict",
    "device_check_first": "aten::embedding runs a derived kernel, whose device check comes "
    "before embedding's own argument checks",
    "no_autocast": "emu registers no autocast kernels: under torch.autocast('emu') every op "
    "runs in its inputs' dtypes",
    "dropped_rank": "torch.distributed all-gathers on emu tensors (all_gather, "
    "all_gather_into_tensor and their coalesced forms) receive zeros from the group's last rank",
    "no_profiler": "emu reports no device events to torch.profiler: its kernels and copies "
    "have no device time",
    "rng_state_ignored": "torch.emu.set_rng_state accepts a saved state and leaves the "
    "generator as it is",
    "wrong_reduction": "torch.distributed all_reduce with ReduceOp.SUM on emu tensors computes "
    "MAX (emu's kernel for c10d::allreduce_ asks its backend for the wrong reduction)",
}


@dataclass(frozen=True)
class Settings:
    """Validated settings: ``device_count``, ``cpu_fallback`` and the set of ``plants``."""

    device_count: int
    cpu_fallback: bool
    plants: frozenset[str]


def read_settings(environ: dict[str, str] | None = None) -> Settings:
    """Parse the EMU_* variables; raise ValueError naming the variable and the bad value."""
    env = os.environ if environ is None else environ
    raw_count = env.get("EMU_DEVICE_COUNT", "2").strip() or "2"
    try:
        count = int(raw_count)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_DEVICES:
        raise ValueError(
            f"EMU_DEVICE_COUNT={raw_count!r}: expected an integer from 1 to {MAX_DEVICES}"
        )
    raw_fallback = env.get("EMU_CPU_FALLBACK", "0").strip()
    if raw_fallback not in ("", "0", "1"):
        raise ValueError(f"EMU_CPU_FALLBACK={raw_fallback!r}: expected 0 or 1")
    plants = frozenset(p.strip() for p in env.get("EMU_PLANT", "").split(",") if p.strip())
    unknown = sorted(plants - PLANTS.keys())
    if unknown:
        raise ValueError(
            f"EMU_PLANT: unknown planted bug(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(PLANTS))}"
        )
    return Settings(device_count=count, cpu_fallback=raw_fallback == "1", plants=plants)
