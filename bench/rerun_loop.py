"""Benchmark: the contributor's loop, a rerun of what one missing lowering blocks, against
the full embedded selection it comes from.

On emu, side by side in one invocation:

1. the full selection (``--suite embedded:full --trace-ops``, no skiplist, the run a
   nightly makes), its wall time;
2. from that run's records, the missing overload whose blocked tests are closest to
   ``--blocked`` (30), and a rerun of exactly those tests (``--rerun --where blocking=``),
   its wall time;
3. a rerun of a single test of the same selection: the fixed cost of any run (interpreter,
   torch, collecting the selection), printed apart.

Target: the rerun's wall time below 1/50 of the full selection's. The ratio is printed with
and without the fixed cost.

    python bench/rerun_loop.py [--full-from RUN] [--blocked 30] [--workers 2]

``--full-from RUN`` takes step 1 from an earlier full run of this machine instead of
making one (40 minutes on 2 cores): its recorded wall time, start to end. The ratio then
compares runs made at different times, and says so.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

TARGET = 1 / 50
ROOT = Path(__file__).resolve().parents[1]
# Run as a script, this folder comes first on sys.path, and bench/op_coverage.py would
# shadow the op_coverage package.
if sys.path and Path(sys.path[0]).resolve() == ROOT / "bench":
    sys.path[0] = str(ROOT)


def _conformance(*args: str) -> float:
    """Run ``conformance`` with ``args``; its wall time (exit 0 or 1: tests may fail)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "conformance", *args], capture_output=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.stderr.write(done.stdout.decode()[-3000:] + done.stderr.decode()[-3000:])
        raise SystemExit(f"conformance {' '.join(args[:3])} ... exited {done.returncode}")
    return elapsed


def _recorded_wall(run_dir: Path) -> float:
    from conformance.store import read_meta

    meta = read_meta(run_dir)
    if not (meta.start_time and meta.end_time):
        raise SystemExit(f"{run_dir}: the run has no start and end time")
    start, end = (datetime.fromisoformat(t) for t in (meta.start_time, meta.end_time))
    return (end - start).total_seconds()


def _pick(run_dir: Path, wanted: int) -> tuple[str, int]:
    from conformance.store import read_run
    from op_coverage.triage import blocked_tests

    _, records = read_run(run_dir)
    blocked = blocked_tests(records)
    counts = blocked[blocked["blocking_op"].notna()].groupby("blocking_op")["test_id"].nunique()
    if counts.empty:
        raise SystemExit(f"{run_dir}: no test is blocked by a missing lowering")
    op = min(counts.index, key=lambda name: (abs(int(counts[name]) - wanted), name))
    return str(op), int(counts[op])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full-from", metavar="RUN", help="an earlier full run to compare with")
    parser.add_argument("--blocked", type=int, default=30, help="tests the overload should block")
    parser.add_argument("--workers", default="2", help="xdist workers for every run")
    return parser


def main() -> int:
    args = build_parser().parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-rerun-") as tmp:
        runs = Path(tmp)
        common = ["--device", "emu", "--no-skiplist", "-n", args.workers, "--runs-root", str(runs)]
        common += ["--progress-interval", "0"]
        if args.full_from:
            full_dir = Path(args.full_from)
            full_s = _recorded_wall(full_dir)
            how = f"recorded by {full_dir.name}"
        else:
            print("running the full embedded selection on emu (about 40 min on 2 cores) ...")
            full_s = _conformance(
                "run", *common, "--suite", "embedded:full", "--trace-ops", "--run-id", "full"
            )
            full_dir = runs / "full"
            how = "measured now"
        op, count = _pick(full_dir, args.blocked)
        rerun = ["run", *common, "--suite", "embedded:full", "--rerun", str(full_dir)]
        rerun_s = _conformance(*rerun, "--where", f"blocking={op}", "--run-id", "blocked")
        from conformance.store import read_run

        _, first = read_run(full_dir, ["test_id"])
        one = first["test_id"].iloc[0]
        fixed_s = _conformance(*rerun, "--where", f"test_id={_escape(one)}", "--run-id", "one")

    ratio = rerun_s / full_s
    net = max(rerun_s - fixed_s, 0.0) / max(full_s - fixed_s, 1e-9)
    print(f"full embedded selection on emu: {full_s:8.1f} s ({how})")
    print(f"rerun of the {count} tests {op} blocks: {rerun_s:8.1f} s")
    print(f"fixed cost of a run (a rerun of 1 test): {fixed_s:8.1f} s")
    print(f"rerun / full: 1/{1 / ratio:.0f} (target below 1/{1 / TARGET:.0f})")
    print(f"without the fixed cost: 1/{1 / net:.0f}" if net else "without the fixed cost: ~0")
    if ratio >= TARGET:
        print("target missed")
        return 1
    return 0


def _escape(test_id: str) -> str:
    import re

    return re.escape(test_id)


if __name__ == "__main__":
    raise SystemExit(main())
