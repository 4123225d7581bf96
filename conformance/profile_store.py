"""A run's per-op profile in the results store (``conformance run --profile``).

Beside the outcomes, a profiled run holds::

    <run>/ops_profile.jsonl     one row per line, a test's rows appended and flushed at once
    <run>/ops_profile.parquet   the same rows, consolidated when the run ends

one row per test, op and input signature, columns :data:`~conformance.model.PROFILE_COLUMNS`.
As with the outcomes, the JSON lines are the log of record: a run that is killed keeps the
rows of every test whose record it kept, ``--resume`` appends to them, and the Parquet file
is rewritten whenever a session ends (removed while a resumed session is going on).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance.errors import ConfigError, ConformanceError
from conformance.model import PROFILE_COLUMNS
from conformance.store import META_NAME, _drop_torn_tail, amending_runs, read_meta, read_run

if TYPE_CHECKING:
    import pandas
    import pyarrow

__all__ = [
    "PROFILE_JSONL_NAME",
    "PROFILE_PARQUET_NAME",
    "ProfileWriter",
    "has_profile",
    "merge_profiles",
    "read_profile",
    "read_profile_as_amended",
]

PROFILE_JSONL_NAME = "ops_profile.jsonl"
PROFILE_PARQUET_NAME = "ops_profile.parquet"

_DEFAULTS = {name: kind() for name, kind in PROFILE_COLUMNS.items()}


class ProfileWriter:
    """Appends profile rows to one run folder; closing it consolidates them into Parquet.

    Opening a folder that already holds rows (a resumed run) keeps them; whoever writes
    decides which tests' rows to append (the rows of a test whose record the run kept).
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        _drop_torn_tail(self.run_dir / PROFILE_JSONL_NAME)
        # Rows appended from now on make an earlier consolidation stale.
        (self.run_dir / PROFILE_PARQUET_NAME).unlink(missing_ok=True)
        self._jsonl = open(self.run_dir / PROFILE_JSONL_NAME, "a", encoding="utf-8")  # noqa: SIM115
        self.written = 0

    def write(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """Append rows (dicts keyed by PROFILE_COLUMNS; missing keys take their type's
        default) in one write and flush; return how many."""
        lines = [
            json.dumps({name: row.get(name, _DEFAULTS[name]) for name in PROFILE_COLUMNS})
            for row in rows
        ]
        if lines:
            self._jsonl.write("\n".join(lines) + "\n")
            self._jsonl.flush()
            self.written += len(lines)
        return len(lines)

    def close(self) -> Path:
        """Write ``ops_profile.parquet`` from every row of the run; return its path."""
        if not self._jsonl.closed:
            self._jsonl.close()
        path = self.run_dir / PROFILE_PARQUET_NAME
        _write_parquet(path, _table_from_jsonl(self.run_dir / PROFILE_JSONL_NAME))
        return path


def has_profile(run_dir: str | os.PathLike[str]) -> bool:
    """Whether the run holds profile rows (consolidated or not)."""
    run_dir = Path(run_dir)
    return (run_dir / PROFILE_PARQUET_NAME).is_file() or (run_dir / PROFILE_JSONL_NAME).is_file()


def read_profile(run_dir: str | os.PathLike[str]) -> pandas.DataFrame:
    """A run's profile rows, columns PROFILE_COLUMNS: from Parquet when consolidated, else
    from the JSON lines of a run going on or cut off. ConfigError naming the folder when
    the run holds none."""
    frame = _read_table(Path(run_dir)).to_pandas()
    for name, kind in PROFILE_COLUMNS.items():
        if name not in frame.columns:
            frame[name] = kind()
    return frame[list(PROFILE_COLUMNS)]


def _read_table(run_dir: Path) -> pyarrow.Table:
    """A run's profile rows as Arrow (see :func:`read_profile`)."""
    parquet = run_dir / PROFILE_PARQUET_NAME
    if parquet.is_file():
        import pyarrow.parquet as pq

        try:
            return pq.read_table(parquet)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise ConformanceError(f"{parquet}: unreadable profile: {exc}") from None
    if (run_dir / PROFILE_JSONL_NAME).is_file():
        return _table_from_jsonl(run_dir / PROFILE_JSONL_NAME)
    if not (run_dir / META_NAME).is_file():
        read_meta(run_dir)  # the error that says what the folder is not
    raise ConfigError(
        f"no per-op profile ({PROFILE_PARQUET_NAME}): run it with --profile",
        where=str(run_dir),
    )


def read_profile_as_amended(run_dir: str | os.PathLike[str]) -> pandas.DataFrame:
    """The profile of the whole picture a run belongs to, as ``store.read_as_amended`` reads
    its outcomes: a run of its own as it is; a rerun as its base run's rows, where every
    profiled rerun of that base up to this one (by start time) replaces the rows of each
    test it recorded. A rerun made without ``--profile`` leaves its tests' earlier rows."""
    import pandas

    run_dir = Path(run_dir)
    meta = read_meta(run_dir)
    if not meta.amends:
        return read_profile(run_dir)
    base_dir, reruns = amending_runs(run_dir, meta)
    profiled = [path for path in (base_dir, *reruns) if has_profile(path)]
    if not profiled:
        raise ConfigError(
            f"no per-op profile ({PROFILE_PARQUET_NAME}) in it or the runs it amends with "
            f"{meta.amends}: run it with --profile",
            where=str(run_dir),
        )
    frames = [read_profile(base_dir)] if has_profile(base_dir) else []
    for rerun in reruns:
        if not has_profile(rerun):
            continue
        _, recorded = read_run(rerun, ["test_id"])
        rerun_tests = set(recorded["test_id"])
        frames = [frame[~frame["test_id"].isin(rerun_tests)] for frame in frames]
        frames.append(read_profile(rerun))
    frames = [frame for frame in frames if len(frame)] or frames[:1]
    return pandas.concat(frames, ignore_index=True)


def merge_profiles(run_dirs: Sequence[str | os.PathLike[str]], out_dir: str | Path) -> bool:
    """Write the rows of every run that holds a profile into ``out_dir`` (shards merged into
    one run), as Arrow tables concatenated into its Parquet file; False, writing nothing,
    when none does."""
    import pyarrow as pa

    profiled = [Path(path) for path in run_dirs if has_profile(path)]
    if not profiled:
        return False
    schema = _arrow_schema()
    tables = [_read_table(path).select(schema.names).cast(schema) for path in profiled]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _write_parquet(out / PROFILE_PARQUET_NAME, pa.concat_tables(tables))
    return True


def _arrow_schema() -> pyarrow.Schema:
    import pyarrow as pa

    kinds = {str: pa.string(), int: pa.int64(), float: pa.float64()}
    return pa.schema([pa.field(name, kinds[kind]) for name, kind in PROFILE_COLUMNS.items()])


def _table_from_jsonl(path: Path) -> pyarrow.Table:
    """The rows of a JSON lines file as an Arrow table (a torn last line is ignored).
    Arrow's JSON reader builds the columns in C++: a full run's profile holds hundreds of
    thousands of rows, and the run's end waits for it."""
    import pyarrow.json as pa_json

    schema = _arrow_schema()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return schema.empty_table()
    data = data[: data.rfind(b"\n") + 1]
    if not data.strip():
        return schema.empty_table()
    longest = max(map(len, data.split(b"\n")))
    try:
        return pa_json.read_json(
            io.BytesIO(data),
            read_options=pa_json.ReadOptions(block_size=max(1 << 20, longest * 4)),
            parse_options=pa_json.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise ConformanceError(f"{path}: corrupt profile rows: {exc}") from None


def _write_parquet(path: Path, table: pyarrow.Table) -> None:
    import pyarrow.parquet as pq

    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)
