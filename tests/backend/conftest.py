"""Fixtures for the emu backend's tests.

The tests exercise the installed package (``pip install --no-build-isolation ./backend``);
building the C++ core inside the test run would take a minute.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
torch_emu = pytest.importorskip(
    "torch_emu", reason="emu is not installed: pip install --no-build-isolation ./backend"
)


@pytest.fixture
def no_fallback():
    """Run with the CPU fallback off and its counters clear; restore the previous state."""
    was_on = torch_emu.cpu_fallback_enabled()
    torch_emu.set_cpu_fallback(False)
    torch_emu.reset_fallback_counts()
    yield
    torch_emu.set_cpu_fallback(was_on)
    torch_emu.reset_fallback_counts()


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with extra environment variables."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("EMU_")}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
