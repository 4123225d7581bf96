"""The feature matrix: per feature area and dtype family, ``supported``, ``partial``,
``unsupported`` or ``not run``, derived from a run's records by the rules in this module.

Nothing in the matrix is typed by hand. Which tests belong to an area is a predicate over
the result record's fields (``file``, ``test_class``, ``template``, ``op``, ``dtype``,
``params``, ``mode``, ``category``, ``detail``, ``test_id``), declared once in
:data:`AREAS`; the status of an area is :func:`status_of` over the outcomes of its tests.
Reports render both, the rules in words (``Rule.describe``) beside the table.

The status rule (:func:`status_of`), per area:

- Tests written for another device type (category ``not_applicable``) are left out, and
  so are tests skipped for reasons that are not the backend's (category ``upstream_skip``:
  the test's own skip decorators; ``environment``: a package the machine lacks) and tests
  the test itself expects to fail on every device (``xfailed`` with no skiplist entry: an
  OpInfo's own expected failure). The rest are the area's *judged* tests.
- A judged test *passed natively* when it passed without any op falling back to the CPU,
  was flaky (failed, then passed on its retry), or passed unexpectedly (``xpassed``: the
  skiplist entry is stale, the feature works). It was *refused* when it did not pass and
  its category is ``unsupported_feature`` or ``unsupported_dtype``, or a missing lowering
  of one of the area's own ops (``Area.core_ops``). Every other judged test counts as not
  passing: failures, errors, crashes, timeouts, passes through the CPU fallback, and tests
  the backend's skiplists skip or expect to fail.
- ``not run``: no judged test. ``unsupported``: none passed natively, or at least half of
  the judged tests were refused. ``supported``: at least :data:`SUPPORTED_RATE` of the
  judged tests passed natively and none was refused. ``partial``: anything else.

Tests of sparse, nested or quantized tensors count in those rows only (``Area.dense``):
the other rows describe dense tensors, so a layout the backend refuses does not make every
dtype family partial. Likewise a dtype family's row is refused only by ``unsupported_dtype``
(``Area.refusals``): a test of the family refused as an unsupported feature is that
feature's row's business and is not counted in the dtype's (``Area.ignores``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from conformance.model import OUTCOMES
from reports.counts import Counts, percent

if TYPE_CHECKING:
    import numpy
    import pandas

__all__ = [
    "AREAS",
    "STATUSES",
    "SUPPORTED_RATE",
    "VERDICTS",
    "Area",
    "FeatureMatrix",
    "FeatureRow",
    "Rule",
    "build_features",
    "memberships",
    "rule_text",
    "status_of",
]

#: The statuses of a cell, best first.
STATUSES = ("supported", "partial", "unsupported", "not run")
#: A backend's claim against the measured status (``reports.claims``), in the order reports
#: count them.
VERDICTS = ("agrees", "differs", "not run")
#: Share of an area's judged tests that must pass natively for ``supported``.
SUPPORTED_RATE = 0.95
#: Categories of skips that are not the backend's: the test's own skip, the machine's.
NEUTRAL_SKIPS = ("upstream_skip", "environment")
#: Categories of a refusal: the backend said it does not support what the test asked.
REFUSALS = ("unsupported_feature", "unsupported_dtype")
#: Outcomes of a test that passed natively (unless ops fell back to the CPU).
PASSING = ("passed", "flaky", "xpassed")
_SKIP_OUTCOMES = ("skipped", "deselected", "xfailed")


def rule_text() -> str:
    """The status rule in a few sentences, as the reports print it in their legend."""
    rate = f"{SUPPORTED_RATE:.0%}"
    return (
        "Each area is judged on its tests that ran on the device or were kept from it by the "
        "backend; tests written for another device type (not_applicable), skipped by the "
        "test's own decorators or for a missing package (upstream_skip, environment), and the "
        "test's own expected failures (xfailed with no skiplist entry) are left out. "
        f"supported: at least {rate} of them passed natively (passed with no CPU fallback, "
        "flaky, or passed unexpectedly) and none was refused (unsupported_feature, "
        "unsupported_dtype, or a missing lowering of the area's own ops); "
        "unsupported: none passed natively, or at least half were refused; "
        "partial: anything between; not run: no test of the area was judged. "
        "Tests of sparse, nested or quantized tensors count in those rows only; a dtype "
        "family is refused only by unsupported_dtype, and leaves a test refused as an "
        "unsupported feature to that feature's row."
    )


# -- Rules: predicates over records, vectorised over a frame ---------------------------------


class _Columns:
    """A frame's columns as codes over their distinct values, so a regular expression runs
    once per distinct value (a run has ~150K tests but a few hundred templates), in Arrow's
    regular expression engine where the column is Arrow's; each (column, pattern) is
    searched once."""

    def __init__(self, frame: pandas.DataFrame) -> None:
        self.frame = frame
        self._factorized: dict[str, tuple[numpy.ndarray, pandas.Series]] = {}
        self._labels: dict[str, list[str]] = {}
        self._searched: dict[tuple[str, str], numpy.ndarray] = {}

    def __len__(self) -> int:
        return len(self.frame)

    def codes(self, name: str) -> tuple[numpy.ndarray, pandas.Series]:
        """Each record's code into the column's distinct values; a missing value is ""."""
        import numpy
        import pandas

        if name not in self._factorized:
            if name in self.frame.columns:
                codes, uniques = pandas.factorize(self.frame[name], sort=False)
                uniques = pandas.Series(uniques, copy=False)
                if not _arrow_strings(uniques):
                    uniques = uniques.astype(str).astype(object)
            else:
                codes, uniques = numpy.full(len(self.frame), -1), pandas.Series([], dtype=object)
            if (codes < 0).any():
                codes = numpy.where(codes < 0, len(uniques), codes)
                uniques = pandas.concat([uniques, pandas.Series([""], dtype=uniques.dtype)])
            self._factorized[name] = (codes, uniques.reset_index(drop=True))
        return self._factorized[name]

    def labels(self, name: str) -> list[str]:
        """The column's distinct values, in code order."""
        if name not in self._labels:
            self._labels[name] = [str(value) for value in self.codes(name)[1].tolist()]
        return self._labels[name]

    def isin(self, name: str, values: Iterable[str]) -> numpy.ndarray:
        """Whether each record's ``name`` is one of ``values``."""
        import numpy

        wanted = set(values)
        hits = numpy.asarray([label in wanted for label in self.labels(name)], dtype=bool)
        return hits[self.codes(name)[0]] if hits.size else numpy.zeros(len(self), dtype=bool)

    def search(self, name: str, pattern: str) -> numpy.ndarray:
        """Whether each record's ``name`` matches ``pattern`` (``re.search``)."""
        import numpy

        key = (name, pattern)
        if key not in self._searched:
            codes, uniques = self.codes(name)
            hits = None
            if len(uniques) > 1000 and _arrow_strings(uniques):
                try:
                    hits = uniques.str.contains(pattern).to_numpy(dtype=bool, na_value=False)
                except Exception:  # a pattern Arrow's engine refuses: Python's below
                    hits = None
            if hits is None:
                compiled = _compiled(pattern)
                labels = self.labels(name)
                hits = numpy.fromiter(
                    (compiled.search(value) is not None for value in labels),
                    dtype=bool,
                    count=len(labels),
                )
            self._searched[key] = hits[codes] if hits.size else numpy.zeros(len(self), dtype=bool)
        return self._searched[key]


def _arrow_strings(values: pandas.Series) -> bool:
    """Whether ``values`` are strings stored by Arrow (whose regular expressions are C++)."""
    import pandas

    dtype = values.dtype
    if isinstance(dtype, pandas.StringDtype):
        return dtype.storage == "pyarrow"
    return isinstance(dtype, pandas.ArrowDtype) and "string" in str(dtype)


class Rule:
    """A predicate over result records: ``rule.mask(columns)`` is a boolean per record,
    ``rule.describe()`` the same predicate in words. Rules combine with ``&``, ``|`` and
    ``~``."""

    def mask(self, columns: _Columns) -> numpy.ndarray:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def __and__(self, other: Rule) -> Rule:
        return _All((self, other))

    def __or__(self, other: Rule) -> Rule:
        return _Any((self, other))

    def __invert__(self) -> Rule:
        return _Not(self)

    def named(self, words: str) -> Rule:
        """This rule, described as ``words`` where another rule refers to it."""
        return _Named(self, words)


@dataclass(frozen=True)
class Field(Rule):
    """``field`` matches the regular expression ``pattern`` (``re.search``); ``words``
    says so in the page's terms."""

    field: str
    pattern: str
    words: str

    def mask(self, columns: _Columns) -> numpy.ndarray:
        return columns.search(self.field, self.pattern)

    def describe(self) -> str:
        return self.words


@dataclass(frozen=True)
class _All(Rule):
    rules: tuple[Rule, ...]

    def mask(self, columns: _Columns) -> numpy.ndarray:
        import numpy

        result = numpy.ones(len(columns), dtype=bool)
        for rule in self.rules:
            result &= rule.mask(columns)
        return result

    def describe(self) -> str:
        return " and ".join(_grouped(rule) for rule in self.rules)

    def __and__(self, other: Rule) -> Rule:
        return _All((*self.rules, other))


@dataclass(frozen=True)
class _Any(Rule):
    rules: tuple[Rule, ...]

    def mask(self, columns: _Columns) -> numpy.ndarray:
        import numpy

        result = numpy.zeros(len(columns), dtype=bool)
        for rule in self.rules:
            result |= rule.mask(columns)
        return result

    def describe(self) -> str:
        return ", or ".join(_grouped(rule) for rule in self.rules)

    def __or__(self, other: Rule) -> Rule:
        return _Any((*self.rules, other))


@dataclass(frozen=True)
class _Not(Rule):
    rule: Rule

    def mask(self, columns: _Columns) -> numpy.ndarray:
        return ~self.rule.mask(columns)

    def describe(self) -> str:
        return f"not {_grouped(self.rule)}"


@dataclass(frozen=True)
class _Named(Rule):
    rule: Rule
    words: str

    def mask(self, columns: _Columns) -> numpy.ndarray:
        return self.rule.mask(columns)

    def describe(self) -> str:
        return self.words


def _grouped(rule: Rule) -> str:
    text = rule.describe()
    return f"({text})" if isinstance(rule, (_All, _Any)) and len(rule.rules) > 1 else text


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    if pattern not in _PATTERNS:
        _PATTERNS[pattern] = re.compile(pattern)
    return _PATTERNS[pattern]


def _alternatives(names: Iterable[str]) -> str:
    return "|".join(re.escape(name) for name in names)


def _listed(names: Sequence[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


def files(*names: str) -> Rule:
    """The test file is one of ``names`` (in any folder: ``test_ops.py`` is upstream's and
    the embedded suite's ``embedded/test_ops.py``)."""
    return Field("file", rf"(?:^|/)(?:{_alternatives(names)})$", f"file {_listed(names)}")


def under(folder: str) -> Rule:
    """The test file is under ``folder`` (upstream's ``distributed/``)."""
    return Field("file", rf"^(?:embedded/)?{re.escape(folder)}/", f"file under `{folder}/`")


def templates(pattern: str, words: str) -> Rule:
    return Field("template", pattern, f"template {words}")


def classes(pattern: str, words: str) -> Rule:
    return Field("test_class", pattern, f"class {words}")


def ops(pattern: str, words: str) -> Rule:
    return Field("op", pattern, f"op {words}")


def named(pattern: str, words: str) -> Rule:
    """The test_id (file, class, test name with its op, dtype and parameters) matches."""
    return Field("test_id", pattern, f"test id {words}")


def details(pattern: str, words: str) -> Rule:
    return Field("detail", pattern, f"detail {words}")


def feature(*names: str) -> Rule:
    """The backend refused the test as an unsupported feature named ``names``."""
    return Field("category", r"^unsupported_feature$", "category `unsupported_feature`") & Field(
        "detail", rf"^(?:{_alternatives(names)})$", f"detail {_listed(names)}"
    )


def mode(name: str) -> Rule:
    """The record's execution mode (a record with none, from a run older than modes, is
    eager)."""
    pattern = r"^(?:eager)?$" if name == "eager" else rf"^{re.escape(name)}$"
    return Field("mode", pattern, f"mode `{name}`")


def dtypes(*names: str, words: str = "") -> Rule:
    """The test's dtype, or one of its dtypes (``float32_int64``), is one of ``names``; a
    name ending in ``*`` is a prefix (``float8_*``)."""
    parts = [
        re.escape(name[:-1]) + r"[a-z0-9]*(?:_[a-z][a-z0-9]*)?"
        if name.endswith("*")
        else re.escape(name)
        for name in names
    ]
    return Field(
        "dtype", rf"(?:^|_)(?:{'|'.join(parts)})(?:_|$)", words or f"dtype {_listed(names)}"
    )


HAS_OP = Field("op", r".", "an OpInfo op")


# -- The areas ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Area:
    """A row of the matrix: ``rule`` selects its tests. ``refusals`` are the categories of a
    test the backend refused (a dtype row is refused only by ``unsupported_dtype``; a
    feature refused in a dtype's test is that feature's row's business, and ``ignores``
    leaves it out of the dtype's row); ``core_ops`` (a regular expression over ATen
    overloads) names the ops whose missing lowering refuses the area too. A ``dense`` area
    leaves out the tests of sparse, nested and quantized tensors, which have rows of their
    own."""

    key: str
    title: str
    group: str  # "feature" or "dtype"
    rule: Rule
    description: str = ""
    core_ops: str = ""
    dense: bool = True
    refusals: tuple[str, ...] = REFUSALS
    ignores: tuple[str, ...] = ()

    def describe(self) -> str:
        """The membership rule in words."""
        text = self.rule.describe()
        return f"{text}; dense tensors only" if self.dense else text


SPARSE = named(
    r"(?i)sparse", "containing `sparse` (file, class, template, op or layout)"
) | details(r"(?i)sparse", "naming `sparse`")
NESTED = (
    ops(r"(?i)nested|jagged", "containing `nested` or `jagged`")
    | Field("file", r"(?i)nested", "file containing `nested`")
    | classes(r"(?i)nested", "containing `nested`")
    | templates(r"(?i)nested_?tensor|jagged|njt", "naming nested tensors (`nested_tensor`, `njt`)")
    | details(r"(?i)^nested$|aten::_?nested", "`nested` or a nested-tensor overload")
)
QUANTIZED = (
    dtypes("qint8", "quint8", "qint32", "quint4x2", "quint2x4")
    | named(r"(?i)quantiz", "containing `quantiz` (file, class, template or op)")
    | details(
        r"(?i)^(?:per_channel_quant|quantized)$|quantiz",
        "`per_channel_quant`, `quantized` or a quantize overload",
    )
)
LAYOUTS = SPARSE | NESTED | QUANTIZED

FORWARD_AD = (
    templates(
        r"forward_mode_AD|fwgrad|forward_ad", "`*forward_mode_AD*`, `*fwgrad*`, `*forward_ad*`"
    )
    | files("test_ops_fwd_gradients.py")
    | feature("forward_ad")
)
AUTOGRAD = (
    templates(
        r"^test_(?:fn_|inplace_)?(?:fail_)?(?:grad|gradgrad)(?:_|$)",
        "`test_grad`, `test_gradgrad`, `test_fn_grad*`, `test_fn_gradgrad`, `test_inplace_grad*`",
    )
    | files("test_ops_gradients.py", "test_autograd.py")
) & ~FORWARD_AD.named("a forward-mode AD test")
AUTOCAST = files("test_autocast.py") | templates(r"autocast", "containing `autocast`")
PROFILER = files("test_profiler.py") | templates(r"^test_profiler", "`test_profiler*`")
_RUNTIME_NAMES = r"(?i)runtime|accelerator|stream|event|allocator|generator"
RUNTIME = Field(
    "file",
    _RUNTIME_NAMES,
    "file naming a runtime, accelerator, stream, event, allocator or generator",
) | classes(_RUNTIME_NAMES, "naming the same")
DISTRIBUTED = (
    files("test_distributed.py")
    | under("distributed")
    | classes(r"Distributed", "containing `Distributed`")
)
MODULES = files("test_modules.py") | classes(r"^TestModule$", "`TestModule`")
OPTIMIZERS = files("test_optim.py") | classes(r"Optim", "containing `Optim`")
#: Upstream's files of operator tests (tests not parametrized by an OpInfo included).
OPERATOR_FILES = (
    "test_ops.py",
    "test_binary_ufuncs.py",
    "test_unary_ufuncs.py",
    "test_reductions.py",
    "test_foreach.py",
    "test_indexing.py",
    "test_shape_ops.py",
    "test_sort_and_select.py",
    "test_scatter_gather_ops.py",
    "test_type_promotion.py",
    "test_view_ops.py",
    "test_torch.py",
    "test_tensor_creation_ops.py",
    "test_linalg.py",
)
EAGER_OPS = (
    mode("eager")
    & (HAS_OP | files(*OPERATOR_FILES))
    & ~(AUTOGRAD | FORWARD_AD | AUTOCAST | PROFILER | DISTRIBUTED | MODULES | OPTIMIZERS).named(
        "a test of the autograd, forward-mode AD, autocast, profiler, distributed, "
        "nn modules or optimizers row"
    )
)
COMPILE = mode("compile")
DYNAMIC_SHAPES = named(r"(?i)dynamic", "containing `dynamic`") | details(
    r"^dynamic_shapes$", "`dynamic_shapes`"
)
ATTENTION = (
    ops(
        r"(?i)scaled_dot_product_attention|multi_?head_?attention|transformer",
        "`*scaled_dot_product_attention*`, `*MultiheadAttention*`, `*Transformer*`",
    )
    | named(
        r"(?i)attn_mask|attention_mask|key_padding_mask|src_mask|tgt_mask|is_causal",
        "naming an attention mask (`attn_mask`, `key_padding_mask`, `is_causal`, ...)",
    )
    | details(r"^attn_mask$", "`attn_mask`")
)
COMPLEX_DTYPES = ("complex32", "complex64", "complex128")
COMPLEX = (
    dtypes(*COMPLEX_DTYPES)
    | templates(r"(?i)conj|complex", "containing `conj` or `complex`")
    | details(r"^complex$", "`complex`")
)


def _dtype_area(key: str, title: str, rule: Rule) -> Area:
    return Area(
        key,
        title,
        "dtype",
        rule,
        refusals=("unsupported_dtype",),
        ignores=("unsupported_feature",),
    )


#: Every row of the matrix, in the order reports show them.
AREAS: tuple[Area, ...] = (
    Area(
        "eager_ops",
        "Eager operators",
        "feature",
        EAGER_OPS,
        "operators run eagerly: forward results, out=, variants, views, errors, references",
    ),
    Area(
        "compile",
        "torch.compile",
        "feature",
        COMPILE,
        "every test of a run in compile mode (conformance run --mode compile)",
    ),
    Area("autograd", "Autograd (backward)", "feature", AUTOGRAD, "gradients of ops and modules"),
    Area(
        "forward_ad",
        "Forward-mode AD",
        "feature",
        FORWARD_AD,
        "forward-mode gradients (jvp) of operators",
        core_ops=r"_efficientzerotensor",
    ),
    Area("modules", "nn modules", "feature", MODULES, "torch.nn modules, forward and backward"),
    Area("optimizers", "Optimizers", "feature", OPTIMIZERS, "torch.optim steps"),
    Area("autocast", "Autocast", "feature", AUTOCAST, "torch.autocast on the device"),
    Area("profiler", "Profiler", "feature", PROFILER, "torch.profiler's device events and memory"),
    Area(
        "runtime",
        "Runtime APIs",
        "feature",
        RUNTIME,
        "streams, events, memory and generators of the device",
    ),
    Area(
        "distributed",
        "torch.distributed",
        "feature",
        DISTRIBUTED,
        "collectives and DDP across processes on the device",
    ),
    Area(
        "sparse",
        "Sparse tensors",
        "feature",
        SPARSE,
        "sparse layouts (COO, CSR, CSC, BSR, BSC) and sparse ops",
        core_ops=r"(?i)sparse",
        dense=False,
    ),
    Area(
        "nested",
        "Nested tensors",
        "feature",
        NESTED,
        "NestedTensor and jagged layouts",
        core_ops=r"(?i)nested",
        dense=False,
    ),
    Area(
        "quantization",
        "Quantization",
        "feature",
        QUANTIZED,
        "quantized dtypes and quantize ops, per-tensor and per-channel",
        core_ops=r"(?i)quantiz|_per_channel|_per_tensor",
        dense=False,
    ),
    Area(
        "dynamic_shapes",
        "Dynamic shapes",
        "feature",
        DYNAMIC_SHAPES,
        "symbolic sizes under torch.compile",
    ),
    Area(
        "attention",
        "Attention and masks",
        "feature",
        ATTENTION,
        "scaled_dot_product_attention, MultiheadAttention and Transformer layers, with masks",
        core_ops=r"scaled_dot_product|_flash_attention|_efficient_attention",
    ),
    Area("complex", "Complex numbers", "feature", COMPLEX, "complex dtypes and conjugate views"),
    _dtype_area("dtype_floating", "float32, float64", dtypes("float32", "float64")),
    _dtype_area("dtype_reduced", "float16, bfloat16", dtypes("float16", "bfloat16")),
    _dtype_area(
        "dtype_integer",
        "integers",
        dtypes(
            *(f"{sign}int{bits}" for sign in ("", "u") for bits in (8, 16, 32, 64)),
            words="dtype `int8` to `int64`, `uint8` to `uint64`",
        ),
    ),
    _dtype_area("dtype_bool", "bool", dtypes("bool")),
    _dtype_area("dtype_complex", "complex", dtypes(*COMPLEX_DTYPES)),
    _dtype_area("dtype_float8", "float8", dtypes("float8_*", words="dtype `float8_*`")),
)
assert len({area.key for area in AREAS}) == len(AREAS), "area keys are unique"


# -- The matrix ---------------------------------------------------------------------------------


@dataclass
class FeatureRow:
    """One area of one run: its status and the numbers behind it.

    ``counts`` covers every test of the area (the not applicable ones too); ``judged`` the
    tests the status is judged on, of which ``native`` passed natively, ``fallback`` passed
    through the CPU fallback, ``refused`` were refused and ``failing`` did not pass
    otherwise; ``not_counted`` were left out for reasons that are not the backend's and
    ``not_applicable`` are written for another device type. ``refusals`` and ``failures``
    count the judged tests that did not pass by ``category: detail``; ``templates`` counts
    the area's tests by (file, class, template); ``not_passed`` holds the frame positions
    of the judged tests that did not pass natively."""

    area: Area
    status: str
    counts: Counts
    judged: int
    native: int
    fallback: int
    refused: int
    failing: int
    not_counted: int
    not_applicable: int
    refusals: list[tuple[str, int]] = field(default_factory=list)
    failures: list[tuple[str, int]] = field(default_factory=list)
    templates: list[tuple[str, str, str, Counts]] = field(default_factory=list)
    not_passed: list[int] = field(default_factory=list)
    before: str | None = None  # the area's status in the run compared with, if any
    claimed: str | None = None  # the status the backend claims for the area, if it does

    @property
    def key(self) -> str:
        return self.area.key

    @property
    def rate(self) -> str:
        """Native passes of the judged tests, as the one percentage rule prints it."""
        return percent(self.native, self.judged)

    @property
    def changed(self) -> bool:
        return self.before is not None and self.before != self.status

    @property
    def change(self) -> str:
        """``partial -> supported`` when the status changed since the run compared with."""
        return f"{self.before} -> {self.status}" if self.changed else ""

    @property
    def verdict(self) -> str:
        """The claim against the measured status: ``agrees``, ``differs``, or ``not run``
        (no test of the area was judged, so the claim is not checked); "" with no claim."""
        if self.claimed is None:
            return ""
        if self.status == "not run":
            return "not run"
        return "agrees" if self.claimed == self.status else "differs"

    def reasons(self, top: int = 2) -> str:
        """The most frequent reasons the area's tests did not pass natively, refusals
        first: ``unsupported_feature: sparse (19), missing_lowering: aten::angle (3)``."""
        listed = [*self.refusals, *self.failures]
        if self.fallback:
            listed.append(("passed via the CPU fallback", self.fallback))
        text = ", ".join(f"{reason} ({n:,})" for reason, n in listed[:top])
        more = len(listed) - top
        return text + (f", and {more:,} more" if more > 0 else "")

    def why(self) -> str:
        """The rule's reading of this row, in one sentence."""
        if self.status == "not run":
            left_out = [
                f"{n:,} {what}"
                for n, what in (
                    (self.not_applicable, "not applicable"),
                    (self.not_counted, "not counted"),
                )
                if n
            ]
            return "no test of the area was judged" + (
                f" ({', '.join(left_out)})" if left_out else ""
            )
        share = f"{self.native:,} of {self.judged:,} judged tests passed natively ({self.rate})"
        if self.status == "supported":
            return f"{share}, none refused"
        if self.native == 0:
            return f"{share}"
        if self.status == "unsupported":
            return f"{share}; {self.refused:,} refused, at least half"
        refused = f"; {self.refused:,} refused" if self.refused else ""
        return f"{share}{refused}"


@dataclass
class FeatureMatrix:
    """Every area of a run; ``before_run`` names the run the changes are against,
    ``claims_file`` the file of the backend's claims checked in the run's ``claims_mode``
    (``reports.claims``)."""

    rows: list[FeatureRow]
    before_run: str = ""
    claims_file: str = ""
    claims_mode: str = ""

    @property
    def changes(self) -> list[FeatureRow]:
        return [row for row in self.rows if row.changed]

    @property
    def claimed(self) -> list[FeatureRow]:
        """The rows the backend claims a status for."""
        return [row for row in self.rows if row.claimed is not None]

    @property
    def differences(self) -> list[FeatureRow]:
        """The claimed rows whose measured status is another."""
        return [row for row in self.rows if row.verdict == "differs"]

    def verdict_counts(self) -> dict[str, int]:
        """How many claims have each verdict, in ``agrees, differs, not run`` order."""
        verdicts = [row.verdict for row in self.claimed]
        return {name: verdicts.count(name) for name in VERDICTS}

    def group(self, name: str) -> list[FeatureRow]:
        return [row for row in self.rows if row.area.group == name]


def status_of(judged: int, native: int, refused: int) -> str:
    """The status rule (see the module's documentation)."""
    if judged == 0:
        return "not run"
    if native == 0 or 2 * refused >= judged:
        return "unsupported"
    if refused == 0 and native >= SUPPORTED_RATE * judged:
        return "supported"
    return "partial"


def build_features(
    frame: pandas.DataFrame,
    *,
    before: pandas.DataFrame | None = None,
    before_run: str = "",
    areas: Sequence[Area] = AREAS,
) -> FeatureMatrix:
    """The matrix of a run's records (a prepared frame or a run as read); with ``before``,
    the records of an earlier run, each row's ``before`` holds that run's status."""
    rows = _rows(frame, areas, detailed=True)
    if before is not None:
        earlier = {row.key: row.status for row in _rows(before, areas, detailed=False)}
        for row in rows:
            row.before = earlier.get(row.key)
    return FeatureMatrix(rows=rows, before_run=before_run)


class _Records:
    """The columns of a frame the status rule and the rows read, computed once: outcome
    codes, the fallback flag, each record's reason (``category: detail``) and template
    (file, class, template) as codes, and the regular-expression searches of the rules."""

    def __init__(self, frame: pandas.DataFrame) -> None:
        import numpy
        import pandas

        self.columns = _Columns(frame)
        self.outcome = numpy.asarray(
            pandas.Categorical(frame["outcome"], categories=OUTCOMES).codes, dtype=numpy.int64
        )
        entry_codes = self.columns.codes("skip_entry")[0]
        entries = numpy.asarray([value != "" for value in self.columns.labels("skip_entry")])
        self.listed = entries[entry_codes] if entries.size else numpy.zeros(len(frame), bool)
        if "via_fallback" in frame.columns:
            self.via_fallback = frame["via_fallback"].to_numpy(dtype=bool)
        elif "ops_fallback" in frame.columns:
            has_ops = frame["ops_fallback"].map(lambda ops: ops is not None and len(ops) > 0)
            self.via_fallback = (frame["outcome"] == "passed").to_numpy() & has_ops.to_numpy(
                dtype=bool
            )
        else:
            self.via_fallback = numpy.zeros(len(frame), dtype=bool)
        self._reason: tuple[numpy.ndarray, list[str]] | None = None
        self._template: tuple[numpy.ndarray, list[tuple[str, str, str]]] | None = None

    def outcome_in(self, names: Iterable[str]) -> numpy.ndarray:
        import numpy

        return numpy.isin(self.outcome, [OUTCOMES.index(name) for name in names])

    def category_in(self, names: Iterable[str]) -> numpy.ndarray:
        return self.columns.isin("category", names)

    def reasons(self) -> tuple[numpy.ndarray, list[str]]:
        """Each record's ``category: detail`` (its outcome where it has no category)."""
        if self._reason is None:
            self._reason = _combined(
                [
                    (self.columns.codes(name)[0], self.columns.labels(name))
                    for name in ("category", "detail", "outcome")
                ],
                lambda category, detail, outcome: (
                    (category or outcome) + (f": {detail}" if detail else "")
                ),
            )
        return self._reason

    def templates(self) -> tuple[numpy.ndarray, list[tuple[str, str, str]]]:
        """Each record's (file, class, template)."""
        if self._template is None:
            self._template = _combined(
                [
                    (self.columns.codes(name)[0], self.columns.labels(name))
                    for name in ("file", "test_class", "template")
                ],
                lambda *parts: parts,
            )
        return self._template


def _combined(coded: list[tuple[numpy.ndarray, list[str]]], label: Any) -> tuple:
    """Codes over the distinct combinations of several coded columns, with their labels."""
    import numpy

    dims = [max(1, len(uniques)) for _, uniques in coded]
    if not coded[0][0].size:
        return numpy.zeros(0, dtype=numpy.int64), []
    key = numpy.ravel_multi_index([codes for codes, _ in coded], dims)
    present, inverse = numpy.unique(key, return_inverse=True)
    parts = numpy.unravel_index(present, dims)
    labels = [
        label(*(uniques[i] for (_, uniques), i in zip(coded, combination, strict=True)))
        for combination in zip(*(part.tolist() for part in parts), strict=True)
    ]
    return inverse.reshape(-1), labels


def _verdicts(records: _Records) -> dict[str, numpy.ndarray]:
    """Per record: left out (not applicable, or not counted), passed natively, through
    the fallback, or not passed: the masks the status rule counts."""
    not_applicable = records.category_in(["not_applicable"])
    skipped = records.outcome_in(_SKIP_OUTCOMES)
    not_counted = ~not_applicable & (
        (skipped & records.category_in(NEUTRAL_SKIPS))
        | (records.outcome_in(["xfailed"]) & ~records.listed)
    )
    judged = ~not_applicable & ~not_counted
    passing = records.outcome_in(PASSING)
    return {
        "not_applicable": not_applicable,
        "not_counted": not_counted,
        "judged": judged,
        "native": judged & passing & ~records.via_fallback,
        "fallback": judged & passing & records.via_fallback,
        "not_passed": judged & ~passing,
    }


def memberships(
    frame: pandas.DataFrame, areas: Sequence[Area] = AREAS, *, columns: _Columns | None = None
) -> dict[str, numpy.ndarray]:
    """Which records of ``frame`` each area holds: a boolean per record, by area key."""
    columns = columns or _Columns(frame)
    layout = LAYOUTS.mask(columns)
    return {
        area.key: area.rule.mask(columns) & ~layout if area.dense else area.rule.mask(columns)
        for area in areas
    }


def _rows(frame: pandas.DataFrame, areas: Sequence[Area], *, detailed: bool) -> list[FeatureRow]:
    import numpy

    records = _Records(frame)
    verdicts = _verdicts(records)
    member_of = memberships(frame, areas, columns=records.columns)
    missing = records.category_in(["missing_lowering"])
    rows = []
    for area in areas:
        member = member_of[area.key]
        not_passed = verdicts["not_passed"] & member
        ignored = not_passed & records.category_in(area.ignores)
        not_passed &= ~ignored
        refused = not_passed & records.category_in(area.refusals)
        if area.core_ops:
            refused |= not_passed & missing & records.columns.search("detail", area.core_ops)
        failing = not_passed & ~refused
        judged = int((verdicts["judged"] & member).sum()) - int(ignored.sum())
        native = int((verdicts["native"] & member).sum())
        row = FeatureRow(
            area=area,
            status=status_of(judged, native, int(refused.sum())),
            counts=Counts(),
            judged=judged,
            native=native,
            fallback=int((verdicts["fallback"] & member).sum()),
            refused=int(refused.sum()),
            failing=int(failing.sum()),
            not_counted=int((verdicts["not_counted"] & member).sum()) + int(ignored.sum()),
            not_applicable=int((verdicts["not_applicable"] & member).sum()),
        )
        if detailed:
            row.counts = _counts(records, member)
            row.refusals = _reasons(records, refused)
            row.failures = _reasons(records, failing)
            row.templates = _templates(records, member)
            not_native = (verdicts["fallback"] & member) | refused | failing
            row.not_passed = numpy.flatnonzero(not_native).tolist()
        rows.append(row)
    return rows


def _count_table(codes: numpy.ndarray, records: _Records, chosen: numpy.ndarray, size: int):
    """Per code among the chosen records: a row of counts per outcome, then fallback."""
    import numpy

    table = numpy.zeros((size, len(OUTCOMES) + 1), dtype=numpy.int64)
    numpy.add.at(table, (codes[chosen], records.outcome[chosen]), 1)
    numpy.add.at(table, (codes[chosen], len(OUTCOMES)), records.via_fallback[chosen].astype(int))
    return table


def _counts(records: _Records, member: numpy.ndarray) -> Counts:
    import numpy

    table = _count_table(numpy.zeros(len(member), dtype=numpy.int64), records, member, 1)
    return Counts(*table[0].tolist())


def _reasons(records: _Records, chosen: numpy.ndarray) -> list[tuple[str, int]]:
    """``category: detail`` of the chosen records, most frequent first."""
    import numpy

    if not chosen.any():
        return []
    codes, labels = records.reasons()
    counted = numpy.bincount(codes[chosen], minlength=len(labels))
    listed = [(labels[i], int(n)) for i, n in enumerate(counted.tolist()) if n]
    return sorted(listed, key=lambda item: (-item[1], item[0]))


def _templates(records: _Records, member: numpy.ndarray) -> list[tuple[str, str, str, Counts]]:
    """The area's tests counted by (file, class, template), in that order."""
    if not member.any():
        return []
    codes, labels = records.templates()
    table = _count_table(codes, records, member, len(labels))
    return sorted(
        (*labels[i], Counts(*row))
        for i, row in enumerate(table.tolist())
        if any(row[: len(OUTCOMES)])
    )
