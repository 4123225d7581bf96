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
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.errors import ConformanceError
from conformance.model import TestIdentity
from skiplists.runs import RunFacts, plugin_args, read_run_facts
from skiplists.skiplist import Skiplist
from skiplists.update import UpdatePlan, apply_plan, plan_update

__all__ = ["SweepResult", "selected_nodeids", "sweep"]


@dataclass
class SweepResult:
    facts: RunFacts
    plan: UpdatePlan
    changes: dict[Path, tuple[str, str]]  # path -> (old text, new text)


def selected_nodeids(
    skiplist: Skiplist,
    identities: Iterable[TestIdentity],
    tiers: Collection[str],
    records: Iterable[Mapping[str, Any]] = (),
) -> list[str]:
    """Nodeids of the tests an entry of the given tiers applies to: at collection, or, for
    a cause entry, the tests whose failure it explained in the run ``records`` come from."""
    nodeids = []
    for identity in identities:
        entry = skiplist.match(identity)
        if entry is not None and entry.tier in tiers:
            nodeids.append(identity.nodeid)
    if "xfail" in tiers:
        causes = {entry.where for entry in skiplist.causes}
        chosen = set(nodeids)
        for record in records:
            if record.get("skip_entry") in causes and record["nodeid"] not in chosen:
                chosen.add(record["nodeid"])
                nodeids.append(record["nodeid"])
    return nodeids


def sweep(
    skiplist: Skiplist,
    nodeids: Sequence[str],
    *,
    device: str,
    rootdir: Path,
    pytest_args: Sequence[str] = (),
    today: dt.date,
    swept_causes: Collection[str] = (),
) -> SweepResult:
    """Run ``nodeids`` (relative to ``rootdir``) without the skiplist; plan the removals.
    ``swept_causes`` are the cause entries (``where``) whose tests are among them."""
    if not nodeids:
        raise ConformanceError("the skiplist selects none of the given tests: nothing to sweep")
    with tempfile.TemporaryDirectory(prefix="skiplist-sweep-") as scratch:
        run_dir = Path(scratch) / "run"
        args_file = Path(scratch) / "nodeids.txt"
        # pytest reads "@file" as one argument per line: no command-line length limit.
        args_file.write_text("\n".join(nodeids) + "\n", encoding="utf-8")
        command = [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin_args(),
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
    # A cause entry goes when none of the tests it explained fails of its cause any more;
    # the sweep says nothing of the cause entries whose tests it did not run.
    plan.stale = [s for s in plan.stale if s.entry.where in swept_causes]
    changes = apply_plan(plan, None, prune=True, today=today) if plan.passing or plan.stale else {}
    return SweepResult(facts=facts, plan=plan, changes=changes)
