"""Per-op device metrics (``--profile``): torch's profiler around each test's call phase.

A pytest plugin of its own (entry point ``pytest11: conformance_profile``): it declares
``--profile`` and, in a device run that asks for it, registers two objects through the
runner's ``pytest_conformance_configure`` hook:

:class:`CallProfiler`, where tests run (the pytest process, or each xdist worker), runs
``torch.profiler.profile`` around each test's call phase, with ``record_shapes``, on the CPU
activity and the device's own (``ProfilerActivity.PrivateUse1`` for the PrivateUse1
backend, ``CUDA`` for cuda, none for cpu; left out where this torch cannot profile it). It
keeps the ATen ops and the device's kernel events, sums them by op and input signature
(shapes and dtypes), and hands the rows to the process that owns the run on the call's
report, as the user property ``ops_profile`` (a list of :data:`ROW_FIELDS` lists).

:class:`ProfileRecorder`, in the process that owns the run, appends a test's rows to the
run's profile (:mod:`conformance.profile_store`) when the test's record has been appended
to the run (``pytest_conformance_record``), so the two agree: a resumed run keeps the rows of
the tests it recorded before and profiles only the others, and a test that kills its worker
sends no rows and costs no other test its rows. It consolidates the rows when the session
ends. A retried test (``--retry-failures``) keeps its first attempt's rows, as its record
keeps its first attempt's fields.

The profiler leaves outcomes as they are: it starts after the test's setup and stops after
its call, outside the test's code; an error or warning it raises there is swallowed (that
test then has no rows), never raised into the test. A test that runs a profiler of its own
keeps it working: profilers do not nest, so the inner one, the test's, takes over and that
test's rows are lost, not its outcome. The profiler costs time: figures include its
overhead, and with ``--trace-ops`` the tracing's dispatch mode too. Compile mode is
refused: compiling dispatches ATen ops on fake tensors, once per op and worker, in
whichever test comes first, and those would be counted as that test's ops.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Generator, Iterable
from typing import Any

import pytest

from conformance.profile_store import ProfileWriter

__all__ = [
    "PROFILE_PROPERTY",
    "ROW_FIELDS",
    "CallProfiler",
    "ProfileRecorder",
    "device_activities",
    "summarize_events",
]

#: The report property that carries a test's rows from where it ran to the run's owner.
PROFILE_PROPERTY = "ops_profile"
#: The fields of a row as it travels: PROFILE_COLUMNS without the test's identity.
ROW_FIELDS = (
    "op",
    "calls",
    "device_calls",
    "cpu_time_us",
    "self_cpu_time_us",
    "device_time_us",
    "self_device_time_us",
    "input_shapes",
    "input_dtypes",
)
_ROWS_KEY = pytest.StashKey[list[list[Any]]]()
#: Kineto, the profiler's library, logs each start and stop on stderr: into every test's
#: captured output. It reads its log level once, when the first profiler starts.
_KINETO_LOG_LEVEL = "KINETO_LOG_LEVEL"
_KINETO_SILENT = "6"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("conformance", "device conformance run").addoption(
        "--profile",
        dest="conformance_profile",
        action="store_true",
        help="profile each test's call and record per-op times and input shapes in the "
        "run's ops_profile.parquet",
    )


@pytest.hookimpl(optionalhook=True)  # the runner declares it; without the runner, no run
def pytest_conformance_configure(
    config: pytest.Config, device_type: str, run_dir: Any, owns_run: bool, runs_tests: bool
) -> None:
    """``--profile``: the profiler where tests run, its recorder where the run is owned."""
    if not config.option.conformance_profile:
        return
    if config.option.conformance_mode == "compile":
        raise pytest.UsageError(
            "--profile: compiling dispatches ATen ops on fake tensors in whichever test "
            "compiles an op first, which would be counted as that test's: profile an eager run"
        )
    if owns_run:
        config.pluginmanager.register(ProfileRecorder(run_dir), "conformance-profile-recorder")
    if runs_tests:
        config.pluginmanager.register(CallProfiler(device_type), "conformance-profiler")


def device_activities(device_type: str) -> tuple[list[Any], Any]:
    """The profiler activities for a device type (CPU, plus the device's where this torch
    supports it) and the DeviceType of the device's kernel events (None for cpu)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, supported_activities

    activities = [ProfilerActivity.CPU]
    if device_type == "cpu":
        return activities, None
    if device_type == torch._C._get_privateuse1_backend_name():
        activity, kernel_type = ProfilerActivity.PrivateUse1, DeviceType.PrivateUse1
    else:  # cuda, xpu, mtia, hpu
        name = device_type.upper()
        activity, kernel_type = (
            getattr(ProfilerActivity, name, None),
            getattr(DeviceType, name, None),
        )
    if activity is not None and activity in supported_activities():
        activities.append(activity)
    return activities, kernel_type


def summarize_events(events: Iterable[Any], kernel_type: Any = None) -> list[list[Any]]:
    """The profiler's events summed by op and input signature: one :data:`ROW_FIELDS` list
    per ATen op (``aten::...`` on the CPU) and input shapes and dtypes, and per kernel name
    for events on the device ``kernel_type`` names. Times are microseconds; device times
    come from the events' ``device_time_total`` and ``self_device_time_total`` (0 where an
    event has none), and the calls that have some are the row's device calls."""
    from torch.autograd import DeviceType

    groups: dict[tuple[str, str, str], list[Any]] = {}
    for event in events:
        name = event.name
        on_device = kernel_type is not None and event.device_type == kernel_type
        if not on_device and not (
            name.startswith("aten::") and event.device_type == DeviceType.CPU
        ):
            continue
        if on_device:
            shapes = dtypes = ""
        else:
            shapes = str(list(event.input_shapes or []))
            dtypes = getattr(event, "input_dtypes", None)
            dtypes = str(list(dtypes)) if dtypes is not None else ""
        row = groups.get((name, shapes, dtypes))
        if row is None:
            row = groups[name, shapes, dtypes] = [name, 0, 0, 0.0, 0.0, 0.0, 0.0, shapes, dtypes]
        device_time = _device_time(event, "device_time_total")
        row[1] += 1
        row[2] += int(device_time > 0)
        row[3] += float(event.cpu_time_total)
        row[4] += float(event.self_cpu_time_total)
        row[5] += device_time
        row[6] += _device_time(event, "self_device_time_total")
    rows = list(groups.values())
    for row in rows:
        row[3:7] = [round(value, 3) for value in row[3:7]]
    return rows


def _device_time(event: Any, name: str) -> float:
    try:
        return float(getattr(event, name, 0.0) or 0.0)
    except Exception:  # an event of a device type this torch's FunctionEvent refuses
        return 0.0


class CallProfiler:
    """Registered where tests run: profiles each test's call phase (see the module)."""

    def __init__(self, device_type: str) -> None:
        self.activities, self.kernel_type = device_activities(device_type)
        self._started_once = False

    @pytest.hookimpl(wrapper=True, trylast=True)  # innermost: closest to the test's code
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        profiler = self._start()
        try:
            return (yield)
        finally:
            if profiler is not None:
                rows = self._stop(profiler)
                if rows is not None:
                    item.stash[_ROWS_KEY] = rows

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        # On the call's report only (not on the item): the rows travel once, not with
        # every later report of the test.
        if call.when == "call":
            rows = item.stash.get(_ROWS_KEY, None)
            if rows is not None:
                del item.stash[_ROWS_KEY]
                report.user_properties.append((PROFILE_PROPERTY, rows))
        return report

    def _start(self) -> Any:
        """A started profiler, or None when it cannot start (the test runs unprofiled)."""
        quiet = not self._started_once and _KINETO_LOG_LEVEL not in os.environ
        self._started_once = True
        if quiet:
            os.environ[_KINETO_LOG_LEVEL] = _KINETO_SILENT
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                from torch.profiler import profile

                profiler = profile(activities=self.activities, record_shapes=True)
                profiler.start()
            return profiler
        except Exception:
            return None
        finally:
            if quiet:  # the tests see the environment they would see without the profiler
                del os.environ[_KINETO_LOG_LEVEL]

    def _stop(self, profiler: Any) -> list[list[Any]] | None:
        """The test's rows, or None when the profiler yields none (a test's own profiler
        took over)."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                profiler.stop()
                return summarize_events(profiler.events(), self.kernel_type)
        except Exception:
            return None


class ProfileRecorder:
    """Registered in the process that owns the run: writes the rows (see the module)."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.writer = ProfileWriter(run_dir)
        #: Rows from a test's call report, by nodeid, until the test's record is written.
        self._pending: dict[str, list[list[Any]]] = {}
        self.tests = 0

    @pytest.hookimpl(tryfirst=True)  # before the record that may follow this report
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        for entry in report.user_properties:
            if (
                isinstance(entry, (tuple, list))
                and len(entry) == 2
                and entry[0] == PROFILE_PROPERTY
            ):
                self._pending[report.nodeid] = entry[1]

    @pytest.hookimpl
    def pytest_conformance_record(self, record: Any) -> None:
        rows = self._pending.pop(record.nodeid, None)
        if not rows:
            return
        identity = {"test_id": record.test_id, "file": record.file}
        self.writer.write({**identity, **dict(zip(ROW_FIELDS, row, strict=True))} for row in rows)
        self.tests += 1

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.writer.close()

    @pytest.hookimpl(trylast=True)  # after the recorder's lines
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.write_line(
            f"per-op profile of {self.tests} tests ({self.writer.written} rows) in "
            f"{self.writer.run_dir}"
        )
