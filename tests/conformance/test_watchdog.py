"""The per-test watchdog: ends a hung process after noting which test hung."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from conformance.watchdog import (
    TIMEOUT_EXIT_CODE,
    descendants,
    kill_descendants,
    timed_out_nodeids,
    timeout_notes,
)


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


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def test_expiry_kills_the_processes_the_test_started_and_their_children(tmp_path):
    # The ranks of a multi-process test: a child that waits for ever, and a child that
    # started a grandchild of its own (which outlives its parent if only children die).
    pids = tmp_path / "pids"
    done = run_script(
        tmp_path,
        f"""
        import subprocess, sys
        sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
        spawner = [
            sys.executable, "-c",
            "import subprocess, sys, time; "
            f"p = subprocess.Popen({{sleeper!r}}, stdout=subprocess.DEVNULL); "
            "print(p.pid, flush=True); time.sleep(120)",
        ]
        child = subprocess.Popen(sleeper, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        parent = subprocess.Popen(spawner, stdout=subprocess.PIPE, text=True)
        grandchild = int(parent.stdout.readline())
        Path({str(pids)!r}).write_text(f"{{child.pid}} {{parent.pid}} {{grandchild}}")
        dog.start("f.py::T::test_ranks_hang"); time.sleep(60)
        """,
    )
    assert done.returncode == TIMEOUT_EXIT_CODE, done.stderr
    started = [int(p) for p in pids.read_text().split()]
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in started if _alive(p)]


def test_descendants_lists_the_whole_tree_and_nothing_else():
    script = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "print(p.pid, flush=True); time.sleep(30)\n"
    )
    outer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        inner = int(outer.stdout.readline())
        assert set(descendants(outer.pid)) == {inner}
        assert outer.pid in descendants()  # this test's own child
        assert sorted(kill_descendants(outer.pid)) == [inner]
    finally:
        kill_descendants(outer.pid)
        outer.kill()
        outer.wait()
