"""The per-test watchdog: ends a hung process after noting which test hung."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conformance.watchdog import TIMEOUT_EXIT_CODE, timed_out_nodeids, timeout_notes


def run_script(tmp_path, body: str) -> subprocess.CompletedProcess:
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from conformance.watchdog import Watchdog, note_timeout
        run_dir = Path({str(tmp_path)!r})
        dog = Watchdog(0.3, lambda nodeid, elapsed: note_timeout(run_dir, nodeid, elapsed))
        """
    ) + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )


def test_a_test_that_outlives_its_limit_ends_the_process_with_a_note(tmp_path):
    done = run_script(
        tmp_path,
        """
        dog.start("quick"); time.sleep(0.05); dog.stop()
        dog.start("f.py::T::test_hang"); time.sleep(30)
        print("not reached")
    """,
    )
    assert done.returncode == TIMEOUT_EXIT_CODE
    assert "not reached" not in done.stdout
    assert timed_out_nodeids(tmp_path) == {"f.py::T::test_hang"}
    # The note keeps how long the test ran: at least its limit.
    assert 0.3 <= timeout_notes(tmp_path)["f.py::T::test_hang"] < 10


def test_tests_within_their_limit_are_left_alone(tmp_path):
    done = run_script(
        tmp_path,
        """
        for i in range(5):
            dog.start(f"t{i}"); time.sleep(0.1); dog.stop()
        time.sleep(0.5)  # idle between tests is not timed
        print("finished")
    """,
    )
    assert done.returncode == 0 and "finished" in done.stdout
    assert timed_out_nodeids(tmp_path) == set()
