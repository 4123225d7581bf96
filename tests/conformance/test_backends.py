"""Loading a backend by device type."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conformance.backends import load_backend
from conformance.errors import ConfigError


def test_cpu_needs_nothing_and_reports_torch_as_its_version():
    import torch

    backend = load_backend("cpu")
    assert backend.name == "cpu"
    assert backend.version == torch.__version__
    assert backend.device_names == ("cpu",)
    assert backend.fallback_ops() == []


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("nosuchdev", "unknown device 'nosuchdev': no installed backend registers it"),
        ("cuda", "built into torch, not a PrivateUse1 backend"),
        ("emu:0", "invalid device type"),
    ],
)
def test_devices_that_cannot_be_loaded_are_named(device, message):
    with pytest.raises(ConfigError, match=message):
        load_backend(device)


def test_a_backend_module_that_does_not_import_is_named():
    with pytest.raises(ConfigError, match="--backend-module: cannot import 'no_such_backend_pkg'"):
        load_backend("nosuchdev", "no_such_backend_pkg")


def test_emu_hooks_are_found_on_its_package_behind_the_autoload_module():
    pytest.importorskip("torch_emu")
    backend = load_backend("emu")
    assert backend.module.__name__ == "torch_emu"
    assert backend.version
    assert any(low.overload == "aten::add.Tensor" for low in backend.lowerings())
    backend.reset_fallback_counts()
    assert backend.fallback_ops() == []


def test_torch_build_is_read_without_importing_torch_and_agrees_with_it():
    import torch

    from conformance import backends

    assert backends.torch_build() == (str(torch.__version__), torch.version.git_version)
    # The same answer from the files alone, as a process without torch gets it.
    code = (
        "import sys; from conformance.backends import torch_build; v = torch_build(); "
        "print(v[0], v[1], 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(torch.__version__), torch.version.git_version, "False"]


@pytest.mark.parametrize(
    ("device", "module", "message"),
    [
        ("nosuchdev", None, "unknown device 'nosuchdev': no installed backend provides it"),
        ("cuda", None, "built into torch, not a PrivateUse1 backend"),
        ("emu:0", None, "invalid device type"),
        (
            "nosuchdev",
            "no_such_backend_pkg",
            "--backend-module: cannot import 'no_such_backend_pkg'",
        ),
    ],
)
def test_describe_checks_what_it_can_without_importing(device, module, message):
    from conformance.backends import describe_backend

    with pytest.raises(ConfigError, match=message):
        describe_backend(device, module)


def test_describe_emu_names_it_and_its_distribution_version():
    pytest.importorskip("torch_emu")
    from conformance.backends import describe_backend

    backend = describe_backend("emu")
    assert (backend.name, backend.module) == ("emu", None)
    assert backend.device_names == ("emu", "privateuse1")
    assert backend.version == load_backend("emu").version


def test_an_xdist_controller_never_imports_torch(pytester: pytest.Pytester):
    """The workers load the backend; the controller only describes it, and gets the
    loaded backend's version and commit back from the workers for the run's metadata."""
    import json

    import torch

    pytester.makepyfile(
        test_small="""
        import torch
        from torch.testing._internal.common_device_type import instantiate_device_type_tests
        from torch.testing._internal.common_utils import TestCase

        class TestSmall(TestCase):
            def test_one(self, device):
                self.assertEqual(torch.ones(2, device=device).sum().item(), 2)

        instantiate_device_type_tests(TestSmall, globals(), only_for="cpu")
        """,
        conftest="""
        import sys
        def pytest_unconfigure(config):
            if not hasattr(config, "workerinput"):
                with open("controller.txt", "w") as f:
                    f.write(str("torch" in sys.modules))
        """,
    )
    result = pytester.runpytest_subprocess("-n", "1", "--device", "cpu", "--run-dir", "run")
    result.assert_outcomes(passed=1)
    assert (pytester.path / "controller.txt").read_text() == "False"
    meta = json.loads((pytester.path / "run" / "meta.json").read_text())
    assert meta["backend_git"] == meta["torch_git"] == torch.version.git_version
    assert meta["collected"] == 1


def test_a_backend_that_raises_while_loading_is_named_with_the_line(tmp_path, monkeypatch):
    (tmp_path / "broken_backend_pkg.py").write_text(
        "import os\nraise RuntimeError('driver not found: libbrk.so')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as info:
        load_backend("brk", "broken_backend_pkg")
    message = str(info.value)
    assert message.startswith("--backend-module: cannot import 'broken_backend_pkg': ")
    assert "RuntimeError: driver not found: libbrk.so" in message
    assert f"(at {tmp_path / 'broken_backend_pkg.py'}:2)" in message


#: A backend whose C++ extension was built against another torch: the loader's ImportError,
#: re-raised as the backend's own error, as torch's autoload does.
STALE_EXTENSION = """\
def _load_extension():
    raise ImportError("/opt/brk/_C.so: undefined symbol: _ZN3c1017SomeSymbolE")


try:
    _load_extension()
except ImportError as exc:
    raise RuntimeError("Failed to load the backend extension: brk") from exc
"""


def stale_extension_message(path) -> str:
    from conformance.backends import torch_build

    return (
        f"--backend-module: cannot import '{path.stem}': "
        "RuntimeError: Failed to load the backend extension: brk; "
        "root cause: ImportError: /opt/brk/_C.so: undefined symbol: _ZN3c1017SomeSymbolE "
        f"(at {path}:2); the extension was likely built against another torch release than "
        f"the installed torch {torch_build()[0]}: rebuild it against this torch "
        "(for emu: pip install --no-build-isolation ./backend)"
    )


def test_a_missing_cpp_symbol_names_the_root_cause_and_the_torch_release(tmp_path, monkeypatch):
    path = tmp_path / "stale_backend_pkg.py"
    path.write_text(STALE_EXTENSION)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as info:
        load_backend("brk", "stale_backend_pkg")
    assert str(info.value) == stale_extension_message(path)


def test_a_chain_names_its_innermost_exception_as_the_root_cause(tmp_path, monkeypatch):
    # Explicit (from) and implicit (raised while handling) links alike; no symbol, no hint.
    path = tmp_path / "chained_backend_pkg.py"
    path.write_text(
        "try:\n"
        "    try:\n"
        "        open('/no/such/dir/libbrk.so')\n"
        "    except OSError as exc:\n"
        "        raise LookupError('no driver') from exc\n"
        "except LookupError:\n"
        "    raise RuntimeError('Failed to load the backend extension: brk')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as info:
        load_backend("brk", "chained_backend_pkg")
    assert str(info.value) == (
        "--backend-module: cannot import 'chained_backend_pkg': "
        "RuntimeError: Failed to load the backend extension: brk; "
        "root cause: FileNotFoundError: [Errno 2] No such file or directory: "
        f"'/no/such/dir/libbrk.so' (at {path}:3)"
    )


@pytest.mark.parametrize(
    ("source", "message", "line"),
    [
        # `from None` hides the context: the top exception is all there is to name.
        (
            "try:\n    {}['key']\nexcept KeyError:\n    raise RuntimeError('no driver') from None\n",
            "RuntimeError: no driver",
            4,
        ),
        # A chain that loops back on itself ends where it would repeat.
        (
            "inner = KeyError('inner')\nouter = RuntimeError('outer')\n"
            "outer.__cause__, inner.__cause__ = inner, outer\n"
            "try:\n    raise inner\nexcept KeyError:\n    pass\nraise outer\n",
            "RuntimeError: outer; root cause: KeyError: 'inner'",
            5,
        ),
    ],
    ids=["suppressed-context", "cycle"],
)
def test_a_suppressed_or_looping_chain_is_followed_as_far_as_it_goes(
    tmp_path, monkeypatch, source, message, line
):
    path = tmp_path / "odd_chain_backend_pkg.py"
    path.write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as info:
        load_backend("brk", "odd_chain_backend_pkg")
    assert str(info.value) == (
        f"--backend-module: cannot import 'odd_chain_backend_pkg': {message} (at {path}:{line})"
    )


@pytest.mark.parametrize("command", ["conformance run", "pytest"])
def test_the_command_line_prints_the_root_cause_on_one_line(tmp_path, command):
    """``conformance run`` checks the backend before it starts pytest (exit 2); the plugin
    under plain serial pytest reports it as a usage error (exit 4)."""
    path = tmp_path / "stale_backend_pkg.py"
    path.write_text(STALE_EXTENSION)
    (tmp_path / "test_never_runs.py").write_text("def test_a():\n    pass\n")
    backend = ["--device", "brk", "--backend-module", "stale_backend_pkg"]
    if command == "pytest":
        argv = ["-m", "pytest", "test_never_runs.py", *backend, "--run-dir", "run"]
        argv += ["-p", "no:cacheprovider"]
        code, prefix = pytest.ExitCode.USAGE_ERROR, "ERROR: "
    else:
        argv = ["-m", "conformance.cli", "run", *backend, "--tests", "test_never_runs.py"]
        argv += ["--runs-root", "runs"]
        code, prefix = 2, "conformance run: error: "
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    done = subprocess.run(
        [sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    out = done.stdout + done.stderr
    assert done.returncode == code, out
    lines = [line for line in out.splitlines() if "SomeSymbol" in line]
    assert lines == [prefix + stale_extension_message(path)]
    assert "Traceback" not in out
