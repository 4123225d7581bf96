"""``conformance run``: run a test selection on a device with the plugin, and judge it.

The command is a short pipeline of steps, each a function of the parsed arguments:

1. :func:`select_tests`: which files, from where (``--tests``, ``--upstream``, ``--suite``);
2. :func:`check_backend`: the device (and the baseline's) can be loaded, else exit 2;
3. the device run: pytest in a subprocess, with xdist always on, so a test that kills its
   process cannot end the run; then the retry of its failed tests (:func:`retry_failures`);
4. :func:`judge`: exit 0 when every outcome was expected, 1 otherwise;
5. with ``--baseline cpu``, the baseline on demand: the tests that did not pass on the
   device, run on cpu (:func:`run_baseline`), and the join (``--baseline-full`` runs the
   whole selection on cpu first instead).

pytest runs in a fresh interpreter so that the backend is registered before any test
module imports PyTorch's device-type machinery.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from conformance.discovery import discover_upstream_files, pick_test_files
from conformance.errors import ConfigError
from conformance.outcome import is_unexpected
from conformance.retry import DEFAULT_RETRY_CAP, retry_cap

__all__ = [
    "Selection",
    "join_baseline",
    "judge",
    "register",
    "select_tests",
]

#: The pytest configuration of upstream runs (see the file).
UPSTREAM_PYTEST_INI = Path(__file__).resolve().parent / "data" / "pytest-upstream.ini"

#: Worker restarts allowed before xdist gives up (each crashing test costs one).
MAX_WORKER_RESTARTS = 100
#: Default per-test time limit, seconds.
DEFAULT_TEST_TIMEOUT = 300.0

# pytest's exit statuses that are not about test outcomes.
_PYTEST_USAGE_ERROR = 4
_PYTEST_NO_TESTS = 5


@dataclass
class Selection:
    """What to run: the paths given to pytest, the folder pytest runs in, and the suite name;
    for a rerun, the test_ids to run and the run they amend."""

    paths: list[Path]
    rootdir: Path
    suite: str
    env: dict[str, str] = field(default_factory=dict)
    only_test_ids: list[str] = field(default_factory=list)
    amends: str = ""


#: The file in a rerun's folder that lists the test_ids it runs.
RERUN_TEST_IDS = "rerun_test_ids.txt"


def _rerun_selection(args: argparse.Namespace, selection: Selection, runs_root: Path) -> Selection:
    """The selection narrowed to the tests ``--rerun``/``--where`` pick, and to their files."""
    from conformance.model import EMBEDDED_NAMESPACE
    from conformance.rerun import select_rerun
    from conformance.store import resolve_run

    runs = [resolve_run(ref, runs_root) for ref in args.rerun]
    rerun = select_rerun(runs, args.where)
    if rerun.suite != selection.suite:
        raise ConfigError(
            f"{rerun.amends} is a run of {rerun.suite}, not {selection.suite}: rerun its tests "
            "with the same suite",
            where="--rerun",
        )
    files = [selection.rootdir / f.removeprefix(EMBEDDED_NAMESPACE) for f in rerun.files]
    paths = [path for path in files if path.is_file()] or selection.paths
    shown = " ".join(rerun.where) or "every test"
    print(
        f"conformance run: rerun of {len(rerun.test_ids):,} tests of {rerun.amends} ({shown}) "
        f"in {len(paths)} file(s)",
        flush=True,
    )
    return Selection(
        paths, selection.rootdir, selection.suite, selection.env, rerun.test_ids, rerun.amends
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run a test selection on a device and record every outcome",
        description="Run upstream-style PyTorch tests on a device backend with the conformance "
        "plugin, under pytest-xdist, and record every outcome in the results store. "
        "Exit 0 when every outcome was expected, 1 otherwise, 2 for bad input.",
    )
    parser.add_argument(
        "--device", required=True, metavar="TYPE", help="device type: emu, cpu, ..."
    )
    parser.add_argument(
        "--backend-module", metavar="MODULE", help="module that registers the backend"
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--tests", nargs="+", metavar="PATH", help="a PyTorch test/ folder, or test files"
    )
    where.add_argument(
        "--suite", metavar="embedded[:SELECTION]", help="the embedded suite: smoke, core or full"
    )
    where.add_argument(
        "--upstream",
        nargs="?",
        const="",
        metavar="TAG",
        help="PyTorch's test/ at TAG (default: the installed torch's tag), fetched and cached",
    )
    parser.add_argument(
        "--files",
        nargs="+",
        metavar="NAME_OR_GLOB",
        help="test files to run from the folder: names or globs, also under subfolders "
        "(nn/test_convolution.py, 'functorch/*'); default: every file that instantiates "
        "device-type tests, minus conformance/data/upstream_exclusions.toml",
    )
    parser.add_argument(
        "--list-files",
        action="store_true",
        help="print the files the run would select, one a line, and exit",
    )
    parser.add_argument(
        "--list-tests",
        action="store_true",
        help="collect the selection on --device (no skiplist, no shard) and print each "
        "file's test count (file<TAB>count) and the total; exit without running",
    )
    parser.add_argument(
        "-n",
        "--workers",
        default="auto",
        metavar="N",
        help="xdist workers: a number >= 1 or auto (default: auto)",
    )
    parser.add_argument("--runs-root", default="runs", metavar="DIR", help="default: runs")
    parser.add_argument("--run-id", metavar="ID", help="name of the run (default: time and device)")
    parser.add_argument(
        "--baseline",
        metavar="DEVICE",
        help="after the run, run its tests that did not pass on DEVICE (cpu) too, and mark "
        "backend-only failures (the baseline on demand; see --baseline-full)",
    )
    parser.add_argument(
        "--baseline-full",
        action="store_true",
        help="with --baseline: run the whole selection on the baseline device, before the run",
    )
    parser.add_argument(
        "--baseline-for",
        action="append",
        default=[],
        metavar="RUN",
        help="run on --device only the tests that did not pass in RUN (repeatable: in any of "
        "them): the on-demand baseline of runs made elsewhere (a CI matrix's shards)",
    )
    parser.add_argument(
        "--resume", metavar="RUN", help="finish an interrupted run (folder, id or latest)"
    )
    parser.add_argument(
        "--skiplist",
        action="append",
        default=[],
        metavar="PATH",
        help="skiplist file (repeatable; default: the backend's own)",
    )
    parser.add_argument("--no-skiplist", action="store_true", help="apply no skiplist")
    parser.add_argument(
        "--test-timeout",
        type=float,
        default=DEFAULT_TEST_TIMEOUT,
        metavar="SECONDS",
        help=f"per-test time limit (default: {DEFAULT_TEST_TIMEOUT:g})",
    )
    parser.add_argument(
        "--trace-ops", action="store_true", help="record the ATen ops each test dispatches"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="run torch's profiler around each test's call and record per-op calls, CPU and "
        "device times and input shapes in the run's ops_profile.parquet (see ops perf)",
    )
    parser.add_argument(
        "--retry-failures",
        type=retry_cap,
        default=DEFAULT_RETRY_CAP,
        metavar="N",
        help="retry each failed, errored, crashed or timed-out test once in a fresh process, "
        f"at most N tests (default: {DEFAULT_RETRY_CAP}; 0: no retries); a test that passes "
        "on its retry is recorded as flaky, with both attempts",
    )
    parser.add_argument(
        "--mode",
        choices=("eager", "compile"),
        default="eager",
        help="eager, or compile: the tests' ops under torch.compile with the device's "
        "compile backend (emu's for emu, inductor for cpu); a --baseline runs eager",
    )
    parser.add_argument("--shard", metavar="K/N", help="run only shard K of N")
    parser.add_argument(
        "--shard-durations",
        action="append",
        default=[],
        metavar="RUN",
        help="test durations an earlier run recorded (repeatable): shards balance on them "
        "and the progress line's ETA counts them",
    )
    parser.add_argument(
        "--expected-count", type=int, metavar="N", help="tests the selection should collect"
    )
    parser.add_argument(
        "--rerun",
        action="append",
        default=[],
        metavar="RUN",
        help="run only tests of these earlier runs' records (repeatable; see --where); the "
        "new run amends the first",
    )
    parser.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --rerun: outcome, category, detail, blocking (overload), dispatched "
        "(overload), template, file, test_class, op, dtype, suite or test_id (regex); "
        "repeatable, all must hold; A,B for alternatives",
    )
    parser.add_argument(
        "--progress-interval",
        type=float,
        metavar="SECONDS",
        help="seconds between progress lines (done/total, rate, ETA, failures; default 10, 0: none)",
    )
    parser.add_argument(
        "pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="passed on to pytest"
    )
    parser.set_defaults(handler=run_command)

    try:
        fetch = importlib.import_module("conformance.fetch")
    except ModuleNotFoundError as exc:
        if exc.name != "conformance.fetch":
            raise
    else:
        fetch.register(subparsers)


def run_command(args: argparse.Namespace) -> int:
    """The ``run`` handler: returns the exit code."""
    selection = select_tests(args)
    if args.list_files or args.list_tests:
        return _list_selection(args, selection)
    workers = _check_workers(args.workers)
    for path in args.skiplist:
        if not Path(path).is_file():
            raise ConfigError(f"no such file: {path}", where="--skiplist")
    _check_shard(args.shard)
    if args.trace_ops and args.mode == "compile":
        # Tracing is a TorchDispatchMode, and torch.compile refuses to run under one.
        raise ConfigError(
            "op tracing runs under a dispatch mode, which torch.compile cannot compile "
            "through: trace an eager run",
            where="--trace-ops",
        )
    if args.profile and args.mode == "compile":
        # Compiling runs ATen ops on fake tensors, once per op and worker, in whichever
        # test compiles the op first: they would be counted as that test's ops.
        raise ConfigError(
            "compiling dispatches ATen ops on fake tensors in whichever test compiles an op "
            "first, which would be counted as that test's: profile an eager run",
            where="--profile",
        )
    runs_root = Path(args.runs_root).resolve()
    if args.shard_durations:
        from conformance.store import resolve_run

        args.shard_durations = [
            resolve_run(ref, runs_root).resolve() for ref in args.shard_durations
        ]  # absolute: pytest runs in the selection's folder
    if args.baseline_full and not args.baseline:
        raise ConfigError("needs --baseline DEVICE", where="--baseline-full")
    if args.baseline_for:
        for option, given in (
            ("--baseline", args.baseline),
            ("--rerun", args.rerun),
            ("--resume", args.resume),
            ("--shard", args.shard),
        ):
            if given:
                raise ConfigError(
                    f"a baseline on demand runs the tests its runs did not pass; not with {option}",
                    where="--baseline-for",
                )
    check_backend(args.device, args.backend_module)
    if args.baseline:
        check_backend(args.baseline, None)

    resume_dir = None
    if args.resume:
        from conformance.backends import torch_build
        from conformance.resume import Wanted, check_resumable
        from conformance.store import resolve_run

        resume_dir = resolve_run(args.resume, runs_root).resolve()
        wanted = Wanted(
            backend=args.device,
            suite=selection.suite,
            shard=args.shard or "",
            torch_version=torch_build()[0],
            paths=[str(path) for path in selection.paths],
            filters=None,  # pytest's own options: the plugin checks them
            mode=args.mode,
        )
        check_resumable(resume_dir, wanted)

    if args.where and not args.rerun:
        raise ConfigError("selects among the records of --rerun RUN", where="--where")
    if args.rerun:
        if resume_dir is not None:
            raise ConfigError("--resume finishes a rerun as it was started", where="--rerun")
        selection = _rerun_selection(args, selection, runs_root)

    if args.baseline_for:
        from conformance.store import resolve_run

        runs = [resolve_run(ref, runs_root).resolve() for ref in args.baseline_for]
        run_dir = _run_dir(runs_root, args.device, args.run_id)
        status = run_baseline(args, selection, runs, args.device, run_dir, workers, own=True)
        if status is not None:
            return status
        code = judge(run_dir)
        print(f"run written to {run_dir}")
        return code

    baseline_dir = None
    if args.baseline and args.baseline_full:
        baseline_dir = _run_dir(runs_root, args.baseline, None)
        status = _run_pytest(
            args, selection, args.baseline, baseline_dir, None, workers, baseline=True
        )
        if status is not None:
            return status

    run_dir = resume_dir or _run_dir(runs_root, args.device, args.run_id)
    if selection.only_test_ids:
        run_dir.mkdir(parents=True, exist_ok=True)
        listed = run_dir / RERUN_TEST_IDS
        listed.write_text("\n".join(selection.only_test_ids) + "\n", encoding="utf-8")
        args.only_test_ids_file = listed
    status = _run_pytest(args, selection, args.device, run_dir, resume_dir, workers, baseline=False)
    if status is not None:
        return status
    retry_failures(args, selection, run_dir, workers, args.retry_failures)
    code = judge(run_dir)
    if args.baseline and baseline_dir is None:
        from conformance.store import point_latest

        baseline_dir = _run_dir(runs_root, args.baseline, None)
        status = run_baseline(args, selection, [run_dir], args.baseline, baseline_dir, workers)
        point_latest(run_dir)  # the run the command is about, not its baseline
        if status is not None:
            return status
    if baseline_dir is not None:
        join_baseline(run_dir, baseline_dir, args.baseline)
    print(f"run written to {run_dir}")
    return code


def select_tests(args: argparse.Namespace) -> Selection:
    """Resolve ``--tests``/``--upstream``/``--suite`` and ``--files`` into pytest paths."""
    if args.suite is not None:
        from conformance.embedded import DEFAULT_SELECTION, SELECTION_ENV, SELECTIONS, SUITE_DIR

        name, _, chosen = args.suite.partition(":")
        chosen = chosen or DEFAULT_SELECTION
        if name != "embedded" or chosen not in SELECTIONS:
            raise ConfigError(
                f"unknown suite {args.suite!r}; expected embedded[:{'|'.join(SELECTIONS)}]",
                where="--suite",
            )
        paths = pick_test_files(SUITE_DIR, args.files) if args.files else [SUITE_DIR]
        return Selection(paths, SUITE_DIR, f"embedded:{chosen}", {SELECTION_ENV: chosen})
    if args.upstream is not None:
        from conformance.fetch import fetch_tests, torch_tag

        tag = args.upstream or torch_tag()
        folder = Path(fetch_tests(tag)).resolve()
        return Selection(_upstream_files(folder, args.files), folder, f"upstream:{tag}")

    given = [Path(p).resolve() for p in args.tests]
    for path in given:
        if not path.exists():
            raise ConfigError(f"no such file or folder: {path}", where="--tests")
    if len(given) == 1 and given[0].is_dir():
        folder = given[0]
        return Selection(_upstream_files(folder, args.files), folder, f"upstream:{folder}")
    if args.files:
        raise ConfigError(
            "--files selects inside one folder; give --tests a single folder", where="--files"
        )
    rootdir = Path(os.path.commonpath([p if p.is_dir() else p.parent for p in given]))
    return Selection(given, rootdir, "upstream:" + ",".join(str(p) for p in given))


def _upstream_files(folder: Path, patterns: list[str] | None) -> list[Path]:
    """The files ``--files`` names, else the folder's discovered device-generic files."""
    if patterns:
        return pick_test_files(folder, patterns)
    discovered = discover_upstream_files(folder)
    if not discovered.files:
        raise ConfigError(
            f"no test file under {folder} instantiates device-type tests "
            "(instantiate_device_type_tests) outside the exclusion list; name files with --files",
            where="--tests",
        )
    return discovered.paths


def _list_selection(args: argparse.Namespace, selection: Selection) -> int:
    """``--list-files``/``--list-tests``: show the selection and return, running nothing."""
    from conformance.listing import count_tests, print_files

    if args.rerun or args.resume:
        raise ConfigError(
            "lists the selection of --tests, --upstream or --suite and --files; "
            "not with --rerun or --resume",
            where="--list-tests" if args.list_tests else "--list-files",
        )
    if not args.list_tests:
        return print_files(selection.paths, selection.rootdir)
    check_backend(args.device, args.backend_module)
    options = _pytest_options(args, selection, args.device, baseline=False)
    return count_tests(
        selection.paths, selection.rootdir, options, dict(os.environ, **selection.env)
    )


def check_backend(device: str, module: str | None) -> None:
    """ConfigError (exit 2) unless the device's backend loads in this process."""
    from conformance.backends import load_backend

    load_backend(device, module)


def run_baseline(
    args: argparse.Namespace,
    selection: Selection,
    device_runs: list[Path],
    device: str,
    run_dir: Path,
    workers: str,
    *,
    own: bool = False,
) -> int | None:
    """The baseline on demand: run on ``device``, into ``run_dir``, the tests of
    ``selection`` that did not pass in ``device_runs`` (conformance.baseline.needs_baseline),
    from the files that hold them. The run's metadata names the runs it is the baseline for
    and carries their shard; with no such test, the run is written empty. ``own``: the run
    is the command's own (``--baseline-for``), with its skiplist options and retries. None
    when done, else the exit code the command should return."""
    from conformance.baseline import tests_needing_baseline
    from conformance.model import EMBEDDED_NAMESPACE
    from conformance.store import read_meta, read_run, write_meta

    needed: set[str] = set()
    files: dict[str, str] = {}
    metas = []
    tests = 0
    for path in device_runs:
        meta, frame = read_run(path, ["test_id", "file", "template", "outcome", "category"])
        if meta.suite != selection.suite:
            raise ConfigError(
                f"{meta.run_id} is a run of {meta.suite}, not {selection.suite}: its baseline "
                "runs the same suite",
                where="--baseline-for",
            )
        metas.append(meta)
        tests += frame["test_id"].nunique()
        chosen = tests_needing_baseline(frame)
        needed.update(chosen)
        files.update(zip(frame["test_id"], frame["file"], strict=True))
    shards = {meta.shard for meta in metas}
    if len(shards) > 1:
        raise ConfigError(
            f"the runs are of different shards ({', '.join(sorted(shards))}): give one shard's",
            where="--baseline-for",
        )
    baseline_for = ",".join(meta.run_id for meta in metas)
    names = ", ".join(sorted({meta.backend for meta in metas}))
    print(
        f"conformance run: baseline {device} on demand: {len(needed):,} of {tests:,} tests did "
        f"not pass on {names}; {tests - len(needed):,} passing tests not re-run",
        flush=True,
    )
    shard = shards.pop()
    if not needed:
        _write_empty_run(run_dir, device, selection, shard, baseline_for)
        return None
    wanted = sorted({files[t] for t in needed})
    paths = [selection.rootdir / f.removeprefix(EMBEDDED_NAMESPACE) for f in wanted]
    chosen_paths = [path for path in paths if path.is_file()] or selection.paths
    on_demand = Selection(chosen_paths, selection.rootdir, selection.suite, selection.env)
    run_dir.mkdir(parents=True, exist_ok=True)
    listed = run_dir / RERUN_TEST_IDS
    listed.write_text("\n".join(sorted(needed)) + "\n", encoding="utf-8")
    try:
        status = _run_pytest(
            args, on_demand, device, run_dir, None, workers, baseline=not own, only=listed
        )
    except ConfigError:  # collected none of them (tests that exist on the device only)
        _write_empty_run(run_dir, device, selection, shard, baseline_for)
        return None
    if status is not None:
        return status
    if own:
        retry_failures(args, on_demand, run_dir, workers, args.retry_failures)
    meta = read_meta(run_dir)
    meta.baseline_for = baseline_for
    meta.shard = shard  # the device runs' shard: not re-sharded, their tests are the shard's
    write_meta(run_dir, meta)
    return None


def _write_empty_run(
    run_dir: Path, device: str, selection: Selection, shard: str, baseline_for: str
) -> None:
    """A complete run with no record: the on-demand baseline of runs that passed every test."""
    import socket

    from conformance import __version__
    from conformance.backends import load_backend, torch_build
    from conformance.model import RunMeta
    from conformance.store import RunWriter, utc_now

    backend = load_backend(device)
    torch_version, torch_git = torch_build()
    now = utc_now()
    meta = RunMeta(
        run_id=run_dir.name,
        start_time=now,
        torch_version=torch_version,
        torch_git=torch_git,
        backend=backend.name,
        backend_version=backend.version,
        backend_git=backend.git,
        harness_version=__version__,
        suite=selection.suite,
        shard=shard,
        paths=[str(path) for path in selection.paths],
        rootdir=str(selection.rootdir),
        env=dict(selection.env),
        host=socket.gethostname(),
        command=["conformance", *sys.argv[1:]],
        baseline_for=baseline_for,
    )
    RunWriter(run_dir, meta).close(complete=True, collected=0, end_time=now)


def retry_failures(
    args: argparse.Namespace, selection: Selection, run_dir: Path, workers: str, cap: int
) -> None:
    """Retry the run's failed tests (at most ``cap``) once in a fresh pytest process and fold
    what the retry recorded into their records (:mod:`conformance.retry`). A retry that
    does not run leaves every record as it was, and says so."""
    import tempfile

    from conformance.model import EMBEDDED_NAMESPACE
    from conformance.retry import fold_retries, plan_retries
    from conformance.store import read_meta, read_records, rewrite_records, write_meta

    meta = read_meta(run_dir)
    if not meta.complete:
        return  # judge() says how to finish it; a resumed run retries at its end
    records = read_records(run_dir, meta)
    plan = plan_retries(records, cap)
    meta.retry_cap = cap
    meta.retry_left_out = plan.left_out
    if not plan.test_ids:
        write_meta(run_dir, meta)
        if plan.left_out:
            print(
                f"conformance run: {plan.left_out:,} failed tests not retried (--retry-failures 0)",
                flush=True,
            )
        return None
    left = f"; {plan.left_out:,} more over the cap not retried" if plan.left_out else ""
    print(
        f"conformance run: retrying {len(plan.test_ids):,} failed tests once in a fresh "
        f"process (--retry-failures {cap}){left}",
        flush=True,
    )
    files = [selection.rootdir / f.removeprefix(EMBEDDED_NAMESPACE) for f in plan.files]
    paths = [path for path in files if path.is_file()] or selection.paths
    retry_selection = Selection(paths, selection.rootdir, selection.suite, selection.env)
    with tempfile.TemporaryDirectory(prefix="conformance-retry-") as scratch:
        listed = Path(scratch) / RERUN_TEST_IDS
        listed.write_text("\n".join(plan.test_ids) + "\n", encoding="utf-8")
        retry_dir = Path(scratch) / "retry"
        try:
            status = _run_pytest(
                args,
                retry_selection,
                args.device,
                retry_dir,
                None,
                workers,
                baseline=False,
                only=listed,
                trace=False,
            )
        except ConfigError:  # it collected none of them: each is named below
            status = None
        if status is not None:
            print(
                f"conformance run: warning: the retry did not run (status {status})",
                file=sys.stderr,
            )
        retried = read_records(retry_dir) if (retry_dir / "meta.json").is_file() else []
    folded, result = fold_retries(records, plan.test_ids, retried)
    rewrite_records(run_dir, folded, meta)
    print(
        f"conformance run: retry: {len(result.flaky):,} flaky (failed, then passed), "
        f"{len(result.failed_again):,} failed again",
        flush=True,
    )
    if result.unrecorded:
        shown = ", ".join(result.unrecorded[:5]) + (" ..." if len(result.unrecorded) > 5 else "")
        print(
            f"conformance run: warning: the retry recorded no outcome for "
            f"{len(result.unrecorded):,} tests, which keep their first outcome: {shown}",
            file=sys.stderr,
        )


def _check_workers(value: str) -> str:
    if value == "auto" or (value.isdigit() and int(value) >= 1):
        return value
    raise ConfigError(
        f"expected a number >= 1 or auto, got {value!r} (workers let a run survive crashes)",
        where="-n",
    )


def _check_shard(spec: str | None) -> None:
    import pytest

    from conformance.plugin import parse_shard

    try:
        parse_shard(spec)
    except pytest.UsageError as exc:
        raise ConfigError(str(exc)) from None


def _run_dir(runs_root: Path, device: str, run_id: str | None) -> Path:
    from conformance.store import new_run_id

    run_dir = runs_root / (run_id or new_run_id(device))
    if (run_dir / "meta.json").exists():
        raise ConfigError(f"{run_dir} already holds a run; pick another --run-id or --resume it")
    return run_dir


def _pytest_options(
    args: argparse.Namespace, selection: Selection, device: str, *, baseline: bool
) -> list[str]:
    """The options that decide what pytest collects, the same for a run and for
    ``--list-tests``: device, backend, suite, mode, rootdir, and the user's pytest arguments
    (last, as given after ``--``)."""
    options = ["--device", device, "--suite", selection.suite, "--rootdir", str(selection.rootdir)]
    options += ["-p", "no:cacheprovider"]
    if selection.suite.startswith("upstream"):
        options += ["-c", str(UPSTREAM_PYTEST_INI)]
    if args.backend_module and not baseline:
        options += ["--backend-module", args.backend_module]
    if args.mode != "eager" and not baseline:
        options += ["--mode", args.mode]
    return options + args.pytest_args


def _run_pytest(
    args: argparse.Namespace,
    selection: Selection,
    device: str,
    run_dir: Path,
    resume_dir: Path | None,
    workers: str,
    *,
    baseline: bool,
    only: Path | None = None,
    trace: bool = True,
) -> int | None:
    """Run pytest; None when it ran the tests, else the exit code the command should return.
    ``only`` lists the test_ids to run (a retry, a baseline on demand): those alone,
    unsharded (they are the shard's already); ``trace`` False leaves out op tracing and
    profiling (a retry: its records keep the first attempt's ops and profile)."""
    command = [sys.executable, "-m", "pytest", *map(str, selection.paths)]
    command += ["--resume", str(resume_dir)] if resume_dir else ["--run-dir", str(run_dir)]
    command += ["-n", workers, "--max-worker-restart", str(MAX_WORKER_RESTARTS)]
    command += ["-q", "--tb=line", "--test-timeout", f"{args.test_timeout:g}"]
    if args.no_skiplist:
        command.append("--no-skiplist")
    if not baseline:
        for path in args.skiplist:
            command += ["--skiplist", str(Path(path).resolve())]
        if args.expected_count is not None and only is None:
            command += ["--expected-count", str(args.expected_count)]
    if args.trace_ops and trace:
        command.append("--trace-ops")
    if args.profile and trace:
        command.append("--profile")
    listed = getattr(args, "only_test_ids_file", None)
    if only is not None:
        command += ["--only-test-ids", str(only)]
    elif listed is not None:
        command += ["--only-test-ids", str(listed), "--amends", selection.amends]
    if args.progress_interval is not None:
        command += ["--progress-interval", f"{args.progress_interval:g}"]
    if args.shard and only is None:
        command += ["--shard", args.shard]
        for run in args.shard_durations:
            command += ["--shard-durations", str(run)]
    command += _pytest_options(args, selection, device, baseline=baseline)
    env = dict(os.environ, **selection.env)
    env["CONFORMANCE_COMMAND"] = json.dumps(["conformance", *sys.argv[1:]])
    role = "baseline " if baseline else "retry " if not trace else ""
    print(f"conformance run: {role}{device}: {' '.join(command[1:])}", flush=True)
    status = subprocess.call(command, cwd=selection.rootdir, env=env)
    if status == _PYTEST_USAGE_ERROR:
        return 2
    if status == _PYTEST_NO_TESTS:
        raise ConfigError(f"no tests collected from {', '.join(map(str, selection.paths))}")
    if not (run_dir / "meta.json").exists():
        print(
            f"conformance run: pytest ended with status {status} before the run started",
            file=sys.stderr,
        )
        return 1
    return None


def judge(run_dir: Path) -> int:
    """Print the run's counts; 0 when every outcome was expected and the run is complete."""
    from conformance.model import COLLECTION_ERROR, is_collection_record
    from conformance.store import read_run

    meta, frame = read_run(run_dir)
    counts = Counter(frame["outcome"])
    print(
        "outcomes: " + ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
        if counts
        else "outcomes: none"
    )
    unexpected = sum(
        is_unexpected(outcome, message)
        for outcome, message in zip(frame["outcome"], frame["message"], strict=True)
    )
    flaky = frame.loc[frame["outcome"] == "flaky", "test_id"].tolist()
    if flaky:
        # A finding to look into, not a failure of the run: its retry passed.
        shown = ", ".join(flaky[:5]) + (" ..." if len(flaky) > 5 else "")
        print(f"conformance run: {len(flaky)} flaky (failed, then passed on a retry): {shown}")
    problems = []
    if unexpected:
        problems.append(f"{unexpected} unexpected outcomes")
    # Each file that failed to collect by name, its tests being in no count above; one a
    # skiplist entry expects is said too, but fails nothing.
    for row in frame.loc[frame["category"] == COLLECTION_ERROR].itertuples(index=False):
        if is_collection_record(row.category, row.template):
            first = row.message.split("\n", 1)[0]
            line = f"{row.test_id} failed to collect ({row.outcome}): {first}"
            if is_unexpected(row.outcome, row.message):
                problems.append(line)
            else:
                print(f"conformance run: {line} [expected by {row.skip_entry}]")
    if not meta.complete:
        problems.append(f"the run did not finish; resume it with --resume {run_dir}")
    if meta.expected is not None and meta.collected < meta.expected:
        problems.append(f"collected {meta.collected} tests, expected {meta.expected}")
    for problem in problems:
        print(f"conformance run: {problem}", file=sys.stderr)
    return 1 if problems else 0


def join_baseline(run_dir: Path, baseline_dir: Path, device: str) -> None:
    """Join the run with its baseline run on ``device``, write the join beside the run and
    print what it covers and finds; warn on stderr when it covers too little of the run."""
    from conformance.baseline import compare, coverage_of, write_baseline
    from conformance.store import read_run

    meta, frame = read_run(run_dir)
    base_meta, base_frame = read_run(baseline_dir)
    joined = compare(frame, base_frame)
    coverage = coverage_of(frame, base_frame, on_demand=bool(base_meta.baseline_for))
    write_baseline(
        run_dir,
        joined,
        baseline_run=base_meta.run_id,
        baseline_device=device,
        coverage=coverage,
    )
    print(
        f"baseline {device} ({baseline_dir}): {coverage.describe(meta.backend, device)}; "
        f"{int(joined['backend_only'].sum()):,} failures are backend-only, "
        f"{int((joined['failure_scope'] == 'both').sum()):,} fail on {device} too"
    )
    warning = coverage.warning(device)
    if warning:
        print(warning, file=sys.stderr)
