"""Builds the native core of torch_emu (three C++ files) against the installed torch.

Install with ``pip install --no-build-isolation ./backend``; see README.md.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from setuptools import setup

# The core; autocast apart (its header brings in all of ATen's operator headers); the
# profiler's device events apart (they build against Kineto's headers).
SOURCES = [
    "torch_emu/csrc/emu_core.cpp",
    "torch_emu/csrc/emu_autocast.cpp",
    "torch_emu/csrc/emu_profiler.cpp",
]


def find_cxx() -> str:
    """Return the C++ compiler the build will use, or exit with a message naming what is missing."""
    configured = os.environ.get("CXX")
    if configured:
        program = shlex.split(configured)[0]
        if shutil.which(program) is None:
            sys.exit(
                f"torch_emu: the C++ compiler named by CXX ({configured!r}) was not found. "
                "Install a C++ compiler (g++ or clang++, e.g. `apt-get install g++`) or point CXX at one."
            )
        return program
    for program in ("c++", "g++", "clang++"):
        if shutil.which(program):
            return program
    sys.exit(
        "torch_emu: no C++ compiler found (looked for c++, g++ and clang++ on PATH). "
        "The emu backend's native core must be compiled: install g++ or clang++, or set CXX. "
        "The rest of the conformance harness does not need it."
    )


def main() -> None:
    find_cxx()
    try:
        from torch.utils.cpp_extension import BuildExtension, CppExtension, include_paths
    except ImportError:
        sys.exit(
            "torch_emu: torch must be installed before building, and the build must see it: "
            "pip install --no-build-isolation ./backend"
        )
    extension = CppExtension(
        "torch_emu._C",
        SOURCES,
        # -g0: debug info roughly doubles compile time and the wheel's size.
        extra_compile_args=["-O2", "-g0"],
        # Kineto's headers, which torch ships, for the PrivateUse1 profiler registry.
        include_dirs=[
            str(p / "kineto") for p in map(Path, include_paths()) if (p / "kineto").is_dir()
        ],
        define_macros=[("USE_KINETO", None)],
        py_limited_api=True,
    )
    setup(
        ext_modules=[extension],
        cmdclass={"build_ext": BuildExtension.with_options(no_python_abi_suffix=True)},
        options={"bdist_wheel": {"py_limited_api": "cp310"}},
    )


if __name__ == "__main__":
    main()
