"""Coverage snapshots: one JSON file per run (or release) with every op's status and load.

``<run_dir>/op_coverage.json``::

    {"meta": {"format_version": 1, "torch_version": ..., "backend": ..., ...},
     "denominators": {"core_aten": {"description", "version", "count", "native", "composite",
                                    "fallback", "missing", "covered_pct"}, ...},
     "ops": [{"op": "aten::add.Tensor", "status": "native", "kind": "python",
              "source": "pointwise.py:40", "in_core": true, "in_opinfo": true,
              "exercised": true, "tests_dispatched": 412, "tests_blocked": 0,
              "tests_fallback": 0, "templates_blocked": 0, "opinfos_blocked": 0}, ...],
     "other_blocking": [{"op": ..., "tests_blocked": ...}],   # blocking ops torch lacks
     "disagreements": [{"op", "registry", "dispatcher", "problem"}],
     "tests": {"total": N, "blocked": B, "traced": bool}}

``ops`` lists every ATen overload of the installed torch, sorted by name. Reports read the
file when it is present; :mod:`op_coverage.diff` compares two.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from itertools import chain
from pathlib import Path
from typing import Any

import pandas

from conformance.errors import ConfigError
from conformance.model import RunMeta
from op_coverage.denominators import denominators
from op_coverage.dispatcher import aten_overloads
from op_coverage.static import StaticTable, load_static_table
from op_coverage.triage import blocked_tests

__all__ = [
    "SNAPSHOT_FORMAT",
    "SNAPSHOT_NAME",
    "read_snapshot",
    "save_snapshot",
    "snapshot",
    "write_snapshot",
]

SNAPSHOT_NAME = "op_coverage.json"

# Version of the snapshot format. Bump it when a field is added, removed or changes meaning:
#   1: first version.
SNAPSHOT_FORMAT = 1

_COVERED = ("native", "composite")


def _per_test_counts(records: pandas.DataFrame, column: str) -> Counter[str]:
    last = records.drop_duplicates("test_id", keep="last")
    lists = (listed for listed in last[column] if listed is not None and len(listed))
    return Counter(chain.from_iterable(set(listed) for listed in lists))


def snapshot(
    device_type: str,
    records: pandas.DataFrame | None = None,
    meta: RunMeta | None = None,
    *,
    static: StaticTable | None = None,
    opinfo: bool = True,
    module_name: str | None = None,
) -> dict[str, Any]:
    """The coverage snapshot of ``device_type`` in this process, joined with a run's
    ``records`` when given. ``static`` defaults to the backend's static table (loading the
    backend, from ``module_name`` when given); ``opinfo=False`` leaves out the OpInfo
    denominator (its import is slow)."""
    import torch

    from conformance import __version__ as harness_version

    if static is None:
        static = load_static_table(device_type, module_name)
    overloads = aten_overloads()
    run_id = meta.run_id if meta is not None else ""
    denoms = denominators(overloads, torch.__version__, records, run_id, opinfo=opinfo)
    opinfo_ops = denoms["opinfo"].ops if "opinfo" in denoms else frozenset()
    exercised = denoms["suite_exercised"].ops if "suite_exercised" in denoms else frozenset()

    dispatched: Counter[str] = Counter()
    fallback: Counter[str] = Counter()
    blocked_by: dict[str, dict[str, int]] = {}
    total = blocked_total = 0
    traced = False
    if records is not None:
        dispatched = _per_test_counts(records, "ops_dispatched")
        fallback = _per_test_counts(records, "ops_fallback")
        traced = bool(dispatched)
        blocked = blocked_tests(records)
        blocked_total = int(blocked["test_id"].nunique())
        total = int(records["test_id"].nunique())
        named = blocked[blocked["blocking_op"].notna()]
        named = named.assign(
            template=named["template"].replace("", None), op=named["op"].replace("", None)
        )
        counts = named.groupby("blocking_op")[["test_id", "template", "op"]].nunique()
        blocked_by = {
            str(op): {
                "tests_blocked": int(tests),
                "templates_blocked": int(templates),
                "opinfos_blocked": int(opinfos),
            }
            for op, tests, templates, opinfos in counts.itertuples()
        }

    unblocked = {"tests_blocked": 0, "templates_blocked": 0, "opinfos_blocked": 0}

    def load(op: str) -> dict[str, int]:
        return blocked_by.get(op, unblocked)

    ops = []
    for name, row in static.ops.items():
        ops.append(
            {
                "op": name,
                "status": row.status,
                "kind": row.kind,
                "source": row.source,
                "in_core": row.in_core,
                "in_opinfo": name in opinfo_ops,
                "exercised": name in exercised,
                "tests_dispatched": dispatched.get(name, 0),
                **load(name),
                "tests_fallback": fallback.get(name, 0),
            }
        )
    statuses = {row["op"]: row["status"] for row in ops}
    summary = {}
    for key, denom in denoms.items():
        counts = Counter(statuses.get(op, "unknown") for op in denom.ops)
        covered = sum(counts[s] for s in _COVERED)
        summary[key] = {
            "description": denom.description,
            "version": denom.version,
            "count": len(denom.ops),
            **{
                s: counts.get(s, 0)
                for s in ("native", "composite", "fallback", "missing", "unknown")
            },
            "covered_pct": round(100.0 * covered / len(denom.ops), 2) if denom.ops else 0.0,
        }
    return {
        "meta": {
            "format_version": SNAPSHOT_FORMAT,
            "kind": "op_coverage",
            "torch_version": torch.__version__,
            "torch_git": torch.version.git_version,
            "backend": device_type,
            "backend_version": (meta.backend_version if meta is not None else "")
            or static.backend_version,
            "dispatch_key": static.dispatch_key,
            "registry": static.has_registry,
            "harness_version": harness_version,
            "run_id": run_id,
            "run_torch_version": meta.torch_version if meta is not None else "",
        },
        "denominators": summary,
        "ops": ops,
        "other_blocking": [
            {"op": op, **load(op)} for op in sorted(blocked_by) if op not in static.ops
        ],
        "disagreements": [vars(d) for d in static.disagreements],
        "tests": {"total": total, "blocked": blocked_total, "traced": traced},
    }


def write_snapshot(
    run_dir: str | os.PathLike[str],
    *,
    static: StaticTable | None = None,
    opinfo: bool = True,
    module_name: str | None = None,
) -> Path:
    """Build the snapshot of a run (its backend is the run's ``meta.backend``, loaded in this
    process, from ``module_name`` when given, unless ``static`` is given) and write
    ``<run_dir>/op_coverage.json``; returns the path. The file is replaced atomically.

    A rerun's snapshot counts the tests of its base run amended by it (and the base's
    earlier reruns): the coverage as it stands after the rerun, not of its few tests."""
    from conformance.store import read_as_amended

    meta, records = read_as_amended(run_dir)
    if not meta.backend:
        raise ConfigError("run has no backend in meta.json", where=str(run_dir))
    data = snapshot(
        meta.backend, records, meta, static=static, opinfo=opinfo, module_name=module_name
    )
    return save_snapshot(data, Path(run_dir) / SNAPSHOT_NAME)


def save_snapshot(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write a snapshot (as from :func:`snapshot`) to ``path``, atomically; returns it.
    A release snapshot is one kept outside its run folder."""
    path = Path(path)
    if not path.parent.is_dir():
        raise ConfigError("no such folder", where=str(path.parent))
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(partial, path)
    return path


def read_snapshot(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a snapshot from a file or from a run folder holding ``op_coverage.json``.

    Raises ConfigError when it is missing, not JSON, of another format version, or lacks
    the ``meta`` or ``ops`` block.
    """
    path = Path(path)
    if path.is_dir():
        path = path / SNAPSHOT_NAME
    if not path.is_file():
        raise ConfigError(
            "no coverage snapshot (run `conformance ops snapshot RUN_DIR` first)", where=str(path)
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not JSON: {exc}", where=str(path)) from exc
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("meta"), dict)
        or not isinstance(data.get("ops"), list)
    ):
        raise ConfigError("not a coverage snapshot: needs 'meta' and 'ops' blocks", where=str(path))
    version = data["meta"].get("format_version")
    if version != SNAPSHOT_FORMAT:
        raise ConfigError(
            f"snapshot format {version!r}, this harness reads format {SNAPSHOT_FORMAT}",
            where=str(path),
        )
    return data
