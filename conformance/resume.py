"""Which run ``--resume`` may finish: the same selection, interrupted, nothing else.

Resuming appends records to a run folder, so a wrong folder would mix the outcomes of two
different selections into one run and mark it complete. A run is resumed only when it is
incomplete and its records are of the current format, made on the same device, suite, selection
(test paths and -k/-m filters), shard and torch version; anything else is refused before
the folder is touched, with a message that says what differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from conformance.errors import ConfigError
from conformance.model import FORMAT_VERSION, RECORD_FORMAT, RunMeta
from conformance.store import read_meta

__all__ = ["Wanted", "check_resumable"]


@dataclass(frozen=True)
class Wanted:
    """What the resuming session would run."""

    backend: str
    suite: str
    shard: str
    torch_version: str
    paths: list[str] = field(default_factory=list)
    #: -k/-m/--deselect filters; None where they are not known yet (checked by the plugin).
    filters: list[str] | None = field(default_factory=list)
    mode: str = "eager"


def check_resumable(run_dir: str | Path, wanted: Wanted) -> RunMeta:
    """The run's metadata when ``wanted`` may resume it; ConfigError naming every
    difference otherwise. Reads the folder and writes nothing."""
    run_dir = Path(run_dir)
    meta = read_meta(run_dir)
    if meta.complete:
        raise ConfigError(
            "the run is complete: there is nothing to resume (start a new run instead)",
            where=str(run_dir),
        )
    differences = []
    if meta.format_version < RECORD_FORMAT:
        differences.append(
            f"format version: the run has {meta.format_version}, whose records this "
            f"harness (format {FORMAT_VERSION}) does not append to"
        )
    for name, shown in (
        ("backend", "device"),
        ("suite", "suite"),
        ("mode", "mode"),
        ("shard", "shard"),
        ("torch_version", "torch version"),
        ("paths", "test paths"),
        ("filters", "filters"),
    ):
        had, now = getattr(meta, name), getattr(wanted, name)
        if now is not None and had != now:
            differences.append(f"{shown}: the run has {_show(had)}, this command {_show(now)}")
    if differences:
        raise ConfigError(
            "not the same selection, so it cannot be resumed here; "
            + "; ".join(differences)
            + " (the run was left untouched)",
            where=str(run_dir),
        )
    return meta


def _show(value: object) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]" if value else "none"
    return repr(value) if value else "none"
