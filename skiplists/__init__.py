"""Skiplists: strict data files that say why a test cannot pass yet on a backend.

Load the files with :func:`load` (or the shipped ones via :func:`default_paths`), ask
:meth:`Skiplist.match` which entry applies to a test, and apply them at collection with
:func:`apply_to_items`. Every problem in a file is a :class:`SkiplistError` naming the
file, line and field.
"""

from __future__ import annotations

from skiplists.apply import apply_to_items
from skiplists.entry import TIERS, Selector, SkipEntry
from skiplists.errors import SkiplistError
from skiplists.skiplist import (
    DATA_DIR,
    NOT_PRIVATEUSE1,
    Skiplist,
    common_paths,
    default_paths,
    load,
)

__all__ = [
    "DATA_DIR",
    "NOT_PRIVATEUSE1",
    "TIERS",
    "Selector",
    "SkipEntry",
    "Skiplist",
    "SkiplistError",
    "apply_to_items",
    "common_paths",
    "default_paths",
    "load",
]
