"""Hooks the conformance plugin calls, for conftests and other plugins to implement.

Registered through ``pytest_addhooks``; they fire only during a device run (``--device``).
"""

from __future__ import annotations

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
