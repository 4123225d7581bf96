"""Shards: every test in exactly one, the same in every process."""

from __future__ import annotations

import pytest

from conformance.plugin import parse_shard
from conformance.worker import in_shard


def test_shards_partition_a_selection():
    nodeids = [f"test_ops.py::TestCommonCPU::test_{i}_cpu_float32" for i in range(500)]
    shards = [[n for n in nodeids if in_shard(n, (k, 4))] for k in range(1, 5)]
    assert sorted(n for shard in shards for n in shard) == sorted(nodeids)
    assert all(60 < len(shard) < 190 for shard in shards)  # roughly balanced by count
    assert all(in_shard(n, None) for n in nodeids)


@pytest.mark.parametrize("spec", ["0/2", "3/2", "1", "a/b", "1/0", "-1/2"])
def test_bad_shard_specs_are_usage_errors(spec):
    with pytest.raises(pytest.UsageError, match="--shard: expected K/N"):
        parse_shard(spec)


def test_good_shard_specs():
    assert parse_shard("2/4") == (2, 4)
    assert parse_shard(None) is None
