"""``conformance suite``: facts about the embedded suite (where it is, its size, its speed).

- ``conformance suite path`` prints the folder to hand to pytest or ``conformance run``.
- ``conformance suite counts [--device emu] [--selection smoke]`` collects the suite in
  subprocesses (for the device and for ``cpu``, side by side) and prints the number of
  tests per template.
- ``conformance suite time [--device emu] [--selection smoke] [-n 2]`` runs the selection
  with pytest-xdist and prints its wall time.
- ``conformance suite agree EMBEDDED_RUN... --upstream UPSTREAM_RUN...`` joins recorded
  runs of the suite with runs of upstream's files and prints how well they agree, per
  template (see :mod:`conformance.agreement`).

``counts`` and ``time`` run pytest with ``-p no:conformance``: they measure the suite itself,
without the harness plugin's skiplists and recording.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from conformance.embedded import DEFAULT_SELECTION, SELECTION_ENV, SELECTIONS, SUITE_DIR, TEMPLATES
from conformance.errors import ConfigError, ConformanceError

__all__ = [
    "collect_nodeids",
    "count_by_template",
    "format_counts",
    "register",
    "template_of",
]

_PYTEST = (sys.executable, "-m", "pytest", "-p", "no:conformance", "-p", "no:cacheprovider")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``suite`` command and its subcommands."""
    suite = subparsers.add_parser(
        "suite", help="the embedded conformance suite: path, counts, time, agreement with upstream"
    )
    commands = suite.add_subparsers(dest="suite_command", metavar="SUBCOMMAND", required=True)

    path = commands.add_parser("path", help="print the folder holding the suite's test files")
    path.set_defaults(handler=_path_command)

    counts = commands.add_parser("counts", help="tests per template, for a device and for cpu")
    _add_common(counts)
    counts.set_defaults(handler=_counts_command)

    timing = commands.add_parser("time", help="run a selection and print its wall time")
    _add_common(timing)
    timing.add_argument(
        "-n", "--workers", type=_workers, default=2, help="pytest-xdist workers (default 2)"
    )
    timing.set_defaults(handler=_time_command)

    agree = commands.add_parser(
        "agree",
        help="how well recorded runs of the suite agree with runs of upstream's files",
        description="Join runs of the embedded suite with runs of upstream's test files on "
        "(class, template, op, dtype, params, mode), for the templates both have, and print "
        "per template how often their verdicts agree, where the suite misses a failure and "
        "where it reports a false one. Exit 0 whatever the agreement (it is a report).",
    )
    agree.add_argument(
        "embedded", nargs="+", metavar="EMBEDDED_RUN", help="runs of the embedded suite (shards)"
    )
    agree.add_argument(
        "--upstream",
        nargs="+",
        required=True,
        metavar="UPSTREAM_RUN",
        help="runs of upstream's test files on the same device (shards)",
    )
    agree.add_argument("--template", help="only this template (upstream's name or the suite's)")
    agree.add_argument("--json", metavar="FILE", help="also write the full report as JSON")
    agree.add_argument(
        "--show",
        type=_count,
        default=10,
        metavar="N",
        help="disagreements listed per template (default 10; 0: none)",
    )
    agree.add_argument("--runs-root", default="runs", metavar="DIR", help="default: runs")
    agree.set_defaults(handler=_agree_command)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="emu", help="device type under test (default emu)")
    parser.add_argument(
        "--selection",
        choices=SELECTIONS,
        default=None,
        help=f"selection (default: ${SELECTION_ENV}, else {DEFAULT_SELECTION})",
    )


def _non_negative(noun: str, subject: str) -> Callable[[str], int]:
    """An argparse type: an integer of 0 or more; errors say what it counts."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {noun}: {text!r}") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"{subject} be 0 or more, got {value}")
        return value

    return parse


_workers = _non_negative("number of workers", "workers must")
_count = _non_negative("number", "must")


def _selection(args: argparse.Namespace) -> str:
    name = args.selection or os.environ.get(SELECTION_ENV, "").strip() or DEFAULT_SELECTION
    if name not in SELECTIONS:
        raise ConfigError(
            f"unknown selection {name!r}; valid names: {', '.join(SELECTIONS)}",
            where=f"environment variable {SELECTION_ENV}",
        )
    return name


def _device(args: argparse.Namespace) -> str:
    device = args.device.strip()
    if not device or not device.replace("_", "").isalnum():
        raise ConfigError(f"not a device type: {args.device!r}", where="--device")
    return device


def _env(device: str, selection: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = device
    env[SELECTION_ENV] = selection
    return env


def template_of(nodeid: str) -> tuple[str, str]:
    """``(file, template)`` of a collected nodeid; the template is ``""`` when unknown.

    The template is the longest known template name the test name equals or starts with
    followed by ``_`` (``test_out_warning_abs_cpu_float32`` is ``test_out_warning``).
    """
    parts = nodeid.split("::")
    file = parts[0].rsplit("/", 1)[-1]
    name = parts[-1]
    matches = [t for t in TEMPLATES.get(file, ()) if name == t or name.startswith(t + "_")]
    return file, max(matches, key=len, default="")


def count_by_template(nodeids: Iterable[str]) -> Counter:
    """Number of tests per ``(file, template)``."""
    return Counter(template_of(n) for n in nodeids)


def collect_nodeids_start(device: str, selection: str) -> subprocess.Popen:
    """Start collecting the suite for ``device`` in a subprocess."""
    return subprocess.Popen(
        [*_PYTEST, str(SUITE_DIR), "--collect-only", "-q"],
        cwd=SUITE_DIR,
        env=_env(device, selection),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _nodeids(process: subprocess.Popen, device: str) -> list[str]:
    out, err = process.communicate()
    if process.returncode not in (0, 5):  # 5: nothing collected, a valid answer
        tail = "\n".join((out + err).strip().splitlines()[-15:])
        raise ConformanceError(f"collecting the suite for {device!r} failed:\n{tail}")
    return [line.strip() for line in out.splitlines() if "::" in line]


def collect_nodeids(device: str, selection: str) -> list[str]:
    """The nodeids the suite yields for ``device`` in ``selection`` (collected in a subprocess)."""
    return _nodeids(collect_nodeids_start(device, selection), device)


def format_counts(columns: dict[str, Counter]) -> str:
    """A text table: one row per template, one column per device, and a total row."""
    keys = sorted({k for counts in columns.values() for k in counts})
    devices = list(columns)
    width = max([len("template"), *(len(f"{f}::{t or '?'}") for f, t in keys)])
    lines = ["  ".join(["template".ljust(width), *(d.rjust(8) for d in devices)])]
    for file, template in keys:
        cells = [str(columns[d][(file, template)]).rjust(8) for d in devices]
        lines.append("  ".join([f"{file}::{template or '?'}".ljust(width), *cells]))
    totals = [str(sum(columns[d].values())).rjust(8) for d in devices]
    lines.append("  ".join(["total".ljust(width), *totals]))
    return "\n".join(lines)


def _path_command(args: argparse.Namespace) -> int:
    print(SUITE_DIR)
    return 0


def _counts_command(args: argparse.Namespace) -> int:
    device, selection = _device(args), _selection(args)
    devices = [device] if device == "cpu" else [device, "cpu"]
    # Both collections run at once: each spends most of its time importing torch.
    processes = {d: collect_nodeids_start(d, selection) for d in devices}
    columns = {d: count_by_template(_nodeids(p, d)) for d, p in processes.items()}
    print(f"embedded suite, selection {selection}: tests per template")
    print(format_counts(columns))
    return 0


def _time_command(args: argparse.Namespace) -> int:
    """Run the selection; exit 0 when the run completed, whatever the test outcomes."""
    device, selection = _device(args), _selection(args)
    command: list[str] = [*_PYTEST, str(SUITE_DIR), "-q"]
    if args.workers:
        command += ["-n", str(args.workers)]
    start = time.monotonic()
    result = subprocess.run(
        command, cwd=SUITE_DIR, env=_env(device, selection), capture_output=True, text=True
    )
    elapsed = time.monotonic() - start
    summary = _summary_line(result.stdout)
    if result.returncode not in (0, 1):  # 0: all passed, 1: some tests failed
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        raise ConformanceError(f"the {selection} run on {device!r} did not complete:\n{tail}")
    print(
        f"embedded suite, selection {selection}, device {device}, "
        f"{args.workers or 'no'} workers: {elapsed:.1f} s wall"
    )
    print(summary)
    return 0


def _summary_line(stdout: str) -> str:
    lines = [line for line in stdout.strip().splitlines() if line.strip()]
    return lines[-1].strip("= ") if lines else "(no pytest summary)"


def _read_runs(refs: Sequence[str], root: str, suite: str, option: str) -> list:
    """The records of each run ``refs`` names (a rerun read with the run it amends), checked
    to hold tests of ``suite``; ConfigError naming the run otherwise."""
    from conformance.agreement import COLUMNS
    from conformance.store import read_as_amended, resolve_run

    runs = []
    for ref in refs:
        run_dir = resolve_run(ref, root)
        meta, frame = read_as_amended(run_dir, COLUMNS)
        if not (frame["suite"] == suite).any():
            found = ", ".join(sorted(set(frame["suite"]))) or "no records"
            raise ConfigError(
                f"run {meta.run_id} ({run_dir}) holds no tests of the {suite} suite ({found})",
                where=option,
            )
        runs.append((meta, frame))
    return runs


def _agree_command(args: argparse.Namespace) -> int:
    """Print the agreement report; exit 0 whatever it says."""
    from conformance.agreement import agreement, format_report

    embedded = _read_runs(args.embedded, args.runs_root, "embedded", "EMBEDDED_RUN")
    upstream = _read_runs(args.upstream, args.runs_root, "upstream", "--upstream")
    for attribute, what in (("backend", "devices"), ("mode", "modes")):
        seen = {m.run_id: getattr(m, attribute) for m, _ in embedded + upstream}
        seen = {run: value for run, value in seen.items() if value}
        if len(set(seen.values())) > 1:
            listed = "; ".join(f"{run}: {value}" for run, value in sorted(seen.items()))
            raise ConfigError(f"the runs are of different {what} ({listed})", where="the runs")
    report = agreement([f for _, f in embedded], [f for _, f in upstream], args.template)
    if args.json:
        import json

        try:
            Path(args.json).write_text(
                json.dumps(report.to_dict(), indent=1) + "\n", encoding="utf-8"
            )
        except OSError as exc:
            raise ConfigError(f"cannot write: {exc.strerror}", where=args.json) from None
    print(format_report(report, show=args.show))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry for ``python -m conformance.embedded.cli``: the ``suite`` command alone."""
    parser = argparse.ArgumentParser(prog="conformance")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except ConformanceError as exc:
        print(f"conformance suite: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
