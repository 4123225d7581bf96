"""The embedded conformance suite: device-generic tests built from the torch wheel's databases.

Test files in this folder (``test_*.py``) are ordinary upstream-style PyTorch test files:
unittest ``TestCase`` classes instantiated per device with ``instantiate_device_type_tests``
and parametrized over ``op_db``, ``module_db`` and ``optim_db``. They need no PyTorch source
checkout. Which ops, modules and optimizers they cover is the *selection*, read from the
``CONFORMANCE_SELECTION`` environment variable when the files are collected.

This module stays import-light (no torch) so the command line can use it; the selection
logic that needs torch lives in :mod:`conformance.embedded.selection`.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DEFAULT_SELECTION", "SELECTIONS", "SELECTION_ENV", "SUITE_DIR"]

#: The folder holding the suite's test files; pass it to pytest.
SUITE_DIR: Path = Path(__file__).resolve().parent

#: Environment variable naming the selection, read at collection time.
SELECTION_ENV = "CONFORMANCE_SELECTION"

#: The named selections, smallest first.
SELECTIONS = ("smoke", "core", "full")

#: The selection used when the environment variable is unset or empty.
DEFAULT_SELECTION = "smoke"
