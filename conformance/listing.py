"""Show a selection instead of running it: ``--list-files`` and ``--list-tests``.

Both print to stdout, one line per file, so the output can be piped; notes go to stderr.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from conformance.discovery import module_name_clashes, test_files

__all__ = ["count_tests", "print_files", "selected_files", "warn_module_name_clashes"]

# pytest's status when collection is fine but holds no test, and for a usage error.
_PYTEST_NO_TESTS = 5
_PYTEST_USAGE_ERROR = 4
# `ERROR path[::node] - message` lines of pytest's short summary, and the header of an error's
# section, whose `E   ` lines hold the message when the summary has none (import errors).
_COLLECT_ERROR = re.compile(r"^ERROR (?P<file>[^\s:]+)(?:::\S*)?(?: - (?P<message>.*))?$")
_ERROR_SECTION = re.compile(r"^_+ ERROR collecting (?P<file>\S+) _+$")


def selected_files(paths: Sequence[Path], rootdir: Path) -> list[str]:
    """The files a selection's paths stand for, relative to ``rootdir`` where they are under
    it: a file as given, a folder as its ``test_*.py`` files."""
    listed: list[str] = []
    for path in paths:
        names = [path / name for name in test_files(path)] if path.is_dir() else [path]
        listed += [_relative(name, rootdir) for name in names]
    return listed


def print_files(paths: Sequence[Path], rootdir: Path) -> int:
    """Print the selection's files, one a line; returns the exit code (0)."""
    listed = selected_files(paths, rootdir)
    for name in listed:
        print(name)
    warn_module_name_clashes(rootdir, listed, "conformance run")
    return 0


def warn_module_name_clashes(rootdir: Path, names: Sequence[str], prog: str) -> None:
    """Say on stderr which listed files pytest alone could not import side by side, and
    how a run imports them (conformance.modules)."""
    for group in module_name_clashes(rootdir, names):
        print(
            f"{prog}: note: {', '.join(group)} share a module name: a run imports "
            f"{group[0]} by it and the others under names of their own",
            file=sys.stderr,
        )


def count_tests(
    paths: Sequence[Path], rootdir: Path, pytest_options: Sequence[str], env: dict[str, str]
) -> int:
    """Collect the selection with ``pytest --collect-only -q`` and ``pytest_options`` (the
    device, suite and plugin options a run passes), in ``rootdir``; print ``file<TAB>count``
    for each file and ``total<TAB>count``. Files that fail to collect are named on stderr
    and make the exit code 1; a pytest usage error makes it 2."""
    command = [sys.executable, "-m", "pytest", *map(str, paths), *pytest_options]
    command += ["--collect-only", "-q"]
    listed = selected_files(paths, rootdir)
    print(
        f"conformance run: collecting {len(listed)} file(s); big files take a while",
        file=sys.stderr,
    )
    done = subprocess.run(command, cwd=rootdir, env=env, capture_output=True, text=True)
    lines = done.stdout.splitlines()
    counts = Counter(nodeid.split("::", 1)[0] for nodeid in _nodeids(lines))
    for name in listed + sorted(set(counts) - set(listed)):
        print(f"{name}\t{counts.get(name, 0)}")
    print(f"total\t{sum(counts.values())}", flush=True)
    errors = _collection_errors(lines)
    for name, message in errors.items():
        print(f"conformance run: {name}: {message}", file=sys.stderr)
    if done.returncode in (0, _PYTEST_NO_TESTS) and not errors:
        return 0
    if not errors:  # pytest stopped before collecting: show why
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        print("\n".join(tail), file=sys.stderr)
        print(f"conformance run: pytest ended with status {done.returncode}", file=sys.stderr)
    return 2 if done.returncode == _PYTEST_USAGE_ERROR else 1


def _nodeids(lines: list[str]) -> list[str]:
    """The test ids ``--collect-only -q`` prints first, up to the blank line or the section
    (errors, warnings) that follows them."""
    nodeids = []
    for line in lines:
        if not line.strip() or line.startswith("="):
            break
        if "::" in line:
            nodeids.append(line.strip())
    return nodeids


def _collection_errors(lines: list[str]) -> dict[str, str]:
    """The files that failed to collect, each with the last line of its error."""
    detail: dict[str, str] = {}
    section = ""
    for line in lines:
        if header := _ERROR_SECTION.match(line):
            section = header["file"]
        elif section and line.startswith("E   "):
            detail[section] = line[1:].strip()
    errors = {}
    for line in lines:
        if found := _COLLECT_ERROR.match(line):
            name = found["file"]
            errors[name] = found["message"] or detail.get(name) or "collection error"
    return errors


def _relative(path: Path, rootdir: Path) -> str:
    try:
        return path.relative_to(rootdir).as_posix()
    except ValueError:
        return str(path)
