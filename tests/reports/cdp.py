"""A small Chrome DevTools Protocol client over ``--remote-debugging-pipe``.

Chromium reads NUL-terminated JSON commands from file descriptor 3 and writes responses
and events to descriptor 4; nothing listens on a port and nothing is downloaded. Used by
the browser tests (and the scale benchmark) to open report pages from disk.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from typing import Any

__all__ = ["Browser", "CdpError", "find_chromium"]

FLAGS = (
    "--headless",
    "--no-sandbox",  # needed as root in containers
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--remote-debugging-pipe",
)


class CdpError(RuntimeError):
    """A protocol error, a script exception in the page, or a timeout."""


def find_chromium() -> str | None:
    """The Chromium binary: ``$CHROMIUM``, else ``chromium`` or ``chromium-browser`` on PATH."""
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return explicit if shutil.which(explicit) else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium with one page. Use as a context manager."""

    def __init__(self, binary: str, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="cdp-profile-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_fds() -> None:
            # Move both ends above the low descriptors first, so placing them at 3 and 4
            # cannot clobber one with the other.
            high_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 20)
            high_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 20)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.process = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Descriptors 3 and 4 are made in the child; close_fds would close them. The
            # parent's own pipe ends are non-inheritable (PEP 446), so nothing else leaks.
            preexec_fn=wire_fds,
            close_fds=False,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next_id = 0
        self._responses: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.dialogs: list[str] = []
        self._lock = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._lock:
                    self._lock.notify_all()
                return
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for raw in messages:
                message = json.loads(raw)
                with self._lock:
                    if "id" in message:
                        self._responses[message["id"]] = message
                    else:
                        self.events.append(message)
                        if message.get("method") == "Page.javascriptDialogOpening":
                            self.dialogs.append(message["params"].get("message", ""))
                    self._lock.notify_all()
                if message.get("method") == "Page.javascriptDialogOpening":
                    # Dismiss it, or the page would block.
                    self._send(
                        "Page.handleJavaScriptDialog", {"accept": False}, message.get("sessionId")
                    )

    def _send(self, method: str, params: dict[str, Any], session: str | None) -> int:
        with self._lock:
            self._next_id += 1
            number = self._next_id
        command: dict[str, Any] = {"id": number, "method": method, "params": params}
        if session:
            command["sessionId"] = session
        os.write(self._to_browser, json.dumps(command).encode() + b"\0")
        return number

    def call(self, method: str, *, session: bool = False, **params: Any) -> dict[str, Any]:
        """Send a command and wait for its result."""
        number = self._send(method, params, self.session if session else None)
        deadline = time.monotonic() + self.timeout
        with self._lock:
            while number not in self._responses:
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    raise CdpError(f"no answer to {method} within {self.timeout} s")
                self._lock.wait(left)
            response = self._responses.pop(number)
        if "error" in response:
            raise CdpError(f"{method}: {response['error']}")
        return response.get("result", {})

    def open(self, url: str) -> float:
        """Navigate and wait for the load event; returns the seconds it took."""
        with self._lock:
            seen = len(self.events)
        started = time.monotonic()
        result = self.call("Page.navigate", session=True, url=url)
        if result.get("errorText"):
            raise CdpError(f"cannot open {url}: {result['errorText']}")
        self._wait_event("Page.loadEventFired", seen)
        return time.monotonic() - started

    def _wait_event(self, method: str, after: int) -> None:
        deadline = time.monotonic() + self.timeout
        with self._lock:
            while not any(e.get("method") == method for e in self.events[after:]):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CdpError(f"no {method} within {self.timeout} s")
                self._lock.wait(left)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (exceptions raise CdpError)."""
        result = self.call(
            "Runtime.evaluate",
            session=True,
            expression=expression,
            returnByValue=True,
            awaitPromise=True,
        )
        if "exceptionDetails" in result:
            raise CdpError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float | None = None) -> Any:
        """Poll until ``expression`` is truthy (an exception counts as false); returns its
        value."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            try:
                value = self.evaluate(expression)
            except CdpError:
                # The page may be between documents (a click started a navigation).
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise CdpError(f"{expression!r} still false after {timeout or self.timeout} s")
            time.sleep(0.05)

    def close(self) -> None:
        try:
            self._send("Browser.close", {}, None)
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        for fd in (self._to_browser, self._from_browser):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
