"""Shards: every test in exactly one, the same in every process."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.model import ResultRecord, RunMeta
from conformance.plugin import parse_shard
from conformance.sharding import in_shard, read_durations, select_shard
from conformance.store import RunWriter

NODEIDS = [f"test_ops.py::TestCommonCPU::test_{i}_cpu_float32" for i in range(500)]


def test_shards_partition_a_selection():
    shards = [[n for n in NODEIDS if in_shard(n, (k, 4))] for k in range(1, 5)]
    assert sorted(n for shard in shards for n in shard) == sorted(NODEIDS)
    assert all(60 < len(shard) < 190 for shard in shards)  # roughly balanced by count
    assert all(in_shard(n, None) for n in NODEIDS)
    assert select_shard(NODEIDS, (2, 4)) == set(shards[1])


def test_recorded_durations_balance_shards_by_time_not_count():
    # a few slow tests and many fast ones: a split by count would leave one shard with
    # most of the time
    durations = {n: (30.0 if i < 6 else 0.1) for i, n in enumerate(NODEIDS)}
    del durations[NODEIDS[-1]]  # unknown: counts as the median
    shards = [select_shard(NODEIDS, (k, 3), durations) for k in range(1, 4)]
    assert set().union(*shards) == set(NODEIDS)
    assert sum(len(s) for s in shards) == len(NODEIDS)
    times = [sum(durations.get(n, 0.1) for n in shard) for shard in shards]
    assert max(times) - min(times) <= 0.2
    assert [len([n for n in s if durations.get(n) == 30.0]) for s in shards] == [2, 2, 2]
    # the same inputs give the same split in another order
    assert select_shard(list(reversed(NODEIDS)), (1, 3), durations) == shards[0]


def test_durations_are_read_from_earlier_runs(tmp_path: Path):
    writer = RunWriter(tmp_path / "r", RunMeta(run_id="r"))
    for nodeid, outcome, seconds in [("a", "passed", 2.5), ("b", "deselected", 0.0)]:
        writer.write(
            ResultRecord(
                run_id="r", nodeid=nodeid, test_id=nodeid, file="f", outcome=outcome,
                duration_s=seconds,
            )
        )  # fmt: skip
    writer.close()
    assert read_durations([tmp_path / "r"]) == {"a": 2.5}


@pytest.mark.parametrize("spec", ["0/2", "3/2", "1", "a/b", "1/0", "-1/2"])
def test_bad_shard_specs_are_usage_errors(spec):
    with pytest.raises(pytest.UsageError, match="--shard: expected K/N"):
        parse_shard(spec)


def test_good_shard_specs():
    assert parse_shard("2/4") == (2, 4)
    assert parse_shard(None) is None
