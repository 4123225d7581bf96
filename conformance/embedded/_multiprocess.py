"""Multi-process tests on the torch wheel's own base: the ranks of one test are one test.

:class:`RankTestCase` is upstream's ``MultiProcessTestCase`` (``torch.testing._internal.
common_distributed``: one process per rank, a ``FileStore`` in a fresh temporary file for the
rendezvous, so tests of parallel runs and xdist workers never meet) with what a conformance
run needs of it:

- **Every rank decides the outcome.** Upstream checks the first rank's exit code only, so a
  test whose second rank crashed could pass. Here the test passes only when every rank
  passed; it fails with each rank's error, ``rank N crashed with signal SIGSEGV`` for a rank
  a signal ended, ``rank N exited with code C`` for one that left by itself; it is skipped
  only when every rank skipped, with the reason they gave (a refusal one rank makes and
  another does not is a failure).
- **A rank that fails ends the test.** The other ranks get a few seconds to end by
  themselves (they usually fail too, their peer gone), then they are killed: nobody waits
  for a collective's timeout.
- **A hang is a timeout.** Past :data:`TIMEOUT_ENV` seconds (default 120) the ranks' stacks
  are logged, the ranks are killed and the test fails with ``timed out after N s``. The
  harness's ``--test-timeout`` stops the test too, whichever comes first: its watchdog kills
  the whole process tree.
- **No rank outlives the test.** Ranks are killed, never left to end by themselves, when the
  test ends, and each rank asks the kernel to kill it when its parent dies
  (``PR_SET_PDEATHSIG``, Linux): the fork server, which ends with the test process however
  that ends.
- **Ranks start fast and clean.** They are forked from a fork server (multiprocessing's
  ``forkserver``: a fresh interpreter per test process, started with the first test, that
  has imported torch, the backend and the test module), so hundreds of small tests stay
  cheap, and no rank inherits the test process's threads: forked from a process that ran a
  backward pass on an accelerator, a rank could not use autograd (torch refuses autograd
  after a fork once its device threads run). ``CONFORMANCE_DIST_START`` chooses
  ``fork`` (faster, for test processes that never ran autograd on the device) or ``spawn``
  (upstream's, an interpreter per rank).
- **Nothing starts for a test that does not apply.** A template decorated with
  :func:`on_ranks` runs its ``applies`` check in the test process before any rank starts.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import importlib
import os
import re
import signal
import sys
import threading
import time
import traceback
import unittest
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing
from torch.testing._internal.common_distributed import TEST_SKIPS, MultiProcessTestCase

from op_coverage.tracing import note_ops, trace_ops, tracing_device

__all__ = [
    "GROUP_TIMEOUT_S",
    "START_ENV",
    "TIMEOUT_ENV",
    "WORLD_SIZE",
    "RankTestCase",
    "on_ranks",
]

#: Ranks per test, unless the class says otherwise (``RankTestCase.ranks``).
WORLD_SIZE = 2
#: Seconds a test's ranks may run before they are killed (the test then fails as timed out).
TIMEOUT_ENV = "CONFORMANCE_DIST_TIMEOUT"
#: How ranks start: ``fork`` (default) or ``spawn``.
START_ENV = "CONFORMANCE_DIST_START"
#: The process group's own timeout: a collective waiting on a lost peer fails after it.
GROUP_TIMEOUT_S = 60
#: Seconds the other ranks get to end by themselves after one failed.
_GRACE_S = 5.0
_SKIP_CODE = TEST_SKIPS["generic"].exit_code
_ERROR_CODE = MultiProcessTestCase.TEST_ERROR_EXIT_CODE


def _die_with_parent() -> None:
    """Ask the kernel to kill this process when its parent dies (Linux): the test process,
    or the fork server, which ends with the test process."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request was in place
        os._exit(1)


def _context(method: str, module: str):
    """The multiprocessing context ranks start in; the fork server preloads torch and the
    test module, so a rank starts with them imported."""
    if method not in ("forkserver", "fork", "spawn"):
        raise ValueError(f"{START_ENV}={method!r}: expected forkserver, fork or spawn")
    context = torch.multiprocessing.get_context(method)
    if method == "forkserver" and not _server_stopper:
        context.set_forkserver_preload(["torch", module])
        # The server ends by itself when this process has ended (its pipe closes), after
        # its own interpreter shuts down; stopping it at exit means it is gone by then.
        _server_stopper.append(atexit.register(_stop_fork_server))
    return context


_server_stopper: list = []


def _stop_fork_server() -> None:
    from multiprocessing import forkserver

    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is not None:
        with contextlib.suppress(Exception):
            stop()


def _class_key(cls: type) -> tuple[str, str, str, str]:
    """What finds the test's class again in a rank: module, class name, and the generic
    class's and device type's names, for a rank whose module instantiated the device-generic
    classes under other names (the harness names them after the backend, plain pytest after
    the dispatch key)."""
    generic = next(
        (
            b.__name__
            for b in cls.__mro__[1:]
            if issubclass(b, RankTestCase) and getattr(b, "device_type", None) is None
        ),
        "",
    )
    return cls.__module__, cls.__name__, generic, _device_type(cls)


def _device_type(cls: type) -> str:
    name = str(getattr(cls, "device_type", ""))
    return torch._C._get_privateuse1_backend_name() if name == "privateuse1" else name


def _find_class(key: tuple[str, str, str, str]) -> type:
    module_name, name, generic, device_type = key
    module = importlib.import_module(module_name)
    found = getattr(module, name, None)
    if isinstance(found, type):
        return found
    for candidate in vars(module).values():
        if (
            isinstance(candidate, type)
            and issubclass(candidate, RankTestCase)
            and _device_type(candidate) == device_type
            and any(b.__name__ == generic for b in candidate.__mro__[1:])
        ):
            return candidate
    raise LookupError(f"no {name} (from {generic}, for {device_type}) in {module_name}")


def _rank_main(
    key, rank: int, test_name: str, file_name: str, parent_pipe, trace: tuple[bool, str | None]
) -> None:
    """A rank's entry point (a module function, so a fresh interpreter can unpickle it).
    ``trace``: whether the test process traces ops (``--trace-ops``), and on which device
    type; the rank then traces its own and sends them."""
    try:
        cls = _find_class(key)
    except BaseException:
        parent_pipe.send(("error", traceback.format_exc()))
        raise
    cls._run(rank, test_name, file_name, parent_pipe, trace=trace)


def _limit_s() -> float:
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    return float(raw) if raw else 120.0


def on_ranks(applies: Callable[..., str | None] | None = None, make_group: bool = True) -> Callable:
    """Make a device-generic template a multi-process test.

    In the test process the wrapper checks ``applies(**params)`` (a reason to skip, or None)
    and then starts the ranks and waits for them; in each rank it sets ``self.rank_device``,
    makes the process group with the device's default backend unless ``make_group`` is
    false (:meth:`RankTestCase.init_group`), and runs the template.
    """

    def decorate(template: Callable) -> Callable:
        @functools.wraps(template)
        def run(self: RankTestCase, device: str, **params: Any) -> None:
            if applies is not None:
                reason = applies(device=device, **params)
                if reason:
                    raise unittest.SkipTest(reason)
            if self.rank == self.MAIN_PROCESS_RANK:
                self.backend_name = _backend_name(device)
                self.run_ranks()
                return
            self.init_group(device, make_group)
            template(self, device, **params)

        return run

    return decorate


_ERROR_LINE = re.compile(r"^\w[\w.]*(?:Error|Exception|Failure|Interrupt)\b.*")


def _error_line(text: str) -> str:
    """The line of a rank's traceback that says what went wrong (the last ``...Error: ...``
    line; upstream appends repro notes after it), else its last line."""
    lines = text.strip().splitlines()
    errors = [line for line in lines if _ERROR_LINE.match(line.strip())]
    return (errors[-1] if errors else lines[-1] if lines else "").strip()


def _backend_name(device: str) -> str:
    """The c10d backend the ranks' process group uses for ``device``."""
    try:
        return dist.get_default_backend_for_device(torch.device(device).type)
    except (ValueError, RuntimeError):
        return ""


class RankTestCase(MultiProcessTestCase):
    """Upstream's multi-process test case, with every rank deciding the outcome."""

    #: Ranks per test of the class.
    ranks: int = WORLD_SIZE

    @property
    def world_size(self) -> int:
        return self.ranks

    # In the test process the template itself starts the ranks (on_ranks), after its
    # applicability check; upstream's wrapper would only join ranks started in setUp.
    def join_or_run(self, fn):
        return fn

    def tearDown(self) -> None:
        self._kill_ranks()
        super().tearDown()
        with contextlib.suppress(OSError):
            os.remove(self.file_name)

    # -- the test process -------------------------------------------------------------

    def run_ranks(self) -> None:
        """Start the ranks of this test, wait for them, and turn their ends into an outcome."""
        method = os.environ.get(START_ENV, "").strip() or "forkserver"
        self._received: dict[int, tuple[str, str]] = {}  # rank -> its skip or error
        self._start_processes(_context(method, type(self).__module__).Process)
        try:
            self._wait_for_ranks()
        finally:
            self._kill_ranks()
            for pipe in self.pid_to_pipe.values():
                pipe.close()

    def _kill_ranks(self) -> list[int]:
        """Kill the ranks still running; return which."""
        killed = []
        for rank, process in enumerate(getattr(self, "processes", [])):
            if process.exitcode is None:
                process.kill()
                killed.append(rank)
            process.join(timeout=10)
        return killed

    def _wait_for_ranks(self) -> None:
        limit = _limit_s()
        start = time.monotonic()
        failed_at = None
        killed: list[int] = []
        while True:
            codes = [p.exitcode for p in self.processes]
            if all(c is not None for c in codes):
                break
            now = time.monotonic()
            if failed_at is None and any(c not in (None, 0, _SKIP_CODE) for c in codes):
                failed_at = now
            if failed_at is not None and now - failed_at > _GRACE_S:
                killed = self._kill_ranks()
                break
            if now - start > limit:
                self._drain()
                self._get_timedout_process_traceback()
                self._kill_ranks()
                raise RuntimeError(
                    f"{self._ranks_header(time.monotonic() - start)} the ranks did not finish "
                    f"in {limit:g} s and were killed (still running: "
                    f"{', '.join(str(i) for i, c in enumerate(codes) if c is None)})\n"
                    f"timed out after {limit:g} s"
                )
            self._drain()
            time.sleep(0.02)
        codes = [None if r in killed else p.exitcode for r, p in enumerate(self.processes)]
        self._drain()
        self._judge(codes, time.monotonic() - start)

    def _drain(self, wait_s: float = 0.0) -> None:
        """Read what the ranks sent so far: the ops a traced rank dispatched go to the test
        process's trace (op_coverage.tracing.note_ops); a rank's skip or error is kept for
        the verdict. Read while the ranks run, so none blocks on a full pipe."""
        received = self._received
        for rank, process in enumerate(self.processes):
            pipe = self.pid_to_pipe[process.pid]
            try:
                while pipe.poll(wait_s):
                    kind, payload = pipe.recv()
                    if kind == "ops":
                        note_ops(payload)
                    else:
                        received.setdefault(rank, (kind, payload))
            except (EOFError, OSError, ValueError, TypeError):
                continue

    def _message(self, rank: int) -> tuple[str, str]:
        """The skip or error a rank sent, ("", "") when it sent none."""
        self._drain(0.1)
        return self._received.get(rank, ("", ""))

    def _judge(self, codes: list[int | None], elapsed: float) -> None:
        """``codes``: each rank's exit code, None for a rank killed after another failed."""
        if all(code == 0 for code in codes):
            return
        messages = [self._message(rank) for rank in range(len(codes))]
        if all(code == _SKIP_CODE for code in codes):
            reasons = {text for kind, text in messages if kind == "skip"}
            raise unittest.SkipTest(" / ".join(sorted(reasons)) or TEST_SKIPS["generic"].message)
        # One line per rank, the worst first (a crash, an error, an exit, a rank killed
        # after another failed), then the tracebacks of the ranks that failed.
        lines: list[tuple[int, str]] = []
        details = []
        for rank, (code, (kind, text)) in enumerate(zip(codes, messages, strict=True)):
            if code is not None and code < 0:
                try:
                    name = signal.Signals(-code).name
                except ValueError:
                    name = str(-code)
                lines.append((0, f"rank {rank} crashed with signal {name}"))
            elif code not in (None, 0, _SKIP_CODE) and kind == "error":
                lines.append((1, f"rank {rank} failed: {_error_line(text)}"))
                details.append(f"rank {rank}:\n{text.rstrip()}")
            elif code not in (None, 0, _SKIP_CODE):
                lines.append((2, f"rank {rank} exited with code {code}"))
            elif code is None:
                lines.append(
                    (3, f"rank {rank} still running {_GRACE_S:g} s after another failed: killed")
                )
            elif code == _SKIP_CODE:
                lines.append((4, f"rank {rank} skipped: {text}"))
            else:
                lines.append((5, f"rank {rank} passed"))
        summary = "\n".join(line for _, line in sorted(lines, key=lambda item: item[0]))
        raise AssertionError(f"{self._ranks_header(elapsed)}\n{summary}\n\n" + "\n\n".join(details))

    def _ranks_header(self, elapsed: float) -> str:
        """The first line of a multi-rank failure, which classification reads: how many
        ranks, on which c10d backend, for how long."""
        backend = getattr(self, "backend_name", "") or "unknown backend"
        return f"{self.world_size} ranks on {backend}, {elapsed:.1f} s:"

    # -- a rank -------------------------------------------------------------------------

    @classmethod
    def _run(cls, rank: int, test_name: str, file_name: str, parent_pipe, **kwargs) -> None:
        _die_with_parent()
        self = cls(test_name)
        self.rank = rank
        self.file_name = file_name
        self._trace = kwargs.get("trace", (False, None))
        self.run_test(test_name, parent_pipe)

    def run_test(self, test_name: str, parent_pipe) -> None:
        # Upstream's listener thread answers the test process's request for this rank's
        # stack when the ranks time out.
        signal_recv, signal_send = torch.multiprocessing.Pipe(duplex=False)
        listener = threading.Thread(
            target=MultiProcessTestCase._event_listener,
            args=(parent_pipe, signal_recv, self.rank),
            daemon=True,
        )
        listener.start()
        code = 0
        traced, device_type = getattr(self, "_trace", (False, None))
        tracer = trace_ops(device_type) if traced else contextlib.nullcontext()
        trace = None
        try:
            with tracer as trace:
                getattr(self, test_name)()
        except unittest.SkipTest as skip:
            parent_pipe.send(("skip", str(skip)))
            code = _SKIP_CODE
        except BaseException:
            parent_pipe.send(("error", traceback.format_exc()))
            code = _ERROR_CODE
        finally:
            signal_send.send(None)
            listener.join(timeout=5)
            if traced and trace is not None:
                with contextlib.suppress(OSError, ValueError):
                    parent_pipe.send(("ops", trace.ops))
        if code != _ERROR_CODE:
            self._leave_together()
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        parent_pipe.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def _leave_together(self) -> None:
        """Wait (through the group's store, a few seconds at most) until every rank has
        ended its test: a rank that skips or passes early must not close its connections
        while a peer is still connecting to it or reading from it."""
        if not dist.is_initialized():
            return
        with contextlib.suppress(Exception):
            store = dist.distributed_c10d._get_default_store()
            key = "conformance/ranks_done"
            store.add(key, 1)
            deadline = time.monotonic() + _GRACE_S
            while store.add(key, 0) < self.world_size and time.monotonic() < deadline:
                time.sleep(0.005)

    def init_group(self, device: str, make_group: bool = True) -> None:
        """This rank's device (rank ``r`` on device index ``r`` modulo the device count) and,
        with ``make_group``, the process group, with the device's default backend."""
        device_type = torch.device(device).type
        if device_type == "cpu":
            self.rank_device = torch.device("cpu")
        else:
            module = torch.get_device_module(device_type)
            index = self.rank % max(1, module.device_count())
            module.set_device(index)
            self.rank_device = torch.device(device_type, index)
        if not make_group:
            return
        store = dist.FileStore(self.file_name, self.world_size)
        dist.init_process_group(
            backend=dist.get_default_backend_for_device(device_type),
            store=store,
            rank=self.rank,
            world_size=self.world_size,
            timeout=timedelta(seconds=GROUP_TIMEOUT_S),
        )

    def _start_processes(self, proc) -> None:
        # Upstream's, closing the test process's ends of the ranks' pipes.
        self.processes = []
        for rank in range(int(self.world_size)):
            parent_conn, child_conn = torch.multiprocessing.Pipe()
            process = proc(
                target=_rank_main,
                name=f"rank {rank}",
                args=(
                    _class_key(type(self)),
                    rank,
                    self._current_test_name(),
                    self.file_name,
                    child_conn,
                    tracing_device(),
                ),
            )
            process.start()
            child_conn.close()
            self.pid_to_pipe[process.pid] = parent_conn
            self.processes.append(process)
