"""Per-op performance from a run's profile (``conformance run --profile``): ops ranked by the
time they take, and what got slower between two runs.

Both work on profile frames as :func:`conformance.profile_store.read_profile` returns them
(columns :data:`~conformance.model.PROFILE_COLUMNS`), grouped by op (``by="op"``) or by op
and input signature, shapes and dtypes (``by="op-shape"``). Times are one metric: device
time, where the run has any, else CPU time (``metric="device"`` or ``"cpu"``). An op's
time is its total (inclusive: what it calls counts), and its share is that total over the
run's time in ATen ops (every ATen op's self time, summed: each microsecond counted once).
With CPU time the ATen ops are ranked and every call counts; with device time the ATen
ops and the device's kernel events that have device time, and only the calls that have
some (a test's reference calls on CPU tensors do not dilute the mean per call).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas

__all__ = [
    "GROUPINGS",
    "METRICS",
    "OpDelta",
    "OpTime",
    "PerfComparison",
    "PerfRanking",
    "compare_runs",
    "rank_ops",
    "time_metric",
]

#: metric -> (calls column, total column, self column)
METRICS = {
    "device": ("device_calls", "device_time_us", "self_device_time_us"),
    "cpu": ("calls", "cpu_time_us", "self_cpu_time_us"),
}
#: --by -> the columns an op is keyed on
GROUPINGS = {"op": ("op",), "op-shape": ("op", "input_shapes", "input_dtypes")}
ATEN_PREFIX = "aten::"


@dataclass
class OpTime:
    """One op (or op and input signature) in a run."""

    op: str
    input_shapes: str  # "" when grouped by op
    input_dtypes: str
    calls: int  # with device time, for the device metric
    total_us: float
    self_us: float
    mean_us: float  # total per call
    share: float  # total over the run's time in ATen ops, 0..1
    #: The tests that spend most time in it, heaviest first: (test_id, microseconds).
    tests: list[tuple[str, float]] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.op, self.input_shapes, self.input_dtypes)


@dataclass
class PerfRanking:
    """A run's ops, the most time first."""

    metric: str  # "device" or "cpu"
    by: str  # "op" or "op-shape"
    aten_us: float  # time in ATen ops: their self times summed (the shares' denominator)
    tests: int  # tests with a profile
    ops: list[OpTime] = field(default_factory=list)


@dataclass
class OpDelta:
    """One op in both runs: its mean time per call in each."""

    op: str
    input_shapes: str
    input_dtypes: str
    calls: int  # in the run
    reference_calls: int
    mean_us: float
    reference_mean_us: float
    ratio: float  # mean / reference mean (inf when only the run spends time in it)
    diff_us: float  # mean - reference mean, per call
    total_diff_us: float  # total - reference total


@dataclass
class PerfComparison:
    """A run against a reference run: the ops in both, the largest slowdown first."""

    metric: str
    by: str
    note: str  # why the metric is not the one asked for, if it is not
    changes: list[OpDelta] = field(default_factory=list)
    only_run: list[OpTime] = field(default_factory=list)  # ops the reference never ran
    only_reference: list[OpTime] = field(default_factory=list)


def time_metric(frame: pandas.DataFrame) -> str:
    """``device`` when any row has device time, else ``cpu``."""
    return "device" if len(frame) and float(frame["device_time_us"].sum()) > 0 else "cpu"


def rank_ops(
    frame: pandas.DataFrame, *, by: str = "op", metric: str | None = None, tests: int = 3
) -> PerfRanking:
    """The ops of a profile frame by total time in ``metric`` (default :func:`time_metric`),
    most first, each with its ``tests`` heaviest tests."""
    metric = metric or time_metric(frame)
    calls_column, total_column, self_column = METRICS[metric]
    keys = list(GROUPINGS[by])
    aten = frame["op"].str.startswith(ATEN_PREFIX)
    aten_us = float(frame.loc[aten, self_column].sum())
    rows = frame[frame["device_calls"] > 0] if metric == "device" else frame[aten]
    ranking = PerfRanking(metric, by, aten_us, int(frame["test_id"].nunique()))
    if rows.empty:
        return ranking
    grouped = rows.groupby(keys, sort=False).agg(
        calls=(calls_column, "sum"), total_us=(total_column, "sum"), self_us=(self_column, "sum")
    )
    heaviest = _heaviest_tests(rows, keys, total_column, tests)
    for key, row in grouped.iterrows():
        key = key if isinstance(key, tuple) else (key,)
        op, shapes, dtypes = (*key, "", "")[:3]
        calls, total = int(row["calls"]), float(row["total_us"])
        ranking.ops.append(
            OpTime(
                op=op,
                input_shapes=shapes,
                input_dtypes=dtypes,
                calls=calls,
                total_us=total,
                self_us=float(row["self_us"]),
                mean_us=total / calls if calls else 0.0,
                share=total / aten_us if aten_us else 0.0,
                tests=heaviest.get(key, []),
            )
        )
    ranking.ops.sort(key=lambda t: (-t.total_us, t.key))
    return ranking


def _heaviest_tests(
    rows: pandas.DataFrame, keys: list[str], column: str, count: int
) -> dict[tuple[str, ...], list[tuple[str, float]]]:
    if count <= 0:
        return {}
    per_test = rows.groupby([*keys, "test_id"], sort=False)[column].sum().reset_index()
    per_test = per_test.sort_values([column, "test_id"], ascending=[False, True], kind="stable")
    heaviest: dict[tuple[str, ...], list[tuple[str, float]]] = {}
    for row in per_test.groupby(keys, sort=False).head(count).itertuples(index=False):
        values = tuple(row)
        heaviest.setdefault(values[: len(keys)], []).append((values[len(keys)], float(values[-1])))
    return heaviest


def compare_runs(
    run: pandas.DataFrame,
    reference: pandas.DataFrame,
    *,
    by: str = "op",
    metric: str | None = None,
) -> PerfComparison:
    """What got slower in ``run`` than in ``reference``: the ops in both by the ratio of
    their mean times per call, the largest first; the ops in one run only apart. Without
    ``metric``, device time when both runs have some, else CPU time (``note`` says why)."""
    note = ""
    if metric is None:
        run_metric, reference_metric = time_metric(run), time_metric(reference)
        metric = "device" if run_metric == reference_metric == "device" else "cpu"
        if run_metric != reference_metric:
            note = "only one of the runs has device time: compared on CPU time"
    mine = {t.key: t for t in rank_ops(run, by=by, metric=metric).ops}
    theirs = {t.key: t for t in rank_ops(reference, by=by, metric=metric).ops}
    comparison = PerfComparison(metric, by, note)
    for key, now in mine.items():
        before = theirs.get(key)
        if before is None:
            comparison.only_run.append(now)
            continue
        comparison.changes.append(
            OpDelta(
                op=now.op,
                input_shapes=now.input_shapes,
                input_dtypes=now.input_dtypes,
                calls=now.calls,
                reference_calls=before.calls,
                mean_us=now.mean_us,
                reference_mean_us=before.mean_us,
                ratio=_ratio(now.mean_us, before.mean_us),
                diff_us=now.mean_us - before.mean_us,
                total_diff_us=now.total_us - before.total_us,
            )
        )
    comparison.only_reference = [t for key, t in theirs.items() if key not in mine]
    comparison.changes.sort(key=lambda d: (-d.ratio, -d.diff_us, d.op, d.input_shapes))
    return comparison


def _ratio(value: float, reference: float) -> float:
    if reference > 0:
        return value / reference
    return math.inf if value > 0 else 1.0
