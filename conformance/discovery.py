"""Which upstream test files a run picks: discovered from their source, or named by ``--files``.

A backend can run PyTorch's device-generic tests: the classes a test file hands to
``instantiate_device_type_tests``. So the default selection of a ``test/`` folder is every
``test_*.py`` under it, subfolders included, whose source calls that function, minus the files
the exclusion list names (``conformance/data/upstream_exclusions.toml``, with a reason each).
Sources are read, never imported: discovery is quick, needs no device, and picks the same
files on every machine.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from conformance.errors import ConfigError
from conformance.exclusions import Exclusion, load_exclusions

__all__ = [
    "DiscoveredFiles",
    "discover_upstream_files",
    "instantiates_device_type_tests",
    "module_name_clashes",
    "path_matches",
    "pick_test_files",
    "pytest_module_name",
    "test_files",
]

_FUNCTION = "instantiate_device_type_tests"
# A call that starts a statement (`module.` allowed): a mention inside a comment or in the
# middle of a string does not start a line, and a `def` of the name is not a call.
_CALL = re.compile(rf"^[ \t]*(?:[A-Za-z_][\w.]*\.)?{_FUNCTION}[ \t]*\(", re.MULTILINE)
_GLOB_CHARS = frozenset("*?[")
_SKIPPED_FOLDERS = frozenset({"__pycache__"})


@dataclass(frozen=True)
class DiscoveredFiles:
    """The default selection of a ``test/`` folder: ``files`` to run, and the device-generic
    files the exclusion list leaves out, each with its entry (``excluded``); both as POSIX
    paths relative to ``folder``, top-level files first."""

    folder: Path
    files: tuple[str, ...]
    excluded: tuple[tuple[str, Exclusion], ...] = ()

    @property
    def paths(self) -> list[Path]:
        """The selected files as paths under ``folder``."""
        return [self.folder / name for name in self.files]


def discover_upstream_files(
    folder: Path, exclusions: Sequence[Exclusion] | None = None
) -> DiscoveredFiles:
    """The device-generic test files of a PyTorch ``test/`` folder, for runs without ``--files``.

    Promises: every ``test_*.py`` under ``folder`` (subfolders included; ``__pycache__`` and
    hidden folders skipped) for which :func:`instantiates_device_type_tests` holds, except the
    ones an exclusion entry matches (:func:`path_matches`), as relative POSIX paths in the
    order of :func:`test_files`. ``exclusions`` defaults to the list shipped with the
    harness, loaded strictly (ConfigError naming file, line and field). Nothing is imported.
    """
    folder = Path(folder)
    entries = load_exclusions() if exclusions is None else tuple(exclusions)
    files: list[str] = []
    excluded: list[tuple[str, Exclusion]] = []
    for name in test_files(folder):
        if not instantiates_device_type_tests(folder / name):
            continue
        entry = next((e for e in entries if path_matches(name, e.file)), None)
        if entry is None:
            files.append(name)
        else:
            excluded.append((name, entry))
    return DiscoveredFiles(folder, tuple(files), tuple(excluded))


def test_files(folder: Path) -> list[str]:
    """Every ``test_*.py`` under ``folder``, subfolders included but not ``__pycache__`` or
    hidden ones, as POSIX paths relative to ``folder``: the top-level files sorted, then the
    subfolders' files sorted."""
    found = []
    for root, folders, names in os.walk(folder):
        folders[:] = [f for f in folders if not f.startswith(".") and f not in _SKIPPED_FOLDERS]
        relative = Path(root).relative_to(folder)
        found += [
            (relative / name).as_posix()
            for name in names
            if name.startswith("test_") and name.endswith(".py")
        ]
    # Top level first: where two files share a module name (test_ops.py and
    # functorch/test_ops.py), the first keeps the name pytest gives it; a run imports the
    # later ones under names of their own (conformance.modules).
    return sorted(found, key=lambda name: ("/" in name, name))


def instantiates_device_type_tests(path: Path) -> bool:
    """Whether a file's source calls ``instantiate_device_type_tests(`` as a statement: at the
    start of a line (so not in a comment) and outside triple-quoted strings. A static read."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    if _FUNCTION not in text:  # most files: no regex, no counting
        return False
    return any(
        text.count('"""', 0, call.start()) % 2 == 0 and text.count("'''", 0, call.start()) % 2 == 0
        for call in _CALL.finditer(text)
    )


def pytest_module_name(path: Path) -> str:
    """The module name pytest's default import mode gives a test file: its bare name, under
    the packages (folders with ``__init__.py``) it sits in."""
    path = Path(path)
    module = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        module.insert(0, folder.name)
        folder = folder.parent
    return ".".join(module)


def module_name_clashes(folder: Path, files: Sequence[str]) -> list[list[str]]:
    """Groups of ``files`` that pytest would import under one module name: files whose
    folders have no ``__init__.py`` are imported by their bare name, e.g. ``test_ops.py``
    and ``functorch/test_ops.py``. A run imports the later ones of a group under names of
    their own (:mod:`conformance.modules`)."""
    by_module: dict[str, list[str]] = {}
    for name in files:
        by_module.setdefault(pytest_module_name(Path(folder, name)), []).append(name)
    return [group for group in by_module.values() if len(group) > 1]


def path_matches(path: str, pattern: str) -> bool:
    """Whether a relative POSIX path matches a glob, folder level by folder level: ``*``,
    ``?`` and ``[...]`` match within one level, a ``**`` level matches any number of them."""
    return _match(path.split("/"), pattern.split("/"))


def _match(parts: list[str], pattern: list[str]) -> bool:
    if not pattern:
        return not parts
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_match(parts[i:], rest) for i in range(len(parts) + 1))
    return bool(parts) and fnmatchcase(parts[0], head) and _match(parts[1:], rest)


def pick_test_files(folder: Path, patterns: Sequence[str]) -> list[Path]:
    """The files of ``folder`` that ``--files`` patterns name, pattern by pattern, each once.

    A pattern is a name or a glob (``.py`` may be left off a name). With a ``/`` it matches
    paths relative to ``folder`` (``nn/test_convolution.py``, ``nn/test_*.py``,
    ``functorch/*``); without, it matches the top-level files, or when none matches, file
    names in subfolders. A glob matches ``test_*.py`` files; a name, any file that exists.
    A pattern that matches nothing is a ConfigError naming it.
    """
    folder = Path(folder)
    candidates = test_files(folder)
    chosen: list[Path] = []
    for pattern in patterns:
        matches = _matching(folder, pattern, candidates)
        if not matches:
            raise ConfigError(f"no test file in {folder} matches {pattern!r}", where="--files")
        chosen += [path for path in (folder / name for name in matches) if path not in chosen]
    return chosen


def _matching(folder: Path, pattern: str, candidates: list[str]) -> list[str]:
    wanted = pattern.strip().removeprefix("./")
    if not (_GLOB_CHARS & set(wanted)):
        name = wanted if wanted.endswith(".py") else f"{wanted}.py"
        path = (folder / name).resolve()
        # A name may be any file, but only one inside the folder.
        if path.is_file() and path.is_relative_to(folder.resolve()):
            return [path.relative_to(folder.resolve()).as_posix()]
        wanted = name
    if "/" in wanted:
        return [name for name in candidates if path_matches(name, wanted)]
    top = [name for name in candidates if "/" not in name and fnmatchcase(name, wanted)]
    return top or [name for name in candidates if fnmatchcase(name.rsplit("/", 1)[-1], wanted)]
