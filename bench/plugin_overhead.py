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

    python bench/plugin_overhead.py [--part overhead|speedup|both] [--templates 100]
                                    [--speedup-templates 300] [--matmuls 500] [--size 192]
                                    [--repeat 2]

A run has a fixed cost that no worker count shortens (each worker starts an interpreter
and imports torch, the controller starts and stops them: about 10 s here, the same as
plain pytest-xdist), so the speed-up is measured on a longer selection than the overhead,
closer to a real run's hours than to its start-up. The fixed cost is printed beside it.
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
from collections.abc import Callable
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


PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
Plugin = Callable[..., list[str]]  # (test file, *extra pytest arguments) -> command


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


def measure_overhead(folder: Path, options: argparse.Namespace, plugin: Plugin) -> None:
    """Plain pytest against recording, serial, paired."""
    base = [*PYTEST, "test_bench.py"]
    cost = bookkeeping_per_test(folder)
    report(f"recording cost per test, in process: {cost * 1e6:.0f} us")
    report(f"selection: {options.templates * 2} tests; {options.repeat} pairs per comparison")
    wall_ratios, cpu_ratios = [], []
    for pair in range(options.repeat):
        if pair % 2 == 0:
            plain, recorded = timed(base, folder), timed(plugin("test_bench.py"), folder)
        else:
            recorded, plain = timed(plugin("test_bench.py"), folder), timed(base, folder)
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


def measure_speedup(folder: Path, options: argparse.Namespace, plugin: Plugin) -> None:
    """The plugin with -n 1 against -n 2, paired, with the fixed cost of a run and how much
    slower the tests themselves ran side by side (two processes share caches and memory
    bandwidth, and on a virtual machine the host's other guests) printed beside it."""
    from conformance.store import read_run

    def run(file: str, workers: str) -> tuple[float, float]:
        command = plugin(file, "-n", workers)
        wall = timed(command, folder)[0]
        _meta, records = read_run(folder / command[command.index("--run-dir") + 1])
        return wall, float(records["duration_s"].sum())

    fixed = min(run("test_startup.py", "2")[0] for _ in range(2))
    report(
        f"speed-up selection: {options.speedup_templates * 2} tests; fixed cost of a run "
        f"(2 tiny tests, -n 2): {fixed:.1f} s"
    )
    speedups = []
    for pair in range(options.repeat):
        if pair % 2 == 0:
            one, two = run("test_speedup.py", "1"), run("test_speedup.py", "2")
        else:
            two, one = run("test_speedup.py", "2"), run("test_speedup.py", "1")
        speedups.append(one[0] / two[0])
        report(
            f"  pair {pair + 1}: -n 1 {one[0]:6.2f} s   -n 2 {two[0]:6.2f} s   "
            f"speed-up {one[0] / two[0]:.2f}x   (tests' own time {one[1]:.0f} s vs "
            f"{two[1]:.0f} s: {two[1] / one[1] - 1:+.0%} side by side)"
        )
    load = os.getloadavg()[0]
    report(
        f"-n 2 vs -n 1 speed-up, median of pairs: {statistics.median(speedups):.2f}x  "
        f"(target >= 1.7x; {os.cpu_count()} cores, load average {load:.1f} at the end: "
        "other work on the machine takes from the second worker first)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--templates", type=int, default=100, help="overhead: test templates (x2 dtypes)"
    )
    parser.add_argument(
        "--speedup-templates", type=int, default=300, help="speed-up: test templates (x2 dtypes)"
    )
    parser.add_argument("--matmuls", type=int, default=500, help="work per test: matrix products")
    parser.add_argument("--size", type=int, default=192, help="work per test: matrix size")
    parser.add_argument("--repeat", type=int, default=2, help="pairs of runs per comparison")
    parser.add_argument(
        "--part", choices=("overhead", "speedup", "both"), default="both", help="what to measure"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    options = build_parser().parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="conformance-bench-") as tmp:
        folder = Path(tmp)
        for name, templates, matmuls in (
            ("test_bench.py", options.templates, options.matmuls),
            ("test_speedup.py", options.speedup_templates, options.matmuls),
            ("test_startup.py", 1, 1),
        ):
            source = SUITE.format(templates=templates, matmuls=matmuls, size=options.size)
            (folder / name).write_text(textwrap.dedent(source))
        counter = iter(range(10_000))

        def plugin(file: str, *extra: str) -> list[str]:
            run_dir = f"runs/r{next(counter)}"
            return [*PYTEST, file, "--device", "cpu", "--run-dir", run_dir, *extra]

        if options.part in ("overhead", "both"):
            measure_overhead(folder, options, plugin)
        if options.part in ("speedup", "both"):
            measure_speedup(folder, options, plugin)


if __name__ == "__main__":
    main()
