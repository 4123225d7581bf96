"""A backend's claims: the status it states for each area of the feature matrix, read from a
TOML file and checked against the statuses a run measured (``conformance report
--claims FILE``).

The file holds one table, ``[claims]``, of ``area = "status"`` (the area keys of
:data:`reports.features.AREAS`; a status among :data:`CLAIMABLE`), and optionally a table per
execution mode (``[claims.compile]``, ``[claims.eager]``) whose claims replace the top
level's for runs in that mode::

    [claims]
    autocast = "supported"
    sparse = "unsupported"

    [claims.compile]
    compile = "partial"      # the torch.compile row: a run in compile mode only
    modules = "partial"

Loading is strict: a syntax error, an unknown area, mode or status, or a file with no claim
is a ConfigError naming the file, the line and the bad value.

Each claim for the run's mode gets a verdict (``FeatureRow.verdict``): ``agrees`` when the
area's measured status is the claimed one, ``differs`` when it is another, ``not run`` when
no test of the area was judged (the claim is not checked).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.errors import ConfigError
from conformance.model import MODES
from reports.features import AREAS, FeatureMatrix, FeatureRow
from skiplists.tomllines import Section, at, did_you_mean, error_line, scan

try:  # the standard library's parser where there is one (3.11+)
    import tomllib as _toml

    _TomlError: type[Exception] = _toml.TOMLDecodeError
except ImportError:  # pragma: no cover - Python 3.10
    import tomlkit as _toml  # type: ignore[no-redef]
    from tomlkit.exceptions import TOMLKitError as _TomlError

__all__ = [
    "CLAIMABLE",
    "Claims",
    "apply_claims",
    "difference",
    "load_claims",
    "parse_claims",
]

#: The statuses a backend can claim for an area ("not run" is a run's, not a claim).
CLAIMABLE = ("supported", "partial", "unsupported")

_TABLE = "claims"
_AREA_KEYS = tuple(area.key for area in AREAS)


@dataclass(frozen=True)
class Claims:
    """The claims of one file: ``statuses`` (area key -> claimed status) for every run, and
    ``by_mode`` (mode -> area key -> status), the claims that replace them in that mode."""

    path: str
    statuses: dict[str, str] = field(default_factory=dict)
    by_mode: dict[str, dict[str, str]] = field(default_factory=dict)

    def for_mode(self, mode: str) -> dict[str, str]:
        """The claimed status of each claimed area for a run in ``mode`` ("" is eager)."""
        return {**self.statuses, **self.by_mode.get(mode or "eager", {})}


def load_claims(path: str | Path) -> Claims:
    """The claims of a file, validated (ConfigError naming the file, the line and the
    value)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the claims file: {exc}", where=str(path)) from None
    return parse_claims(text, path)


def parse_claims(text: str, path: str | Path = "<claims>") -> Claims:
    """Parse and validate the text of a claims file (``path`` names it in errors)."""
    try:
        document: Any = _toml.loads(text)
        if not isinstance(document, dict):  # tomlkit's document on the fallback path
            document = document.unwrap()
    except (_TomlError, ValueError) as exc:
        raise ConfigError(
            f"not a valid TOML claims file: {exc}", where=at(path, error_line(exc))
        ) from None
    sections = scan(text)

    def fail(message: str, table: str, key: str = "") -> ConfigError:
        return ConfigError(message, where=at(path, _line(sections, table, key)))

    for key in document:
        if key != _TABLE:
            raise fail(
                f"unknown top-level key {key!r}{did_you_mean(key, [_TABLE])}; the file holds "
                f"one [{_TABLE}] table of area = status",
                "",
                key,
            )
    table = document.get(_TABLE)
    if not isinstance(table, dict):
        raise fail(f"no [{_TABLE}] table of area = status", "", _TABLE)

    def claims_in(items: dict[str, Any], where: str) -> dict[str, str]:
        for area, status in items.items():
            problem = _problem(area, status)
            if problem:
                raise fail(problem, where, area)
        return dict(items)

    statuses: dict[str, str] = {}
    by_mode: dict[str, dict[str, str]] = {}
    for key, value in table.items():
        if not isinstance(value, dict):
            statuses.update(claims_in({key: value}, _TABLE))
        elif key in MODES:
            by_mode[key] = claims_in(value, f"{_TABLE}.{key}")
        else:
            raise fail(
                f"unknown mode table [{_TABLE}.{key}]{did_you_mean(key, MODES)}; "
                f"modes: {', '.join(MODES)}",
                _TABLE,
                key,
            )
    if not statuses and not any(by_mode.values()):
        raise fail(f"[{_TABLE}] states no claim; add area = status lines", _TABLE)
    return Claims(path=str(path), statuses=statuses, by_mode=by_mode)


def _problem(area: str, value: Any) -> str:
    """What is wrong with claiming ``value`` for ``area``; "" when nothing is."""
    if area not in _AREA_KEYS:
        return (
            f"unknown area {area!r}{did_you_mean(area, _AREA_KEYS)}; areas: {', '.join(_AREA_KEYS)}"
        )
    if value == "not run":
        return f"area {area!r}: 'not run' is a run's status, not a claim; leave the area out"
    if not isinstance(value, str) or value not in CLAIMABLE:
        hint = did_you_mean(value, CLAIMABLE) if isinstance(value, str) else ""
        return f"area {area!r}: status {value!r}{hint} is not one of {', '.join(CLAIMABLE)}"
    return ""


def apply_claims(matrix: FeatureMatrix, claims: Claims, mode: str) -> FeatureMatrix:
    """Set each claimed row's ``claimed`` status from the claims for a run in ``mode``, so
    the row's ``verdict`` compares it with the measured status; returns ``matrix``."""
    claimed = claims.for_mode(mode)
    for row in matrix.rows:
        row.claimed = claimed.get(row.key)
    matrix.claims_file = claims.path
    matrix.claims_mode = mode or "eager"
    return matrix


def difference(row: FeatureRow) -> str:
    """A claim the run contradicts, in one line: ``Autocast: claimed supported, measured
    partial: 12 of 55 judged tests passed natively (21.8%) (failures by reason)``."""
    text = f"{row.area.title}: claimed {row.claimed}, measured {row.status}: {row.why()}"
    reasons = row.reasons()
    return f"{text} ({reasons})" if reasons else text


def _line(sections: list[Section], table: str, key: str) -> int:
    """The line of ``key`` in the table named ``table`` ("" the top level): where it is
    assigned, or the header of its own table ``[table.key]``; else the line of the
    table itself; 0 when none is found."""
    own = f"{table}.{key}" if table else key
    for section in sections:
        if section.name == table and key in section.keys:
            return section.keys[key]
        if key and section.name == own:
            return section.line
    if not table:
        return 0
    header = next((section.line for section in sections if section.name == table), 0)
    # A table written inline (`compile = {...}`) or as a dotted key: that key's line.
    parent, _, child = table.rpartition(".")
    return header or _line(sections, parent, child)
