"""``conformance repro RUN TEST_ID``: how to run one recorded test again, alone.

The run's metadata keeps what the command needs: pytest's rootdir (nodeids are relative to
it), the environment the harness set for the tests (the embedded suite's selection, the
device filter) and the device; the record gives the nodeid, the outcome, the message and
the index of the failing sample, which the command passes on in upstream's
``PYTORCH_OPINFO_SAMPLE_INPUT_INDEX`` so that only that sample runs.

For a test of the embedded suite it also writes a standalone script that rebuilds the
failing sample and compares the device with the CPU (:mod:`conformance.repro_script`).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from conformance.embedded import SAMPLE_INDEX_ENV
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
    parser.add_argument(
        "--script",
        metavar="PATH",
        help="where to write the standalone script (default: repro_<test>.py here)",
    )
    parser.add_argument(
        "--no-script", action="store_true", help="print the command only, write no script"
    )
    parser.set_defaults(handler=_repro_command)


def repro_command(meta: Any, record: dict[str, Any]) -> str:
    """The shell command that runs the record's test alone as the run ran it."""
    settings = dict(meta.env)
    if int(record.get("sample_index", -1)) >= 0:
        settings[SAMPLE_INDEX_ENV] = str(record["sample_index"])
    env = " ".join(f"{name}={shlex.quote(value)}" for name, value in sorted(settings.items()))
    command = ["python", "-m", "pytest", record["nodeid"], "--device", meta.backend]
    if "--backend-module" in meta.command:
        module = meta.command[meta.command.index("--backend-module") + 1]
        command += ["--backend-module", module]
    command += ["--no-skiplist", "-p", "no:cacheprovider"]
    quoted = " ".join(shlex.quote(part) for part in command)
    prefix = f"cd {shlex.quote(meta.rootdir)} && " if meta.rootdir else ""
    return f"{prefix}{env + ' ' if env else ''}{quoted} --runs-root {REPRO_RUNS}"


def _repro_command(args: argparse.Namespace) -> int:
    from conformance.repro_script import script_for, script_name
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
    if int(record["sample_index"]) >= 0:
        print(f"failing sample: {record['sample_index']}")
    print("run it alone:")
    print(f"  {repro_command(meta, record)}")
    if args.no_script or record["outcome"] == "passed":
        return 0
    try:
        text = script_for(
            record,
            device=meta.backend,
            selection=meta.suite.partition(":")[2],
            backend_module=_backend_module(meta),
        )
    except ConfigError as exc:
        print(f"no standalone script: {exc}")
        return 0
    path = Path(args.script or script_name(record))
    path.write_text(text, encoding="utf-8")
    print("standalone script (torch and the backend only; exit 0 when the device agrees):")
    print(f"  python {shlex.quote(str(path))}")
    return 0


def _backend_module(meta: Any) -> str:
    """The module a script imports to register the device: ``--backend-module`` if the run
    named one, else the package of the installed backend's entry point ("" for cpu)."""
    if "--backend-module" in meta.command:
        return meta.command[meta.command.index("--backend-module") + 1]
    if meta.backend == "cpu":
        return ""
    from conformance.backends import backend_package_name

    return backend_package_name(meta.backend)
