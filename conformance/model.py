"""The results data model: the contract every stage reads and writes.

A run is a folder holding ``meta.json`` (one :class:`RunMeta`) and the outcomes:
``outcomes.jsonl`` (one :class:`ResultRecord` per line, appended and flushed as each
test finishes) while the run is going on, consolidated into ``outcomes.parquet`` when
it ends. Readers accept either and never see pytest objects.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ALIASING",
    "ATTEMPT_FIELDS",
    "CATEGORIES",
    "COLLECTION_ERROR",
    "COMPILE_ERRORS",
    "EMBEDDED_NAMESPACE",
    "FEATURES",
    "FORMAT_VERSION",
    "MODES",
    "OUTCOMES",
    "PROFILE_COLUMNS",
    "RECORD_COLUMNS",
    "RECORD_FORMAT",
    "SUITES",
    "TORCH_LIMITATIONS",
    "ResultRecord",
    "RunMeta",
    "TestIdentity",
    "is_collection_record",
    "suite_of_file",
]

# Version of the results store format. Bump it when a field is added, removed or
# changes meaning, and say what changed:
#   1: first version.
#   2: test identity carries the suite. Tests of the embedded suite are named in the
#      ``embedded/`` namespace (``file`` ``embedded/test_ops.py``, ``test_id``
#      ``embedded/test_ops.py::TestCommon::...``), so they never equal an upstream test's;
#      records and identities gain ``suite`` (``embedded`` or ``upstream``). Version 1 runs
#      are read as version 2 (store.read_records names their tests the same way). Run
#      metadata gains ``paths`` and ``filters`` (what was selected, checked on resume).
#   3: run metadata gains ``amends`` (the run a rerun, ``--rerun``, reruns tests of),
#      ``rootdir`` (pytest's, which nodeids are relative to) and ``env`` (the environment
#      the harness set for the tests: the embedded selection, the device filter), so a test
#      can be rerun alone. Records are unchanged: version 2 runs read as they are.
#   4: records gain ``sample_index``: the index of the OpInfo sample (or ModuleInfo input)
#      a failing test failed on, where the test exposes it, else -1; and ``mode``, the
#      execution mode (``eager`` or ``compile``) of the run. Runs of versions 2 and 3 read
#      with -1 and ``eager`` (store.read_run fills a column a run does not have).
#   (Still 4: the category ``collection_error`` was added, with records that stand for a
#   file, module or class that failed to collect; no field was added or changed meaning.)
#   5: a test that failed is retried once in a fresh process (``conformance run
#      --retry-failures``). The outcome ``flaky`` is new: the test failed, then passed on
#      its retry (category ``flaky``, detail the first attempt's category). Records gain
#      ``attempts``: each attempt of a retried test in order, ``{outcome, category,
#      detail, message, duration_s}`` (empty for a test run once); ``rerun`` counts the
#      test's retries (0 or 1). The other fields of a retried record are its first
#      attempt's, so a test that failed again keeps its failure. Run metadata gains
#      ``retry_cap`` (tests the run retries at most; 0: no retries) and ``retry_left_out``
#      (failed tests the cap left unretried). Runs of versions 2 to 4 read with no attempts
#      (store.read_run fills the column a run does not have) and a cap of 0.
#   6: run metadata gains ``baseline_for``: the runs (ids, comma-separated) whose tests that
#      did not pass this run ran, as their on-demand baseline (``--baseline DEVICE``, or
#      ``--baseline-for RUN``); "" for a run of its own selection. Records are unchanged.
#   7: a run made with ``--profile`` holds the profiler's per-op figures beside its outcomes:
#      ``ops_profile.jsonl`` while it runs, ``ops_profile.parquet`` when it ends, one row per
#      test, op and input signature (PROFILE_COLUMNS). Records and metadata are unchanged;
#      runs of earlier versions have no profile.
FORMAT_VERSION = 7
#: The first version whose records read as they are; older runs' records are upgraded.
RECORD_FORMAT = 2

#: The namespace of the embedded suite's files in test_ids: ``embedded/test_ops.py``.
EMBEDDED_NAMESPACE = "embedded/"
#: Values of ``suite`` in identities and records.
SUITES = ("upstream", "embedded")

#: Every outcome a test can have in a run.
OUTCOMES = (
    "passed",
    "failed",
    "error",
    "skipped",
    "xfailed",
    "xpassed",
    "crashed",
    "timeout",
    "deselected",
    # Last: codes that index this tuple (the report's search data) keep their meaning.
    # The test failed, then passed when retried in a fresh process (format 5).
    "flaky",
)

#: The fields of each attempt in a record's ``attempts``.
ATTEMPT_FIELDS = ("outcome", "category", "detail", "message", "duration_s")

#: Why a test did not pass. Empty for passed tests.
CATEGORIES = (
    "missing_lowering",
    "unsupported_feature",
    "unsupported_dtype",
    "numerical_mismatch",
    "aliasing",
    "wrong_error",
    "crash",
    "timeout",
    "flaky",
    "known_bug",
    "not_applicable",
    "upstream_skip",
    "compile_error",
    "other",
    # Last, after the catch-all: it is about a file rather than a test, and codes that
    # index this tuple (the report's search data) keep their meaning for the others.
    "collection_error",
    # The cause is torch's: no PrivateUse1 backend can make the test pass on this torch
    # release (the common skiplist layer names these, once, for every backend).
    "torch_limitation",
    # What ran the test lacks what it needs: a package (SciPy, psutil), not the backend.
    "environment",
)

#: The category of a record that stands for a file, module or class that failed to collect
#: (its tests never existed in the run): outcome ``error`` (or the tier of a skiplist entry
#: that expects it), ``nodeid`` the collector's (``test_broken.py``), ``test_id`` its file as
#: test_ids name it (then its class, if a class failed), ``template`` empty, ``detail`` the
#: exception's type and ``message`` the exception (``SyntaxError: invalid syntax ...``).
COLLECTION_ERROR = "collection_error"

#: Values of ``detail`` for the aliasing category (view semantics, copy-on-write).
ALIASING = ("returns_view", "returns_copy", "cow_materialized")
#: Execution modes: a run's ``mode`` and every record's.
MODES = ("eager", "compile")
#: Values of ``detail`` for the compile_error category.
COMPILE_ERRORS = ("graph_break", "backend_compiler", "dynamo")

#: Values of ``detail`` for the unsupported_feature category.
FEATURES = (
    "sparse",
    "nested",
    "forward_ad",
    "dynamic_shapes",
    "per_channel_quant",
    "attn_mask",
    "quantized",
    "complex",
    # torch.compile's default backend on the device: Inductor's code generators for it
    # (scheduling, wrapper) and Dynamo's device interface, which the backend registers.
    "inductor",
)

#: Values of ``detail`` the classifier reads for the torch_limitation category: what in
#: torch 2.13 keeps a test from passing on any PrivateUse1 device, told by the failure or
#: skip itself. A skiplist cause entry may name one (entries that select tests give their
#: own detail, such as ``newer_test``).
TORCH_LIMITATIONS = (
    # largeTensorTest has no memory check for a PrivateUse1 device and skips the test.
    "largeTensorTest",
    # PrivateUse1TestBase learns the device's name in setUpClass, which the spawned ranks of
    # a multi-process test never run: they ask for device 'privateuse1'.
    "device_type_in_ranks",
    # Torch's (or the test's) code calls torch.cuda for any device that is not the CPU.
    "cuda_call",
    # torch._C._select_conv_backend picks kernels for torch's in-tree devices only; any
    # out-of-tree device's convolution is Overrideable, where upstream expects the CPU's.
    "conv_backend_selection",
)


def is_collection_record(category: str, template: str) -> bool:
    """Whether a record stands for a collector that failed to collect rather than a test:
    its category is COLLECTION_ERROR and it has no template (every test has one, so a test
    that a skiplist entry of that category applied to is still a test)."""
    return category == COLLECTION_ERROR and not template


def suite_of_file(file: str) -> str:
    """The suite a test file (as test_ids name it) belongs to."""
    return "embedded" if file.startswith(EMBEDDED_NAMESPACE) else "upstream"


@dataclass(frozen=True, slots=True)
class TestIdentity:
    """Who a collected test is, independent of the device it runs on.

    ``test_id`` is ``file::GenericClass::name`` with the device token removed from the
    class suffix (``PRIVATEUSE1`` or the backend name) and from the test name, so the
    same upstream test has the same ``test_id`` on every device and in every release.
    Files of the embedded suite are named in the ``embedded/`` namespace, so an embedded
    test and an upstream test never share a ``test_id``; ``suite`` says which it is.
    """

    __test__ = False  # not a pytest test class, despite the name

    nodeid: str
    test_id: str
    file: str
    test_class: str = ""
    template: str = ""
    op: str = ""
    variant: str = ""
    dtype: str = ""
    params: str = ""
    device: str = ""
    suite: str = "upstream"


@dataclass
class ResultRecord:
    """One test's result in one run."""

    run_id: str
    nodeid: str
    test_id: str
    file: str
    test_class: str = ""
    template: str = ""
    op: str = ""
    variant: str = ""
    dtype: str = ""
    params: str = ""
    device: str = ""
    suite: str = "upstream"
    outcome: str = ""
    category: str = ""
    detail: str = ""
    message: str = ""
    duration_s: float = 0.0
    skip_entry: str = ""  # "path:line" of the skiplist entry that applied, or ""
    ops_dispatched: list[str] = field(default_factory=list)
    ops_fallback: list[str] = field(default_factory=list)
    worker: str = ""
    shard: str = ""  # "k/N", or "" when the run is not sharded
    rerun: int = 0  # times the test was retried in a fresh process (0 or 1)
    sample_index: int = -1  # the failing sample's index, where the test exposes it
    mode: str = "eager"  # "eager", or "compile" (every op of the test under torch.compile)
    #: Each attempt of a retried test, first to last: dicts of ATTEMPT_FIELDS; empty for a
    #: test run once.
    attempts: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ResultRecord:
        return cls(**{k: data[k] for k in RECORD_COLUMNS if k in data})

    @classmethod
    def of_test(cls, run_id: str, identity: TestIdentity, **fields: Any) -> ResultRecord:
        """The record of the test ``identity`` names; ``fields`` set the rest and win over
        the identity's own (a run records its device, say)."""
        named = {name: getattr(identity, name) for name in _IDENTITY_FIELDS}
        return cls(run_id=run_id, **{**named, **fields})


RECORD_COLUMNS = tuple(f.name for f in dataclasses.fields(ResultRecord))
_IDENTITY_FIELDS = tuple(f.name for f in dataclasses.fields(TestIdentity))

#: The columns of a run's per-op profile (``--profile``) and their types: one row per test,
#: op and input signature. ``op`` is an ATen op (``aten::mm``) or a device kernel event;
#: times are microseconds summed over the ``calls`` (``device_time_us`` 0 where the device
#: reports none); ``device_calls`` counts the calls with device time (a test's CPU reference
#: calls of the same op have none); ``input_shapes`` and ``input_dtypes`` are the
#: profiler's lists as text (``[[4, 5], [5, 4]]``, ``['float', 'float']``), empty for a
#: kernel event.
PROFILE_COLUMNS: dict[str, type] = {
    "test_id": str,
    "file": str,
    "op": str,
    "calls": int,
    "device_calls": int,
    "cpu_time_us": float,
    "self_cpu_time_us": float,
    "device_time_us": float,
    "self_device_time_us": float,
    "input_shapes": str,
    "input_dtypes": str,
}


@dataclass
class RunMeta:
    """What a run was: when, against what, with which command."""

    run_id: str
    format_version: int = FORMAT_VERSION
    start_time: str = ""  # ISO 8601, UTC
    end_time: str = ""
    torch_version: str = ""
    torch_git: str = ""
    backend: str = ""  # device type: "emu", "cpu", ...
    backend_version: str = ""
    backend_git: str = ""
    harness_version: str = ""
    suite: str = ""  # "upstream:v2.13.0", "upstream:/path/to/test", "embedded:smoke", ...
    mode: str = "eager"
    shard: str = ""
    #: What was selected: the test paths given to pytest (absolute), and -k/-m filters.
    paths: list[str] = field(default_factory=list)
    filters: list[str] = field(default_factory=list)
    amends: str = ""  # the run_id this run reruns tests of ("" for a run of its own)
    rootdir: str = ""  # pytest's rootdir, which nodeids are relative to
    env: dict[str, str] = field(default_factory=dict)  # the harness's settings for the tests
    host: str = ""
    command: list[str] = field(default_factory=list)
    collected: int = 0
    expected: int | None = None
    complete: bool = False  # True once the run ended and outcomes were consolidated
    retry_cap: int = 0  # failed tests retried at most, once each in a fresh process (0: none)
    retry_left_out: int = 0  # failed tests the cap left unretried
    #: The runs this one is the on-demand baseline of (it ran only their tests that did not
    #: pass), comma-separated; "" for a run of its own selection.
    baseline_for: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunMeta:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
