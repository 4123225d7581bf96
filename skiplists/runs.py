"""What the tools learn from outside: a recorded run, or the tests a path collects."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.errors import ConfigError
from conformance.model import RECORD_COLUMNS, RunMeta, TestIdentity

__all__ = [
    "RunFacts",
    "collect_identities",
    "facts_from_frame",
    "merge_facts",
    "plugin_args",
    "read_run_facts",
]

#: Outcomes that show a test can pass on the backend.
PASSING = frozenset({"passed", "xpassed"})


@dataclass
class RunFacts:
    """A run reduced to what the skiplist tools use."""

    meta: RunMeta
    identities: list[TestIdentity] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)  # one per test, last rerun

    def passing_ids(self) -> set[str]:
        """test_ids that passed, including strict xfails that passed (reported as failed)."""
        return {r["test_id"] for r in self.records if passes(r)}


def passes(record: dict[str, Any]) -> bool:
    if record["outcome"] in PASSING:
        return True
    return record["outcome"] == "failed" and str(record.get("message", "")).startswith(
        "[XPASS(strict)]"
    )


def read_run_facts(run_dir: Path) -> RunFacts:
    """Read a run folder through the results store (the only place that knows its format)."""
    from conformance import store

    meta, frame = store.read_run(run_dir)
    return facts_from_frame(meta, frame)


def merge_facts(runs: Sequence[RunFacts]) -> RunFacts:
    """Several runs as one (shards, or selections that together cover the suite): the first
    run's metadata, every test once (identity from the last run that has it, by test_id),
    all records."""
    identities = {i.test_id: i for facts in runs for i in facts.identities}
    records = [r for facts in runs for r in facts.records]
    meta = runs[0].meta
    if len(runs) > 1:  # name them all where the facts are reported ("run a, b")
        meta = dataclasses.replace(meta, run_id=", ".join(f.meta.run_id for f in runs))
    return RunFacts(meta=meta, identities=list(identities.values()), records=records)


def facts_from_frame(meta: RunMeta, frame: Any) -> RunFacts:
    """RunFacts from a DataFrame with the RECORD_COLUMNS columns (one row per record)."""
    missing = [c for c in RECORD_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(f"run records lack columns {missing}", where=meta.run_id)
    latest: dict[str, dict[str, Any]] = {}
    for record in frame.to_dict("records"):
        previous = latest.get(record["test_id"])
        if previous is None or int(record["rerun"]) >= int(previous["rerun"]):
            latest[record["test_id"]] = record
    identities = [
        TestIdentity(
            nodeid=r["nodeid"],
            test_id=r["test_id"],
            file=r["file"],
            test_class=r["test_class"],
            template=r["template"],
            op=r["op"],
            variant=r["variant"],
            dtype=r["dtype"],
            params=r["params"],
            device=r["device"],
            suite=r["suite"],
        )
        for r in latest.values()
    ]
    return RunFacts(meta=meta, identities=identities, records=list(latest.values()))


def plugin_args() -> list[str]:
    """The pytest arguments that load the conformance plugin in a subprocess: none when
    pytest loads it from its entry point (naming it too would register it twice, an
    error), ``-p conformance.plugin`` when plugin autoloading is off."""
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return ["-p", "conformance.plugin"]
    return []


def collect_identities(
    paths: Sequence[str], device_names: Sequence[str], pytest_args: Sequence[str] = ()
) -> list[TestIdentity]:
    """Collect the tests under ``paths`` in a subprocess and identify them by nodeid."""
    from conformance.identity import parse_nodeid

    rootdir = Path.cwd()
    plugin = plugin_args() if "--device" in pytest_args else []
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--collect-only",
        "-q",
        # Nodeids relative to a known folder, so the embedded suite's files are named in
        # its namespace (embedded/...) however the paths were given.
        f"--rootdir={rootdir}",
        *plugin,
        *pytest_args,
        *paths,
    ]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    nodeids = [line.strip() for line in done.stdout.splitlines() if "::" in line]
    if done.returncode not in (0, 5) or (done.returncode == 0 and not nodeids):
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise ConfigError(f"collecting {' '.join(paths)} failed:\n{tail}")
    return [parse_nodeid(nodeid, device_names, rootdir) for nodeid in nodeids]
