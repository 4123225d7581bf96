"""``sweep``: run only the tests the skiplist selects, with the skiplist off, and propose
removing the entries whose tests now pass (a unified diff).

The tests run in a subprocess through pytest and the conformance plugin (``--device``,
``--no-skiplist``, ``--run-dir``), so crashes, hangs and classification are handled as in
any run, and the outcomes are read back from the results store.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import tempfile
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from conformance.errors import ConformanceError
from conformance.model import TestIdentity
from skiplists.runs import RunFacts, read_run_facts
from skiplists.skiplist import Skiplist
from skiplists.update import UpdatePlan, apply_plan, plan_update

__all__ = ["SweepResult", "selected_nodeids", "sweep"]


@dataclass
class SweepResult:
    facts: RunFacts
    plan: UpdatePlan
    changes: dict[Path, tuple[str, str]]  # path -> (old text, new text)


def selected_nodeids(
    skiplist: Skiplist, identities: Iterable[TestIdentity], tiers: Collection[str]
) -> list[str]:
    """Nodeids of the tests an entry of the given tiers applies to."""
    nodeids = []
    for identity in identities:
        entry = skiplist.match(identity)
        if entry is not None and entry.tier in tiers:
            nodeids.append(identity.nodeid)
    return nodeids


def sweep(
    skiplist: Skiplist,
    nodeids: Sequence[str],
    *,
    device: str,
    rootdir: Path,
    pytest_args: Sequence[str] = (),
    today: dt.date,
) -> SweepResult:
    """Run ``nodeids`` (relative to ``rootdir``) without the skiplist; plan the removals."""
    if not nodeids:
        raise ConformanceError("the skiplist selects none of the given tests: nothing to sweep")
    with tempfile.TemporaryDirectory(prefix="skiplist-sweep-") as scratch:
        run_dir = Path(scratch) / "run"
        args_file = Path(scratch) / "nodeids.txt"
        # pytest reads "@file" as one argument per line: no command-line length limit.
        args_file.write_text("\n".join(nodeids) + "\n", encoding="utf-8")
        command = [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conformance.plugin",
            "--device", device, "--no-skiplist", "--run-dir", str(run_dir),
            *pytest_args, f"@{args_file}",
        ]  # fmt: skip
        done = subprocess.run(command, cwd=rootdir, capture_output=True, text=True, check=False)
        if not (run_dir / "meta.json").is_file():
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
            raise ConformanceError(f"the sweep run did not start (exit {done.returncode}):\n{tail}")
        facts = read_run_facts(run_dir)
    plan = plan_update(skiplist, facts, today=today)
    plan.additions = []  # a sweep only proposes removals
    changes = apply_plan(plan, None, prune=True, today=today) if plan.passing else {}
    return SweepResult(facts=facts, plan=plan, changes=changes)
