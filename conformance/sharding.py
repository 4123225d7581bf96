"""Deterministic shards: which tests of a selection one CI machine runs.

A test's shard depends only on its device-independent ``test_id`` and on inputs every
machine shares (the shard count and the durations of earlier runs), never on the nodeid
or on which other tests this process collected. So shard K of N holds the same test_ids
on every device (a run on emu and its baseline on cpu, whose collections differ by the
tests upstream's device rules give only one of them), in every xdist worker and on every
CI machine, and shards never overlap or miss a test.

Without timing data a test's shard comes from a hash of its test_id. Given the durations
earlier runs recorded (on any device: tests keep their test_id), the recorded tests of
the files being run are bin-packed onto the least loaded shard, the heavy tests first,
then template by template with no shard taking more than its share of a template, so
shards take about the same wall time rather than holding the same number of tests, even
on a device whose times differ from the recording device's template by template. A test no
earlier run recorded goes by hash (its shard cannot depend on the other tests collected),
and its time is estimated from the recorded tests most like it: the same template, else
the same class, else the same file, else all of them.
"""

from __future__ import annotations

import heapq
import statistics
import zlib
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from conformance.model import TestIdentity

__all__ = [
    "Durations",
    "ShardPlan",
    "in_shard",
    "pack",
    "plan_shard",
    "read_durations",
    "select_shard",
]

#: Outcomes whose recorded time says nothing about how long the test runs.
_NOT_RUN = ("deselected",)


def in_shard(test_id: str, shard: tuple[int, int] | None) -> bool:
    """Whether a test belongs to shard ``k`` of ``N`` (1-based) by hash; stable everywhere."""
    if shard is None:
        return True
    index, count = shard
    return zlib.crc32(test_id.encode("utf-8")) % count == index - 1


@dataclass
class Durations:
    """Recorded test durations by test_id, and the medians that estimate the others."""

    seconds: dict[str, float] = field(default_factory=dict)
    #: test_id -> (file, "file::class", "file::class::template"), the groups it counts in.
    groups: dict[str, tuple[str, str, str]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.seconds)

    def add(self, test_id: str, file: str, test_class: str, template: str, seconds: float) -> None:
        self.seconds[test_id] = seconds
        self.groups[test_id] = _groups(file, test_class, template)

    def estimator(self) -> Estimator:
        """Estimates for tests with no recorded duration (computed once, then reused)."""
        by_group: dict[str, list[float]] = defaultdict(list)
        for test_id, seconds in self.seconds.items():
            for key in self.groups[test_id]:
                by_group[key].append(seconds)
        medians = {key: statistics.median(values) for key, values in by_group.items()}
        overall = statistics.median(self.seconds.values()) if self.seconds else 1.0
        return Estimator(medians, overall)


@dataclass(frozen=True)
class Estimator:
    medians: dict[str, float]
    overall: float

    def estimate(self, identity: TestIdentity) -> tuple[float, str]:
        """(seconds, what the estimate is based on: template, class, file or all)."""
        file, cls, template = _groups(identity.file, identity.test_class, identity.template)
        for key, basis in ((template, "template"), (cls, "class"), (file, "file")):
            if key in self.medians:
                return self.medians[key], basis
        return self.overall, "all"


def _groups(file: str, test_class: str, template: str) -> tuple[str, str, str]:
    return file, f"{file}::{test_class}", f"{file}::{test_class}::{template}"


def read_durations(run_dirs: Iterable[str | Path]) -> Durations:
    """Recorded test durations by test_id, from earlier runs on any device (later runs win).

    Timed-out and crashed tests count with the time they ran before they were stopped."""
    from conformance.store import read_run

    durations = Durations()
    columns = ["test_id", "file", "test_class", "template", "outcome", "duration_s"]
    for run_dir in run_dirs:
        _, frame = read_run(run_dir, columns)
        for test_id, file, cls, template, outcome, seconds in zip(
            *(frame[name] for name in columns), strict=True
        ):
            if outcome not in _NOT_RUN:
                durations.add(test_id, file, cls, template, float(seconds or 0.0))
    return durations


@dataclass
class ShardPlan:
    """The tests one shard runs, and how long they are expected to take."""

    test_ids: set[str]
    expected_s: float = 0.0  # recorded and estimated time of the shard's tests
    estimated: int = 0  # tests of the shard with no recorded duration
    basis: dict[str, int] = field(default_factory=dict)  # estimates by what they rest on


def plan_shard(
    identities: Sequence[TestIdentity],
    shard: tuple[int, int] | None,
    durations: Durations | None = None,
) -> ShardPlan:
    """The tests of ``identities`` that shard ``k`` of ``N`` runs, with their expected time.

    With ``durations``, the recorded tests of the collected files are assigned longest
    first to the shard with the least total so far (ties: the lower shard, then test_id
    order); that assignment is computed from the durations alone, so it is the same in
    every process and on every device. Other tests go by hash.
    """
    if shard is None:
        return ShardPlan({identity.test_id for identity in identities})
    if not durations:
        return ShardPlan({i.test_id for i in identities if in_shard(i.test_id, shard)})
    index, count = shard
    packed = pack(durations, {identity.file for identity in identities}, count)
    seconds = durations.seconds

    plan = ShardPlan(set())
    estimator: Estimator | None = None
    for identity in identities:
        test_id = identity.test_id
        k = packed.get(test_id)  # None: not recorded (or recorded under another file)
        if k is not None:
            if k == index - 1:
                plan.test_ids.add(test_id)
                plan.expected_s += seconds[test_id]
        elif in_shard(test_id, shard):
            estimator = estimator or durations.estimator()
            guess, basis = estimator.estimate(identity)
            plan.test_ids.add(test_id)
            plan.expected_s += guess
            plan.estimated += 1
            plan.basis[basis] = plan.basis.get(basis, 0) + 1
    return plan


#: A test of at least this share of a shard's fair load is heavy: placed before the others.
HEAVY_SHARE = 0.02


def pack(durations: Durations, files: set[str], count: int) -> dict[str, int]:
    """The shard (0-based) of each recorded test of ``files``, out of ``count``.

    The heavy tests first (each at least :data:`HEAVY_SHARE` of a shard's fair load: the
    gradient checks that take minutes), longest first, each to the least loaded shard.
    Then template by template (the most time first), each template's tests longest first,
    each to the least loaded shard that does not yet hold its fair share of the template
    (the template's time over ``count``). Each shard so holds an even share of every
    template as well as of the total: a device that runs one template three times slower
    than the one the durations came from slows every shard alike.
    """
    seconds = durations.seconds
    by_template: dict[str, list[str]] = defaultdict(list)
    for test_id, groups in durations.groups.items():
        if groups[0] in files:
            by_template[groups[2]].append(test_id)
    totals = {key: sum(seconds[t] for t in tests) for key, tests in by_template.items()}
    heavy_s = HEAVY_SHARE * sum(totals.values()) / count
    loads = [0.0] * count
    shares: dict[str, list[float]] = {key: [0.0] * count for key in by_template}
    assigned: dict[str, int] = {}

    def place(test_id: str, k: int, template: str) -> None:
        assigned[test_id] = k
        loads[k] += seconds[test_id]
        shares[template][k] += seconds[test_id]

    heavy = sorted(
        (
            (test_id, key)
            for key, tests in by_template.items()
            for test_id in tests
            if seconds[test_id] >= heavy_s
        ),
        key=lambda item: (-seconds[item[0]], item[0]),
    )
    for test_id, key in heavy:
        place(test_id, min(range(count), key=lambda k: (loads[k], k)), key)
    for key in sorted(by_template, key=lambda key: (-totals[key], key)):
        fair = totals[key] / count
        share = shares[key]
        open_shards = [(loads[k], k) for k in range(count) if share[k] < fair]
        heapq.heapify(open_shards)
        for test_id in sorted(by_template[key], key=lambda t: (-seconds[t], t)):
            if test_id in assigned:
                continue
            if not open_shards:  # every shard holds its share (rounding): the least loaded
                open_shards = [(loads[k], k) for k in range(count)]
                heapq.heapify(open_shards)
            _, k = heapq.heappop(open_shards)
            place(test_id, k, key)
            if share[k] < fair:
                heapq.heappush(open_shards, (loads[k], k))
    return assigned


def select_shard(
    identities: Sequence[TestIdentity],
    shard: tuple[int, int] | None,
    durations: Durations | None = None,
) -> set[str]:
    """The test_ids of ``identities`` that shard ``k`` of ``N`` runs (see plan_shard)."""
    return plan_shard(identities, shard, durations).test_ids
