"""A per-test time limit that works on hangs no exception can interrupt.

A hung test may sit in native code, so raising into it (as a signal-based timeout does) is
not enough. The watchdog is one daemon thread per test process: when a test outlives its
limit, it calls ``on_expiry(nodeid, elapsed_s)`` (which notes the timeout where the controller will
find it), kills every process the test process started, their own children included (the
ranks of a multi-process test, whatever they were waiting for), and ends the process.
Under xdist the controller then sees a dead worker, reads the note, records ``timeout``
instead of ``crashed``, and starts a new worker.

Notes are JSON lines in ``<run_dir>/timeouts.jsonl``:
``{"nodeid": ..., "pid": ..., "elapsed_s": ...}``, the time the test ran before it was stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "TIMEOUT_EXIT_CODE",
    "TIMEOUT_NOTES",
    "Watchdog",
    "descendants",
    "kill_descendants",
    "note_timeout",
    "timed_out_nodeids",
    "timeout_notes",
]

TIMEOUT_NOTES = "timeouts.jsonl"
#: Exit status of a process the watchdog ended (as timeout(1) uses).
TIMEOUT_EXIT_CODE = 124


def note_timeout(run_dir: Path, nodeid: str, elapsed_s: float = 0.0) -> None:
    """Append a timeout note; written with one call and synced so it survives the exit."""
    note = {"nodeid": nodeid, "pid": os.getpid(), "elapsed_s": round(elapsed_s, 6)}
    line = json.dumps(note) + "\n"
    fd = os.open(run_dir / TIMEOUT_NOTES, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def timeout_notes(run_dir: Path) -> dict[str, float]:
    """The tests the watchdog stopped in this run folder, each with the seconds it ran
    (a torn last line is ignored)."""
    try:
        text = (run_dir / TIMEOUT_NOTES).read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    found = {}
    for line in text.split("\n")[:-1]:
        try:
            note = json.loads(line)
            found[note["nodeid"]] = float(note.get("elapsed_s") or 0.0)
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return found


def timed_out_nodeids(run_dir: Path) -> set[str]:
    """Nodeids the watchdog stopped in this run folder."""
    return set(timeout_notes(run_dir))


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process visible in /proc (Linux)."""
    parents = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # it ended meanwhile
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after it
        fields = stat[stat.rfind(b")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
    return parents


def descendants(pid: int | None = None) -> list[int]:
    """The processes ``pid`` (default: this one) started, their children included."""
    root = os.getpid() if pid is None else pid
    if os.path.isdir("/proc"):
        children: dict[int, list[int]] = {}
        for child, parent in _parents().items():
            children.setdefault(parent, []).append(child)
    else:  # elsewhere, through psutil (a dependency of the harness)
        import psutil

        try:
            return [p.pid for p in psutil.Process(root).children(recursive=True)]
        except psutil.Error:
            return []
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def kill_descendants(pid: int | None = None, rounds: int = 5) -> list[int]:
    """SIGKILL every descendant of ``pid`` (default: this process); returns their pids.

    Each round lists the whole tree before killing, so a process whose parent is killed
    first is still found; another round catches any started meanwhile."""
    killed: list[int] = []
    for _ in range(rounds):
        found = [p for p in descendants(pid) if p not in killed]
        if not found:
            break
        for child in found:
            with contextlib.suppress(OSError):  # it ended meanwhile
                os.kill(child, signal.SIGKILL)
        killed.extend(found)
    return killed


class Watchdog:
    """Ends the process when one test runs longer than ``limit_s`` seconds.

    ``start(nodeid)`` arms it for a test, ``stop()`` disarms it. On expiry,
    ``on_expiry(nodeid, elapsed_s)`` is called from the watchdog thread, every process this
    one started is killed with its own children, then the process exits with
    TIMEOUT_EXIT_CODE.
    """

    def __init__(self, limit_s: float, on_expiry: Callable[[str, float], None]) -> None:
        if limit_s <= 0:
            raise ValueError(f"time limit must be positive, got {limit_s}")
        self.limit_s = limit_s
        self._on_expiry = on_expiry
        self._lock = threading.Condition()
        self._current: tuple[str, float, float] | None = None  # nodeid, start, deadline
        self._thread = threading.Thread(
            target=self._watch, name="conformance-watchdog", daemon=True
        )
        self._thread.start()

    def start(self, nodeid: str) -> None:
        with self._lock:
            now = time.monotonic()
            self._current = (nodeid, now, now + self.limit_s)
            self._lock.notify()

    def stop(self) -> None:
        with self._lock:
            self._current = None
            self._lock.notify()

    def _watch(self) -> None:
        while True:
            with self._lock:
                while self._current is None:
                    self._lock.wait()
                nodeid, start, deadline = self._current
                remaining = deadline - time.monotonic()
                if remaining > 0:
                    self._lock.wait(remaining)
                    continue  # re-read: the test may have ended or another started
            self._expire(nodeid, time.monotonic() - start)

    def _expire(self, nodeid: str, elapsed_s: float) -> None:
        try:
            self._on_expiry(nodeid, elapsed_s)
        finally:
            try:
                kill_descendants()
            finally:
                os._exit(TIMEOUT_EXIT_CODE)
