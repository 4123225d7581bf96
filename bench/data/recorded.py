"""Test durations recorded once from real upstream runs, kept for the benchmarks.

``upstream-durations.parquet`` holds one row per test of each recorded run: PyTorch's own
13 device-generic test files for torch 2.13 (``../shared/upstream``) run on emu in shards,
no skiplist. Columns: ``run`` (the shard run's name), ``seq`` (the order its records were
written in, which is the order the tests finished), ``worker``, ``test_id``, ``file``,
``test_class``, ``template``, ``outcome``, ``duration_s``. ``upstream-runs.json`` says, per
run, its wall time, workers, device and torch version, and whether it is a *replay* run:
a later run of tests the other runs recorded (a shard of them balanced on their
durations, as a nightly runs), which the ETA benchmark replays with the others' durations.

Regenerate (after running the shards) with::

    python bench/data/recorded.py RUN_DIR... [--replay RUN_DIR...] [--out bench/data] [--append]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
DURATIONS = HERE / "upstream-durations.parquet"
RUNS = HERE / "upstream-runs.json"
COLUMNS = ("test_id", "file", "test_class", "template", "outcome", "duration_s", "worker")


def load() -> tuple[list[dict], dict[str, dict]]:
    """(rows as dicts in each run's finishing order, runs by name)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(DURATIONS).to_pylist()
    rows.sort(key=lambda row: (row["run"], row["seq"]))
    return rows, json.loads(RUNS.read_text(encoding="utf-8"))


def replay_runs(runs: dict[str, dict]) -> list[str]:
    return sorted(name for name, run in runs.items() if run.get("replay"))


def by_run(rows: list[dict]) -> dict[str, list[dict]]:
    return {run: list(group) for run, group in itertools.groupby(rows, key=lambda r: r["run"])}


def _workers(command: list[str]) -> int:
    for flag, value in itertools.pairwise(command):
        if flag in ("-n", "--workers") and value.isdigit():
            return int(value)
    return 1


def export(run_dirs: list[Path], out: Path, replays: list[Path] = (), append: bool = False) -> None:
    """Write the runs' durations; with ``append``, beside the runs already recorded (a run
    recorded again under the same name replaces its earlier rows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from conformance.store import read_meta, read_records

    table: dict[str, list] = {"run": [], "seq": [], **{name: [] for name in COLUMNS}}
    runs = {}
    if append and DURATIONS.exists():
        names = {run_dir.name for run_dir in [*run_dirs, *replays]}
        kept_rows, kept_runs = load()
        runs = {name: run for name, run in kept_runs.items() if name not in names}
        for row in kept_rows:
            if row["run"] not in names:
                for column in table:
                    table[column].append(row[column])
    for run_dir in [*run_dirs, *replays]:
        meta = read_meta(run_dir)
        name = run_dir.name
        start, end = datetime.fromisoformat(meta.start_time), datetime.fromisoformat(meta.end_time)
        runs[name] = {
            "wall_s": round((end - start).total_seconds(), 1),
            "workers": _workers(meta.command),
            "device": meta.backend,
            "mode": meta.mode,
            "torch": meta.torch_version,
            "shard": meta.shard,
            "recorded": meta.start_time[:10],
            "replay": run_dir in replays,
        }
        for seq, record in enumerate(read_records(run_dir)):
            if record["outcome"] == "deselected":
                continue
            table["run"].append(name)
            table["seq"].append(seq)
            for column in COLUMNS:
                value = record[column]
                table[column].append(round(float(value), 4) if column == "duration_s" else value)
    schema = pa.schema(
        [
            ("run", pa.dictionary(pa.int16(), pa.string())),
            ("seq", pa.int32()),
            *((c, pa.dictionary(pa.int32(), pa.string())) for c in COLUMNS[:5]),
            ("duration_s", pa.float32()),
            ("worker", pa.dictionary(pa.int8(), pa.string())),
        ]
    )
    pq.write_table(
        pa.table(table, schema=schema),
        out / DURATIONS.name,
        compression="zstd",
        compression_level=19,
    )
    (out / RUNS.name).write_text(
        json.dumps(runs, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Record upstream runs' durations for bench/.")
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--replay", nargs="+", type=Path, default=[], metavar="RUN_DIR")
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument(
        "--append", action="store_true", help="keep the runs already recorded beside the new ones"
    )
    args = parser.parse_args(argv)
    export(args.runs, args.out, args.replay, append=args.append)
    print(f"wrote {args.out / DURATIONS.name} and {args.out / RUNS.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
