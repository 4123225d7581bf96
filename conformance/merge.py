"""Merge the shards of one run, made on several machines, into a single run folder.

A nightly CI matrix runs ``conformance run --shard k/N`` on N machines; each writes its
own run folder. ``conformance merge`` checks that the folders are shards of the same
selection (same backend, torch, suite, mode, shard count; each shard once) and writes one
run holding every record (and every per-op profile row, for shards run with ``--profile``),
so reports, skiplist updates, triage and ``ops perf`` see one run.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from conformance.errors import ConfigError
from conformance.model import ResultRecord, RunMeta
from conformance.profile_store import merge_profiles
from conformance.store import RunWriter, read_meta, read_records, resolve_run

__all__ = ["merge_runs", "register"]

#: Fields that must agree between shards of one run.
_SAME = ("backend", "backend_version", "torch_version", "torch_git", "suite", "mode")


def _shard_of(meta: RunMeta, where: Path) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in meta.shard.split("/"))
    except ValueError:
        raise ConfigError(
            f"shard: expected K/N, got {meta.shard!r} (was the run made with --shard?)",
            where=str(where),
        ) from None
    return index, count


def merge_runs(
    run_dirs: Sequence[str | Path], out_dir: str | Path, *, run_id: str | None = None
) -> RunMeta:
    """Write the union of the shard runs ``run_dirs`` into the new run folder ``out_dir``.

    Raises ConfigError, before writing anything, when a folder is not a run, when the
    runs disagree on what was run, or when a shard appears twice. The merged run is
    complete only when every shard 1..N is present and complete.
    """
    out_dir = Path(out_dir)
    if not run_dirs:
        raise ConfigError("no runs to merge")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise ConfigError("output folder exists and is not empty", where=str(out_dir))
    paths = [Path(d) for d in run_dirs]
    metas = [read_meta(path) for path in paths]
    first = metas[0]
    shards: dict[int, Path] = {}
    count = _shard_of(first, paths[0])[1]
    for meta, path in zip(metas, paths, strict=True):
        for name in _SAME:
            if getattr(meta, name) != getattr(first, name):
                raise ConfigError(
                    f"{name} is {getattr(meta, name)!r}, but {paths[0]} has "
                    f"{getattr(first, name)!r}: not shards of the same run",
                    where=str(path),
                )
        index, this_count = _shard_of(meta, path)
        if this_count != count:
            raise ConfigError(
                f"shard {meta.shard} is of {this_count} shards, {paths[0]} of {count}",
                where=str(path),
            )
        if index in shards:
            raise ConfigError(f"shard {meta.shard} is also {shards[index]}", where=str(path))
        shards[index] = path

    merged = RunMeta(
        run_id=run_id or out_dir.name,
        start_time=min(m.start_time for m in metas),
        torch_version=first.torch_version,
        torch_git=first.torch_git,
        backend=first.backend,
        backend_version=first.backend_version,
        backend_git=first.backend_git,
        harness_version=first.harness_version,
        suite=first.suite,
        mode=first.mode,
        rootdir=first.rootdir,
        env=dict(first.env),
        shard="" if len(shards) == count else ",".join(map(str, sorted(shards))) + f"/{count}",
        host=",".join(sorted({m.host for m in metas if m.host})),
        command=["conformance", "merge", *(str(p) for p in paths)],
        collected=sum(m.collected for m in metas),
        expected=first.expected,
        # Each shard retried its own failures: the cap of one shard, the tests left out of all.
        retry_cap=max(m.retry_cap for m in metas),
        retry_left_out=sum(m.retry_left_out for m in metas),
        # On-demand baselines of shard runs: the baseline of all of them.
        baseline_for=",".join(
            dict.fromkeys(run for m in metas for run in m.baseline_for.split(",") if run)
        ),
    )
    writer = RunWriter(out_dir, merged)
    for path in paths:
        for data in read_records(path):
            record = ResultRecord.from_dict(data)
            record.run_id = merged.run_id
            writer.write(record)
    merge_profiles(paths, out_dir)  # the shards' per-op profiles, where made with --profile
    complete = len(shards) == count and all(m.complete for m in metas)
    return writer.close(complete=complete, end_time=max(m.end_time for m in metas))


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "merge",
        help="merge the shard runs of one selection into a single run",
        description="Merge run folders made with --shard K/N (one per CI machine) into one "
        "run folder under --runs-root, checking they are shards of the same run.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN", help="shard run folders or ids")
    parser.add_argument("--runs-root", default="runs", metavar="DIR", help="default: runs")
    parser.add_argument("--run-id", metavar="ID", help="id of the merged run")
    parser.set_defaults(handler=_merge_command)


def _merge_command(args: argparse.Namespace) -> int:
    from conformance.store import new_run_id

    root = Path(args.runs_root)
    sources = [resolve_run(ref, root) for ref in args.runs]
    run_id = args.run_id or new_run_id(read_meta(sources[0]).backend) + "-merged"
    meta = merge_runs(sources, root / run_id, run_id=run_id)
    state = "complete" if meta.complete else "incomplete (shards missing or unfinished)"
    print(f"merged {len(sources)} runs into {root / run_id}: {state}")
    return 0 if meta.complete else 1
