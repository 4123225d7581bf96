"""Benchmark: what the conformance plugin costs, and what xdist workers buy.

Runs one generated upstream-style selection (device-generic tests over two dtypes, each
doing a little real work on the CPU) in fresh pytest processes, side by side:

1. plain pytest against pytest with recording on (``--device cpu``), serial, in
   alternating order so drifts in machine load hit both; the overhead is the median of
   the paired ratios of CPU time (which other load on the machine barely moves) and of
   wall time (target: at most 5%);
2. the plugin with ``-n 1`` against ``-n 2`` (target: at least 1.7x faster on 2 cores).

First it prints what the recording side costs per test in-process (merging the three
reports, writing the line, arming the watchdog), which no machine load distorts much.

Wall times include interpreter and torch start-up, which every real run pays too.

    python bench/plugin_overhead.py [--templates 100] [--matmuls 500] [--size 192] [--repeat 2]

The selection must be long next to start-up (each worker imports torch), or the
speed-up measures start-up instead of the run.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SUITE = """\
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase

MATMULS = {matmuls}
SIZE = {size}


def _work(device, dtype):
    a = torch.randn(SIZE, SIZE, device=device, dtype=dtype) / SIZE
    for _ in range(MATMULS):
        a = torch.tanh(a @ a)
    return a.sum().item()


class TestBench(TestCase):
    pass


def _template(index):
    @dtypes(torch.float32, torch.float64)
    def test(self, device, dtype):
        value = _work(device, dtype)
        self.assertEqual(value, value)

    test.__name__ = f"test_work_{{index}}"
    return test


for _index in range({templates}):
    setattr(TestBench, f"test_work_{{_index}}", _template(_index))

instantiate_device_type_tests(TestBench, globals(), only_for="cpu")
"""


def report(line: str) -> None:
    print(line, flush=True)  # progress shows as each run ends


def timed(command: list[str], cwd: Path) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, the process and its workers) of a run."""
    # One intra-op thread per process, so that two workers do not fight over the cores.
    env = dict(os.environ, PYTORCH_TESTING_DEVICE_ONLY_FOR="cpu", OMP_NUM_THREADS="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(
            f"benchmark run failed ({done.returncode}): {' '.join(command)}\n{done.stdout[-3000:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def bookkeeping_per_test(folder: Path, tests: int = 5000) -> float:
    """Seconds per test the recording side spends, measured in this process on synthetic
    reports (three phases each, identity attached), with the watchdog armed around each."""
    from types import SimpleNamespace

    from conformance.classify import classify_failure, classify_skip
    from conformance.identity import parse_nodeid
    from conformance.model import RunMeta
    from conformance.outcome import OutcomeMerger
    from conformance.store import RunWriter
    from conformance.watchdog import Watchdog

    merger = OutcomeMerger(
        run_id="micro", device="cpu", shard="",
        identity_of=lambda nodeid: parse_nodeid(nodeid, ("cpu",)),
        classify_failure=classify_failure, classify_skip=classify_skip,
    )  # fmt: skip
    writer = RunWriter(folder / "micro", RunMeta(run_id="micro", backend="cpu"))
    watchdog = Watchdog(600, lambda nodeid: None)
    reports = []
    for index in range(tests):
        nodeid = f"test_bench.py::TestBenchCPU::test_work_{index}_cpu_float32"
        identity = {"nodeid": nodeid, "test_id": nodeid.replace("CPU", "").replace("_cpu", ""),
                    "file": "test_bench.py", "test_class": "TestBench",
                    "template": f"test_work_{index}", "dtype": "float32"}  # fmt: skip
        reports.append([
            SimpleNamespace(nodeid=nodeid, when=when, outcome="passed", passed=True, failed=False,
                            skipped=False, longrepr=None, duration=0.01,
                            user_properties=[("test_identity", identity)])
            for when in ("setup", "call", "teardown")
        ])  # fmt: skip
    start = time.perf_counter()
    for phases in reports:
        watchdog.start(phases[0].nodeid)
        for phase in phases:
            record = merger.add(phase)
            if record is not None:
                writer.write(record)
        watchdog.stop()
    per_test = (time.perf_counter() - start) / tests
    writer.close()  # once per run, not per test
    return per_test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--templates", type=int, default=100, help="test templates (x2 dtypes)")
    parser.add_argument("--matmuls", type=int, default=500, help="work per test: matrix products")
    parser.add_argument("--size", type=int, default=192, help="work per test: matrix size")
    parser.add_argument("--repeat", type=int, default=2, help="pairs of runs per comparison")
    options = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="conformance-bench-") as tmp:
        folder = Path(tmp)
        (folder / "test_bench.py").write_text(
            textwrap.dedent(
                SUITE.format(
                    templates=options.templates, matmuls=options.matmuls, size=options.size
                )
            )
        )
        tests = options.templates * 2
        base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_bench.py"]
        counter = iter(range(10_000))

        def plugin(*extra: str) -> list[str]:
            return [*base, "--device", "cpu", "--run-dir", f"runs/r{next(counter)}", *extra]

        cost = bookkeeping_per_test(folder)
        report(f"recording cost per test, in process: {cost * 1e6:.0f} us")
        report(f"selection: {tests} tests; {options.repeat} pairs per comparison")
        wall_ratios, cpu_ratios = [], []
        for pair in range(options.repeat):
            if pair % 2 == 0:
                plain, recorded = timed(base, folder), timed(plugin(), folder)
            else:
                recorded, plain = timed(plugin(), folder), timed(base, folder)
            wall_ratios.append(recorded[0] / plain[0])
            cpu_ratios.append(recorded[1] / plain[1])
            report(
                f"  pair {pair + 1}: plain {plain[0]:6.2f} s ({plain[1]:6.2f} s CPU)   "
                f"recording {recorded[0]:6.2f} s ({recorded[1]:6.2f} s CPU)"
            )
        report(
            f"plugin overhead, median of pairs: {statistics.median(cpu_ratios) - 1:+.1%} CPU time, "
            f"{statistics.median(wall_ratios) - 1:+.1%} wall time  (target <= +5%)"
        )

        speedups = []
        for pair in range(options.repeat):
            if pair % 2 == 0:
                one, two = timed(plugin("-n", "1"), folder)[0], timed(plugin("-n", "2"), folder)[0]
            else:
                two, one = timed(plugin("-n", "2"), folder)[0], timed(plugin("-n", "1"), folder)[0]
            speedups.append(one / two)
            report(
                f"  pair {pair + 1}: -n 1 {one:6.2f} s   -n 2 {two:6.2f} s   speed-up {one / two:.2f}x"
            )
        load = os.getloadavg()[0]
        report(
            f"-n 2 vs -n 1 speed-up, median of pairs: {statistics.median(speedups):.2f}x  "
            f"(target >= 1.7x; {os.cpu_count()} cores, load average {load:.1f} at the end: "
            "other work on the machine takes from the second worker first)"
        )


if __name__ == "__main__":
    main()
