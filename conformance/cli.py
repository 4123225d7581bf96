"""``conformance``: the command line of every part of the harness.

Each part declares its own subcommands in a module with a ``register(subparsers)``
function; this module only assembles them and turns :class:`ConformanceError` into a
message and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from conformance import __version__
from conformance.errors import ConformanceError

__all__ = ["build_parser", "main"]

#: Modules that contribute subcommands, in the order their commands are listed.
PART_MODULES = (
    "conformance.run_cli",
    "conformance.merge",
    "conformance.nightly",
    "conformance.repro",
    "conformance.embedded.cli",
    "skiplists.cli",
    "op_coverage.cli",
    "reports.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="conformance",
        description="Run upstream PyTorch tests against a device backend, triage and report.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in PART_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; each subcommand's handler returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except ConformanceError as exc:
        print(f"conformance {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
