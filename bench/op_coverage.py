"""Benchmarks of op coverage: tracing overhead and triage speed. Not a test.

    python bench/op_coverage.py          # every part in turn, each with its defaults
    python bench/op_coverage.py tracing [--device emu] [--rounds 3]
    python bench/op_coverage.py smoke [--device emu] [--rounds 1]
    python bench/op_coverage.py triage [--outcomes 154000] [--snapshot]

``tracing``: paired runs of the same work in one process, with and without
``trace_ops``: for each of a list of common OpInfos, every sample input (at most
``--samples``) is moved to the device, the op run, and the result compared with the CPU
result (the shape of the suite's compare-with-CPU tests). Each round runs every op
untraced and traced, alternating which goes first, and the ratio of the totals is printed.
Target: traced / untraced <= 1.25.

``smoke``: the real thing, slower: ``conformance run --suite embedded:smoke`` with and
without ``--trace-ops`` (alternating, ``-n 1``), comparing the summed per-test durations
the store recorded (startup and collection excluded) and the wall times.

``triage``: the triage ranking and the op x dtype grid over synthetic outcomes shaped like
a full run (most passed, a third skipped, one in seven blocked on a missing lowering, with
a long tail of blocking ops). Target: <= 5 s.
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
# Run as a script, this file's folder comes first on sys.path and its name would shadow the
# op_coverage package.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(ROOT)
# Only the run command is needed: the CLI is assembled without the other parts' commands.
RUN_ONLY = (
    "import sys, conformance.cli as cli; cli.PART_MODULES = ('conformance.run_cli',); "
    "sys.exit(cli.main(sys.argv[1:]))"
)
SMOKE_OPS = (
    "add", "sub", "mul", "div", "abs", "neg", "exp", "log", "sin", "cos", "tanh", "sigmoid",
    "sqrt", "pow", "clamp", "where", "sum", "mean", "amax", "argmax", "cumsum", "softmax",
    "matmul", "mm", "bmm", "addmm", "cat", "stack", "transpose", "reshape", "index_select",
    "gather", "nn.functional.relu", "nn.functional.gelu", "nn.functional.linear",
    "nn.functional.layer_norm", "nn.functional.conv2d", "max_pool2d_with_indices_backward",
)  # fmt: skip


def _load_device(device: str, module: str | None) -> tuple[str, object | None]:
    """Make ``device`` usable; returns (device, backend package or None)."""
    if device == "cpu":
        return device, None
    from conformance.backends import load_backend

    backend = load_backend(device, module)
    return device, backend.module


def _workload(device: str, samples: int):
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    infos = [info for info in op_db if info.name in SMOKE_OPS and not info.variant_test_name]
    cases = []
    for info in infos:
        inputs = list(info.sample_inputs("cpu", torch.float32))[:samples]
        cases.append((info, inputs))

    def run(info, inputs) -> int:
        failures = 0
        for sample in inputs:
            moved = sample.transform(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t)
            try:
                expected = info(sample.input, *sample.args, **sample.kwargs)
                actual = info(moved.input, *moved.args, **moved.kwargs)
                torch.testing.assert_close(
                    actual, expected, check_device=False, atol=1e-4, rtol=1e-4, equal_nan=True
                )
            except Exception:
                failures += 1  # a missing lowering or a mismatch: still work done
        return failures

    return cases, run


def bench_tracing(args: argparse.Namespace) -> None:
    from op_coverage.tracing import trace_ops

    device, package = _load_device(args.device, args.backend_module)
    counts = getattr(package, "fallback_counts", None)
    cases, run = _workload(device, args.samples)
    traced_device = device if device == "cpu" else None
    for info, inputs in cases:  # warm up: first calls build caches for both modes alike
        run(info, inputs)
    plain = traced = 0.0
    failures = 0
    seen: set[str] = set()
    for round_index in range(args.rounds):
        for index, (info, inputs) in enumerate(cases):
            order = (False, True) if (round_index + index) % 2 == 0 else (True, False)
            for tracing in order:
                start = time.perf_counter()
                if tracing:
                    with trace_ops(traced_device, fallback_counts=counts) as trace:
                        failures += run(info, inputs)
                    seen.update(trace.ops)
                else:
                    failures += run(info, inputs)
                elapsed = time.perf_counter() - start
                if tracing:
                    traced += elapsed
                else:
                    plain += elapsed
    calls = sum(len(inputs) for _, inputs in cases)
    print(
        f"tracing overhead on {device}: {len(cases)} OpInfos, {calls} samples, {args.rounds} rounds"
    )
    print(
        f"  untraced {plain:.3f} s, traced {traced:.3f} s, ratio {traced / plain:.3f} (target <= 1.25)"
    )
    print(f"  {len(seen)} distinct overloads recorded; {failures} sample runs raised")


def _smoke_run(device: str, module: str | None, root: Path, run_id: str, trace: bool) -> float:
    command = [sys.executable, "-c", RUN_ONLY, "run", "--device", device, "--suite",
               "embedded:smoke", "-n", "1", "--runs-root", str(root), "--run-id", run_id]  # fmt: skip
    if module:
        command += ["--backend-module", module]
    if trace:
        command.append("--trace-ops")
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy())
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"conformance run failed ({done.returncode}):\n{done.stderr[-2000:]}")
    from conformance.store import read_run

    if read_run(root / run_id)[1].empty:  # nothing to compare: say why, not divide by zero
        output = (done.stdout + done.stderr)[-2000:]
        raise SystemExit(
            f"conformance run {run_id} recorded no tests ({done.returncode}):\n{output}"
        )
    return wall


def bench_smoke(args: argparse.Namespace) -> None:
    from conformance.store import read_run

    totals = {False: [0.0, 0.0], True: [0.0, 0.0]}  # tracing -> [test seconds, wall seconds]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for round_index in range(args.rounds):
            for trace in (False, True) if round_index % 2 == 0 else (True, False):
                run_id = f"r{round_index}-{'traced' if trace else 'plain'}"
                wall = _smoke_run(args.device, args.backend_module, root, run_id, trace)
                _, records = read_run(root / run_id)
                totals[trace][0] += float(records["duration_s"].sum())
                totals[trace][1] += wall
                print(f"  {run_id}: {len(records)} tests, {records['duration_s'].sum():.2f} s in tests, "
                      f"{wall:.1f} s wall")  # fmt: skip
    (plain_tests, plain_wall), (traced_tests, traced_wall) = totals[False], totals[True]
    print(f"smoke selection on {args.device}, {args.rounds} round(s):")
    print(f"  time in tests: untraced {plain_tests:.2f} s, traced {traced_tests:.2f} s, "
          f"ratio {traced_tests / plain_tests:.3f} (target <= 1.25)")  # fmt: skip
    print(f"  wall: untraced {plain_wall:.1f} s, traced {traced_wall:.1f} s, "
          f"ratio {traced_wall / plain_wall:.3f}")  # fmt: skip


def synthetic_outcomes(count: int, seed: int = 0):
    """``count`` records shaped like a full run: 55% passed, 30% skipped (a third of them by
    a skiplist entry naming a missing lowering), 15% failed on a missing lowering."""
    import numpy
    import pandas

    rng = numpy.random.default_rng(seed)
    templates = numpy.array([f"test_template_{i}" for i in range(60)])
    opinfos = numpy.array([f"op_{i}" for i in range(700)])
    dtypes = numpy.array(["float32", "float64", "float16", "bfloat16", "int64", "int32", "bool",
                          "complex64", "uint8", "int8"])  # fmt: skip
    blocking = numpy.array([f"aten::lowering_{i}.out" for i in range(900)])
    # a long tail: a few ops block thousands of tests, most block a handful
    weights = 1.0 / numpy.arange(1, len(blocking) + 1) ** 1.1
    weights /= weights.sum()
    kind = rng.choice(3, size=count, p=[0.55, 0.30, 0.15])
    template = templates[rng.integers(0, len(templates), count)]
    op = opinfos[rng.integers(0, len(opinfos), count)]
    dtype = dtypes[rng.integers(0, len(dtypes), count)]
    detail_op = blocking[rng.choice(len(blocking), size=count, p=weights)]
    skip_blocked = (kind == 1) & (rng.random(count) < 0.33)
    missing = (kind == 2) | skip_blocked
    outcome = numpy.where(kind == 0, "passed", numpy.where(kind == 1, "skipped", "failed"))
    category = numpy.where(
        missing, "missing_lowering", numpy.where(kind == 1, "unsupported_dtype", "")
    )
    detail = numpy.where(missing, detail_op, "")
    test_id = [f"test_ops.py::TestCommon::{t}_{o}_{d}_{i}" for i, (t, o, d) in
               enumerate(zip(template, op, dtype, strict=True))]  # fmt: skip
    return pandas.DataFrame({
        "test_id": test_id, "template": template, "op": op, "dtype": dtype,
        "outcome": outcome, "category": category, "detail": detail,
    })  # fmt: skip


def bench_triage(args: argparse.Namespace) -> None:
    from op_coverage.render import format_triage
    from op_coverage.triage import dtype_grid, triage

    records = synthetic_outcomes(args.outcomes)
    start = time.perf_counter()
    result = triage(records)
    ranked = time.perf_counter() - start
    grid = dtype_grid(records, [r.op for r in result.ranked[:50]])
    total = time.perf_counter() - start
    text = format_triage(result, 20, 3)
    print(f"triage of {len(records)} outcomes: {result.blocked_total} blocked, "
          f"{len(result.ranked)} ops ranked")  # fmt: skip
    print(f"  ranking {ranked:.2f} s, with the 50 x {grid.shape[1]} dtype grid {total:.2f} s "
          f"(target <= 5 s): {'ok' if total <= 5 else 'TOO SLOW'}")  # fmt: skip
    print("\n".join(text.splitlines()[:6]))
    if args.snapshot:
        import numpy

        from op_coverage.dispatcher import aten_overloads
        from op_coverage.snapshot import snapshot
        from op_coverage.static import static_table

        # Each test dispatched 15 of 400 overloads, as a traced run records.
        names = numpy.array(list(aten_overloads())[:400])
        rng = numpy.random.default_rng(1)
        records["ops_dispatched"] = [list(names[rng.integers(0, 400, 15)]) for _ in records.index]
        records["ops_fallback"] = [[] for _ in records.index]
        table = static_table("cpu")
        start = time.perf_counter()
        snapshot("cpu", records, static=table, opinfo=False)
        print(f"  snapshot of the same outcomes (traced): {time.perf_counter() - start:.2f} s")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(
        dest="bench", metavar="PART", help="tracing, smoke or triage (default: all, in turn)"
    )
    tracing = commands.add_parser("tracing", help="tracing overhead on a common-ops workload")
    smoke = commands.add_parser("smoke", help="the smoke selection with and without tracing")
    for sub in (tracing, smoke):
        sub.add_argument("--device", default="emu")
        sub.add_argument("--backend-module")
        sub.add_argument("--rounds", type=int, default=3 if sub is tracing else 1)
    tracing.add_argument("--samples", type=int, default=4)
    triage = commands.add_parser("triage", help="triage and the dtype grid at full-run scale")
    triage.add_argument("--outcomes", type=int, default=154_000)
    triage.add_argument("--snapshot", action="store_true", help="also time a snapshot")
    return parser


#: The parts, in the order a run with no arguments runs them.
PARTS = {"tracing": bench_tracing, "smoke": bench_smoke, "triage": bench_triage}


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.bench:
        PARTS[args.bench](args)
        return
    for name, part in PARTS.items():
        print(f"== {name}", flush=True)
        part(parser.parse_args([name]))  # the part's own defaults


if __name__ == "__main__":
    main()
