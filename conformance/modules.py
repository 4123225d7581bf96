"""Test files that share a module name, collected side by side in one run.

PyTorch's ``test/`` has no ``__init__.py`` files, so pytest (in its default ``prepend``
import mode, the one upstream's files are written for: they import their sibling helper
modules by bare name) imports each file by its bare name: ``test_ops.py`` and
``functorch/test_ops.py`` are both ``test_ops``, and the second is a collection error.
PyTorch's own CI never meets this: it runs each file in a process of its own.

In a conformance run, the first file to claim a module name imports as pytest would; any
later file with the same name imports under a name of its own (``test_ops@functorch``,
from its path), with its folder put first on ``sys.path`` as the default mode does, so its
sibling imports resolve as they do upstream. Its nodeids, and so its test identities,
are the path-based ones pytest gives every file. pytest's import mode ``importlib`` is no
answer: it names the module ``functorch.test_ops`` and so shadows the installed
``functorch`` package the file imports. One difference remains, which changes no
outcome: pytest does not rewrite the bare ``assert`` statements of a file imported this
way, so their failure messages lack pytest's explanation of the values.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from conformance.discovery import pytest_module_name

__all__ = ["ModuleNames", "SeparateModule", "import_separately"]


def separate_name(path: Path, rootdir: Path) -> str:
    """``functorch/test_ops.py`` under ``rootdir`` -> ``test_ops@functorch``."""
    try:
        relative = path.resolve().relative_to(rootdir.resolve())
    except ValueError:
        relative = path.resolve()
    folders = "/".join(relative.parts[:-1]).strip("/")
    return f"{path.stem}@{folders or '.'}"


def import_separately(path: Path, rootdir: Path) -> ModuleType:
    """Import the test file ``path`` under its own module name (see the module's doc)."""
    name = separate_name(path, rootdir)
    if name in sys.modules:
        return sys.modules[name]
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


class SeparateModule(pytest.Module):
    """A test file whose module name an earlier file of the session already took."""

    def _getobj(self) -> ModuleType:
        try:
            return import_separately(self.path, self.config.rootpath)
        except self.CollectError:
            raise
        except Exception as exc:
            info = pytest.ExceptionInfo.from_exception(exc)
            detail = str(info.getrepr(style="short"))
            raise self.CollectError(
                f"error while importing test module '{self.path}' (under its own module "
                f"name, another file of the run has the name '{self.path.stem}'):\n{detail}"
            ) from exc


class ModuleNames:
    """Which file claimed each module name in this session; later claimants import apart."""

    def __init__(self) -> None:
        self._owners: dict[str, Path] = {}

    def make_module(self, module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
        name = pytest_module_name(module_path)
        owner = self._owners.setdefault(name, module_path)
        if owner == module_path:
            return None  # pytest's own Module
        return SeparateModule.from_parent(parent, path=module_path)
