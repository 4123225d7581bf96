"""Hooks the conformance plugin calls, for conftests and other plugins to implement.

Registered through ``pytest_addhooks``; they fire only during a device run (``--device``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conformance.model import ResultRecord


@pytest.hookspec
def pytest_conformance_record(record: ResultRecord, config: pytest.Config) -> None:
    """Called in the process that owns the run (never in an xdist worker) right after a
    test's record was appended to the run, once per test: live progress, dashboards,
    early alerts. ``record`` must not be modified.
    """


@pytest.hookspec
def pytest_conformance_configure(
    config: pytest.Config, device_type: str, run_dir: Path, owns_run: bool, runs_tests: bool
) -> None:
    """Called once in every process of a device run, after the runner registered its own
    parts: how a feature area (the profiler of ``--profile``, ...) joins a run. The area is a
    pytest plugin of its own (an entry point in the ``pytest11`` group), declares its options
    with ``pytest_addoption`` and, when they ask for it, registers its observers here: where
    tests run (``runs_tests``: the pytest process or an xdist worker) and where the run is
    owned (``owns_run``: the process that appends the records, which fires
    :func:`pytest_conformance_record`). ``run_dir`` is the run's folder, ``device_type`` the
    device under test. Raise ``pytest.UsageError`` to refuse a combination of options.
    """
