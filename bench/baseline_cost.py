"""Benchmark: what the cpu baseline costs beside the device run, on demand and in full.

On a real upstream selection (a shard of PyTorch's ``test_indexing.py`` and
``test_view_ops.py``, from ``../shared/upstream/test`` by default), side by side in one
invocation:

1. the device run (``--device emu``, no skiplist, no retries), its wall time;
2. the baseline on demand: cpu runs only the tests that did not pass on the device
   (``--baseline-for``, what ``--baseline cpu`` does after the run), its wall time;
3. the full baseline: cpu runs the whole shard (what ``--baseline-full`` does), its wall time;
4. a cpu run of a single test of the shard: the fixed cost of any run (interpreter, torch,
   workers, collecting its file), printed apart.

Each baseline's cost is printed as a share of the device run's, with the tests it ran.
Target: the on-demand baseline costs less than the full one.

    python bench/baseline_cost.py [--device emu] [--shard 1/2] [--workers 2] [--tests PATH]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Run as a script, this folder comes first on sys.path, and bench/op_coverage.py would
# shadow the op_coverage package.
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path[0] = str(ROOT)

UPSTREAM = ROOT.parent / "shared" / "upstream" / "test"
FILES = ("test_indexing.py", "test_view_ops.py")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="emu", help="the device under test (default: emu)")
    parser.add_argument(
        "--tests", default=str(UPSTREAM), metavar="PATH", help="PyTorch's test/ folder"
    )
    parser.add_argument("--files", nargs="+", default=list(FILES), metavar="FILE")
    parser.add_argument("--shard", default="1/2", metavar="K/N", help="default: 1/2")
    parser.add_argument("--workers", default="2", help="xdist workers for every run")
    return parser


def _conformance(*args: str) -> float:
    """Run ``conformance`` with ``args``; its wall time (exit 0 or 1: tests may fail)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.stderr.write(done.stdout.decode()[-3000:] + done.stderr.decode()[-3000:])
        raise SystemExit(f"conformance {' '.join(args[:3])} ... exited {done.returncode}")
    return elapsed


def _tests(run_dir: Path) -> tuple[int, int]:
    """(tests recorded, tests that did not pass) of a run."""
    from conformance.baseline import tests_needing_baseline
    from conformance.store import read_run

    _, frame = read_run(run_dir, ["test_id", "template", "outcome", "category"])
    return len(frame), len(tests_needing_baseline(frame))


def _first_test(run_dir: Path) -> str:
    from conformance.store import read_run

    _, frame = read_run(run_dir, ["test_id", "outcome"])
    ran = frame.loc[frame["outcome"] == "passed", "test_id"]
    return str((ran if len(ran) else frame["test_id"]).iloc[0])


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    tests = Path(args.tests)
    if not tests.is_dir():
        raise SystemExit(f"--tests: no such folder: {tests} (PyTorch's test/ folder)")
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as tmp:
        runs = Path(tmp)
        common = ["--tests", str(tests), "--files", *args.files, "-n", args.workers]
        common += ["--no-skiplist", "--retry-failures", "0", "--progress-interval", "0"]
        common += ["--runs-root", str(runs)]
        print(f"{args.device} run of shard {args.shard} of {', '.join(args.files)} ...", flush=True)
        device_s = _conformance(
            "run", "--device", args.device, *common, "--shard", args.shard, "--run-id", "device"
        )
        total, needed = _tests(runs / "device")
        print("cpu baseline on demand ...", flush=True)
        on_demand_s = _conformance(
            "run", "--device", "cpu", *common, "--baseline-for", "device", "--run-id", "on-demand"
        )
        print("cpu baseline in full ...", flush=True)
        full_s = _conformance(
            "run", "--device", "cpu", *common, "--shard", args.shard, "--run-id", "full"
        )
        ran_on_demand, _ = _tests(runs / "on-demand")
        ran_full, _ = _tests(runs / "full")
        print("cpu run of one test (the fixed cost of a run) ...", flush=True)
        one = _first_test(runs / "full")
        fixed_s = _conformance(
            "run", "--device", "cpu", *common, "--rerun", str(runs / "full"),
            "--where", f"test_id={re.escape(one)}", "--run-id", "one",
        )  # fmt: skip

    print(f"{args.device} run: {device_s:8.1f} s, {total:,} tests, {needed:,} did not pass")
    print(
        f"baseline on demand: {on_demand_s:8.1f} s, {ran_on_demand:,} tests: "
        f"{100 * on_demand_s / device_s:5.1f}% of the device run's time"
    )
    print(
        f"full baseline:      {full_s:8.1f} s, {ran_full:,} tests: "
        f"{100 * full_s / device_s:5.1f}% of the device run's time"
    )
    print(
        f"fixed cost of a run (one test on cpu, its file alone): {fixed_s:8.1f} s, "
        "most of what a small baseline costs"
    )
    print(f"on demand / full: {on_demand_s / full_s:.2f} (target below 1)")
    if on_demand_s >= full_s:
        print("target missed")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
