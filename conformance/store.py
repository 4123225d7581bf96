"""The results store: one folder per run, written as tests finish, read by every later stage.

Layout under a runs root::

    <root>/<run_id>/meta.json          RunMeta; ``complete`` turns true when the run ends
    <root>/<run_id>/outcomes.jsonl     one ResultRecord per line, appended and flushed per test
    <root>/<run_id>/outcomes.parquet   the same records, consolidated when the run ends
    <root>/<run_id>/ops_profile.*      per-op profile of a run made with --profile
                                       (conformance.profile_store)
    <root>/latest                      symlink (or, where links fail, a file) naming the last run

The JSON lines file is the log of record: a run that is killed keeps every line that was
flushed, and ``--resume`` appends to it. The Parquet file is a consolidated copy, rewritten
whenever a run (or a resumed run) ends, and removed while a resumed run is going on.
"""

from __future__ import annotations

import io
import json
import os
import secrets
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance.errors import ConfigError, ConformanceError
from conformance.model import (
    ATTEMPT_FIELDS,
    EMBEDDED_NAMESPACE,
    RECORD_COLUMNS,
    RECORD_FORMAT,
    ResultRecord,
    RunMeta,
)

if TYPE_CHECKING:
    import pandas
    import pyarrow

__all__ = [
    "JSONL_NAME",
    "LATEST_NAME",
    "META_NAME",
    "PARQUET_NAME",
    "RunWriter",
    "amending_runs",
    "list_runs",
    "new_run_id",
    "point_latest",
    "read_amended",
    "read_as_amended",
    "read_meta",
    "read_records",
    "read_run",
    "resolve_run",
    "rewrite_records",
    "utc_now",
    "write_meta",
]

META_NAME = "meta.json"
JSONL_NAME = "outcomes.jsonl"
PARQUET_NAME = "outcomes.parquet"
LATEST_NAME = "latest"

_LIST_COLUMNS = ("ops_dispatched", "ops_fallback")
#: Lists of dicts (a record's attempts): read as Python lists, like the list columns.
_STRUCT_LIST_COLUMNS = ("attempts",)
_FLOAT_COLUMNS = ("duration_s",)
_INT_COLUMNS = ("rerun", "sample_index")
#: Every record field's default, for runs written before the field existed.
_DEFAULTS = ResultRecord(run_id="", nodeid="", test_id="", file="").to_dict()


def utc_now() -> str:
    """The current time as ISO 8601 in UTC, to the second."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def new_run_id(backend: str) -> str:
    """A fresh run id that sorts by start time: ``20261129-222030-emu-3f2a``."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{backend}-{secrets.token_hex(2)}"


class RunWriter:
    """Appends records to one run folder; the only code that writes a run.

    Opening a folder that already holds records (a resumed run) keeps them: new records are
    appended, and a nodeid already recorded is never written again, so a run holds one
    record per test however often it is resumed.
    """

    def __init__(self, run_dir: str | os.PathLike[str], meta: RunMeta) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.meta = meta
        # A run killed mid-write leaves a torn last line: cut it, or the next record
        # appended would be glued to it.
        _drop_torn_tail(self.run_dir / JSONL_NAME)
        earlier = list(_iter_jsonl(self.run_dir / JSONL_NAME))
        self.recorded: set[str] = {r["nodeid"] for r in earlier}
        #: test_ids with a record: what a resumed run does not run again, on any process.
        self.recorded_ids: set[str] = {r["test_id"] for r in earlier}
        # Records appended from now on make any earlier consolidation stale.
        (self.run_dir / PARQUET_NAME).unlink(missing_ok=True)
        self.meta.complete = False
        _write_json_atomic(self.run_dir / META_NAME, self.meta.to_dict())
        self._jsonl = open(self.run_dir / JSONL_NAME, "a", encoding="utf-8")  # noqa: SIM115
        _point_latest(self.run_dir)

    def write(self, record: ResultRecord) -> bool:
        """Append one record and flush it; return False (and write nothing) for a nodeid
        already recorded in this run."""
        if record.nodeid in self.recorded:
            return False
        self.recorded.add(record.nodeid)
        self.recorded_ids.add(record.test_id)
        # One write call per line: a kill between calls can only tear the last line.
        # A shallow dict: dataclasses.asdict deep-copies, which costs more than the write.
        line = json.dumps(
            {name: getattr(record, name) for name in RECORD_COLUMNS}, ensure_ascii=False
        )
        self._jsonl.write(line + "\n")
        self._jsonl.flush()
        return True

    def close(self, *, complete: bool = True, **meta_updates: Any) -> RunMeta:
        """End the session: consolidate the records into Parquet and finalize ``meta.json``.

        ``complete`` says whether every test of the run now has its record (False for a
        session that was interrupted: it can be resumed). ``meta_updates`` sets RunMeta
        fields (``collected``, ``end_time``...); the end time defaults to now.
        """
        if not self._jsonl.closed:
            self._jsonl.close()
        for name, value in meta_updates.items():
            setattr(self.meta, name, value)
        if not self.meta.end_time:
            self.meta.end_time = utc_now()
        records = list(_iter_jsonl(self.run_dir / JSONL_NAME))
        _write_parquet(self.run_dir / PARQUET_NAME, records)
        self.meta.complete = complete
        _write_json_atomic(self.run_dir / META_NAME, self.meta.to_dict())
        return self.meta

    def update_meta(self, **meta_updates: Any) -> None:
        """Change RunMeta fields while the run goes on (written at once)."""
        for name, value in meta_updates.items():
            setattr(self.meta, name, value)
        _write_json_atomic(self.run_dir / META_NAME, self.meta.to_dict())


def read_meta(run_dir: str | os.PathLike[str]) -> RunMeta:
    """The RunMeta of a run folder; ConfigError naming the folder or file when absent or bad."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError("no such run folder", where=str(run_dir))
    path = run_dir / META_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError("not a run folder (no meta.json)", where=str(run_dir)) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"unreadable run metadata: {exc}", where=str(path)) from None
    if not isinstance(data, dict) or "run_id" not in data:
        raise ConfigError("run metadata has no run_id", where=str(path))
    return RunMeta.from_dict(data)


def read_records(
    run_dir: str | os.PathLike[str], meta: RunMeta | None = None
) -> list[dict[str, Any]]:
    """Every record of a run as dicts: from Parquet when consolidated, else from the JSON
    lines, where a torn last line (a run killed mid-write) is ignored. Records of an older
    format version are read as the current one (``meta``: the run's, when already read)."""
    run_dir = Path(run_dir)
    parquet = run_dir / PARQUET_NAME
    if parquet.exists():
        records = _read_parquet_table(parquet).to_pylist()
    else:
        records = list(_iter_jsonl(run_dir / JSONL_NAME))
    if records and "suite" not in records[0]:
        upgrade = _v1_upgrade(meta or read_meta(run_dir))
        records = [upgrade(record) for record in records]
    missing = {k: v for k, v in _DEFAULTS.items() if records and k not in records[0]}
    if missing:  # fields newer than the run: their defaults
        records = [{**missing, **record} for record in records]
    return records


def _v1_upgrade(meta: RunMeta) -> Any:
    """The function that reads a format-1 record as format 2: it gains ``suite``, and a
    test of the embedded suite is named in the ``embedded/`` namespace."""
    embedded = meta.suite.startswith("embedded")

    def upgrade(record: dict[str, Any]) -> dict[str, Any]:
        record = dict(record)
        record["suite"] = "embedded" if embedded else "upstream"
        if embedded:
            for name in ("file", "test_id"):
                value = record.get(name) or ""
                if value and not value.startswith(EMBEDDED_NAMESPACE):
                    record[name] = EMBEDDED_NAMESPACE + value
        return record

    return upgrade


def _read_parquet_table(parquet: Path, columns: list[str] | None = None) -> pyarrow.Table:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(parquet, columns=columns)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise ConformanceError(f"{parquet}: unreadable outcomes: {exc}") from None


def _parquet_columns(parquet: Path) -> list[str]:
    import pyarrow.parquet as pq

    try:
        return pq.read_schema(parquet).names
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise ConformanceError(f"{parquet}: unreadable outcomes: {exc}") from None


def _constant_column(name: str, rows: int) -> pyarrow.Array:
    import pyarrow as pa

    kind = _arrow_schema().field(name).type
    return pa.array([_DEFAULTS[name]] * rows, type=kind)


def read_run(
    run_dir: str | os.PathLike[str], columns: Sequence[str] | None = None
) -> tuple[RunMeta, pandas.DataFrame]:
    """Read a run: its metadata and one DataFrame row per record, columns RECORD_COLUMNS
    (or only ``columns``, which a finished run then reads alone from disk).

    Works on a finished run (Parquet) and on a run still going on or cut off (JSON lines).
    """
    import pandas

    names = list(RECORD_COLUMNS) if columns is None else list(columns)
    unknown = [name for name in names if name not in RECORD_COLUMNS]
    if unknown:
        raise ConfigError(f"no such record columns: {', '.join(unknown)}", where=str(run_dir))
    meta = read_meta(run_dir)
    parquet = Path(run_dir) / PARQUET_NAME
    if parquet.exists() and meta.format_version < RECORD_FORMAT:
        # A run of an older format is read record by record, each upgraded.
        records = read_records(run_dir, meta)
        frame = pandas.DataFrame.from_records(records, columns=list(RECORD_COLUMNS))[names]
        for name in set(_LIST_COLUMNS + _STRUCT_LIST_COLUMNS).intersection(names):
            frame[name] = frame[name].map(lambda ops: [] if ops is None else list(ops))
    elif parquet.exists():
        # Arrow builds the columns directly: an order of magnitude faster than records.
        # Fields newer than the run are not in its file: they read as their defaults.
        # (The footer's schema is read every time: a few microseconds, and a run whose
        # writer predates a field reads right whatever its version number says.)
        present = set(_parquet_columns(parquet))
        table = _read_parquet_table(parquet, [n for n in names if n in present])
        for name in names:
            if name not in table.column_names:
                table = table.append_column(name, _constant_column(name, table.num_rows))
        lists = {
            n: table.column(n).to_pylist()
            for n in (*_LIST_COLUMNS, *_STRUCT_LIST_COLUMNS)
            if n in names
        }
        frame = table.drop_columns(list(lists)).to_pandas()
        for name, values in lists.items():  # Python lists straight from Arrow, no per-row map
            frame[name] = [[] if ops is None else ops for ops in values]
        frame = frame.reindex(columns=names)
    else:
        records = read_records(run_dir, meta)
        frame = pandas.DataFrame.from_records(records, columns=list(RECORD_COLUMNS))[names]
        for name in set(_LIST_COLUMNS + _STRUCT_LIST_COLUMNS).intersection(names):
            frame[name] = frame[name].map(list)
    for name in set(_FLOAT_COLUMNS).intersection(names):
        frame[name] = frame[name].astype("float64")
    for name in set(_INT_COLUMNS).intersection(names):
        frame[name] = frame[name].astype("int64")
    return meta, frame


def read_amended(
    base_dir: str | os.PathLike[str],
    reruns: Sequence[str | os.PathLike[str]],
    columns: Sequence[str] | None = None,
) -> tuple[RunMeta, pandas.DataFrame]:
    """A base run amended by reruns of some of its tests: the base run's metadata and one
    row per test, the latest outcome of each (a later rerun wins), keyed on test_id.

    Every rerun must name the base run in its ``amends`` (ConfigError naming the rerun
    otherwise). Nothing is written: the base run stays as it was recorded."""
    import pandas

    meta, frame = read_run(base_dir, columns)
    if not reruns:
        return meta, frame
    if columns is not None and "test_id" not in columns:
        raise ConfigError("an amended view needs the test_id column", where=str(base_dir))
    frames = [frame]
    traced = _traced_ops({}, frame)  # test_id -> the ops its latest traced run dispatched
    for rerun in reruns:
        rerun_meta, rerun_frame = read_run(rerun, columns)
        if rerun_meta.amends != meta.run_id:
            amends = f"amends {rerun_meta.amends}" if rerun_meta.amends else "amends no run"
            raise ConfigError(f"{amends}, not {meta.run_id}", where=str(rerun))
        if "--trace-ops" in rerun_meta.command:
            _traced_ops(traced, rerun_frame)
        elif "ops_dispatched" in rerun_frame.columns:
            # Recorded without --trace-ops, the rerun holds no ops: its tests keep the
            # ones they dispatched before (the ops do not change with the outcome, and
            # coverage snapshots of the amended view count them).
            rerun_frame = rerun_frame.copy()
            rerun_frame["ops_dispatched"] = [
                ops if len(ops) else traced.get(test_id, ops)
                for test_id, ops in zip(
                    rerun_frame["test_id"], rerun_frame["ops_dispatched"], strict=True
                )
            ]
        frames.append(rerun_frame)
    amended = pandas.concat(frames, ignore_index=True)
    amended = amended.drop_duplicates("test_id", keep="last").reset_index(drop=True)
    return meta, amended


def _traced_ops(traced: dict[str, Any], frame: pandas.DataFrame) -> dict[str, Any]:
    """``traced`` updated with the ops each of ``frame``'s tests dispatched, if it has them."""
    if "ops_dispatched" in frame.columns:
        for test_id, ops in zip(frame["test_id"], frame["ops_dispatched"], strict=True):
            if len(ops):
                traced[test_id] = ops
    return traced


def read_as_amended(
    run_dir: str | os.PathLike[str], columns: Sequence[str] | None = None
) -> tuple[RunMeta, pandas.DataFrame]:
    """A run as the whole picture it belongs to: a run of its own as it is; a rerun as its
    base run amended by every rerun of that base up to and including this one (by start
    time), with the rerun's metadata. The base is looked up beside the rerun."""
    run_dir = Path(run_dir)
    meta = read_meta(run_dir)
    if not meta.amends:
        return read_run(run_dir, columns)
    base_dir, reruns = amending_runs(run_dir, meta)
    _, frame = read_amended(base_dir, reruns, columns)
    return meta, frame


def amending_runs(run_dir: Path, meta: RunMeta) -> tuple[Path, list[Path]]:
    """For a rerun (``meta.amends`` set): its base run's folder, looked up beside it, and
    every rerun of that base up to and including this one, by start time."""
    root = run_dir.parent
    base_dir = root / meta.amends
    if not (base_dir / META_NAME).is_file():
        raise ConfigError(
            f"the run it amends, {meta.amends}, is not beside it in {root}", where=str(run_dir)
        )
    mine = (meta.start_time, meta.run_id)
    reruns = [
        root / other.run_id
        for other in list_runs(root)
        if other.amends == meta.amends and (other.start_time, other.run_id) <= mine
    ]
    return base_dir, reruns


def list_runs(root: str | os.PathLike[str]) -> list[RunMeta]:
    """The runs under a runs root, oldest first; folders without ``meta.json`` are ignored."""
    root = Path(root)
    if not root.is_dir():
        raise ConfigError("no such runs folder", where=str(root))
    runs = []
    for child in sorted(root.iterdir()):
        if child.name == LATEST_NAME or not (child / META_NAME).is_file():
            continue
        runs.append(read_meta(child))
    return sorted(runs, key=lambda meta: (meta.start_time, meta.run_id))


def resolve_run(ref: str | os.PathLike[str], root: str | os.PathLike[str] = "runs") -> Path:
    """The folder a run reference names: ``latest`` or a run id, under ``root`` (never the
    working directory, which may hold another runs root), or a path to a run folder."""
    text = str(ref)
    root = Path(root)
    if text == LATEST_NAME:
        latest = root / LATEST_NAME
        candidate = latest
        if latest.is_symlink() or latest.is_dir():
            candidate = latest.resolve()
        elif latest.is_file():
            candidate = root / latest.read_text(encoding="utf-8").strip()
        if (candidate / META_NAME).is_file():
            return candidate
        raise ConfigError(f"no latest run under {root}")
    if os.sep not in text and "/" not in text and (root / text / META_NAME).is_file():
        return root / text
    path = Path(ref)
    if (path / META_NAME).is_file():
        return path
    raise ConfigError(f"no run named {text!r} (neither a run folder nor a run id under {root})")


def _iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    try:
        handle = open(path, encoding="utf-8")  # noqa: SIM115
    except FileNotFoundError:
        return
    with handle:
        lines = handle.read().split("\n")
    # Every complete line ends with "\n", so the last element is "" unless the writer was
    # killed mid-line: that torn fragment is dropped.
    lines.pop()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConformanceError(f"{path}:{number}: corrupt record: {exc}") from None
        if not isinstance(data, dict) or "nodeid" not in data:
            raise ConformanceError(f"{path}:{number}: not a result record")
        yield data


def _drop_torn_tail(path: Path) -> None:
    try:
        handle = open(path, "rb+")  # noqa: SIM115
    except FileNotFoundError:
        return
    with handle:
        data = handle.read()
        if data and not data.endswith(b"\n"):
            handle.truncate(data.rfind(b"\n") + 1)


def _arrow_schema() -> pyarrow.Schema:
    import pyarrow as pa

    fields = []
    for name in RECORD_COLUMNS:
        if name in _LIST_COLUMNS:
            kind = pa.list_(pa.string())
        elif name in _STRUCT_LIST_COLUMNS:
            kind = pa.list_(_attempt_type())
        elif name in _FLOAT_COLUMNS:
            kind = pa.float64()
        elif name in _INT_COLUMNS:
            kind = pa.int64()
        else:
            kind = pa.string()
        fields.append(pa.field(name, kind))
    return pa.schema(fields)


def _attempt_type() -> pyarrow.DataType:
    import pyarrow as pa

    return pa.struct(
        [
            pa.field(name, pa.float64() if name == "duration_s" else pa.string())
            for name in ATTEMPT_FIELDS
        ]
    )


def rewrite_records(
    run_dir: str | os.PathLike[str],
    records: Sequence[dict[str, Any]],
    meta: RunMeta | None = None,
) -> None:
    """Replace the records of a run that has ended (``conformance run`` folds the retries of
    its failed tests into their records this way, before anything else reads the run): the
    JSON lines and, where the run was consolidated, the Parquet file, each replaced whole
    (a kill leaves the old file or the new one, never a mix); then ``meta``, when given."""
    run_dir = Path(run_dir)
    lines = "".join(
        json.dumps(
            {name: record.get(name, _DEFAULTS[name]) for name in RECORD_COLUMNS}, ensure_ascii=False
        )
        + "\n"
        for record in records
    )
    tmp = run_dir / (JSONL_NAME + ".tmp")
    tmp.write_text(lines, encoding="utf-8")
    os.replace(tmp, run_dir / JSONL_NAME)
    if (run_dir / PARQUET_NAME).exists():
        _write_parquet(run_dir / PARQUET_NAME, records)
    if meta is not None:
        write_meta(run_dir, meta)


def write_meta(run_dir: str | os.PathLike[str], meta: RunMeta) -> None:
    """Replace a run's ``meta.json`` with ``meta`` (atomically)."""
    _write_json_atomic(Path(run_dir) / META_NAME, meta.to_dict())


def _write_parquet(path: Path, records: Iterable[dict[str, Any]]) -> None:
    import pyarrow.json as pa_json
    import pyarrow.parquet as pq

    schema = _arrow_schema()
    defaults = _DEFAULTS
    lines = [
        json.dumps({name: record.get(name, defaults[name]) for name in RECORD_COLUMNS}) + "\n"
        for record in records
    ]
    if lines:
        # Arrow's JSON reader builds the columns in C++; building them from Python lists
        # (pa.array, Table.from_pydict) would import pandas, a second of a run's end.
        data = "".join(lines).encode("utf-8")
        table = pa_json.read_json(
            io.BytesIO(data),
            read_options=pa_json.ReadOptions(block_size=max(1 << 20, max(map(len, lines)) * 4)),
            parse_options=pa_json.ParseOptions(explicit_schema=schema),
        )
    else:
        table = schema.empty_table()
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def point_latest(run_dir: str | os.PathLike[str]) -> None:
    """Point ``latest`` in the run's runs root at it (a run made after the one a command is
    about, such as its baseline on demand, leaves ``latest`` at the command's run)."""
    _point_latest(Path(run_dir))


def _point_latest(run_dir: Path) -> None:
    latest = run_dir.parent / LATEST_NAME
    tmp = run_dir.parent / f".{LATEST_NAME}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    try:
        tmp.symlink_to(run_dir.name, target_is_directory=True)
    except OSError:  # file systems without symlinks get a file naming the run
        tmp.write_text(run_dir.name + "\n", encoding="utf-8")
    os.replace(tmp, latest)
