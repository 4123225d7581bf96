"""Reruns: select tests from earlier runs' records instead of running a whole selection.

A contributor who lowered an op reruns the tests it blocked, not the 12,000 of the suite:
``conformance run --suite embedded:full --rerun runs/nightly --where blocking=aten::lgamma.out``.
The records of the runs given (the last record of each test_id, later runs winning) are
filtered by every ``--where KEY=VALUE`` (values separated by commas are alternatives):

``outcome``, ``category``, ``detail``, ``template``, ``file``, ``test_class``, ``op``,
``dtype``, ``suite``
    equal to the record's field;
``blocking``
    the overload whose missing lowering blocks the test, as op coverage and triage read it
    (:func:`op_coverage.triage.blocked_tests`, so the count is the triage's);
``dispatched``
    an ATen overload the test dispatched (runs made with ``--trace-ops``);
``test_id``
    a regular expression the whole test_id must match.

The rerun is a run of its own in the store; its metadata names the run it amends. A rerun
given to ``--rerun`` stands for its base run amended by it (the latest outcome of each test),
and a rerun of it amends the same base, so the loop "lower, rerun, lower the next" keeps one
base run and a list of reruns that amend it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from conformance.errors import ConfigError

__all__ = ["FIELD_KEYS", "Rerun", "parse_where", "select_rerun"]

#: Keys compared with the record's field of the same name.
FIELD_KEYS = (
    "outcome",
    "category",
    "detail",
    "template",
    "file",
    "test_class",
    "op",
    "dtype",
    "suite",
)
_KEYS = (*FIELD_KEYS, "blocking", "dispatched", "test_id")


@dataclass
class Rerun:
    """The tests a rerun runs, and the run it amends."""

    test_ids: list[str]
    files: list[str]  # the test files (as test_ids name them) that hold them
    amends: str  # the base run: the first run given, or the base that run amends
    suite: str  # the base run's suite
    where: list[str] = field(default_factory=list)


def parse_where(specs: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """``["outcome=failed,crashed", "template=test_out"]`` -> ``{key: alternatives}``."""
    where: dict[str, tuple[str, ...]] = {}
    for spec in specs:
        key, sep, value = spec.partition("=")
        key = key.strip()
        if not sep or key not in _KEYS or not value.strip():
            raise ConfigError(
                f"expected KEY=VALUE with KEY one of {', '.join(_KEYS)}, got {spec!r}",
                where="--where",
            )
        if key in where:
            raise ConfigError(f"{key} given twice; list alternatives as {key}=A,B", where="--where")
        values = tuple(v.strip() for v in value.split(",") if v.strip())
        if key == "test_id":
            for pattern in values:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise ConfigError(f"test_id={pattern!r}: {exc}", where="--where") from None
        where[key] = values
    return where


def select_rerun(run_dirs: Sequence[str | Path], where_specs: Sequence[str]) -> Rerun:
    """The tests of the runs' records that every filter selects (ConfigError when none)."""
    import pandas

    from conformance.store import read_as_amended
    from op_coverage.triage import blocked_tests

    if not run_dirs:
        raise ConfigError("give the runs to select from", where="--rerun")
    where = parse_where(where_specs)
    frames, metas = [], []
    for run_dir in run_dirs:
        # A rerun stands for its base run amended by it: the latest outcome of every test.
        meta, frame = read_as_amended(run_dir)
        metas.append(meta)
        frames.append(frame)
    records = pandas.concat(frames, ignore_index=True).drop_duplicates("test_id", keep="last")
    mask = pandas.Series(True, index=records.index)
    for key, values in where.items():
        if key in FIELD_KEYS:
            mask &= records[key].isin(values)
        elif key == "test_id":
            mask &= records["test_id"].str.fullmatch("|".join(f"(?:{v})" for v in values))
        elif key == "dispatched":
            hit = [not set(values).isdisjoint(ops) for ops in records["ops_dispatched"]]
            mask &= pandas.Series(hit, index=records.index)
        else:  # blocking
            blocked = blocked_tests(records)
            ids = set(blocked.loc[blocked["blocking_op"].isin(values), "test_id"])
            mask &= records["test_id"].isin(ids)
    chosen = records[mask]
    shown = " ".join(where_specs) or "(no filter)"
    if chosen.empty:
        raise ConfigError(
            f"no test of {', '.join(m.run_id for m in metas)} matches {shown}", where="--where"
        )
    suites = {m.suite for m in metas}
    if len(suites) > 1:
        raise ConfigError(
            f"the runs are of different suites ({', '.join(sorted(suites))}): rerun from one",
            where="--rerun",
        )
    return Rerun(
        test_ids=sorted(chosen["test_id"]),
        files=sorted(set(chosen["file"])),
        # A rerun of a rerun amends the same base run, so one amended view holds them all.
        amends=metas[0].amends or metas[0].run_id,
        suite=metas[0].suite,
        where=list(where_specs),
    )
