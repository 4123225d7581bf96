"""``conformance nightly plan``: per-shard projections from recorded runs, and the N a
wall-time target needs."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.errors import ConfigError
from conformance.model import ResultRecord, RunMeta
from conformance.plan import make_plan, parse_duration, shards_for_target
from conformance.sharding import in_shard
from conformance.store import RunWriter

START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def write_run(
    root: Path,
    name: str,
    times: dict[str, float],
    *,
    backend: str = "emu",
    mode: str = "eager",
    wall_s: float | None = None,
    workers: int = 2,
    outcomes: dict[str, str] | None = None,
) -> Path:
    """A run whose tests took ``times``; its wall time ``wall_s`` (default: the test time
    over the workers, plus 30 s of start-up)."""
    wall = wall_s if wall_s is not None else 30 + sum(times.values()) / workers
    meta = RunMeta(
        run_id=name,
        backend=backend,
        mode=mode,
        suite="upstream:v2.13.0",
        start_time=START.isoformat(),
        command=["conformance", "run", "--device", backend, "-n", str(workers)],
    )
    writer = RunWriter(root / name, meta)
    for test_id, seconds in times.items():
        file, cls, name_ = test_id.split("::")
        writer.write(
            ResultRecord(
                run_id=name,
                nodeid=test_id,
                test_id=test_id,
                file=file,
                test_class=cls,
                template=name_.rstrip("0123456789"),
                outcome=(outcomes or {}).get(test_id, "passed"),
                duration_s=seconds,
            )
        )
    writer.close(collected=len(times), end_time=(START + timedelta(seconds=wall)).isoformat())
    return root / name


def times_of(count: int, seconds: float, file: str = "test_a.py") -> dict[str, float]:
    return {f"{file}::TestA::test_t{i}": seconds for i in range(count)}


def shard_runs(root: Path, times: dict[str, float], count: int, **kw: object) -> list[Path]:
    """``times`` run as ``count`` hash shards, each a run with its own wall time."""
    return [
        write_run(
            root,
            f"{kw.get('backend', 'emu')}-{kw.get('mode', 'eager')}-{k}",
            {t: s for t, s in times.items() if in_shard(t, (k, count))},
            **kw,  # type: ignore[arg-type]
        )
        for k in range(1, count + 1)
    ]


def test_each_shard_gets_its_legs_and_the_calibrated_wall_time(tmp_path: Path) -> None:
    times = {**times_of(400, 1.0), **times_of(200, 0.5, "test_b.py")}
    failing = {t: "failed" for t in list(times)[:40]}
    runs = shard_runs(tmp_path, times, 4, outcomes=failing)
    runs += shard_runs(tmp_path, {t: 3 * s for t, s in times.items()}, 3, mode="compile")
    runs.append(write_run(tmp_path, "cpu", {t: 0.1 for t in times}, backend="cpu"))
    plan = make_plan(runs, 2, device="emu", workers=2)
    assert [s.tests for s in plan.shards] == [300, 300]
    assert set(plan.shards[0].legs) == {"eager", "compile", "baseline"}
    # 250 s of test time per shard over 2 workers, plus the 30 s of start-up the runs show.
    assert plan.legs["eager"].calibrated_on == 4
    assert plan.legs["eager"].startup_s == pytest.approx(30, abs=0.5)
    for shard in plan.shards:
        assert shard.legs["eager"] == pytest.approx(30 + 125, rel=0.02)
        assert shard.legs["compile"] == pytest.approx(30 + 375, rel=0.02)
    # Baseline on demand: only the 40 failures, at cpu's 0.1 s each, after cpu's start-up
    # (one cpu run: too few for a line, so what it spent beyond its test time is start-up).
    assert plan.legs["baseline"].startup_s == pytest.approx(30, abs=0.5)
    assert sum(s.legs["baseline"] for s in plan.shards) == pytest.approx(
        2 * 30 + 40 * 0.1 / 2, rel=0.02
    )
    assert plan.slowest / plan.mean < 1.02
    assert not plan.too_long


def test_one_recorded_run_makes_its_overhead_each_shards_start_up(tmp_path: Path) -> None:
    # A shard of the same files collects them all, whatever its size: the 85 s a run spent
    # beyond its test time over its workers is paid whole by each shard, not shared out.
    times = times_of(600, 1.0)
    run = write_run(tmp_path, "one", times, wall_s=85 + 300)
    plan = make_plan([run], 2, device="emu", workers=2)
    assert plan.legs["eager"].calibrated_on == 1
    assert plan.legs["eager"].startup_s == pytest.approx(85)
    for shard in plan.shards:
        assert shard.legs["eager"] == pytest.approx(85 + shard.tests / 2, rel=0.02)


def test_a_test_longer_than_a_shards_share_is_named(tmp_path: Path) -> None:
    times = {**times_of(100, 1.0), "test_m.py::TestM::test_gradcheck": 270.0}
    plan = make_plan([write_run(tmp_path, "emu", times)], 4, device="emu", workers=2)
    assert [(t, leg) for t, leg, _ in plan.too_long] == [
        ("test_m.py::TestM::test_gradcheck", "eager")
    ]
    # The shard that holds it takes at least as long as that test.
    assert plan.slowest >= 270


def test_the_target_finds_the_fewest_shards_that_meet_it(tmp_path: Path) -> None:
    runs = shard_runs(tmp_path, times_of(1200, 1.0), 4)
    found = shards_for_target(runs, parse_duration("3m"), device="emu", workers=2, limit=64)
    assert found is not None
    count, plan = found
    assert plan.slowest <= 180
    assert make_plan(runs, count - 1, device="emu", workers=2).slowest > 180
    assert shards_for_target(runs, 10.0, device="emu", workers=2, limit=8) is None


def test_the_command_prints_the_table_and_the_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = shard_runs(tmp_path, times_of(600, 1.0), 3)
    argv = ["nightly", "plan", "--shards", "2", "--durations", *map(str, runs), "--target", "2m"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1].split() == ["shard", "tests", "eager", "baseline", "total"]
    assert [line.split()[0] for line in lines[2:4]] == ["1", "2"]
    assert "target 2m 00s:" in out


def test_no_eager_run_of_the_device_is_a_clear_error(tmp_path: Path) -> None:
    cpu = write_run(tmp_path, "cpu", times_of(3, 1.0), backend="cpu")
    with pytest.raises(ConfigError, match="no eager run of emu"):
        make_plan([cpu], 2, device="emu", workers=2)


@pytest.mark.parametrize(
    ("text", "seconds"), [("90m", 5400), ("1h30m", 5400), ("45s", 45), ("600", 600)]
)
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "5x", "m"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="expected a duration"):
        parse_duration(text)
