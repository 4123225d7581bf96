"""Benchmark: 8 shards balanced by recorded durations: upstream's real ones, and a model.

First, PyTorch's own 13 device-generic files for torch 2.13 as emu ran them (durations
recorded once into bench/data, see bench/data/recorded.py): the recorded tests packed into
8 shards, the slowest shard's time over the mean measured in the recorded times and, for
the tests recorded twice, packed on the first recording and measured in the second (a
rerun's noise: a replay run, a later shard of them); beside the hash split. Tests longer than a shard's fair share (which no
split can balance) are named. Target: slowest within 1.10x of the mean.

Then a synthetic model of 154,000 tests:
A nightly CI matrix runs shard K of N per machine; the run takes as long as its slowest
shard. The durations come from an earlier run on cpu; the shards run on emu, whose
collection differs (about 1% of tests only on each device, as upstream's device rules
give) and whose times differ per template. Printed side by side: the slowest shard's time
over the mean, for the hash split and for the split balanced by cpu's durations, both
measured in emu's times, over several independent draws. Target: the balanced split's
slowest shard within 1.10x of the mean (median of the draws).

    python bench/sharding.py [--part recorded|synthetic|both] [--tests 154000] [--shards 8]
                             [--draws 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import sys
import time
from pathlib import Path

from conformance.model import TestIdentity
from conformance.sharding import Durations, in_shard, pack, plan_shard

TARGET = 1.10


def synthetic_tests(count: int, device: str, rng: random.Random) -> list[TestIdentity]:
    """Upstream-shaped tests of one device: files, classes, templates over ops."""
    tests = []
    for index in range(count):
        file = f"test_file{index % 13}.py"
        template = f"test_tmpl{index % 90}"
        name = f"{template}_op{index // 90}_float32"
        tests.append(
            TestIdentity(
                nodeid=f"{file}::TestClass{device.upper()}::{name}_{device}",
                test_id=f"{file}::TestClass::{name}",
                file=file,
                test_class="TestClass",
                template=template,
                device=device,
            )
        )
    rng.shuffle(tests)
    return tests


def measure(args: argparse.Namespace, seed: int) -> tuple[float, float, int]:
    """(hash split's slowest/mean, balanced split's, tests estimated) for one draw."""
    rng = random.Random(seed)
    universe = synthetic_tests(int(args.tests * 1.01), "x", rng)
    cpu = universe[: args.tests]  # the earlier run's tests
    emu = universe[len(universe) - args.tests :]  # this run's: ~1% differ each way
    # Heavy-tailed times as upstream's files have them: most tests take milliseconds, one
    # in 200 takes seconds to minutes (gradient checks of big ops, up to the 300 s limit);
    # per template a device factor and per test some noise: emu is not cpu run faster.
    base = {
        t.test_id: min(300.0, 2.0 * rng.paretovariate(1.1))
        if rng.random() < 0.005
        else rng.lognormvariate(-3.5, 1.2)
        for t in universe
    }
    factor = {f"test_tmpl{i}": rng.uniform(0.2, 3.0) for i in range(90)}
    on_emu = {  # the time limit stops the slowest on emu too
        t.test_id: min(300.0, base[t.test_id] * factor[t.template] * rng.lognormvariate(0, 0.3))
        for t in emu
    }
    durations = Durations()
    for test in cpu:
        durations.add(test.test_id, test.file, test.test_class, test.template, base[test.test_id])

    def slowest_over_mean(shard_of: dict[str, int]) -> float:
        times = [0.0] * args.shards
        for test_id, k in shard_of.items():
            times[k] += on_emu[test_id]
        return max(times) / (sum(times) / len(times))

    hashed = {
        t.test_id: k
        for t in emu
        for k in range(args.shards)
        if in_shard(t.test_id, (k + 1, args.shards))
    }
    packed = pack(durations, {t.file for t in emu}, args.shards)
    balanced = {
        t.test_id: packed[t.test_id] if t.test_id in packed else hashed[t.test_id] for t in emu
    }
    return (
        slowest_over_mean(hashed),
        slowest_over_mean(balanced),
        len(emu) - len(packed.keys() & {t.test_id for t in emu}),
    )


def _recorded_data():
    path = Path(__file__).resolve().parent / "data" / "recorded.py"
    spec = importlib.util.spec_from_file_location("bench_recorded", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _slowest_over_mean(shard_of: dict[str, int], times: dict[str, float], count: int) -> float:
    loads = [0.0] * count
    for test_id, k in shard_of.items():
        loads[k] += times[test_id]
    return max(loads) / (sum(loads) / count)


def bench_recorded(shards: int) -> float:
    """The recorded upstream durations into ``shards`` shards: slowest over mean."""
    data = _recorded_data()
    rows, runs = data.load()
    first: dict[str, dict] = {}
    second: dict[str, float] = {}
    replays = set(data.replay_runs(runs))
    for row in rows:
        if row["run"] in replays:
            second[row["test_id"]] = float(row["duration_s"])
        else:
            first[row["test_id"]] = row

    def durations_of(test_ids) -> Durations:
        durations = Durations()
        for test_id in test_ids:
            row = first[test_id]
            durations.add(
                test_id, row["file"], row["test_class"], row["template"], float(row["duration_s"])
            )
        return durations

    def hashed(test_ids) -> dict[str, int]:
        return {t: k for t in test_ids for k in range(shards) if in_shard(t, (k + 1, shards))}

    durations = durations_of(first)
    times = durations.seconds
    total = sum(times.values())
    files = {row["file"] for row in first.values()}
    start = time.perf_counter()
    packed = pack(durations, files, shards)
    pack_s = time.perf_counter() - start
    balanced = _slowest_over_mean(packed, times, shards)
    fair = total / shards
    print(
        f"sharding: recorded upstream, {len(first):,} tests of {len(files)} files on emu "
        f"({total / 3600:.1f} h of test time in {len(runs) - len(replays)} runs), {shards} shards: "
        f"hash split {_slowest_over_mean(hashed(first), times, shards):.3f}x, "
        f"balanced {balanced:.3f}x (target <= {TARGET:.2f}x; packed in {pack_s:.2f} s)"
    )
    longest = sorted(times, key=lambda t: -times[t])
    too_long = [t for t in longest if times[t] > fair]
    print(
        f"  longest test {times[longest[0]]:.0f} s against a fair share of {fair:.0f} s per "
        f"shard; {len(too_long)} test(s) longer than a shard's share"
        + "".join(f"\n    {times[t]:.0f} s  {t}" for t in too_long[:10])
    )
    again = [t for t in second if t in first]
    if again:
        subset = durations_of(again)
        packed = pack(subset, {first[t]["file"] for t in again}, shards)
        print(
            f"  {len(again):,} tests recorded twice, packed on the first recording, measured "
            f"in the second: hash split {_slowest_over_mean(hashed(again), second, shards):.3f}x, "
            f"balanced {_slowest_over_mean(packed, second, shards):.3f}x"
        )
    return balanced


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("recorded", "synthetic", "both"), default="both")
    parser.add_argument("--tests", type=int, default=154_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--draws", type=int, default=5, help="independent synthetic nightlies")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ok = True
    if args.part in ("recorded", "both"):
        ok = bench_recorded(args.shards) <= TARGET
    if args.part in ("synthetic", "both"):
        ok = bench_synthetic(args) and ok
    return 0 if ok else 1


def bench_synthetic(args: argparse.Namespace) -> bool:
    results = [measure(args, seed) for seed in range(1, args.draws + 1)]
    print(
        f"sharding: {args.tests:,} emu tests into {args.shards} shards, balanced by the durations "
        f"of {args.tests:,} cpu tests ({results[0][2]:,} emu tests without one); "
        f"slowest shard / mean shard in emu's times, {args.draws} draws:"
    )
    for seed, (hashed, balanced, _) in enumerate(results, start=1):
        print(f"  draw {seed}: hash split {hashed:.3f}x, balanced by cpu durations {balanced:.3f}x")
    hashed = statistics.median(r[0] for r in results)
    balanced = statistics.median(r[1] for r in results)
    print(
        f"  median: hash split {hashed:.3f}x, balanced {balanced:.3f}x (target <= {TARGET:.2f}x); "
        f"the hash split's nightly takes {hashed / balanced:.2f}x the balanced one's"
    )

    emu = synthetic_tests(args.tests, "emu", random.Random(0))
    durations = Durations()
    for test in emu:
        durations.add(test.test_id, test.file, test.test_class, test.template, 0.01)
    start = time.perf_counter()
    plan_shard(emu, (1, args.shards))
    hash_s = time.perf_counter() - start
    start = time.perf_counter()
    plan_shard(emu, (1, args.shards), durations)
    balanced_s = time.perf_counter() - start
    print(
        f"  planning one shard (each xdist worker does, once): {hash_s * 1000:.0f} ms by hash, "
        f"{balanced_s * 1000:.0f} ms balanced"
    )
    return balanced <= TARGET


if __name__ == "__main__":
    sys.exit(main())
