"""Deterministic shards: which tests of a selection one CI machine runs.

Every process that collects the selection (each xdist worker on each machine) computes
the same split from the same inputs, so shards never overlap or miss a test. Without
timing data a test's shard comes from a hash of its nodeid; given the durations a
previous run recorded, tests are bin-packed longest first onto the least loaded shard,
so shards take about the same wall time rather than holding the same number of tests.
"""

from __future__ import annotations

import heapq
import statistics
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

__all__ = ["in_shard", "read_durations", "select_shard"]


def in_shard(nodeid: str, shard: tuple[int, int] | None) -> bool:
    """Whether a test belongs to shard ``k`` of ``N`` (1-based) by hash; stable everywhere."""
    if shard is None:
        return True
    index, count = shard
    return zlib.crc32(nodeid.encode("utf-8")) % count == index - 1


def read_durations(run_dirs: Iterable[str | Path]) -> dict[str, float]:
    """Recorded test durations by nodeid, from earlier runs (later runs win)."""
    from conformance.store import read_records

    durations: dict[str, float] = {}
    for run_dir in run_dirs:
        for record in read_records(run_dir):
            if record.get("outcome") not in ("deselected", "crashed", "timeout"):
                durations[record["nodeid"]] = float(record.get("duration_s") or 0.0)
    return durations


def select_shard(
    nodeids: Sequence[str],
    shard: tuple[int, int] | None,
    durations: Mapping[str, float] | None = None,
) -> set[str]:
    """The nodeids of ``nodeids`` that shard ``k`` of ``N`` runs.

    With ``durations``, tests are assigned longest first to the shard with the least
    total so far (ties: the lower shard, then the nodeid order), and a test with no
    recorded duration counts as the median of the known ones.
    """
    if shard is None:
        return set(nodeids)
    if not durations:
        return {nodeid for nodeid in nodeids if in_shard(nodeid, shard)}
    index, count = shard
    known = [durations[n] for n in nodeids if n in durations]
    default = statistics.median(known) if known else 1.0
    ordered = sorted(nodeids, key=lambda n: (-durations.get(n, default), n))
    loads = [(0.0, k) for k in range(count)]
    mine: set[str] = set()
    for nodeid in ordered:
        load, k = heapq.heappop(loads)
        if k == index - 1:
            mine.add(nodeid)
        heapq.heappush(loads, (load + durations.get(nodeid, default), k))
    return mine
