"""``conformance repro RUN TEST_ID``: how to run one recorded test again, alone.

The run's metadata keeps what the command needs: pytest's rootdir (nodeids are relative to
it), the environment the harness set for the tests (the embedded suite's selection, the
device filter) and the device; the record gives the nodeid, the outcome and the message.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from conformance.errors import ConfigError

__all__ = ["register", "repro_command"]

#: Where a repro's own run goes, so it never mixes with the runs it came from.
REPRO_RUNS = "${TMPDIR:-/tmp}/conformance-repro"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "repro",
        help="the command that runs one recorded test again, alone",
        description="Print how a test of a run failed and the command that runs it alone, "
        "with the device, the environment and the folder the run used.",
    )
    parser.add_argument("run", metavar="RUN", help="a run folder, run id or latest")
    parser.add_argument("test_id", metavar="TEST_ID", help="the test's test_id (or its nodeid)")
    parser.add_argument("--runs-root", default="runs", metavar="DIR", help="default: runs")
    parser.set_defaults(handler=_repro_command)


def repro_command(meta: Any, record: dict[str, Any]) -> str:
    """The shell command that runs the record's test alone as the run ran it."""
    env = " ".join(f"{name}={shlex.quote(value)}" for name, value in sorted(meta.env.items()))
    command = ["python", "-m", "pytest", record["nodeid"], "--device", meta.backend]
    if "--backend-module" in meta.command:
        module = meta.command[meta.command.index("--backend-module") + 1]
        command += ["--backend-module", module]
    command += ["--no-skiplist", "-p", "no:cacheprovider"]
    quoted = " ".join(shlex.quote(part) for part in command)
    prefix = f"cd {shlex.quote(meta.rootdir)} && " if meta.rootdir else ""
    return f"{prefix}{env + ' ' if env else ''}{quoted} --runs-root {REPRO_RUNS}"


def _repro_command(args: argparse.Namespace) -> int:
    from conformance.store import read_run, resolve_run

    run_dir = resolve_run(args.run, Path(args.runs_root))
    meta, frame = read_run(run_dir)
    rows = frame[(frame["test_id"] == args.test_id) | (frame["nodeid"] == args.test_id)]
    if rows.empty:
        raise ConfigError(f"the run has no test {args.test_id!r}", where=str(run_dir))
    record = rows.iloc[-1].to_dict()
    if not meta.rootdir:
        print(f"note: run {meta.run_id} predates recorded rootdirs: run from pytest's rootdir")
    detail = f" {record['detail']}" if record["detail"] else ""
    first = next((ln for ln in str(record["message"]).splitlines() if ln.strip()), "")
    print(f"test_id: {record['test_id']}")
    print(f"in run {meta.run_id} on {meta.backend}: {record['outcome']}", end="")
    print(f" ({record['category']}{detail})" if record["category"] else "")
    if first:
        print(f"message: {first}")
    print("run it alone:")
    print(f"  {repro_command(meta, record)}")
    return 0
