"""``conformance ops ...``: static op tables, snapshots, triage and release diffs.

::

    conformance ops table --device emu [--status missing] [--core] [--json]
    conformance ops snapshot RUN [--out FILE] [--no-opinfo] [--backend-module MODULE]
    conformance ops snapshot --device emu --out FILE     (static only: a release snapshot)
    conformance ops triage RUN [--top N] [--tests K] [--grid] [--json]
    conformance ops diff A B [--limit N] [--json]
    conformance ops perf RUN [--compare RUN] [--top N] [--by op|op-shape] [--json]

``RUN`` is a run folder, a run id under ``--runs-root`` or ``latest``; ``A``/``B`` may also
be snapshot files (then tests are not compared).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from conformance.errors import ConfigError

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``ops`` and its subcommands to the ``conformance`` command line."""
    ops = subparsers.add_parser(
        "ops", help="operator coverage: static table, snapshot, triage, diff, perf"
    )
    commands = ops.add_subparsers(dest="ops_command", metavar="OPS_COMMAND", required=True)

    table = commands.add_parser("table", help="static status of every ATen overload for a backend")
    table.add_argument("--device", required=True, help="device type of the backend (emu, cpu, ...)")
    table.add_argument("--backend-module", help="module to import that registers the backend")
    table.add_argument(
        "--status",
        action="append",
        choices=("native", "composite", "fallback", "missing"),
        default=[],
        help="list the ops with this status (repeatable)",
    )
    table.add_argument("--core", action="store_true", help="list only core ATen ops")
    table.add_argument("--json", action="store_true", help="print every op as JSON")
    table.set_defaults(handler=_table)

    snap = commands.add_parser(
        "snapshot",
        help="write RUN/op_coverage.json, or with --device and --out a static-only snapshot",
    )
    snap.add_argument("run", metavar="RUN", nargs="?")
    snap.add_argument("--device", help="snapshot this backend without a run (needs --out)")
    snap.add_argument("--out", metavar="FILE", help="write here instead of RUN/op_coverage.json")
    snap.add_argument("--runs-root", default="runs")
    snap.add_argument("--backend-module", help="module to import that registers the backend")
    snap.add_argument(
        "--no-opinfo", action="store_true", help="skip the OpInfo denominator (slow import)"
    )
    snap.set_defaults(handler=_snapshot)

    tri = commands.add_parser("triage", help="missing lowerings ranked by the tests they block")
    tri.add_argument("run", metavar="RUN")
    tri.add_argument("--runs-root", default="runs")
    tri.add_argument("--top", type=_positive, default=20, help="how many ops to show (default 20)")
    tri.add_argument(
        "--tests", type=_positive, default=0, metavar="K", help="list K test ids under each op"
    )
    tri.add_argument("--grid", action="store_true", help="also print the op x dtype grid")
    tri.add_argument("--json", action="store_true", help="print the ranking as JSON")
    tri.add_argument(
        "--amend",
        action="append",
        default=[],
        metavar="RERUN",
        help="a rerun of some of the run's tests (repeatable): rank by the latest outcomes",
    )
    tri.set_defaults(handler=_triage)

    dif = commands.add_parser(
        "diff",
        help="ops gained and lost between two runs or snapshots",
        description="Ops gained and lost between two runs (their op_coverage.json) or snapshot "
        "files, and with runs the tests unblocked. A rerun (--rerun) stands for its base run "
        "amended by it, so `diff BASE RERUN` shows what a fix and its rerun gained.",
    )
    dif.add_argument("a", metavar="A")
    dif.add_argument("b", metavar="B")
    dif.add_argument("--runs-root", default="runs")
    dif.add_argument("--limit", type=_positive, default=20, help="rows per list (default 20)")
    dif.add_argument("--json", action="store_true")
    dif.set_defaults(handler=_diff)

    perf = commands.add_parser(
        "perf",
        help="ops ranked by the time they take in a run made with --profile, or what got "
        "slower against another run",
        description="Rank the ops of a run made with `conformance run --profile` by total "
        "time (device time when the run has any, else CPU time): calls, total, mean per "
        "call, share of the time in ATen ops, and the tests that spend most in each. With "
        "--compare, rank the ops in both runs by how much slower each call got in RUN. A "
        "rerun stands for its base run amended by it.",
    )
    perf.add_argument("run", metavar="RUN")
    perf.add_argument(
        "--compare",
        metavar="RUN",
        help="the reference run: rank the ops by mean time per call in RUN over in this one",
    )
    perf.add_argument("--runs-root", default="runs")
    perf.add_argument("--top", type=_positive, default=20, help="ops to show (default 20; 0: all)")
    perf.add_argument(
        "--by",
        choices=("op", "op-shape"),
        default="op",
        help="one line per op, or per op and input signature (shapes and dtypes)",
    )
    perf.add_argument(
        "--tests",
        type=_positive,
        default=3,
        metavar="K",
        help="tests listed under each op, those that spend most in it (default 3)",
    )
    perf.add_argument(
        "--metric",
        choices=("device", "cpu"),
        help="the time to rank by (default: device time when the runs have it, else CPU time)",
    )
    perf.add_argument("--json", action="store_true", help="print the ranking as JSON")
    perf.set_defaults(handler=_perf)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text}")
    return value


def _run_dir(ref: str, root: str) -> Path:
    from conformance.store import resolve_run

    return resolve_run(ref, root)


def _table(args: argparse.Namespace) -> int:
    from op_coverage.render import format_static
    from op_coverage.static import load_static_table

    table = load_static_table(args.device, args.backend_module)
    if args.json:
        print(
            json.dumps(
                {
                    "device": table.device,
                    "dispatch_key": table.dispatch_key,
                    "registry": table.has_registry,
                    "counts": table.counts(),
                    "ops": [
                        dataclasses.asdict(row)
                        for row in table.ops.values()
                        if (not args.status or row.status in args.status)
                        and (row.in_core or not args.core)
                    ],
                    "disagreements": [dataclasses.asdict(d) for d in table.disagreements],
                },
                indent=1,
            )
        )
    else:
        print(format_static(table, args.status, args.core))
    return 0


def _snapshot(args: argparse.Namespace) -> int:
    from conformance.store import read_as_amended
    from op_coverage.render import format_snapshot
    from op_coverage.snapshot import read_snapshot, save_snapshot, snapshot, write_snapshot

    if (args.run is None) == (args.device is None):
        raise ConfigError("give a run folder, or --device (with --out) for a static snapshot")
    opinfo = not args.no_opinfo
    if args.device is not None:
        if not args.out:
            raise ConfigError("a snapshot without a run needs --out FILE", where="--device")
        data = snapshot(args.device, opinfo=opinfo, module_name=args.backend_module)
        path = save_snapshot(data, args.out)
    elif args.out:
        meta, records = read_as_amended(_run_dir(args.run, args.runs_root))
        data = snapshot(meta.backend, records, meta, opinfo=opinfo, module_name=args.backend_module)
        path = save_snapshot(data, args.out)
    else:
        run_dir = _run_dir(args.run, args.runs_root)
        path = write_snapshot(run_dir, opinfo=opinfo, module_name=args.backend_module)
        data = read_snapshot(path)
    print(format_snapshot(data))
    print(f"\nwrote {path}")
    return 0


def _statuses(run_dir: Path) -> dict[str, tuple[str, bool]] | None:
    from op_coverage.snapshot import SNAPSHOT_NAME, read_snapshot

    if not (run_dir / SNAPSHOT_NAME).is_file():
        return None
    return {
        row["op"]: (row["status"], bool(row.get("in_core")))
        for row in read_snapshot(run_dir)["ops"]
    }


def _triage(args: argparse.Namespace) -> int:
    from conformance.store import read_amended
    from op_coverage.render import format_grid, format_triage
    from op_coverage.triage import dtype_grid, triage

    run_dir = _run_dir(args.run, args.runs_root)
    reruns = [_run_dir(ref, args.runs_root) for ref in args.amend]
    _, records = read_amended(run_dir, reruns)
    result = triage(records, _statuses(run_dir))
    if args.json:
        payload: dict[str, Any] = {
            "blocked_total": result.blocked_total,
            "ranked": [
                {"headline": r.headline(), **dataclasses.asdict(r)}
                for r in result.ranked[: args.top]
            ],
            "resolved": [dataclasses.asdict(r) for r in result.resolved],
            "unnamed": result.unnamed,
        }
        if args.grid:
            grid = dtype_grid(records, [r.op for r in result.ranked[: args.top]])
            payload["grid"] = {
                op: {k: int(v) for k, v in row.items() if v} for op, row in grid.iterrows()
            }
        print(json.dumps(payload, indent=1))
        return 0
    print(format_triage(result, args.top, args.tests))
    if args.grid:
        print("\nblocked tests by op and dtype:\n")
        print(format_grid(dtype_grid(records, [r.op for r in result.ranked[: args.top]])))
    return 0


def _side(ref: str, root: str) -> tuple[dict[str, Any], Any]:
    from conformance.store import read_as_amended
    from op_coverage.snapshot import read_snapshot

    path = Path(ref)
    if path.is_file():
        return read_snapshot(path), None
    run_dir = _run_dir(ref, root)
    # A rerun stands for its base run amended by it, as its snapshot does.
    return read_snapshot(run_dir), read_as_amended(run_dir)[1]


def _diff(args: argparse.Namespace) -> int:
    from op_coverage.diff import diff_snapshots
    from op_coverage.render import format_diff

    snap_a, records_a = _side(args.a, args.runs_root)
    snap_b, records_b = _side(args.b, args.runs_root)
    if snap_a["meta"].get("backend") != snap_b["meta"].get("backend"):
        # Allowed (emu against the cpu baseline), but said, since most ops then differ.
        print(
            f"note: comparing backend {snap_a['meta'].get('backend')!r} with {snap_b['meta'].get('backend')!r}"
        )
    diff = diff_snapshots(snap_a, snap_b, records_a, records_b)
    if args.json:
        print(json.dumps(dataclasses.asdict(diff), indent=1))
    else:
        print(format_diff(diff, args.limit))
    return 0


_NO_DEVICE_TIME = "the run has no device time (the device reports none to the profiler): CPU time"


def _perf(args: argparse.Namespace) -> int:
    from conformance.profile_store import read_profile_as_amended
    from conformance.store import read_meta
    from op_coverage.perf import compare_runs, rank_ops
    from op_coverage.render import format_perf, format_perf_comparison

    run_dir = _run_dir(args.run, args.runs_root)
    meta = read_meta(run_dir)
    frame = read_profile_as_amended(run_dir)
    if args.compare is None:
        ranking = rank_ops(frame, by=args.by, metric=args.metric, tests=args.tests)
        if args.json:
            shown = ranking.ops[: args.top] if args.top else ranking.ops
            ops = [
                {**dataclasses.asdict(t), "tests": [{"test_id": i, "us": us} for i, us in t.tests]}
                for t in shown
            ]
            payload = {**dataclasses.asdict(ranking), "ops": ops}
            print(json.dumps({"run_id": meta.run_id, "backend": meta.backend, **payload}, indent=1))
        else:
            title = f"run {meta.run_id} ({meta.backend})"
            note = "" if args.metric or ranking.metric == "device" else _NO_DEVICE_TIME
            print(format_perf(ranking, title, args.top, args.tests, note))
        return 0
    reference_dir = _run_dir(args.compare, args.runs_root)
    reference_meta = read_meta(reference_dir)
    comparison = compare_runs(
        frame, read_profile_as_amended(reference_dir), by=args.by, metric=args.metric
    )
    if args.json:
        payload = dataclasses.asdict(comparison)
        for delta in payload["changes"]:
            delta["ratio"] = None if math.isinf(delta["ratio"]) else delta["ratio"]
        runs = {"run_id": meta.run_id, "reference_run_id": reference_meta.run_id}
        print(json.dumps({**runs, **payload}, indent=1))
    else:
        title = (
            f"run {meta.run_id} ({meta.backend}) against {reference_meta.run_id} "
            f"({reference_meta.backend})"
        )
        print(format_perf_comparison(comparison, title, args.top))
    return 0
