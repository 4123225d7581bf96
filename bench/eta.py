"""Benchmark: the progress line's ETA on replayed upstream runs, against the mean rate.

Each replayed run is a shard of PyTorch's own test files run on emu (recorded once, in
bench/data). The replay puts each worker's tests back on its timeline in the order they
finished, at their recorded durations; at 25%, 50% and 75% of the run's wall time it asks
each method how long is left and compares with what was left:

- mean rate: tests left over tests done per second so far (the line's old ETA);
- recorded: the ETA model given the durations earlier runs recorded for the same tests
  (the replayed run is a later run of them: the last nightly's durations, in practice, as
  the nightly passes them);
- kin only: the ETA model with no recorded durations, estimating each test from the tests
  of its kind this run finished (a first run).

Printed side by side, per run and as the median over runs: the absolute error as a share
of the time truly left. Target: the recorded method's median error at 50% at most 25%,
over every replay.

Each replay also says whether the machine ran it at one speed (*steady*): cut into tenths of
its wall time, the ratio of its tests' time to their recorded time stays within a factor of
2 from the fastest tenth to the slowest. A replay whose machine changed speed mid-run
(another job started beside it: ratios from 1x to 10x within one run) is one no forecast
from the past can foresee; the median over the steady replays is printed beside the median
over all, so a miss can be told apart from a machine that changed under the run.

    python bench/eta.py [--runs NAME...]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from pathlib import Path

from conformance.eta import EtaModel

TARGET = 0.25
FRACTIONS = (0.25, 0.5, 0.75)
#: A replay is steady when its tenths' speed ratios stay within this factor of each other.
STEADY = 2.0
TENTHS = 10


def _recorded_data():
    path = Path(__file__).resolve().parent / "data" / "recorded.py"
    spec = importlib.util.spec_from_file_location("bench_recorded", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timeline(rows: list[dict]) -> list[tuple[float, dict]]:
    """(finish time, row) for every test: each worker runs its tests back to back."""
    clock: dict[str, float] = {}
    events = []
    for row in rows:
        worker = row["worker"] or "main"
        clock[worker] = clock.get(worker, 0.0) + float(row["duration_s"])
        events.append((clock[worker], row))
    events.sort(key=lambda event: event[0])
    return events


def replay(rows: list[dict], recorded: dict[str, float] | None) -> dict[str, list[float]]:
    """Relative errors at each fraction, by method."""
    events = timeline(rows)
    wall = events[-1][0]
    workers = len({row["worker"] or "main" for row in rows})
    total = len(rows)
    models = {"recorded": EtaModel(recorded=dict(recorded or {}), workers=workers)}
    models["kin only"] = EtaModel(workers=workers)
    for model in models.values():
        model.expect((row["test_id"], row["test_id"]) for row in rows)
    errors: dict[str, list[float]] = {"mean rate": [], **{name: [] for name in models}}
    starts = sorted(
        ((finish - float(row["duration_s"]), row) for finish, row in events), key=lambda e: e[0]
    )
    done = begun = 0
    for fraction in FRACTIONS:
        now = fraction * wall
        while begun < total and starts[begun][0] <= now:
            at, row = starts[begun]
            for model in models.values():
                model.started(row["test_id"], at)
            begun += 1
        while done < total and events[done][0] <= now:
            row = events[done][1]
            for model in models.values():
                model.finished(row["test_id"], row["test_id"], float(row["duration_s"]))
            done += 1
        left = wall - now
        rate = done / now if now > 0 else 0.0
        estimates = {"mean rate": (total - done) / rate if rate > 0 else float("inf")}
        for name, model in models.items():
            eta = model.estimate(now)
            estimates[name] = eta.seconds if eta is not None else float("inf")
        for name, estimate in estimates.items():
            errors[name].append(abs(estimate - left) / left)
    return errors


def speed_ratios(rows: list[dict], recorded: dict[str, float]) -> list[float]:
    """Per tenth of the replay's wall time: its finished tests' time over the time recorded
    for them (tenths with no recorded test are left out)."""
    events = timeline(rows)
    wall = events[-1][0]
    now = [0.0] * TENTHS
    then = [0.0] * TENTHS
    for finish, row in events:
        earlier = recorded.get(row["test_id"])
        if earlier is None:
            continue
        tenth = min(TENTHS - 1, int(finish / wall * TENTHS)) if wall > 0 else 0
        now[tenth] += float(row["duration_s"])
        then[tenth] += earlier
    return [n / t for n, t in zip(now, then, strict=True) if t > 0]


def is_steady(ratios: list[float]) -> bool:
    return bool(ratios) and max(ratios) <= STEADY * min(ratios)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs",
        nargs="+",
        metavar="NAME",
        help="recorded runs to replay (default: the replay runs, later runs of tests the "
        "others recorded)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    data = _recorded_data()
    rows, runs = data.load()
    grouped = data.by_run(rows)
    names = args.runs or data.replay_runs(runs)
    unknown = [name for name in names if name not in grouped]
    if unknown or not names:
        print(
            f"eta: no recorded run to replay ({', '.join(unknown) or 'none marked'})",
            file=sys.stderr,
        )
        return 1
    earlier = {
        row["test_id"]: float(row["duration_s"])
        for row in rows
        if not runs.get(row["run"], {}).get("replay")
    }
    methods = ("mean rate", "recorded", "kin only")
    print(
        "eta: replayed upstream runs on emu; |ETA - time left| / time left at "
        + ", ".join(f"{f:.0%}" for f in FRACTIONS)
        + " of each run (recorded: durations the earlier runs recorded for its tests)"
    )
    results = {}
    steady = []
    for name in names:
        results[name] = replay(grouped[name], earlier)
        ratios = speed_ratios(grouped[name], earlier)
        if is_steady(ratios):
            steady.append(name)
        tests, wall = len(grouped[name]), runs.get(name, {}).get("wall_s", 0)
        cells = "; ".join(f"{m} " + "/".join(f"{e:.0%}" for e in results[name][m]) for m in methods)
        speed = (
            f"speed {min(ratios):.1f}x-{max(ratios):.1f}x its recording, "
            + ("steady" if name in steady else "NOT steady: the machine's load changed")
            if ratios
            else "no recorded test"
        )
        print(f"  {name} ({tests:,} tests, {wall:.0f} s; {speed}): {cells}")

    def medians(over: list[str]) -> dict[str, list[float]]:
        return {
            m: [statistics.median(results[n][m][i] for n in over) for i in range(len(FRACTIONS))]
            for m in methods
        }

    def line(label: str, values: dict[str, list[float]]) -> str:
        cells = "; ".join(f"{m} " + "/".join(f"{e:.0%}" for e in values[m]) for m in methods)
        return f"  {label}: {cells}"

    judged = medians(names)
    print(line(f"median of all {len(names)}", judged))
    if steady:
        print(line(f"median of the {len(steady)} steady", medians(steady)))
    else:
        print(f"  no steady replay (speed within {STEADY:.0f}x of its recording throughout)")
    half = FRACTIONS.index(0.5)
    at_half = judged["recorded"][half]
    print(
        f"  at 50%, all replays: recorded {at_half:.0%} (target <= {TARGET:.0%}), "
        f"mean rate {judged['mean rate'][half]:.0%}"
    )
    return 0 if at_half <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
