"""The pytest plugin (entry point ``pytest11: conformance``): a device run, when asked for.

Nothing happens unless ``--device`` is given. Then, before any conftest or test module is
imported, the backend is loaded and PyTorch is told to instantiate only that device's test
classes; ``pytest_configure`` registers the stateful parts: the :class:`TestRunAgent` where
tests run, and the :class:`RunRecorder` in the process that owns the run (never in an xdist
worker). Feature areas that add observers to a run (the profiler of ``--profile``,
:mod:`conformance.profile`) are plugins of their own that join through the
``pytest_conformance_configure`` hook (:mod:`conformance.hookspecs`).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest

from conformance.errors import ConformanceError

__all__ = ["BACKEND_KEY", "parse_shard"]

BACKEND_KEY = pytest.StashKey[Any]()
#: The pid of the xdist controller, for its workers to recognise themselves.
_CONTROLLER_ENV = "CONFORMANCE_XDIST_CONTROLLER_PID"
_ENV_KEY = pytest.StashKey[dict[str, str | None]]()
#: In an xdist worker whose backend failed to load: the error, for the controller to report.
_LOAD_ERROR_KEY = pytest.StashKey[str]()

#: Environment variables that decide what the tests do, kept in the run metadata so a
#: test can be rerun alone as it ran.
_RECORDED_ENV = (
    "CONFORMANCE_SELECTION",
    "CONFORMANCE_MODE",
    "CONFORMANCE_COMPILE_BACKEND",
    "PYTORCH_TEST_WITH_INDUCTOR",
    "PYTORCH_TESTING_DEVICE_ONLY_FOR",
    "EMU_CPU_FALLBACK",
    "TORCH_DEVICE_BACKEND_AUTOLOAD",
)

#: The environment variable through which `conformance run` passes the user's command line.
COMMAND_ENV = "CONFORMANCE_COMMAND"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from conformance import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    # Help texts: lower case, no final period, say what the value is.
    group = parser.getgroup("conformance", "device conformance run")
    group.addoption(
        "--device",
        dest="conformance_device",
        metavar="TYPE",
        help="run the device-generic tests on this device type and record every outcome",
    )
    group.addoption(
        "--backend-module",
        dest="conformance_backend_module",
        metavar="MODULE",
        help="module to import to register the backend (default: torch.backends entry points)",
    )
    group.addoption(
        "--runs-root",
        dest="conformance_runs_root",
        default="runs",
        metavar="DIR",
        help="folder holding one folder per run (default: runs)",
    )
    group.addoption(
        "--run-id",
        dest="conformance_run_id",
        metavar="ID",
        help="name of this run's folder (default: time, device and a random suffix)",
    )
    group.addoption(
        "--run-dir",
        dest="conformance_run_dir",
        metavar="DIR",
        help="write the run to this folder (instead of --runs-root/--run-id)",
    )
    group.addoption(
        "--suite",
        dest="conformance_suite",
        default="",
        metavar="NAME",
        help="what the tests are, recorded in the run metadata (upstream:TAG, embedded:smoke...)",
    )
    group.addoption(
        "--mode",
        dest="conformance_mode",
        default="eager",
        choices=("eager", "compile"),
        help="eager, or compile: every op under torch.compile with the device's compile "
        "backend (default: eager)",
    )
    group.addoption(
        "--skiplist",
        dest="conformance_skiplists",
        action="append",
        default=[],
        metavar="PATH",
        help="skiplist file to apply (repeatable; default: the backend's own)",
    )
    group.addoption(
        "--no-skiplist",
        dest="conformance_no_skiplist",
        action="store_true",
        help="apply no skiplist",
    )
    group.addoption(
        "--test-timeout",
        dest="conformance_test_timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop a test after this long and record it as timeout",
    )
    group.addoption(
        "--resume",
        dest="conformance_resume",
        metavar="RUN_DIR",
        help="finish an interrupted run: append to it, skipping what it recorded",
    )
    group.addoption(
        "--trace-ops",
        dest="conformance_trace_ops",
        action="store_true",
        help="record the ATen operators each test dispatches",
    )
    group.addoption(
        "--shard", dest="conformance_shard", metavar="K/N", help="run only shard K of N (1-based)"
    )
    group.addoption(
        "--shard-durations",
        dest="conformance_shard_durations",
        action="append",
        default=[],
        metavar="RUN_DIR",
        help="test durations these earlier runs recorded: --shard balances on them and the "
        "progress line's ETA counts them",
    )
    group.addoption(
        "--only-test-ids",
        dest="conformance_only_test_ids",
        metavar="FILE",
        help="run only the tests whose test_id is a line of FILE (a rerun; see --amends)",
    )
    group.addoption(
        "--amends",
        dest="conformance_amends",
        default="",
        metavar="RUN_ID",
        help="the run this one reruns tests of, recorded in the run metadata",
    )
    group.addoption(
        "--progress-interval",
        dest="conformance_progress_interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help="print a progress line (done/total, rate, ETA, failures) at most this often "
        "(default: 10; 0: never)",
    )
    group.addoption(
        "--expected-count",
        dest="conformance_expected",
        type=int,
        default=None,
        metavar="N",
        help="number of tests this selection should collect",
    )


def parse_shard(spec: str | None) -> tuple[int, int] | None:
    """``"2/4"`` -> ``(2, 4)``; UsageError naming the option for anything else."""
    if not spec:
        return None
    index, sep, count = spec.partition("/")
    if sep and index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count):
        return int(index), int(count)
    raise pytest.UsageError(f"--shard: expected K/N with 1 <= K <= N, got {spec!r}")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # Conftests and test modules may import common_device_type, which fixes the device
    # bases when first imported: the backend must be registered before that.
    device = early_config.known_args_namespace.conformance_device
    if not device:
        return
    from conformance.backends import describe_backend, load_backend

    module_name = early_config.known_args_namespace.conformance_backend_module
    # An xdist controller runs no test: it only needs to know the backend, and importing
    # torch there would delay the workers' start by seconds. The workers load it.
    controller = _is_xdist_controller(early_config)
    load = describe_backend if controller else load_backend
    try:
        backend = load(device, module_name)
    except ConformanceError as exc:
        if _is_xdist_worker():
            # Raised here, the error would come back as one long traceback per worker
            # start; the worker collects nothing instead and the controller reports it once.
            early_config.stash[_LOAD_ERROR_KEY] = str(exc)
            return
        raise pytest.UsageError(str(exc)) from None
    early_config.stash[BACKEND_KEY] = backend
    saved = {}
    for name, value, force in (
        ("PYTORCH_TESTING_DEVICE_ONLY_FOR", backend.name, True),
        *_mode_env(early_config.known_args_namespace),
        # OpInfo tests then raise the original exception, which classify() can read.
        ("PYTORCH_PRINT_REPRO_ON_FAILURE", "0", False),
        # Tells the workers this process starts that they are its workers.
        *([(_CONTROLLER_ENV, str(os.getpid()), True)] if controller else []),
    ):
        saved[name] = os.environ.get(name)
        if force or name not in os.environ:
            os.environ[name] = value
    early_config.stash[_ENV_KEY] = saved


def _is_xdist_controller(config: pytest.Config) -> bool:
    """Whether this process is an xdist controller. Workers see the same arguments (-n), so
    they are told apart as the children of the process that set _CONTROLLER_ENV; not by
    PYTEST_XDIST_WORKER, which a pytest started from inside a worker inherits."""
    namespace = config.known_args_namespace
    if not (getattr(namespace, "numprocesses", None) or getattr(namespace, "tx", None)):
        return False
    return not _is_xdist_worker()


def _mode_env(args: Any) -> list[tuple[str, str, bool]]:
    """What compile mode sets: ``CONFORMANCE_MODE`` for the embedded suite, whose templates
    compile each op; for upstream files also upstream's own switch, which compiles each
    test through ``TestCase.compile_fn`` (pointed at the device's backend by the agent)."""
    if getattr(args, "conformance_mode", "eager") != "compile":
        return []
    from conformance.embedded import MODE_ENV

    settings = [(MODE_ENV, "compile", True)]
    if not str(getattr(args, "conformance_suite", "") or "").startswith("embedded"):
        settings.append(("PYTORCH_TEST_WITH_INDUCTOR", "1", True))
    return settings


def _is_xdist_worker() -> bool:
    # Also before xdist sets config.workerinput, which it does only after configuration.
    return os.environ.get(_CONTROLLER_ENV) == str(os.getppid())


def pytest_configure(config: pytest.Config) -> None:
    if _LOAD_ERROR_KEY in config.stash:
        from conformance.worker import BackendLoadFailure

        config.pluginmanager.register(
            BackendLoadFailure(config, config.stash[_LOAD_ERROR_KEY]), "conformance-load-failure"
        )
        return
    if not config.option.conformance_device or BACKEND_KEY not in config.stash:
        return
    if config.option.collectonly:
        return
    from conformance.session import WORKER_RESUME_COUNT, WORKER_RUN_DIR, RunRecorder
    from conformance.worker import TestRunAgent

    backend = config.stash[BACKEND_KEY]
    option = config.option
    shard = parse_shard(option.conformance_shard)
    timeout_s = option.conformance_test_timeout
    if timeout_s is not None and timeout_s <= 0:
        raise pytest.UsageError(
            f"--test-timeout: expected a positive number of seconds, got {timeout_s}"
        )
    skiplist = _load_skiplist(config, backend)

    workerinput = getattr(config, "workerinput", None)
    recorder = None
    if workerinput is not None:
        run_dir = Path(workerinput[WORKER_RUN_DIR])
        already = _first_recorded(run_dir, int(workerinput[WORKER_RESUME_COUNT]))
    else:
        writer = _open_writer(config, backend, shard)
        recorder = RunRecorder(config, backend, writer, timeout_s=timeout_s, skiplist=skiplist)
        # A file that fails to collect is recorded as an error; the other files' tests
        # still run, as they do under xdist (whose workers run whatever they collected),
        # rather than pytest stopping the whole session before its first test.
        option.continue_on_collection_errors = True
        config.pluginmanager.register(recorder, "conformance-recorder")
        run_dir = writer.run_dir
        already = frozenset(writer.recorded_ids)
        _register_progress(config, run_dir=run_dir, resumed=bool(already))
    if option.conformance_mode == "compile" and not _is_xdist_controller(config):
        _compile_upstream_tests_with(backend.name)
    agent = TestRunAgent(
        config,
        backend,
        run_dir=run_dir,
        skiplist=skiplist,
        already_recorded=already,
        shard=shard,
        shard_durations=_shard_durations(option.conformance_shard_durations) if shard else None,
        timeout_s=timeout_s,
        trace_ops=option.conformance_trace_ops,
        recorder=recorder,
        only_test_ids=_only_test_ids(option.conformance_only_test_ids),
    )
    config.pluginmanager.register(agent, "conformance-agent")
    # Feature areas (the profiler, ...) join through the hook, not through imports here.
    config.hook.pytest_conformance_configure(
        config=config,
        device_type=backend.name,
        run_dir=Path(run_dir),
        owns_run=recorder is not None,
        runs_tests=not _is_xdist_controller(config),
    )


_MODULE_NAMES_KEY = pytest.StashKey[Any]()


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> Any:
    """In a conformance run, a test file whose module name an earlier file took (upstream's
    ``functorch/test_ops.py`` after ``test_ops.py``) imports under a name of its own."""
    config = parent.config
    if not config.option.conformance_device:
        return None
    from conformance.modules import ModuleNames

    names = config.stash.setdefault(_MODULE_NAMES_KEY, ModuleNames())
    return names.make_module(module_path, parent)


def _compile_upstream_tests_with(device_type: str) -> None:
    """Point upstream's compile switch (PYTORCH_TEST_WITH_INDUCTOR: each test runs through
    ``TestCase.compile_fn``) at the device's compile backend instead of inductor. The
    embedded suite compiles its op calls itself; its TestCase runs are not wrapped."""
    if os.environ.get("PYTORCH_TEST_WITH_INDUCTOR") != "1":
        return
    from torch.testing._internal import common_utils

    from conformance.backends import compile_backend

    try:
        name = compile_backend(device_type)
    except ConformanceError as exc:
        raise pytest.UsageError(str(exc)) from None
    original = common_utils.TestCase.compile_fn
    if getattr(original, "_conformance_backend", None) == name:
        return

    def compile_fn(self: Any, fn: Any, backend: str, nopython: bool) -> Any:
        return original(self, fn, name, nopython)

    compile_fn._conformance_backend = name  # type: ignore[attr-defined]
    common_utils.TestCase.compile_fn = compile_fn


def _register_progress(config: pytest.Config, *, run_dir: Path, resumed: bool) -> None:
    from conformance.progress import DEFAULT_INTERVAL_S, ProgressPlugin

    interval = config.option.conformance_progress_interval
    interval = DEFAULT_INTERVAL_S if interval is None else interval
    if interval < 0:
        raise pytest.UsageError(
            f"--progress-interval: expected seconds >= 0 (0: no progress line), got {interval:g}"
        )
    if interval > 0:
        plugin = ProgressPlugin(
            config,
            interval,
            recorded=_recorded_seconds(config, run_dir if resumed else None),
        )
        config.pluginmanager.register(plugin, "conformance-progress")


def _recorded_seconds(config: pytest.Config, resumed_run: Path | None) -> dict[str, float]:
    """Test durations the ETA starts from, by nodeid: the ``--shard-durations`` runs' (those
    of this device: another device's tests have other nodeids), then the records of the
    run being resumed (this machine: they win)."""
    from conformance.store import read_records

    seconds: dict[str, float] = {}
    runs = [*config.option.conformance_shard_durations, *([resumed_run] if resumed_run else [])]
    for run in runs:
        for record in read_records(run):
            if record.get("outcome") != "deselected":
                seconds[record["nodeid"]] = float(record.get("duration_s") or 0.0)
    return seconds


def pytest_unconfigure(config: pytest.Config) -> None:
    # In-process runs (pytester) share os.environ with the caller: put it back.
    for name, value in config.stash.get(_ENV_KEY, {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _shard_durations(run_dirs: list[str]) -> Any:
    if not run_dirs:
        return None
    from conformance.errors import ConformanceError
    from conformance.sharding import read_durations

    try:
        return read_durations(run_dirs)
    except ConformanceError as exc:
        raise pytest.UsageError(f"--shard-durations: {exc}") from None


def _only_test_ids(path: str | None) -> frozenset[str] | None:
    if not path:
        return None
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise pytest.UsageError(f"--only-test-ids: cannot read {path}: {exc}") from None
    test_ids = frozenset(line.strip() for line in lines if line.strip())
    if not test_ids:
        raise pytest.UsageError(f"--only-test-ids: {path} lists no test_id")
    return test_ids


def _load_skiplist(config: pytest.Config, backend: Any) -> Any:
    option = config.option
    if option.conformance_no_skiplist:
        return None
    import skiplists
    from conformance.backends import torch_build

    torch_version = torch_build()[0]
    paths = [Path(p) for p in option.conformance_skiplists]
    for path in paths:
        if not path.is_file():
            raise pytest.UsageError(f"--skiplist: no such file: {path}")
    # The common layer (torch's own limits) applies under a backend's files, shipped or given.
    if paths:
        if backend.name not in skiplists.NOT_PRIVATEUSE1:
            paths = [*skiplists.common_paths(torch_version), *paths]
    else:
        paths = list(skiplists.default_paths(backend.name, torch_version))
    if not paths:
        return None
    try:
        return skiplists.load(
            paths, backend=backend.name, torch_version=torch_version, mode=option.conformance_mode
        )
    except ConformanceError as exc:
        raise pytest.UsageError(str(exc)) from None


def _first_recorded(run_dir: Path, count: int) -> frozenset[str]:
    from conformance.store import read_records

    if count <= 0:
        return frozenset()
    return frozenset(record["test_id"] for record in read_records(run_dir)[:count])


def _open_writer(config: pytest.Config, backend: Any, shard: tuple[int, int] | None) -> Any:
    import json

    from conformance import __version__
    from conformance.backends import torch_build
    from conformance.model import RunMeta
    from conformance.store import RunWriter, new_run_id, utc_now

    option = config.option
    suite = option.conformance_suite or _suite_from_args(config)
    shard_name = f"{shard[0]}/{shard[1]}" if shard else ""
    paths, filters = _selected(config)
    if option.conformance_only_test_ids:
        filters.append(f"--only-test-ids {Path(option.conformance_only_test_ids).resolve()}")
    torch_version, torch_git = torch_build()
    if option.conformance_resume:
        from conformance.resume import Wanted, check_resumable

        run_dir = Path(option.conformance_resume)
        wanted = Wanted(
            backend.name, suite, shard_name, torch_version, paths, filters, option.conformance_mode
        )
        try:
            meta = check_resumable(run_dir, wanted)
        except ConformanceError as exc:
            raise pytest.UsageError(f"--resume: {exc}") from None
        return RunWriter(run_dir, meta)

    if option.conformance_run_dir:
        run_dir = Path(option.conformance_run_dir)
    else:
        run_id = option.conformance_run_id or new_run_id(backend.name)
        run_dir = Path(option.conformance_runs_root) / run_id
    if (run_dir / "meta.json").exists():
        raise pytest.UsageError(f"{run_dir} already holds a run; use --resume to continue it")
    command = (
        json.loads(os.environ[COMMAND_ENV])
        if COMMAND_ENV in os.environ
        else ["pytest", *config.invocation_params.args]
    )
    meta = RunMeta(
        run_id=run_dir.name,
        start_time=utc_now(),
        torch_version=torch_version,
        torch_git=torch_git,
        backend=backend.name,
        backend_version=backend.version,
        backend_git=backend.git,
        harness_version=__version__,
        suite=suite,
        mode=option.conformance_mode,
        shard=shard_name,
        paths=paths,
        filters=filters,
        amends=option.conformance_amends,
        rootdir=str(config.rootpath),
        env={name: os.environ[name] for name in _RECORDED_ENV if os.environ.get(name)},
        host=socket.gethostname(),
        command=[str(part) for part in command],
        expected=option.conformance_expected,
    )
    return RunWriter(run_dir, meta)


def _selected(config: pytest.Config) -> tuple[list[str], list[str]]:
    """What the session selects: its test paths, absolute (a nodeid keeps its ``::`` part),
    and its -k/-m/--deselect filters; a resumed session must select the same."""
    here = config.invocation_params.dir
    paths = []
    for arg in config.args:
        path, sep, rest = str(arg).partition("::")
        paths.append(str((here / path).resolve()) + sep + rest)
    option = config.option
    filters = [f"-k {option.keyword}"] if getattr(option, "keyword", "") else []
    filters += [f"-m {option.markexpr}"] if getattr(option, "markexpr", "") else []
    filters += [f"--deselect {nodeid}" for nodeid in getattr(option, "deselect", None) or ()]
    return paths, filters


def _suite_from_args(config: pytest.Config) -> str:
    return "tests:" + ",".join(str(p) for p in config.args)
