"""Benchmark: 8 shards of 154,000 tests balanced by durations recorded on another device.

A nightly CI matrix runs shard K of N per machine; the run takes as long as its slowest
shard. The durations come from an earlier run on cpu; the shards run on emu, whose
collection differs (about 1% of tests only on each device, as upstream's device rules
give) and whose times differ per template. Printed side by side: the slowest shard's time
over the mean, for the hash split and for the split balanced by cpu's durations, both
measured in emu's times, over several independent draws. Target: the balanced split's
slowest shard within 1.10x of the mean (median of the draws).

    python bench/sharding.py [--tests 154000] [--shards 8] [--draws 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=154_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--draws", type=int, default=5, help="independent synthetic nightlies")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

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
    return 0 if balanced <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
