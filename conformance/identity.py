"""Test identity: a canonical, device-independent ``test_id`` for every collected test.

Upstream device-generic tests are instantiated by torch as
``{Generic}{DEVICE}::{template}{_params}_{device}{_dtype...}`` (see
``common_device_type.DeviceTypeTestBase.instantiate_test``). The class suffix reads
``PRIVATEUSE1`` for the first class a PrivateUse1 backend instantiates in a process and
the backend's name afterwards, while method names always use the backend's name, so the
suffix and the device token are both removed to give the same ``test_id`` on every device.

Two entry points:

- :func:`identity_from_item` reads the structured data torch attaches to the instantiated
  test (the ``param_kwargs`` it closes over: OpInfo, ModuleInfo, dtype, other parameters;
  the generic class among the instantiated class's bases) and falls back to the parser.
- :func:`parse_nodeid` works from the nodeid alone (an xdist controller, a stored record).
  It finds ``@ops``/``@modules`` names by looking them up in torch's OpInfo and ModuleInfo
  databases, loaded once on first need.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance.embedded import SUITE_DIR
from conformance.model import EMBEDDED_NAMESPACE, TestIdentity, suite_of_file

if TYPE_CHECKING:
    import torch

__all__ = ["collector_identity", "identity_from_item", "parse_nodeid"]

# Always recognised besides the caller's device names: torch has named PrivateUse1 classes
# and (in older releases) methods "privateuse1" rather than after the backend.
_ALWAYS_DEVICES = ("privateuse1",)

# Keys of param_kwargs that have their own TestIdentity field.
_STRUCTURED_KEYS = frozenset({"device", "devices", "dtype", "dtypes", "op", "module_info"})


def _dtype_name(dtype: torch.dtype) -> str:
    # Same spelling torch uses in test names (common_utils.dtype_name).
    return str(dtype).split(".", 1)[1]


@functools.cache
def _dtype_alternatives() -> str:
    """Every dtype name torch knows, as a regex alternation, longest first (so that
    float8_e4m3fnuz wins over float8_e4m3fn). torch is imported here, not at module import:
    an xdist controller parses names only for tests no worker reported (crashes)."""
    import torch

    names = {_dtype_name(v) for v in vars(torch).values() if isinstance(v, torch.dtype)}
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


@functools.cache
def _dtype_token() -> re.Pattern[str]:
    return re.compile(rf"_({_dtype_alternatives()})(?=_|$)")


@functools.lru_cache(maxsize=64)
def _name_pattern(devices: tuple[str, ...]) -> re.Pattern[str]:
    """``stem _device (_dtype)*`` with the device taken as the last one that only dtypes follow."""
    alt = "|".join(re.escape(d) for d in sorted(devices, key=len, reverse=True))
    return re.compile(
        rf"^(?P<stem>.+?)_(?P<device>{alt})(?P<dtypes>(?:_(?:{_dtype_alternatives()}))*)$"
    )


def _normalise_devices(device_names: Iterable[str]) -> tuple[str, ...]:
    if isinstance(device_names, str):
        raise TypeError("device_names must be an iterable of device names, not a string")
    names = {name.split(":", 1)[0].strip().lower() for name in device_names}
    names.discard("")
    names.update(_ALWAYS_DEVICES)
    return tuple(sorted(names))


def _split_class(test_class: str, devices: tuple[str, ...]) -> tuple[str, str]:
    """(generic class, suffix) when the class ends in a device suffix, else (class, "")."""
    best = ""
    for device in devices:
        suffix = device.upper()
        if len(suffix) > len(best) and test_class.endswith(suffix) and test_class != suffix:
            best = suffix
    return (test_class[: -len(best)], best) if best else (test_class, "")


class _ParametrizedNames:
    """Formatted names of every OpInfo and ModuleInfo, to find them inside test names."""

    def __init__(self) -> None:
        # formatted name -> (op field, variant field)
        self.by_formatted: dict[str, tuple[str, str]] = {}
        self.modules: set[str] = set()  # formatted ModuleInfo names
        self.longest = 0

    def add(self, formatted: str, op: str, variant: str) -> None:
        # First database wins on a clash; op_db is loaded first because most tests use it.
        self.by_formatted.setdefault(formatted, (op, variant))
        self.longest = max(self.longest, len(formatted))


@functools.cache
def _parametrized_names() -> _ParametrizedNames:
    # Importing the databases costs seconds; done once, and only when a name needs it.
    from torch.testing._internal import common_methods_invocations as cmi
    from torch.testing._internal.common_modules import module_db

    names = _ParametrizedNames()
    for db_name in (
        "op_db",
        "python_ref_db",
        "foreach_unary_op_db",
        "foreach_binary_op_db",
        "foreach_pointwise_op_db",
        "foreach_reduce_op_db",
        "foreach_other_op_db",
    ):
        for op in getattr(cmi, db_name, ()):
            names.add(op.formatted_name, op.full_name, op.variant_test_name)
    for module_info in module_db:
        names.add(module_info.formatted_name, module_info.name, "")
        names.modules.add(module_info.formatted_name)
    return names


def _find_parametrized(stem: str) -> tuple[str, str, str, str] | None:
    """(template, op, variant, params) for ``template_<formatted op>[_params]``, or None.

    The op is a database name that ends the stem, after a template of at least
    ``test_x`` (``@modules`` names may be followed by ``_train_mode``/``_eval_mode``);
    ``test_reference_numerics_normal_abs`` is op ``abs``, and
    ``..._linalg_norm_subgradients_at_zero`` is ``linalg.norm.subgradients_at_zero``.
    Parameters after the op (``..._foreach_add_is_fastpath_True``) hide it: the name
    then parses with no op, and the whole stem as template. A test that is not
    ``@ops``-parametrized but whose name ends in an op name (``test_dim_function_empty``)
    is read as one, which is why the structured path of :func:`identity_from_item` is preferred wherever an item exists.
    """
    names = _parametrized_names()
    table = names.by_formatted
    for mode in ("_train_mode", "_eval_mode"):
        # @modules appends the training flag after the module name; "mode" is an op too.
        module_stem = stem.removesuffix(mode)
        if module_stem != stem:
            for start in (i + 1 for i, ch in enumerate(module_stem) if ch == "_" and i >= 6):
                if module_stem[start:] in names.modules:
                    op, variant = table[module_stem[start:]]
                    training = f"training={mode == '_train_mode'}"
                    return module_stem[: start - 1], op, variant, training
    # Only a name that ends the stem counts: an op name inside other parameters
    # (test_CTCLoss_..._reduction_mean_use_module_form_True) is not the test's op, and a
    # miss costs less than a wrong op. Longest first: linalg_norm_subgradients_at_zero.
    for start in (i + 1 for i, ch in enumerate(stem) if ch == "_" and i >= 6):
        if len(stem) - start <= names.longest and stem[start:] in table:
            op, variant = table[stem[start:]]
            return stem[: start - 1], op, variant, ""
    return None


@functools.lru_cache(maxsize=256)
def _test_file(file: str, rootdir: str | None) -> str:
    """``file`` as test_ids name it. The embedded suite's files are named in its namespace,
    ``embedded/`` and their path in the suite folder, whatever pytest's rootdir was (an
    editable install makes it the repository), so skiplists match and no embedded test
    shares a test_id with an upstream one; other files as pytest names them."""
    if rootdir is None:
        return file
    path = Path(os.path.realpath(os.path.join(rootdir, file)))
    try:
        return EMBEDDED_NAMESPACE + path.relative_to(SUITE_DIR).as_posix()
    except ValueError:
        return file


def _rootdir(item: Any) -> str | None:
    config = getattr(item, "config", None)
    return str(config.rootpath) if config is not None else None


def parse_nodeid(
    nodeid: str, device_names: Iterable[str], rootdir: str | os.PathLike | None = None
) -> TestIdentity:
    """Identity of a test from its pytest nodeid alone.

    ``device_names`` are the device tokens to remove (``("emu", "privateuse1", "cpu")``);
    ``privateuse1`` is always recognised; an index (``emu:0``) is ignored, as torch
    names tests by device type only (``_cuda``, never ``_cuda_0``, multi-device tests too). The class suffix and the device token are only
    removed together, so a class that is not device-instantiated keeps its name. The
    dtype suffix (one or more dtypes after the device) goes to ``dtype``, ``_``-joined;
    ``@ops``/``@modules`` names go to ``op`` and ``variant``; text after the op goes to
    ``params``. ``test_id`` is ``file::GenericClass::name`` without the device token.
    With ``rootdir`` (pytest's, which the nodeid is relative to), a file of the embedded
    suite is named relative to the suite folder. Raises ValueError for an empty nodeid.
    """
    if not nodeid or not nodeid.strip():
        raise ValueError("parse_nodeid: empty nodeid")
    parsed = _split_nodeid(nodeid, device_names, rootdir)
    file, test_class, name, test_id = parsed.file, parsed.test_class, parsed.name, parsed.test_id
    if parsed.match is None:
        # Not a device-instantiated test: the name is already device independent.
        return TestIdentity(
            nodeid=nodeid,
            test_id=test_id,
            file=file,
            test_class=test_class,
            template=name,
            suite=suite_of_file(file),
        )
    stem, device = parsed.match["stem"], parsed.match["device"]
    dtypes = _dtype_token().findall(parsed.match["dtypes"])
    template, op, variant, params = stem, "", "", ""
    found = _find_parametrized(stem)
    if found is not None:
        template, op, variant, params = found
    return TestIdentity(
        nodeid=nodeid,
        test_id=test_id,
        file=file,
        test_class=test_class,
        template=template,
        op=op,
        variant=variant,
        dtype="_".join(dtypes),
        params=params,
        device=device,
        suite=suite_of_file(file),
    )


@dataclasses.dataclass(frozen=True)
class _SplitNodeid:
    file: str
    test_class: str  # generic (device suffix removed) where the name is device-instantiated
    name: str
    test_id: str
    match: re.Match[str] | None  # the name's stem, device and dtypes, where instantiated


def _split_nodeid(
    nodeid: str, device_names: Iterable[str], rootdir: str | os.PathLike | None
) -> _SplitNodeid:
    devices = _normalise_devices(device_names)
    parts = nodeid.split("::")
    file = _test_file(parts[0], None if rootdir is None else os.fspath(rootdir))
    name = parts[-1] if len(parts) > 1 else ""
    test_class = "::".join(parts[1:-1])
    match = _name_pattern(devices).match(name) if name else None
    generic_class, class_suffix = _split_class(test_class, devices) if test_class else ("", "")
    if match is None or not class_suffix:
        test_id = "::".join(p for p in (file, test_class, name) if p)
        return _SplitNodeid(file, test_class, name, test_id, None)
    test_id = f"{file}::{generic_class}::{match['stem']}{match['dtypes']}"
    return _SplitNodeid(file, generic_class, name, test_id, match)


def collector_identity(
    nodeid: str, device_names: Iterable[str], rootdir: str | os.PathLike | None = None
) -> TestIdentity:
    """Identity of a collector (a file, module or class) rather than a test: what a
    collection error is recorded under. ``test_id`` is the file as test_ids name it (the
    embedded suite's in its namespace, as :func:`parse_nodeid` does), followed by the class
    path, each class's device suffix removed, when a class failed; ``template`` is empty.
    An empty nodeid (the session's own collector) is named ``.``."""
    devices = _normalise_devices(device_names)
    parts = (nodeid or ".").split("::")
    file = _test_file(parts[0], None if rootdir is None else os.fspath(rootdir))
    test_class = "::".join(_split_class(name, devices)[0] for name in parts[1:])
    return TestIdentity(
        nodeid=nodeid or ".",
        test_id="::".join(p for p in (file, test_class) if p),
        file=file,
        test_class=test_class,
        suite=suite_of_file(file),
    )


def _param_kwargs(function: Any) -> dict[str, Any] | None:
    """The ``param_kwargs`` torch's ``instantiated_test`` closes over as a default, or None."""
    for _ in range(4):  # instantiated_test is the outermost function unless re-wrapped
        if function is None:
            return None
        code = getattr(function, "__code__", None)
        defaults = getattr(function, "__defaults__", None)
        if (
            code is not None
            and code.co_name == "instantiated_test"
            and defaults
            and isinstance(defaults[-1], dict)
        ):
            return defaults[-1]
        function = getattr(function, "__wrapped__", None)
    return None


def _format_value(value: Any) -> str:
    # Stable across processes: never a repr with an address in it.
    import torch

    if isinstance(value, torch.dtype):
        return _dtype_name(value)
    if value is None or isinstance(value, (bool, int, float, str, torch.device)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(_format_value(v) for v in value) + ")"
    for attr in ("full_name", "__qualname__", "__name__"):
        named = getattr(value, attr, None)
        if isinstance(named, str):
            return named
    return type(value).__name__


def _device_token(cls: type) -> str:
    device_type = getattr(cls, "device_type", "")
    if device_type == "privateuse1":
        import torch

        return torch._C._get_privateuse1_backend_name()
    return device_type


def _generic_class(cls: type) -> str | None:
    """The template class an instantiated device class was built from, or None."""
    # instantiate_device_type_tests builds type(name, (device_base, generic_class), {}).
    bases = cls.__bases__
    if len(bases) == 2 and isinstance(getattr(bases[0], "device_type", None), str):
        return bases[1].__name__
    return None


def identity_from_item(item: Any, device_names: Iterable[str]) -> TestIdentity:
    """Identity of a collected pytest item, from torch's structured test data where present.

    For a test instantiated by ``instantiate_device_type_tests``: the generic class comes
    from the instantiated class's bases, the template from the test function's name
    (``functools.wraps`` keeps it through parametrization), op/variant from the OpInfo
    (``full_name``, ``variant_test_name``) or the ModuleInfo name, dtype from the dtype
    parameter and the remaining parameters as ``key=value`` pairs. A test parametrized by
    ``instantiate_parametrized_tests`` (no device) gets the same fields, its name being
    its test_id. Anything else, or a test whose structure does not match its name, goes
    through :func:`parse_nodeid`.
    """
    nodeid: str = item.nodeid
    rootdir = _rootdir(item)
    cls = getattr(item, "cls", None)
    function = getattr(item, "obj", None)
    kwargs = _param_kwargs(function) if cls is not None else None
    if kwargs is None:
        return parse_nodeid(nodeid, device_names, rootdir)
    name = nodeid.rsplit("::", 1)[-1]
    template = getattr(function, "__name__", "")
    dtype = _dtype_field(kwargs)
    generic = _generic_class(cls)
    if generic is None:
        # instantiate_parametrized_tests: "{template}_{suffix}" in the class itself.
        if not (template and name.startswith(template + "_")):
            return parse_nodeid(nodeid, device_names, rootdir)
        file = _test_file(nodeid.split("::", 1)[0], rootdir)
        op, variant, params = _parametrized_fields(kwargs, name)
        return TestIdentity(
            nodeid=nodeid,
            test_id=file + nodeid[nodeid.index("::") :],
            file=file,
            test_class=cls.__name__,
            template=template,
            op=op,
            variant=variant,
            dtype=dtype,
            params=params,
            suite=suite_of_file(file),
        )

    device = _device_token(cls)
    tail = f"_{device}" + (f"_{dtype}" if dtype else "")
    if not (
        template
        and name.startswith(template)
        and name.endswith(tail)
        and len(name) >= len(template) + len(tail)
    ):
        return parse_nodeid(nodeid, device_names, rootdir)
    stem = name[: len(name) - len(tail)]
    op, variant, params = _parametrized_fields(kwargs, stem)
    file = _test_file(nodeid.split("::", 1)[0], rootdir)
    return TestIdentity(
        nodeid=nodeid,
        test_id=f"{file}::{generic}::{stem}" + (f"_{dtype}" if dtype else ""),
        file=file,
        test_class=generic,
        template=template,
        op=op,
        variant=variant,
        dtype=dtype,
        params=params,
        device=device,
        suite=suite_of_file(file),
    )


def _dtype_field(kwargs: dict[str, Any]) -> str:
    """The dtype(s) a test was instantiated for, spelled as in its name."""
    import torch

    value = kwargs.get("dtypes", kwargs.get("dtype"))
    if isinstance(value, (list, tuple)):
        return "_".join(_dtype_name(d) for d in value if isinstance(d, torch.dtype))
    return _dtype_name(value) if isinstance(value, torch.dtype) else ""


def _parametrized_fields(kwargs: dict[str, Any], stem: str) -> tuple[str, str, str]:
    """(op, variant, params) from a test's param_kwargs; ``stem`` is its name sans device."""
    op = variant = ""
    op_info = kwargs.get("op")
    module_info = kwargs.get("module_info")
    if op_info is not None:
        op = getattr(op_info, "full_name", "") or getattr(op_info, "name", "")
        variant = getattr(op_info, "variant_test_name", "") or ""
    elif module_info is not None:
        op = getattr(module_info, "name", "")
    skip_keys = _STRUCTURED_KEYS
    if module_info is not None and not stem.endswith(("_train_mode", "_eval_mode")):
        # @modules passes `training` always but names it only for modules whose train
        # and eval modes differ; a constant is not a parametrization.
        skip_keys = _STRUCTURED_KEYS | {"training"}
    params = ",".join(
        f"{key}={_format_value(value)}" for key, value in kwargs.items() if key not in skip_keys
    )
    return op, variant, params
