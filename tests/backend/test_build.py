"""Building without a C++ compiler stops early with a message naming what is missing."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

BACKEND = pathlib.Path(__file__).resolve().parents[2] / "backend"


def _setup(env_changes: dict[str, str], tmp_path: pathlib.Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, **env_changes)
    return subprocess.run(
        [sys.executable, str(BACKEND / "setup.py"), "build_ext", "--build-temp", str(tmp_path)],
        cwd=BACKEND,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_missing_compiler_named_by_cxx(tmp_path):
    result = _setup({"CXX": "/nonexistent/c++"}, tmp_path)
    assert result.returncode != 0
    assert "the C++ compiler named by CXX ('/nonexistent/c++') was not found" in result.stderr


def test_no_compiler_on_path(tmp_path):
    env = {"PATH": str(tmp_path)}  # an empty directory: no c++, g++ or clang++
    result = _setup(env | {"CXX": ""}, tmp_path)
    assert result.returncode != 0
    assert "no C++ compiler found (looked for c++, g++ and clang++ on PATH)" in result.stderr
    assert "The rest of the conformance harness does not need it" in result.stderr
