"""Benchmark: what ``conformance run --profile`` costs. Not a test.

    python bench/profile_overhead.py              # both parts, each with its defaults
    python bench/profile_overhead.py calls [--device emu] [--rounds 3] [--samples 4]
    python bench/profile_overhead.py run [--device emu] [--rounds 2] [--workers 1] [-k EXPR]

``calls``: in one process, a test-sized unit of work (one OpInfo's samples run on the
device and compared with the CPU, for each of a list of common ops), plain and under the
profiler as ``--profile`` runs it around a test's call (start with the device's activity and
``record_shapes``, run, stop, sum the events by op and input signature); rounds alternate
which goes first. Prints the total of each and the ratio, and the profiler's cost per unit.

``run``: ``conformance run`` on a selection of the embedded suite (default: the smoke
selection's ``test_compare_cpu`` and ``test_noncontiguous_samples``) with and without
``--profile``, alternating, comparing the per-test durations the store recorded (startup
and collection excluded) and the wall times.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(ROOT)  # the op_coverage package, not bench/op_coverage.py
RUN_ONLY = (
    "import sys, conformance.cli as cli; cli.PART_MODULES = ('conformance.run_cli',); "
    "sys.exit(cli.main(sys.argv[1:]))"
)
OPS = (
    "add", "mul", "div", "exp", "sin", "sum", "mean", "amax", "cumsum", "softmax", "matmul",
    "addmm", "cat", "index_select", "gather", "where", "nn.functional.linear",
    "nn.functional.layer_norm", "nn.functional.conv2d", "nn.functional.gelu",
)  # fmt: skip
DEFAULT_K = "test_compare_cpu or test_noncontiguous_samples"


def _workload(device: str, samples: int):
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    infos = [info for info in op_db if info.name in OPS and not info.variant_test_name]
    cases = [(info, list(info.sample_inputs("cpu", torch.float32))[:samples]) for info in infos]

    def run(info, inputs) -> None:
        for sample in inputs:
            moved = sample.transform(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t)
            try:
                expected = info(sample.input, *sample.args, **sample.kwargs)
                actual = info(moved.input, *moved.args, **moved.kwargs)
                torch.testing.assert_close(
                    actual, expected, check_device=False, atol=1e-4, rtol=1e-4
                )
            except Exception:
                pass  # a missing lowering or a mismatch: still work done

    return cases, run


def bench_calls(args: argparse.Namespace) -> None:
    from conformance.backends import load_backend
    from conformance.profile import CallProfiler

    if args.device != "cpu":
        load_backend(args.device, args.backend_module)
    profiler = CallProfiler(args.device)
    cases, run = _workload(args.device, args.samples)
    for info, inputs in cases:  # warm up: first calls build caches either way
        run(info, inputs)
    profiler._stop(profiler._start())  # the profiler's own first start (kineto's setup)
    plain = profiled = 0.0
    rows = 0
    for round_index in range(args.rounds):
        for index, (info, inputs) in enumerate(cases):
            order = (False, True) if (round_index + index) % 2 == 0 else (True, False)
            for profiling in order:
                start = time.perf_counter()
                if profiling:
                    started = profiler._start()
                    run(info, inputs)
                    rows += len(profiler._stop(started) or ())
                    profiled += time.perf_counter() - start
                else:
                    run(info, inputs)
                    plain += time.perf_counter() - start
    units = len(cases) * args.rounds
    print(
        f"profiler on {args.device} ({', '.join(a.name for a in profiler.activities)}): "
        f"{len(cases)} OpInfos x {args.samples} samples, {args.rounds} rounds"
    )
    print(
        f"  plain {plain:.3f} s, profiled {profiled:.3f} s, ratio {profiled / plain:.2f}; "
        f"{(profiled - plain) / units * 1000:.1f} ms more per unit, {rows / units:.0f} rows per unit"
    )


def _run(args: argparse.Namespace, root: Path, run_id: str, profile: bool) -> float:
    command = [sys.executable, "-c", RUN_ONLY, "run", "--device", args.device, "--suite",
               "embedded:smoke", "--files", "test_ops.py", "-n", str(args.workers),
               "--runs-root", str(root), "--run-id", run_id, "--retry-failures", "0",
               "--progress-interval", "0"]  # fmt: skip
    if args.backend_module:
        command += ["--backend-module", args.backend_module]
    if profile:
        command.append("--profile")
    command += ["--", "-k", args.k]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy())
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"conformance run failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return wall


def bench_run(args: argparse.Namespace) -> None:
    from conformance.store import read_run

    totals = {False: [0.0, 0.0], True: [0.0, 0.0]}  # profile -> [test seconds, wall seconds]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for round_index in range(args.rounds):
            for profile in (False, True) if round_index % 2 == 0 else (True, False):
                run_id = f"r{round_index}-{'profiled' if profile else 'plain'}"
                wall = _run(args, root, run_id, profile)
                _, records = read_run(root / run_id)
                tests = float(records["duration_s"].sum())
                totals[profile][0] += tests
                totals[profile][1] += wall
                print(
                    f"  {run_id}: {len(records)} tests, {tests:.2f} s in tests, {wall:.1f} s wall"
                )
    (plain_tests, plain_wall), (profiled_tests, profiled_wall) = totals[False], totals[True]
    print(f"embedded:smoke test_ops.py -k {args.k!r} on {args.device}, {args.rounds} round(s):")
    print(f"  time in tests: plain {plain_tests:.2f} s, profiled {profiled_tests:.2f} s, "
          f"ratio {profiled_tests / plain_tests:.2f}")  # fmt: skip
    print(f"  wall: plain {plain_wall:.1f} s, profiled {profiled_wall:.1f} s, "
          f"ratio {profiled_wall / plain_wall:.2f}")  # fmt: skip


PARTS = {"calls": bench_calls, "run": bench_run}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(
        dest="bench", metavar="PART", help="calls or run (default: both, in turn)"
    )
    calls = commands.add_parser("calls", help="the profiler around test-sized units of work")
    run = commands.add_parser("run", help="conformance run with and without --profile")
    for sub in (calls, run):
        sub.add_argument("--device", default="emu")
        sub.add_argument("--backend-module")
    calls.add_argument("--rounds", type=int, default=3)
    calls.add_argument("--samples", type=int, default=4)
    run.add_argument("--rounds", type=int, default=2)
    run.add_argument("--workers", type=int, default=1)
    run.add_argument("-k", default=DEFAULT_K, help=f"tests to run (default: {DEFAULT_K!r})")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.bench is not None:
        PARTS[args.bench](args)
        return
    for name in PARTS:
        PARTS[name](build_parser().parse_args([name]))


if __name__ == "__main__":
    main()
