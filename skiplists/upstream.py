"""PyTorch's own skip mechanisms, to and from skiplist entries.

* The disabled-tests JSON (``DISABLED_TESTS_FILE``): ``{"test_name (__main__.TestClass)":
  [issue_url, [platforms]]}``. torch's ``check_if_enable`` disables a test when its class
  name starts with the key's class and its method equals the key's name, or equals it
  once the device and dtype suffixes are removed.
* torch 2.13's ``DeviceTypeTestBase.set_test_configs(op_overrides=, op_allowlist=,
  test_exclusions=)``: ``op_overrides`` maps an OpInfo full_name to ``DecorateInfo``s,
  ``test_exclusions`` maps a generic class to test template names (or ``"*"``), and
  ``op_allowlist`` limits which ops generate tests at all.
"""

from __future__ import annotations

import re
import unittest
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from conformance.errors import ConfigError
from conformance.model import TestIdentity
from skiplists.entry import SkipEntry
from skiplists.loader import DTYPE_PATTERN
from skiplists.skiplist import Skiplist

__all__ = [
    "export_disabled",
    "from_test_configs",
    "import_disabled",
    "install_test_configs",
    "to_test_configs",
    "with_device",
]

_KEY = re.compile(r"(?P<name>\w+) \((?:[\w.]*\.)?(?P<cls>\w+)\)")


def import_disabled(
    data: Mapping[str, Any],
    *,
    device_names: Sequence[str],
    class_files: Mapping[str, str],
    platform: str = "",
    tier: str = "skip",
    category: str = "known_bug",
) -> list[dict[str, Any]]:
    """Entries for a disabled-tests JSON. ``class_files`` maps generic class -> file (from a
    run); keys whose class it does not know become patterns over any file. With
    ``platform``, keys limited to other platforms are left out."""
    suffixes = sorted({d.upper() for d in (*device_names, "privateuse1")}, key=len, reverse=True)
    tokens = sorted({d.lower() for d in (*device_names, "privateuse1")}, key=len, reverse=True)
    device_token = re.compile(rf"_(?:{'|'.join(map(re.escape, tokens))})(?=_|$)")
    entries = []
    for key, value in data.items():
        found = _KEY.fullmatch(key)
        if found is None:
            raise ConfigError(
                f"{key!r} is not 'test_name (module.TestClass)'", where="disabled-tests"
            )
        if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], list)):
            raise ConfigError(
                f"{key!r}: value must be [issue_url, [platforms]]", where="disabled-tests"
            )
        link, platforms = value
        if platform and platforms and platform not in platforms:
            continue
        cls = found["cls"]
        generic = next((cls[: -len(s)] for s in suffixes if cls.endswith(s) and cls != s), cls)
        name = device_token.sub("", found["name"])
        file = class_files.get(generic)
        specific = name != found["name"]  # named one device variant, not every variant
        if file and specific:
            selector: dict[str, Any] = {"test_id": f"{file}::{generic}::{name}"}
        else:
            # A bare name disables every device and dtype variant of the test.
            file_part = re.escape(file) if file else r"[^:]+"
            tail = "" if specific else f"(?:_{DTYPE_PATTERN.pattern})?"
            selector = {"pattern": f"{file_part}::{re.escape(generic)}::{re.escape(name)}{tail}"}
        scope = f" on {', '.join(platforms)}" if platforms else ""
        entries.append(
            {
                **selector,
                "tier": tier,
                "category": category,
                "reason": f"disabled upstream{scope} ({key})",
                "link": link if isinstance(link, str) and link.startswith("http") else "",
            }
        )
    return entries


def export_disabled(
    skiplist: Skiplist,
    identities: Iterable[TestIdentity] | None,
    *,
    device: str,
    tiers: Collection[str] = ("skip", "deselect"),
) -> tuple[dict[str, list[Any]], list[SkipEntry]]:
    """The disabled-tests JSON for entries of the given tiers, and the entries that could not
    be exported. With ``identities`` (a run or a collection) every entry is expanded to
    the tests it applies to; without, only exact test_ids are exported."""
    disabled: dict[str, list[Any]] = {}
    left_out: list[SkipEntry] = []

    def add(entry: SkipEntry, test_id: str) -> None:
        _file, cls, name = test_id.split("::")[-3:] if test_id.count("::") >= 2 else ("", "", "")
        if not cls:
            left_out.append(entry)
            return
        key = f"{with_device(name, device)} (__main__.{cls})"
        disabled[key] = [entry.link, []]

    if identities is not None:
        for identity in identities:
            entry = skiplist.match(identity)
            if entry is not None and entry.tier in tiers:
                add(entry, identity.test_id)
        return disabled, left_out
    for entry in skiplist.entries:
        if entry.tier not in tiers:
            continue
        if not entry.selector.test_ids:
            left_out.append(entry)
            continue
        for test_id in entry.selector.test_ids:
            add(entry, test_id)
    return disabled, left_out


def with_device(name: str, device: str) -> str:
    """Put the device token back where torch writes it: before the dtype suffix."""
    found = re.search(rf"(?:_{DTYPE_PATTERN.pattern})$", name)
    if found is None:
        return f"{name}_{device}"
    return f"{name[: found.start()]}_{device}{found.group(0)}"


def to_test_configs(skiplist: Skiplist, device_type: str) -> dict[str, Any]:
    """Plain data for ``set_test_configs``: ``op_overrides`` as ``{op: [{"tier", "class",
    "test", "dtypes", "reason"}]}`` from structured entries with an ``op`` (and no other
    fields than class, template, dtypes); ``test_exclusions`` from deselect entries that
    select a class or a class and template. Other entries are not expressible there."""
    overrides: dict[str, list[dict[str, Any]]] = {}
    exclusions: dict[str, list[str] | str] = {}
    for entry in skiplist.entries:
        selector = entry.selector
        fields = selector.field_values()
        if selector.kind != "fields":
            continue
        if selector.op and set(fields) <= {"op", "test_class", "template", "dtype"}:
            overrides.setdefault(selector.op, []).append(
                {
                    "tier": entry.tier,
                    "class": selector.test_class or None,
                    "test": selector.template or None,
                    "dtypes": list(selector.dtypes) or None,
                    "reason": entry.mark_reason(),
                    "device_type": device_type,
                }
            )
        elif entry.tier == "deselect" and set(fields) == {"test_class"}:
            exclusions[selector.test_class] = "*"
        elif entry.tier == "deselect" and set(fields) == {"test_class", "template"}:
            current = exclusions.setdefault(selector.test_class, [])
            if isinstance(current, list):
                current.append(selector.template)
    return {"op_overrides": overrides, "op_allowlist": None, "test_exclusions": exclusions}


def install_test_configs(configs: Mapping[str, Any], base: Any = None) -> None:
    """Call ``set_test_configs`` on the device test base (PrivateUse1TestBase by default)
    with real ``DecorateInfo`` objects built from :func:`to_test_configs` data."""
    import torch
    from torch.testing._internal import common_device_type
    from torch.testing._internal.opinfo.core import DecorateInfo

    base = base or common_device_type.PrivateUse1TestBase
    overrides = {}
    for op, infos in configs.get("op_overrides", {}).items():
        decorated = []
        for info in infos:
            # deselect cannot be expressed per variant upstream; skip is the nearest.
            decorator = (
                unittest.expectedFailure
                if info["tier"] == "xfail"
                else unittest.skip(info["reason"])
            )
            dtypes = tuple(getattr(torch, d) for d in info["dtypes"]) if info["dtypes"] else None
            decorated.append(
                DecorateInfo(
                    decorator,
                    info["class"],
                    info["test"],
                    device_type=info.get("device_type"),
                    dtypes=dtypes,
                )
            )
        overrides[op] = decorated
    base.set_test_configs(
        op_overrides=overrides or None,
        op_allowlist=configs.get("op_allowlist"),
        test_exclusions=configs.get("test_exclusions") or None,
    )


def from_test_configs(
    *,
    op_overrides: Mapping[str, Sequence[Any]] | None = None,
    op_allowlist: Collection[str] | None = None,
    test_exclusions: Mapping[str, Any] | None = None,
    all_ops: Collection[str] = (),
    category: str = "known_bug",
) -> list[dict[str, Any]]:
    """Entries equivalent to a backend's ``set_test_configs`` arguments. ``op_overrides``
    values may be DecorateInfo objects or :func:`to_test_configs` dicts; ``all_ops`` (the
    OpInfo full names) is needed to turn an allowlist into deselect entries."""
    entries: list[dict[str, Any]] = []
    for op, infos in (op_overrides or {}).items():
        for info in infos:
            if isinstance(info, Mapping):
                tier, cls, test, dtypes = info["tier"], info["class"], info["test"], info["dtypes"]
            else:
                tier = "xfail" if any(_is_expected_failure(d) for d in info.decorators) else "skip"
                cls, test = info.cls_name, info.test_name
                dtypes = (
                    [str(d).removeprefix("torch.") for d in info.dtypes] if info.dtypes else None
                )
            entries.append(
                {
                    "class": cls or "",
                    "template": test or "",
                    "op": op,
                    "dtypes": list(dtypes or []),
                    "tier": tier,
                    "category": category,
                    "reason": f"op_overrides[{op!r}] of the backend's test configs",
                }
            )
    for cls, names in (test_exclusions or {}).items():
        for name in ["*"] if names == "*" or "*" in names else names:
            entries.append(
                {
                    "class": cls,
                    "template": "" if name == "*" else name,
                    "tier": "deselect",
                    "category": "not_applicable",
                    "reason": f"test_exclusions[{cls!r}] of the backend's test configs",
                }
            )
    if op_allowlist is not None:
        allowed = set(op_allowlist)
        for op in sorted(set(all_ops) - allowed):
            entries.append(
                {
                    "op": op,
                    "tier": "deselect",
                    "category": "not_applicable",
                    "reason": "not in the backend's op_allowlist",
                }
            )
    return entries


def _is_expected_failure(decorator: Any) -> bool:
    return (
        decorator is unittest.expectedFailure
        or getattr(decorator, "__name__", "") == "expectedFailure"
    )
