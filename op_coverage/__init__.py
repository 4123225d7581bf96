"""Operator coverage: which ATen overloads a backend lowers, and which tests each missing one blocks.

- :func:`static_table` / :func:`load_static_table`: the status of every ATen overload for a
  backend (native, composite, fallback, missing), cross-checked against its lowering registry;
- :func:`trace_ops`: the overloads a block of code dispatched on the device (per test, when a
  run traces ops);
- :func:`triage`, :func:`dtype_grid`: missing lowerings ranked by the tests they block;
- :func:`snapshot`, :func:`write_snapshot`, :func:`read_snapshot`: ``<run_dir>/op_coverage.json``;
- :func:`diff_snapshots`: ops gained and lost between two snapshots, upstream churn apart.

Torch is imported only by the functions that need it.
"""

from __future__ import annotations

from op_coverage.denominators import Denominator, denominators
from op_coverage.diff import SnapshotDiff, diff_snapshots
from op_coverage.snapshot import (
    SNAPSHOT_FORMAT,
    SNAPSHOT_NAME,
    read_snapshot,
    save_snapshot,
    snapshot,
    write_snapshot,
)
from op_coverage.static import Disagreement, OpStatus, StaticTable, load_static_table, static_table
from op_coverage.tracing import OpTrace, trace_ops
from op_coverage.triage import BlockingOp, Triage, blocked_tests, dtype_grid, triage

__all__ = [
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_NAME",
    "BlockingOp",
    "Denominator",
    "Disagreement",
    "OpStatus",
    "OpTrace",
    "SnapshotDiff",
    "StaticTable",
    "Triage",
    "blocked_tests",
    "denominators",
    "diff_snapshots",
    "dtype_grid",
    "load_static_table",
    "read_snapshot",
    "save_snapshot",
    "snapshot",
    "static_table",
    "trace_ops",
    "triage",
    "write_snapshot",
]
