"""Shards: every test in exactly one, the same tests on every device and in every process."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from conformance.model import ResultRecord, RunMeta, TestIdentity
from conformance.plugin import parse_shard
from conformance.sharding import Durations, in_shard, plan_shard, read_durations, select_shard
from conformance.store import RunWriter

FILE = "test_ops.py"


def identity(i: int, device: str, template: str = "test_out") -> TestIdentity:
    """Test ``i`` as ``device`` names it: the nodeid names the device, the test_id does not."""
    suffix = "PRIVATEUSE1" if device == "emu" else device.upper()
    return TestIdentity(
        nodeid=f"{FILE}::TestCommon{suffix}::{template}_op{i}_{device}_float32",
        test_id=f"{FILE}::TestCommon::{template}_op{i}_float32",
        file=FILE,
        test_class="TestCommon",
        template=template,
        op=f"op{i}",
        dtype="float32",
        device=device,
    )


CPU = [identity(i, "cpu") for i in range(500)]
EMU = [identity(i, "emu") for i in range(500)]


def durations_of(seconds: dict[str, float]) -> Durations:
    table = Durations()
    for test_id, value in seconds.items():
        template = test_id.split("::")[2].split("_op")[0]
        table.add(test_id, FILE, "TestCommon", template, value)
    return table


def test_shards_partition_a_selection():
    test_ids = [i.test_id for i in CPU]
    shards = [select_shard(CPU, (k, 4)) for k in range(1, 5)]
    assert sorted(t for shard in shards for t in shard) == sorted(test_ids)
    assert all(60 < len(shard) < 190 for shard in shards)  # roughly balanced by count
    assert all(in_shard(t, None) for t in test_ids)
    assert select_shard(CPU, None) == set(test_ids)
    assert shards[1] == {t for t in test_ids if in_shard(t, (2, 4))}


def test_a_shard_holds_the_same_tests_on_every_device():
    # Upstream's device rules give each device some tests the other lacks.
    cpu = [*CPU, *(identity(i, "cpu", "test_cpu_only") for i in range(40))]
    emu = [*EMU[:-30], *(identity(i, "emu", "test_emu_only") for i in range(25))]
    common = {i.test_id for i in cpu} & {i.test_id for i in emu}
    rng = random.Random(7)
    recorded = durations_of({i.test_id: rng.lognormvariate(-2, 1.5) for i in cpu})
    for durations in (None, recorded):
        for k in range(1, 6):
            on_cpu = select_shard(cpu, (k, 5), durations)
            on_emu = select_shard(emu, (k, 5), durations)
            assert on_cpu & common == on_emu & common, (k, durations is None)
            # and whatever order a process collected them in
            assert select_shard(list(reversed(emu)), (k, 5), durations) == on_emu


def test_recorded_durations_balance_shards_by_time_not_count():
    # a few slow tests and many fast ones: a split by count would leave one shard with
    # most of the time
    seconds = {i.test_id: (30.0 if n < 6 else 0.1) for n, i in enumerate(CPU)}
    shards = [select_shard(EMU, (k, 3), durations_of(seconds)) for k in range(1, 4)]
    assert set().union(*shards) == set(seconds)
    assert sum(len(s) for s in shards) == len(CPU)
    times = [sum(seconds[t] for t in shard) for shard in shards]
    assert max(times) - min(times) <= 0.2
    assert [len([t for t in s if seconds[t] == 30.0]) for s in shards] == [2, 2, 2]


def test_tests_without_a_recorded_duration_are_estimated_from_their_template():
    seconds = {i.test_id: 0.1 for i in CPU}
    seconds.update({identity(i, "cpu", "test_grad").test_id: 4.0 for i in range(20)})
    durations = durations_of(seconds)
    new = [identity(i, "emu", "test_grad") for i in range(20, 60)]  # a template's new tests
    other = TestIdentity(nodeid="x", test_id="test_ops.py::TestNew::test_x", file=FILE)
    plans = [plan_shard([*EMU, *new, other], (k, 4), durations) for k in range(1, 5)]
    assert sum(plan.estimated for plan in plans) == 41
    basis = {}
    for plan in plans:
        for name, count in plan.basis.items():
            basis[name] = basis.get(name, 0) + count
    assert basis == {"template": 40, "file": 1}
    estimator = durations.estimator()
    assert estimator.estimate(new[0]) == (4.0, "template")  # not the overall median, 0.1
    assert estimator.estimate(other) == (0.1, "file")
    assert sum(plan.expected_s for plan in plans) == pytest.approx(500 * 0.1 + 40 * 4.0 + 0.1)


def test_durations_from_files_not_collected_do_not_unbalance_the_shards():
    seconds = {i.test_id: 0.1 for i in CPU}
    seconds.update({f"test_other.py::T::test_{n}": 50.0 for n in range(8)})
    durations = Durations()
    for test_id, value in seconds.items():
        durations.add(test_id, test_id.split("::")[0], "T", "t", value)
    sizes = [len(select_shard(EMU, (k, 4), durations)) for k in range(1, 5)]
    assert sizes == [125, 125, 125, 125]


def test_durations_are_read_from_earlier_runs_on_any_device(tmp_path: Path):
    writer = RunWriter(tmp_path / "r", RunMeta(run_id="r", backend="cpu"))
    rows = [("a", "passed", 2.5), ("b", "deselected", 0.0), ("c", "timeout", 300.0)]
    for test_id, outcome, seconds in rows:
        writer.write(
            ResultRecord(
                run_id="r", nodeid=f"{test_id}_cpu", test_id=test_id, file="f",
                template="t", outcome=outcome, duration_s=seconds,
            )
        )  # fmt: skip
    writer.close()
    durations = read_durations([tmp_path / "r"])
    assert durations.seconds == {"a": 2.5, "c": 300.0}  # keyed by test_id; timeouts count


@pytest.mark.parametrize("spec", ["0/2", "3/2", "1", "a/b", "1/0", "-1/2"])
def test_bad_shard_specs_are_usage_errors(spec):
    with pytest.raises(pytest.UsageError, match="--shard: expected K/N"):
        parse_shard(spec)


def test_good_shard_specs():
    assert parse_shard("2/4") == (2, 4)
    assert parse_shard(None) is None
