"""``conformance nightly plan``: how long each shard of a nightly will take, before the night.

A team sizes its CI matrix from runs it already has. Given recorded runs (the last
nightly's merged runs, or any shard runs: the device's eager runs, its compile runs and
cpu runs, told apart by their metadata), the plan splits the device run's tests into N
shards exactly as ``nightly shard K/N`` will (the same durations, packed the same way:
:func:`conformance.sharding.pack`) and projects, per shard, the wall time of its three
legs, which a shard runs one after the other:

- the device's eager leg: the recorded eager time of the shard's tests;
- the compile leg: their recorded compile time (when a compile run is given);
- the baseline on demand: the cpu time of the shard's tests that did not pass on the
  device (:func:`conformance.baseline.needs_baseline`; a cpu run's times where it
  recorded them, else the device's, which for a skipped test is no time at all: give a
  cpu run for a true figure).

Test time becomes wall time as the given runs show: a run's wall time against its test
time over its workers, fitted over the runs of each leg (``wall = start-up + factor *
test time / workers``), so worker start-up, collection and the harness's overheads count.
With a wall-time target, the plan also finds the smallest N whose slowest shard meets it.
A test longer than a shard's fair share (the leg's test time over N) cannot be balanced
away; the plan names those tests.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from conformance.baseline import needs_baseline
from conformance.errors import ConfigError
from conformance.sharding import Durations, pack

__all__ = ["Leg", "Plan", "ShardProjection", "make_plan", "register"]

BASELINE_DEVICE = "cpu"
LEGS = ("eager", "compile", "baseline")


@dataclass
class Leg:
    """One leg's recorded test times and how they turn into wall time."""

    name: str
    seconds: dict[str, float] = field(default_factory=dict)
    startup_s: float = 0.0
    factor: float = 1.0  # wall seconds per second of test time, per worker
    calibrated_on: int = 0  # runs the start-up and factor were fitted on

    def wall(self, test_seconds: float, workers: int, longest: float = 0.0) -> float:
        if test_seconds <= 0:
            return 0.0
        return self.startup_s + max(self.factor * test_seconds / workers, longest)


@dataclass
class ShardProjection:
    index: int  # 1-based
    tests: int
    legs: dict[str, float]  # leg -> projected wall seconds (absent: not recorded)

    @property
    def total(self) -> float:
        return sum(self.legs.values())


@dataclass
class Plan:
    shards: list[ShardProjection]
    workers: int
    legs: dict[str, Leg]
    #: (test_id, leg, seconds) of tests longer than their leg's fair share of a shard.
    too_long: list[tuple[str, str, float]]
    untimed: int  # tests of the device run that no leg could time

    @property
    def slowest(self) -> float:
        return max((s.total for s in self.shards), default=0.0)

    @property
    def mean(self) -> float:
        return sum(s.total for s in self.shards) / len(self.shards) if self.shards else 0.0


@dataclass
class _Run:
    path: Path
    backend: str
    mode: str
    merged: bool
    wall_s: float | None
    workers: int | None
    seconds: dict[str, float]
    outcomes: dict[str, str]
    files: dict[str, tuple[str, str, str]]  # test_id -> (file, class, template)


def _read(path: Path) -> _Run:
    from conformance.store import read_run

    meta, frame = read_run(
        path, ["test_id", "file", "test_class", "template", "outcome", "duration_s"]
    )
    ran = frame[frame["outcome"] != "deselected"]
    seconds = {t: float(s or 0.0) for t, s in zip(ran["test_id"], ran["duration_s"], strict=True)}
    outcomes = dict(zip(ran["test_id"], ran["outcome"], strict=True))
    files = {
        t: (f, c, p)
        for t, f, c, p in zip(
            ran["test_id"], ran["file"], ran["test_class"], ran["template"], strict=True
        )
    }
    merged = len(meta.command) > 1 and meta.command[1] == "merge"
    return _Run(
        path=path,
        backend=meta.backend,
        mode=meta.mode or "eager",
        merged=merged,
        wall_s=_wall(meta.start_time, meta.end_time),
        workers=_workers(meta.command),
        seconds=seconds,
        outcomes=outcomes,
        files=files,
    )


def _wall(start: str, end: str) -> float | None:
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except (TypeError, ValueError):
        return None


def _workers(command: Sequence[str]) -> int | None:
    """``-n N`` of the run's command line (None: not given, or ``auto``)."""
    for flag, value in itertools.pairwise(command):
        if flag in ("-n", "--workers", "--numprocesses") and value.isdigit():
            return max(1, int(value))
    return None


def _calibrate(leg: Leg, runs: Iterable[_Run], default_workers: int, startup_s: float) -> None:
    """Fit ``wall = start-up + factor * test time / workers`` on the runs with a wall time
    of their own (merged runs span a whole matrix: not those). With fewer than three runs
    for a line (or none that fits), the time a run spent beyond its test time over its
    workers is start-up, which a shard of the same files pays whole: collecting them and
    starting the workers (a shard of upstream's 13 files spends about 85 s on it whatever
    its size); with no run, the start-up is ``startup_s`` (the eager leg's)."""
    points = [
        (sum(run.seconds.values()) / (run.workers or default_workers), run.wall_s)
        for run in runs
        if not run.merged and run.wall_s and run.wall_s > 0 and run.seconds
    ]
    leg.calibrated_on = len(points)
    if not points:
        leg.startup_s = startup_s
        return
    if len(points) >= 3:
        mean_x = sum(x for x, _ in points) / len(points)
        mean_y = sum(y for _, y in points) / len(points)
        spread = sum((x - mean_x) ** 2 for x, _ in points)
        if spread > 0:
            factor = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
            startup = mean_y - factor * mean_x
            if factor > 0 and startup >= 0:
                leg.factor, leg.startup_s = factor, startup
                return
    leg.factor = 1.0
    leg.startup_s = max(0.0, min(y - x for x, y in points))


def make_plan(
    run_dirs: Sequence[str | Path | _Run], shards: int, *, device: str, workers: int
) -> Plan:
    """The projection of ``shards`` shards from the recorded runs ``run_dirs``."""
    if shards < 1:
        raise ConfigError(f"expected at least 1 shard, got {shards}", where="--shards")
    if workers < 1:
        raise ConfigError(f"expected at least 1 worker, got {workers}", where="--workers")
    runs = [run if isinstance(run, _Run) else _read(Path(run)) for run in run_dirs]
    by_leg: dict[str, list[_Run]] = {name: [] for name in LEGS}
    for run in runs:
        if run.backend == device:
            by_leg["compile" if run.mode == "compile" else "eager"].append(run)
        elif run.backend == BASELINE_DEVICE and run.mode == "eager":
            by_leg["baseline"].append(run)
    if not by_leg["eager"]:
        names = ", ".join(f"{run.path} ({run.backend}, {run.mode})" for run in runs)
        raise ConfigError(
            f"no eager run of {device} among the runs given: {names or 'none'}",
            where="--durations",
        )
    legs: dict[str, Leg] = {}
    for name, leg_runs in by_leg.items():  # eager first: the others borrow its start-up
        if not leg_runs:
            continue
        leg = legs[name] = Leg(name)
        for run in leg_runs:
            leg.seconds.update(run.seconds)
        _calibrate(leg, leg_runs, workers, legs["eager"].startup_s if "eager" in legs else 0.0)

    outcomes: dict[str, str] = {}
    identity: dict[str, tuple[str, str, str]] = {}
    for run in by_leg["eager"]:
        outcomes.update(run.outcomes)
        identity.update(run.files)
    # The nightly's shard runs balance on the last nightly of the device, then of cpu.
    durations = Durations()
    for run in [*by_leg["eager"], *by_leg["baseline"]]:
        for test_id, seconds in run.seconds.items():
            file, cls, template = run.files[test_id]
            durations.add(test_id, file, cls, template, seconds)
    files = {file for file, _, _ in identity.values()}
    assigned = pack(durations, files, shards)

    needing = {t for t, outcome in outcomes.items() if needs_baseline(outcome)}
    baseline_times = legs.get("baseline", Leg("baseline")).seconds
    eager_times = legs["eager"].seconds
    members: list[list[str]] = [[] for _ in range(shards)]
    untimed = 0
    for test_id in outcomes:
        k = assigned.get(test_id)
        if k is None:
            untimed += 1
            continue
        members[k].append(test_id)

    def leg_tests(name: str, tests: list[str]) -> dict[str, float]:
        if name == "eager":
            return {t: eager_times.get(t, 0.0) for t in tests}
        if name == "compile":
            times = legs["compile"].seconds
            return {t: times[t] for t in tests if t in times}
        # Baseline on demand: cpu's time where recorded, else the device's.
        return {t: baseline_times.get(t, eager_times.get(t, 0.0)) for t in tests if t in needing}

    leg_names = ["eager", *(["compile"] if "compile" in legs else []), "baseline"]
    if "baseline" not in legs:
        eager = legs["eager"]
        legs["baseline"] = Leg("baseline", startup_s=eager.startup_s, factor=eager.factor)
    projections = []
    too_long: list[tuple[str, str, float]] = []
    for name in leg_names:
        total = sum(sum(leg_tests(name, tests).values()) for tests in members)
        fair = total / shards
        for tests in members:
            too_long += [
                (t, name, s) for t, s in leg_tests(name, tests).items() if shards > 1 and s > fair
            ]
    for k, tests in enumerate(members):
        walls = {}
        for name in leg_names:
            times = leg_tests(name, tests)
            walls[name] = legs[name].wall(
                sum(times.values()), workers, max(times.values(), default=0.0)
            )
        projections.append(ShardProjection(k + 1, len(tests), walls))
    too_long.sort(key=lambda item: -item[2])
    return Plan(projections, workers, legs, too_long, untimed)


def shards_for_target(
    run_dirs: Sequence[str | Path | _Run], target_s: float, *, device: str, workers: int, limit: int
) -> tuple[int, Plan] | None:
    """The fewest shards (up to ``limit``) whose slowest shard takes at most ``target_s``."""
    runs = [run if isinstance(run, _Run) else _read(Path(run)) for run in run_dirs]  # once
    low, high = 1, limit
    best: tuple[int, Plan] | None = None
    while low <= high:
        middle = (low + high) // 2
        plan = make_plan(runs, middle, device=device, workers=workers)
        if plan.slowest <= target_s:
            best = (middle, plan)
            high = middle - 1
        else:
            low = middle + 1
    return best


def parse_duration(text: str) -> float:
    """``"90m"``, ``"2h"``, ``"1h30m"``, ``"45s"``, ``"600"`` (seconds) -> seconds."""
    spec = text.strip().lower()
    if spec.replace(".", "", 1).isdigit():
        return float(spec)
    total, number = 0.0, ""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0}
    for char in spec:
        if char.isdigit() or char == ".":
            number += char
        elif char in units and number:
            total += float(number) * units[char]
            number = ""
        else:
            raise ConfigError(f"expected a duration like 90m, 2h or 1h30m, got {text!r}")
    if number or total <= 0:
        raise ConfigError(f"expected a duration like 90m, 2h or 1h30m, got {text!r}")
    return total


def format_plan(plan: Plan, *, top: int = 10) -> str:
    from conformance.progress import format_duration

    legs = [name for name in LEGS if name in plan.shards[0].legs] if plan.shards else []
    header = ["shard", "tests", *legs, "total"]
    rows = [
        [
            str(shard.index),
            f"{shard.tests:,}",
            *(format_duration(shard.legs[name]) for name in legs),
            format_duration(shard.total),
        ]
        for shard in plan.shards
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
        for row in [header, *rows]
    ]
    ratio = plan.slowest / plan.mean if plan.mean else 1.0
    lines.append(
        f"slowest shard {format_duration(plan.slowest)}, mean {format_duration(plan.mean)} "
        f"({ratio:.2f}x), {plan.workers} workers per shard"
    )
    for name in legs:
        leg = plan.legs[name]
        how = (
            f"fitted on {leg.calibrated_on} run(s): start-up {format_duration(leg.startup_s)}, "
            f"{leg.factor:.2f} wall s per test s per worker"
            if leg.calibrated_on
            else "no run with its own wall time: test time over workers"
        )
        lines.append(f"{name}: {how}")
    if plan.untimed:
        lines.append(f"{plan.untimed:,} tests of the device run have no recorded time")
    if plan.too_long:
        lines.append(
            f"{len(plan.too_long)} test(s) longer than their leg's fair share of a shard "
            "(they bound how short a shard can be):"
        )
        lines += [
            f"  {format_duration(seconds)}  {leg}  {test_id}"
            for test_id, leg, seconds in plan.too_long[:top]
        ]
    return "\n".join(lines)


def register(steps: argparse._SubParsersAction) -> None:
    parser = steps.add_parser(
        "plan",
        help="project each shard's wall time from recorded runs, and the shards a target needs",
        description="Project the wall time of each of N shards (device eager, compile leg, "
        "baseline on demand) from recorded runs, as 'nightly shard K/N' will split them.",
    )
    parser.add_argument("--shards", type=int, required=True, metavar="N")
    parser.add_argument(
        "--durations",
        nargs="+",
        required=True,
        metavar="RUN",
        help="recorded runs: the device's eager (and compile) runs and cpu's, shard runs "
        "or merged ones (a folder, or a run id under --runs-root)",
    )
    parser.add_argument("--device", default="emu", metavar="TYPE", help="default: emu")
    parser.add_argument("--runs-root", default="runs", metavar="DIR")
    parser.add_argument(
        "-n", "--workers", type=int, default=2, metavar="N", help="workers per shard (default 2)"
    )
    parser.add_argument(
        "--target", metavar="DURATION", help="wall-time target per shard (90m, 2h, 1h30m)"
    )
    parser.add_argument(
        "--max-shards", type=int, default=512, metavar="N", help="searched up to (default 512)"
    )
    parser.set_defaults(handler=_plan_command)


def _plan_command(args: argparse.Namespace) -> int:
    from conformance.progress import format_duration
    from conformance.store import resolve_run

    runs = [_read(resolve_run(ref, args.runs_root)) for ref in args.durations]
    plan = make_plan(runs, args.shards, device=args.device, workers=args.workers)
    print(f"conformance nightly plan: {args.shards} shards of {args.device}")
    print(format_plan(plan))
    if args.target:
        target = parse_duration(args.target)
        found = shards_for_target(
            runs, target, device=args.device, workers=args.workers, limit=args.max_shards
        )
        if found is None:
            print(
                f"no shard count up to {args.max_shards} meets {format_duration(target)}: "
                "its longest tests bound every shard",
                file=sys.stderr,
            )
            return 1
        count, best = found
        print(
            f"target {format_duration(target)}: {count} shards of {args.workers} workers "
            f"(slowest {format_duration(best.slowest)}, mean {format_duration(best.mean)})"
        )
    return 0
