"""The sets of ATen overloads coverage is measured against, each named and versioned.

- ``aten_all``: every ATen overload the installed torch defines (versioned by torch release);
- ``core_aten``: those tagged ``torch.Tag.core`` (the core ATen IR; by torch release);
- ``opinfo``: overloads of the operators that have an OpInfo entry in torch's ``op_db``: an
  entry's ``aten_name`` names an operator, and all its overloads and its in-place twin
  (``add``, ``add.Tensor``, ``add.out``, ``add_.Tensor`` ...) count (by torch release);
- ``suite_exercised``: overloads a run's tests dispatched (``ops_dispatched``, when op tracing
  was on) or were blocked by (``detail`` of missing_lowering records) (by run id).

A denominator's ``version`` says what it depends on, so a coverage figure is never compared
across two different denominators without saying so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pandas

from op_coverage.names import packet_of
from op_coverage.triage import blocked_tests

__all__ = ["Denominator", "denominators", "exercised_overloads", "opinfo_overloads"]

DESCRIPTIONS = {
    "aten_all": "every ATen overload in the installed torch",
    "core_aten": "core ATen IR (torch.Tag.core)",
    "opinfo": "overloads of operators with an OpInfo entry",
    "suite_exercised": "overloads the run's tests dispatched or were blocked by",
}


@dataclass(frozen=True)
class Denominator:
    """A named, versioned set of overloads."""

    name: str
    version: str  # "torch 2.13.0" or "run <run_id>"
    ops: frozenset[str]

    @property
    def description(self) -> str:
        return DESCRIPTIONS.get(self.name, self.name)


def opinfo_overloads(overloads: Iterable[str]) -> set[str]:
    """The overloads (among ``overloads``) of operators named by an OpInfo's ``aten_name``.

    Imports torch's test databases (several seconds, once per process).
    """
    from torch.testing._internal.common_methods_invocations import op_db

    packets: set[str] = set()
    for info in op_db:
        name = info.aten_name or info.name
        for candidate in {name, name.replace(".", "_"), name.rsplit(".", 1)[-1]}:
            packets.add(f"aten::{candidate}")
            packets.add(f"aten::{candidate}_")
    return {op for op in overloads if packet_of(op) in packets}


def exercised_overloads(records: pandas.DataFrame) -> set[str]:
    """Overloads the run's tests dispatched (traced) or were blocked by."""
    ops: set[str] = set()
    if "ops_dispatched" in records.columns:
        for listed in records["ops_dispatched"]:
            if listed is not None and len(listed):
                ops.update(listed)
    blocking = blocked_tests(records)["blocking_op"].dropna()
    ops.update(blocking.unique())
    return ops


def denominators(
    overloads: Mapping[str, tuple[str, ...]],
    torch_version: str,
    records: pandas.DataFrame | None = None,
    run_id: str = "",
    *,
    opinfo: bool = True,
) -> dict[str, Denominator]:
    """The denominators for this torch (``overloads`` as from ``aten_overloads()``) and, when
    ``records`` are given, for the run. ``opinfo=False`` skips the OpInfo set."""
    version = f"torch {torch_version}"
    result = {
        "aten_all": Denominator("aten_all", version, frozenset(overloads)),
        "core_aten": Denominator(
            "core_aten", version, frozenset(op for op, tags in overloads.items() if "core" in tags)
        ),
    }
    if opinfo:
        result["opinfo"] = Denominator("opinfo", version, frozenset(opinfo_overloads(overloads)))
    if records is not None:
        result["suite_exercised"] = Denominator(
            "suite_exercised", f"run {run_id}".strip(), frozenset(exercised_overloads(records))
        )
    return result
