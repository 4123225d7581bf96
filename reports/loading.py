"""Reading what a report is made from: a run, its optional op coverage, a runs root.

Runs are read with the results store's ``read_run``, asking only for the columns a page
needs. This module checks that what it got is something a report can trust (known
outcomes and categories, unique test ids) and names the run and the test when it is not.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance.errors import ConfigError
from conformance.model import CATEGORIES, OUTCOMES, RECORD_COLUMNS, RunMeta

if TYPE_CHECKING:
    import pandas

__all__ = ["OP_STATUSES", "OpCoverage", "OpStatus", "load_op_coverage", "load_run", "run_dirs"]

OP_COVERAGE_NAME = "op_coverage.json"
#: Statuses an ATen overload can have in op_coverage.json, best first.
OP_STATUSES = ("native", "composite", "fallback", "missing")


def load_run(
    run_dir: str | Path, columns: list[str] | None = None, amend: Sequence[str | Path] = ()
) -> tuple[RunMeta, pandas.DataFrame]:
    """The run in ``run_dir`` as (RunMeta, DataFrame with RECORD_COLUMNS), or only
    ``columns`` of it (test_id, outcome and category are always read, to be checked);
    with ``amend``, the reruns of some of its tests, the latest outcome of each test.

    Raises ConfigError naming the folder and the offending test for outcomes or categories
    outside the model, and for a test id recorded twice.
    """
    if columns is not None:
        columns = list(dict.fromkeys(["test_id", "outcome", "category", *columns]))
    from conformance.store import read_amended

    meta, frame = read_amended(run_dir, amend, columns)
    check_frame(frame, where=str(run_dir), columns=columns)
    return meta, frame


def check_frame(frame: pandas.DataFrame, *, where: str, columns: list[str] | None = None) -> None:
    """Raise ConfigError (naming ``where``) unless ``frame`` holds valid result records
    (with RECORD_COLUMNS, or ``columns`` when given)."""
    missing = [name for name in (columns or RECORD_COLUMNS) if name not in frame.columns]
    if missing:
        raise ConfigError(f"outcomes lack columns {', '.join(missing)}", where=where)
    bad = frame.loc[~frame["outcome"].isin(OUTCOMES)]
    if len(bad):
        row = bad.iloc[0]
        raise ConfigError(
            f"test {row['test_id']!r} has outcome {row['outcome']!r}, "
            f"not one of {', '.join(OUTCOMES)}",
            where=where,
        )
    bad = frame.loc[~frame["category"].isin((*CATEGORIES, ""))]
    if len(bad):
        row = bad.iloc[0]
        raise ConfigError(
            f"test {row['test_id']!r} has category {row['category']!r}, "
            f"not one of {', '.join(CATEGORIES)}",
            where=where,
        )
    duplicated = frame["test_id"].duplicated()
    if duplicated.any():
        test_id = frame.loc[duplicated, "test_id"].iloc[0]
        raise ConfigError(f"test id {test_id!r} is recorded more than once", where=where)


@dataclass(frozen=True, slots=True)
class OpStatus:
    """One ATen overload as op_coverage.json describes it."""

    op: str
    status: str
    source: str = ""
    in_core: bool = False
    tests_blocked: int = 0


@dataclass
class OpCoverage:
    """The contents of op_coverage.json, keyed by overload (``aten::add.Tensor``)."""

    meta: dict[str, Any] = field(default_factory=dict)
    ops: dict[str, OpStatus] = field(default_factory=dict)
    #: Named operator sets (core ATen, OpInfo ops...) with counts per status, as written
    #: by op_coverage: {"core_aten": {"description", "count", "native", ..., "covered_pct"}}
    denominators: dict[str, dict[str, Any]] = field(default_factory=dict)

    def by_packet(self) -> dict[str, list[OpStatus]]:
        """Overloads grouped by the operator name with namespace and overload removed
        (``aten::add.Tensor`` -> ``add``): the name an OpInfo test is parametrized by."""
        packets: dict[str, list[OpStatus]] = {}
        for status in self.ops.values():
            name = status.op.split("::", 1)[-1].split(".", 1)[0]
            packets.setdefault(name, []).append(status)
        return packets


def load_op_coverage(run_dir: str | Path) -> OpCoverage | None:
    """``op_coverage.json`` from a run folder, or None when the run has none.

    Raises ConfigError naming the file and the entry for a malformed document.
    """
    path = Path(run_dir) / OP_COVERAGE_NAME
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON: {exc}", where=str(path)) from None
    if not isinstance(data, dict) or not isinstance(data.get("ops"), list):
        raise ConfigError("expected an object with an 'ops' list", where=str(path))
    denominators = data.get("denominators") or {}
    if not isinstance(denominators, dict) or not all(
        isinstance(v, dict) for v in denominators.values()
    ):
        raise ConfigError("'denominators' must map names to objects", where=str(path))
    coverage = OpCoverage(meta=dict(data.get("meta") or {}), denominators=denominators)
    for index, entry in enumerate(data["ops"]):
        where = f"{path}: ops[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError("entry is not an object", where=where)
        name, status = entry.get("op"), entry.get("status")
        if not isinstance(name, str) or not name:
            raise ConfigError("field 'op' must be a non-empty string", where=where)
        if status not in OP_STATUSES:
            raise ConfigError(
                f"field 'status' is {status!r}, not one of {', '.join(OP_STATUSES)}", where=where
            )
        blocked = entry.get("tests_blocked", 0)
        if not isinstance(blocked, int) or blocked < 0:
            raise ConfigError("field 'tests_blocked' must be a count", where=where)
        coverage.ops[name] = OpStatus(
            op=name,
            status=status,
            source=str(entry.get("source") or ""),
            in_core=bool(entry.get("in_core", False)),
            tests_blocked=blocked,
        )
    return coverage


def run_dirs(runs_root: str | Path) -> list[Path]:
    """The run folders under a runs root, oldest first (by start time, then run id)."""
    from conformance.store import LATEST_NAME, META_NAME, read_meta

    root = Path(runs_root)
    if not root.is_dir():
        raise ConfigError("no such runs folder", where=str(root))
    found = []
    for child in root.iterdir():
        # ``latest`` points at a run already listed under its own name.
        if child.name == LATEST_NAME or child.is_symlink() or not (child / META_NAME).is_file():
            continue
        meta = read_meta(child)
        found.append((meta.start_time, meta.run_id, child))
    return [path for _, _, path in sorted(found)]
