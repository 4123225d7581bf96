"""Separating backend failures from failures the CPU has too.

A baseline is a second run of the same selection on another device (normally ``cpu``).
Joined by ``test_id`` (device-independent), each test of the device run gets the baseline's
outcome beside its own, and ``backend_only`` says whether its failure is the backend's:
it failed on the device and passed on the baseline.

The join is written next to the device run as ``baseline.parquet``, with
``baseline.json`` naming the baseline run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance.errors import ConfigError

if TYPE_CHECKING:
    import pandas

__all__ = [
    "BASELINE_JSON",
    "BASELINE_PARQUET",
    "FAILED_OUTCOMES",
    "compare",
    "read_baseline",
    "write_baseline",
]

BASELINE_PARQUET = "baseline.parquet"
BASELINE_JSON = "baseline.json"

#: Outcomes that count as "the test does not work here" (a known failure included).
FAILED_OUTCOMES = ("failed", "error", "crashed", "timeout", "xfailed")
_PASSED_OUTCOMES = ("passed", "xpassed")

_KEEP = ("test_id", "nodeid", "file", "test_class", "template", "op", "variant", "dtype")
_SIDE = ("outcome", "category", "detail")


def compare(device: pandas.DataFrame, baseline: pandas.DataFrame) -> pandas.DataFrame:
    """One row per test of the device run, with the baseline's outcome beside it.

    Columns: the identity fields, ``outcome``/``category``/``detail`` on the device,
    ``baseline_outcome``/``baseline_category``/``baseline_detail`` (empty where the
    baseline has no such test), ``backend_only`` (failed on the device, passed on the
    baseline) and ``failure_scope``: ``backend``, ``both`` (failed on the baseline too),
    ``unknown`` (baseline skipped or missing the test) or empty when the device did not fail.
    """
    left = device.loc[:, [*_KEEP, *_SIDE]]
    right = baseline.loc[:, ["test_id", *_SIDE]].drop_duplicates("test_id", keep="last")
    right = right.rename(columns={name: f"baseline_{name}" for name in _SIDE})
    joined = left.merge(right, on="test_id", how="left", validate="many_to_one")
    for name in _SIDE:
        joined[f"baseline_{name}"] = joined[f"baseline_{name}"].fillna("")
    failed = joined["outcome"].isin(FAILED_OUTCOMES)
    base_passed = joined["baseline_outcome"].isin(_PASSED_OUTCOMES)
    base_failed = joined["baseline_outcome"].isin(FAILED_OUTCOMES)
    joined["backend_only"] = failed & base_passed
    joined["failure_scope"] = ""
    joined.loc[failed & base_passed, "failure_scope"] = "backend"
    joined.loc[failed & base_failed, "failure_scope"] = "both"
    joined.loc[failed & ~base_passed & ~base_failed, "failure_scope"] = "unknown"
    return joined.reset_index(drop=True)


def write_baseline(
    run_dir: str | os.PathLike[str],
    joined: pandas.DataFrame,
    *,
    baseline_run: str,
    baseline_device: str,
) -> Path:
    """Write the join beside the device run; return the Parquet file's path."""
    run_dir = Path(run_dir)
    path = run_dir / BASELINE_PARQUET
    joined.to_parquet(path, index=False)
    summary = {
        "baseline_run_id": baseline_run,
        "baseline_device": baseline_device,
        "backend_only": int(joined["backend_only"].sum()),
        "both": int((joined["failure_scope"] == "both").sum()),
    }
    (run_dir / BASELINE_JSON).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return path


def read_baseline(run_dir: str | os.PathLike[str]) -> tuple[dict[str, Any], pandas.DataFrame]:
    """The baseline summary and join of a run; ConfigError when the run has none."""
    import pandas

    run_dir = Path(run_dir)
    try:
        summary = json.loads((run_dir / BASELINE_JSON).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("the run has no baseline", where=str(run_dir)) from None
    return summary, pandas.read_parquet(run_dir / BASELINE_PARQUET)
