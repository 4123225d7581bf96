"""Benchmark: compile mode on emu against eager.

Side by side in one invocation:

1. per call, a small MLP's forward on emu (batch 32, 64 -> 128 -> 128 -> 10), eager and
   compiled with emu's torch.compile backend, after warm-up (the compile itself is not
   timed); rounds interleave the two, the best round of each counts;
2. the wall time of ``conformance run --suite embedded:smoke`` on emu in compile mode
   against eager, with emu's skiplist, run back to back (what a nightly's compile job
   costs beside its eager job). Target: compile at most ``--target`` (2.5) times eager;
   the script exits 1 when the smoke part misses it. Each worker compiles an op's calls
   once and reuses the graphs across the templates, so the ratio is bounded by the
   compilations the samples need (one per op, variant and input layout), not the calls.

No target is set for the per-call ratio: compiled graphs run the same emu kernels one by
one, so per call they save Python dispatch at best.

    python bench/compile_mode.py [--part calls|smoke|both] [--calls 300] [--rounds 5]
                                 [--target 2.5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time

#: The most a compile-mode smoke run may take, in times the eager run's wall time.
TARGET = 2.5


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("calls", "smoke", "both"), default="both")
    parser.add_argument("--calls", type=int, default=300, help="forward calls per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", default="2", help="xdist workers for the smoke runs")
    parser.add_argument(
        "--target",
        type=float,
        default=TARGET,
        help="the most compile mode's smoke wall time may be, in eager's (default: %(default)s)",
    )
    return parser


def _per_call_us(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def bench_calls(calls: int, rounds: int) -> tuple[float, float]:
    import torch

    torch.set_num_threads(1)  # per-call overhead, not OpenMP spin, on a shared machine
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 128),
        torch.nn.GELU(),
        torch.nn.Linear(128, 10),
    ).to("emu")
    x = torch.randn(32, 64, device="emu")
    compiled = torch.compile(model, backend="emu")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x).cpu(), model(x).cpu(), rtol=1e-5, atol=1e-6)
        for _ in range(10):  # warm up both
            model(x), compiled(x)
        eager_best = compiled_best = float("inf")
        for _ in range(rounds):
            eager_best = min(eager_best, _per_call_us(lambda: model(x), calls))
            compiled_best = min(compiled_best, _per_call_us(lambda: compiled(x), calls))
    return eager_best, compiled_best


def _smoke(mode: str, runs: str, workers: str) -> float:
    command = [sys.executable, "-m", "conformance", "run", "--device", "emu"]
    command += ["--suite", "embedded:smoke", "--mode", mode, "-n", workers]
    command += ["--runs-root", runs, "--run-id", mode, "--progress-interval", "0"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"smoke in {mode} mode exited {done.returncode}")
    return elapsed


def main() -> int:
    args = build_parser().parse_args()
    status = 0
    if args.part in ("calls", "both"):
        eager_us, compiled_us = bench_calls(args.calls, args.rounds)
        print(
            f"MLP forward on emu, per call: eager {eager_us:8.1f} us, compiled {compiled_us:8.1f} us"
        )
        print(f"compiled / eager: {compiled_us / eager_us:.2f}x")
    if args.part in ("smoke", "both"):
        with tempfile.TemporaryDirectory(prefix="bench-compile-") as runs:
            eager_s = _smoke("eager", runs, args.workers)
            compile_s = _smoke("compile", runs, args.workers)
        ratio = compile_s / eager_s
        verdict = "met" if ratio <= args.target else "MISSED"
        print(f"embedded:smoke on emu: eager {eager_s:6.1f} s, compile {compile_s:6.1f} s")
        print(f"compile / eager wall time: {ratio:.2f}x (target <= {args.target:g}x: {verdict})")
        status = 0 if ratio <= args.target else 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
