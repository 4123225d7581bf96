"""Why a test did not pass: a category and detail from its exception or its report text.

Categories are those of :data:`conformance.model.CATEGORIES`. The exception is preferred:
its chain is walked from the original error outwards, because OpInfo tests re-raise the
original as a plain ``Exception`` (with the sample input appended) whose ``__cause__`` is
the real error, and ``assertRaisesRegex`` raises its mismatch while the unexpected error is
its ``__context__``. When only text exists (an xdist worker's report, a stored record),
the same rules run over the text, restricted to pytest's ``E`` lines when there are any so
that source lines quoted in a traceback do not count.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["classify_failure", "classify_skip", "failing_sample", "missing_op"]

# Dispatcher: "Could not run 'aten::cumsum.out' with arguments from the 'SparseCPU' backend."
_COULD_NOT_RUN = re.compile(
    r"Could not run '(?P<op>[\w.]+::[\w.]+)' with arguments from the '(?P<key>\w+)' backend"
)
# MPS-style and fake-tensor wording for an operator without a kernel on a device.
_NOT_IMPLEMENTED_FOR_DEVICE = re.compile(
    r"[Tt]he operator '(?P<op>[\w.]+::[\w.]+)' is not currently implemented for the"
)
_NO_META_KERNEL = re.compile(
    r"(?<![\w.])(?P<op>[\w.]+::[\w.]+): attempted to run this operator with Meta tensors"
)
# The emu backend's refusal, and the wording other backends are asked to use.
_UNSUPPORTED_FEATURE = re.compile(r"unsupported feature '(?P<feature>[\w.-]+)'")
_MISMATCH_ATTRIBUTE = re.compile(r"The values for attribute '(?P<attr>\w+)(?:\(\))?' do not match")
_MISMATCH_VALUES = re.compile(
    r"(?:Tensor-likes|Scalars) are not (?:close|equal)!|Booleans mismatch|"
    r"Not equal to tolerance|Arrays are not (?:almost )?equal|Mismatched elements: \d"
)
_REGEX_MISMATCH = re.compile(
    r"Regex (?:pattern )?did(?:n't| not) match|\"[^\n]{0,2000}\" does not match \""
)
_NOT_RAISED = re.compile(r"\b\w+ not (?:raised|triggered)\b|DID NOT (?:RAISE|WARN)")
# pytest-timeout's failure and banner, and the run's own "timed out after 300 s" record.
_TIMEOUT = re.compile(
    r"Failed: Timeout >\s*(?P<limit>[\d.]+s)|\+{5,} Timeout \+{5,}|"
    r"^timed out(?: after (?P<after>[\d.]+) ?s)?\s*$",
    re.M,
)
_CRASH = re.compile(
    r"worker '[^']+' crashed while running|node down: Not properly terminated|"
    r"Fatal Python error: |Segmentation fault|Aborted \(core dumped\)|"
    r"(?:crashed|killed|terminated) (?:with|by) signal"
)
# What ended the process, in the words faulthandler, the shell or xdist use.
_SIGNAL_WORDS = {
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Floating point exception": "SIGFPE",
    "Illegal instruction": "SIGILL",
}
_SIGNAL = re.compile(r"signal:? (?P<name>SIG[A-Z]+|\d+)|(?P<word>" + "|".join(_SIGNAL_WORDS) + ")")
_REFUSED = r"[^\n]{0,60}\bnot (?:supported|implemented)"
# Dispatch keys (SparseCPU, SparseCsrPrivateUse1, NestedTensorCPU, QuantizedCPU) or words.
_SPARSE = re.compile(rf"\bSparse[A-Z]\w*|\b[Ss]parse\b{_REFUSED}")
_NESTED = re.compile(rf"\bNested[A-Z]\w*|\b[Nn]ested tensors?\b{_REFUSED}")
_PER_CHANNEL = re.compile(r"per[_ ]channel", re.I)
_QUANTIZED = re.compile(rf"\bQuantized[A-Z]\w*|\b[Qq]uantized\b{_REFUSED}")
_DYNAMIC = re.compile(
    r"GuardOnDataDependentSymNode|data-dependent|dynamic shapes? (?:is |are )?not supported", re.I
)
_ATTN_MASK = re.compile(rf"\battn_mask\b{_REFUSED}")
# Inductor asked for the device's code generators or device interface and found none.
_INDUCTOR_DEVICE = re.compile(
    r"InductorError: (?:LoweringException: )?(?:KeyError: '\w+'$|"
    r"NotImplementedError: No interface for device \w+|RuntimeError: device \w+ nyi)",
    re.M,
)
_COMPLEX = re.compile(r"complex (?:numbers|tensors|dtypes?) (?:are |is )?not supported", re.I)

# ScalarType names in ATen messages -> the names torch uses for dtypes in test names.
_SCALAR_TYPES = {
    "Byte": "uint8",
    "Char": "int8",
    "Short": "int16",
    "Int": "int32",
    "Long": "int64",
    "Half": "float16",
    "Float": "float32",
    "Double": "float64",
    "ComplexHalf": "complex32",
    "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
    "Bool": "bool",
    "BFloat16": "bfloat16",
    "QInt8": "qint8",
    "QUInt8": "quint8",
    "QInt32": "qint32",
    "UInt16": "uint16",
    "UInt32": "uint32",
    "UInt64": "uint64",
    "Float8_e5m2": "float8_e5m2",
    "Float8_e4m3fn": "float8_e4m3fn",
    "Float8_e5m2fnuz": "float8_e5m2fnuz",
    "Float8_e4m3fnuz": "float8_e4m3fnuz",
    "Float8_e8m0fnu": "float8_e8m0fnu",
}

# Python-side aliases torch accepts (torch.half, torch.long, ...).
_ALIASES = {
    "half": "float16",
    "float": "float32",
    "double": "float64",
    "cfloat": "complex64",
    "cdouble": "complex128",
    "chalf": "complex32",
    "long": "int64",
    "int": "int32",
    "short": "int16",
}
_TORCH_DTYPES = (
    *{*_SCALAR_TYPES.values(), "int1", "int2", "int4", "float4_e2m1fn_x2", "quint4x2"},
)
_DTYPE_WORD = "|".join(sorted({*_SCALAR_TYPES, *_TORCH_DTYPES, *_ALIASES}, key=len, reverse=True))
# ATen dtype dispatch: "\"exp_vml_cpu\" not implemented for 'ComplexHalf'".
_DTYPE_NOT_IMPLEMENTED = re.compile(rf"not implemented for '(?P<dtype>{_DTYPE_WORD})'")
_DTYPE_UNSUPPORTED = re.compile(
    r"(?:unsupported (?:dtype|scalar ?type)s?|(?:dtype|scalar ?type)s? (?:is |are )?not supported)"
    rf"(?:(?: for)?[:\s'\"]*(?:torch\.)?(?P<dtype>{_DTYPE_WORD})\b)?",
    re.IGNORECASE,
)
_DTYPE_DOES_NOT_SUPPORT = re.compile(
    rf"does not support (?:dtype )?(?:torch\.)?(?P<dtype>{_DTYPE_WORD})\b|"
    rf"\b(?:dtype )?(?:torch\.)?(?P<dtype2>{_DTYPE_WORD}) (?:dtype )?(?:is )?not supported"
)


def _dtype(name: str) -> str:
    """torch's spelling of a dtype named in a message (Half, torch.half, float16 -> float16)."""
    name = name.removeprefix("torch.")
    return _SCALAR_TYPES.get(name) or _ALIASES.get(name.lower()) or name.lower()


def missing_op(text: str) -> str | None:
    """The first operator the text says has no kernel (``aten::cumsum.out``), or None."""
    first: tuple[int, str] | None = None
    for pattern in (_COULD_NOT_RUN, _NOT_IMPLEMENTED_FOR_DEVICE, _NO_META_KERNEL):
        match = pattern.search(text)
        if match and (first is None or match.start() < first[0]):
            first = (match.start(), match["op"])
    return first[1] if first else None


def _dispatch_key_feature(key: str) -> str | None:
    """The feature a dispatch key belongs to (``SparsePrivateUse1`` -> sparse), or None."""
    lowered = key.lower()
    if lowered.startswith("sparse"):
        return "sparse"
    if lowered.startswith("nested"):
        return "nested"
    if lowered.startswith("quantized"):
        return "quantized"
    return None


def _missing_kernel(message: str) -> tuple[str, str] | None:
    match = _COULD_NOT_RUN.search(message)
    if match:
        feature = _dispatch_key_feature(match["key"])
        if feature:
            return "unsupported_feature", feature
        return "missing_lowering", match["op"]
    op = missing_op(message)
    return ("missing_lowering", op) if op else None


def _feature(message: str) -> tuple[str, str] | None:
    match = _UNSUPPORTED_FEATURE.search(message)
    if match:
        return "unsupported_feature", match["feature"]
    if "Trying to use forward AD" in message or re.search(
        r"forward[- ]mode AD|forward AD .*not (?:supported|implemented)", message, re.I
    ):
        return "unsupported_feature", "forward_ad"
    if _NESTED.search(message):
        return "unsupported_feature", "nested"
    if _PER_CHANNEL.search(message) and _QUANTIZED.search(message):
        return "unsupported_feature", "per_channel_quant"
    if _SPARSE.search(message):
        return "unsupported_feature", "sparse"
    if _QUANTIZED.search(message):
        return "unsupported_feature", "quantized"
    if _DYNAMIC.search(message):
        return "unsupported_feature", "dynamic_shapes"
    if _ATTN_MASK.search(message):
        return "unsupported_feature", "attn_mask"
    if _COMPLEX.search(message):
        return "unsupported_feature", "complex"
    if _INDUCTOR_DEVICE.search(message):
        return "unsupported_feature", "inductor"
    return None


def _unsupported_dtype(message: str) -> tuple[str, str] | None:
    for pattern in (_DTYPE_NOT_IMPLEMENTED, _DTYPE_UNSUPPORTED, _DTYPE_DOES_NOT_SUPPORT):
        match = pattern.search(message)
        if match:
            dtype = match.groupdict().get("dtype") or match.groupdict().get("dtype2") or ""
            return "unsupported_dtype", _dtype(dtype) if dtype else ""
    return None


# View semantics and copy-on-write, as upstream's checks word them (test_ops.py's
# TestCommon and TestCompositeCompliance): the op aliases where its reference does not, or
# the reverse; or a kernel materialized a lazy copy-on-write input it only reads.
_RETURNS_VIEW = re.compile(r"The torch implementation returns a view, while the reference does not")
_RETURNS_COPY = re.compile(
    r"The reference returns a view, while the torch implementation does not|"
    r"The torch implementation does not return a view, while the reference does"
)
_COW_MATERIALIZED = re.compile(
    r"(?:Argument \w+|Keyword argument '[^']*'|The output grad \d+) "
    r"during (?:forward|backward) call unexpectedly materializes"
)


def _aliasing(message: str) -> tuple[str, str] | None:
    if _RETURNS_VIEW.search(message):
        return "aliasing", "returns_view"
    if _RETURNS_COPY.search(message):
        return "aliasing", "returns_copy"
    if _COW_MATERIALIZED.search(message):
        return "aliasing", "cow_materialized"
    return None


# gradcheck's and gradgradcheck's GradcheckError: the backward (or forward-mode) kernels
# disagree with finite differences.
_GRADIENT_MISMATCH = re.compile(r"Jacobian (?:computed with forward mode )?mismatch for output")


def _assertion(message: str) -> tuple[str, str] | None:
    if _GRADIENT_MISMATCH.search(message):
        return "numerical_mismatch", "gradient"
    match = _MISMATCH_ATTRIBUTE.search(message)
    if match:
        return "numerical_mismatch", match["attr"]
    if _MISMATCH_VALUES.search(message):
        return "numerical_mismatch", "values"
    if _REGEX_MISMATCH.search(message):
        return "wrong_error", "message"
    if _NOT_RAISED.search(message):
        return "wrong_error", "not_raised"
    return None


def _ended(message: str) -> tuple[str, str] | None:
    """A test that did not end by itself: a timeout, or a crash of its process."""
    match = _TIMEOUT.search(message)
    if match:
        return "timeout", match["limit"] or (f"{match['after']}s" if match["after"] else "")
    if not _CRASH.search(message):
        return None
    match = _SIGNAL.search(message)
    if match is None:
        return "crash", ""
    if match["word"]:
        return "crash", _SIGNAL_WORDS[match["word"]]
    name = match["name"]
    if name.isdigit():
        try:
            name = signal.Signals(int(name)).name
        except ValueError:
            name = f"signal {name}"
    return "crash", name


# What torch 2.13 itself gets wrong on a PrivateUse1 device (conformance.model's
# TORCH_LIMITATIONS): a spawned rank of a device-type test asks for device 'privateuse1';
# code that calls torch.cuda for any device but the CPU, in a wheel without CUDA; the
# convolution backend torch selects for a device it has no kernel of its own for.
_TORCH_LIMITS = (
    (re.compile(r"Invalid device string: 'privateuse1'"), "device_type_in_ranks"),
    (re.compile(r"Torch not compiled with CUDA enabled"), "cuda_call"),
    # torch.nn.parallel's scatter, gather and broadcast call CUDA's comm functions for any
    # device; a wheel without CUDA has none.
    (
        re.compile(
            r"module 'torch\._C' has no attribute '_(?:scatter|gather|broadcast|reduce_add)"
        ),
        "cuda_call",
    ),
    (
        re.compile(r"<_ConvBackend\.Overrideable: \d+> != <_ConvBackend\.\w+: \d+>"),
        "conv_backend_selection",
    ),
)


def _torch_limitation(message: str) -> tuple[str, str] | None:
    for pattern, detail in _TORCH_LIMITS:
        if pattern.search(message):
            return "torch_limitation", detail
    return None


# A multi-rank test's failure (conformance.embedded._multiprocess): its first line names the
# c10d backend; the collective is the torch.distributed function a rank's traceback ends in,
# or the one a result check names. Upstream's MultiProcessTestCase says which rank failed
# and quotes its traceback, whose last exception line is the rank's error.
_RANKS = re.compile(r"(?:^|: )\d+ ranks on (?P<backend>[^,\n]+), [\d.]+ s:", re.M)
_UPSTREAM_RANK = re.compile(r"Process \d+ exited with error code -?\d+ and exception:")
_LAST_ERROR = re.compile(r"^(?P<name>[\w.]+(?:Error|Exception|Failure))(?::|$)", re.M)
_COLLECTIVES = (
    "all_reduce",
    "all_gather_into_tensor",
    "all_gather",
    "reduce_scatter_tensor",
    "reduce_scatter",
    "all_to_all_single",
    "all_to_all",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "barrier",
    "send",
    "recv",
    "isend",
    "irecv",
)
_C10D_FRAME = re.compile(r'distributed_c10d\.py", line \d+, in (?P<fn>\w+)')
# A rank's own error, as the failure's summary names it: "rank 1 failed: ValueError: ...".
_RANK_FAILED = re.compile(r"^rank \d+ failed: (?P<name>[\w.]+(?:Error|Exception|Failure))", re.M)
_CHECKED = re.compile(r"^(?P<fn>" + "|".join(_COLLECTIVES) + r")\b", re.M)


def _collective(message: str) -> str | None:
    """The collective a multi-rank failure happened in, or checked, if it names one."""
    frames = [m["fn"] for m in _C10D_FRAME.finditer(message) if m["fn"] in _COLLECTIVES]
    if frames:
        return frames[-1]
    checked = _CHECKED.search(message)
    return checked["fn"] if checked else None


def _ranks(message: str) -> tuple[str, str] | None:
    """A multi-rank test's failure: what the other rules say about the ranks' errors, with
    the collective and the backend as the detail where the detail would name neither (a
    wrong result, a hang, an unclassified error); a missing kernel keeps its op, a crash
    its signal."""
    header = _RANKS.search(message)
    if header is None:
        return _upstream_ranks(message)
    failed = _RANK_FAILED.search(message)
    unclassified = ("other", failed["name"] if failed else _exception_name(message))
    category, detail = _first(_RULES, message) or unclassified
    if category in ("numerical_mismatch", "timeout", "other", "wrong_error"):
        where = _collective(message)
        backend = header["backend"]
        detail = f"{where} on {backend}" if where else f"{detail} on {backend}"
    return category, detail


def _upstream_ranks(message: str) -> tuple[str, str] | None:
    """Upstream's multi-process failure: what the rules say about the rank's traceback, an
    unclassified error named by the rank's own exception (not the parent's RuntimeError),
    in the collective its traceback ends in."""
    if not _UPSTREAM_RANK.search(message):
        return None
    found = _first(_RULES, message)
    if found and found[0] not in ("numerical_mismatch", "timeout", "other", "wrong_error"):
        return found
    errors = [m["name"] for m in _LAST_ERROR.finditer(message)]
    category, detail = found or ("other", errors[-1] if errors else "")
    where = _collective(message)
    return category, f"{where}: {detail}" if where else detail


# Most specific first: a kernel message names the op; a feature refusal wins over the
# dtype it mentions; assertion wording comes last because it quotes other messages.
_RULES: tuple[Callable[[str], tuple[str, str] | None], ...] = (
    _ended,
    _torch_limitation,
    _missing_kernel,
    _feature,
    _unsupported_dtype,
    _aliasing,
    _assertion,
)


def _first(
    rules: tuple[Callable[[str], tuple[str, str] | None], ...], message: str
) -> tuple[str, str] | None:
    for rule in rules:
        found = rule(message)
        if found:
            return found
    return None


def _classify_message(message: str) -> tuple[str, str] | None:
    return _first((_ranks, *_RULES), message)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and its causes, innermost (the original error) first."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen) and len(seen) < 16:
        seen.append(current)
        # Follow what Python's traceback would show: the explicit cause, else the context.
        if current.__cause__ is not None:
            current = current.__cause__
        elif not current.__suppress_context__:
            current = current.__context__
        else:
            current = None
    return reversed(seen)


# The embedded suite's note, and upstream's wrapper (common_device_type, when it tracks
# the OpInfo's samples): "Caused by sample input at index 3: SampleInput(...)".
_SAMPLE_NOTE = re.compile(r"^while testing (?:sample|error input|module input) (?P<index>\d+)\b")
_UPSTREAM_SAMPLE = re.compile(
    r"Caused by (?:sample|reference|error|module) input at index (?P<index>\d+):"
)
_TRACKED_KINDS = ("sample input", "reference input", "error input", "module input")


def failing_sample(exc: BaseException, tracked: Any = None) -> int | None:
    """The index of the sample (or module input) a test failed on, where the test says:
    upstream's tracked input (on the exception, or ``tracked``, the one upstream's wrapper
    held when the test ended) or its message, or the embedded suite's note."""
    for error in _chain(exc):
        if (index := _tracked_index(getattr(error, "_tracked_input", None))) is not None:
            return index
        for note in getattr(error, "__notes__", ()) or ():
            if found := _SAMPLE_NOTE.match(str(note)):
                return int(found["index"])
        if error.args and (found := _UPSTREAM_SAMPLE.search(str(error.args[0]))):
            return int(found["index"])
    return _tracked_index(tracked)


def _tracked_index(tracked: Any) -> int | None:
    if tracked is not None and getattr(tracked, "type_desc", "") in _TRACKED_KINDS:
        return int(tracked.index)
    return None


def _describe(error: BaseException) -> str:
    try:
        message = str(error)
    except Exception:  # a broken __str__ must not hide the failure being classified
        message = repr(error.args)
    return f"{type(error).__name__}: {message}"


def _error_lines(text: str) -> str:
    """pytest's ``E`` lines of a long report, or the text itself when it has none."""
    lines = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    return "\n".join(lines) if lines else text


def _exception_name(text: str) -> str:
    match = re.search(r"^(?:E\s+)?(\w+(?:Error|Exception|Exit|Interrupt))\b", text, re.M)
    return match[1] if match else ""


def classify_failure(exc: BaseException | None, text: str) -> tuple[str, str]:
    """(category, detail) for a failed test, from its exception and/or report text.

    Promises: a category from :data:`~conformance.model.CATEGORIES`; missing_lowering
    with the first operator named (``aten::cumsum.out``); unsupported_feature with one of
    :data:`~conformance.model.FEATURES` or the name the backend gave; unsupported_dtype
    with torch's dtype name (``float16``); numerical_mismatch with ``values`` or the
    attribute that differs (``dtype``, ``shape``); aliasing with ``returns_view``,
    ``returns_copy`` or ``cow_materialized``; compile_error with ``graph_break``,
    ``backend_compiler`` or ``dynamo``; wrong_error with ``message`` or
    ``not_raised``; torch_limitation with one of
    :data:`~conformance.model.TORCH_LIMITATIONS`; crash with the signal when known; timeout with the limit when known;
    other with the exception type name.
    """
    if exc is not None:
        chain = list(_chain(exc))
        for error in chain:
            found = _classify_message(_describe(error))
            if found:
                return found
    found = _ended(text) or _classify_message(_error_lines(text))
    if found:
        return found
    found = _compile_error(chain if exc is not None else [], text)
    if found:
        return found
    if exc is not None:
        return "other", type(chain[0]).__name__
    return "other", _exception_name(text)


# torch.compile's failures, by exception class (module torch._dynamo.exc) or its name in
# a report's text: a graph break under fullgraph=True, the backend's compiler raising,
# and the rest of Dynamo/AOTAutograd/Inductor.
_GRAPH_BREAKS = ("Unsupported", "UncapturedHigherOrderOpError", "UserError")
_COMPILE_TEXT = re.compile(
    r"torch\._dynamo\.exc\.(?P<name>\w+)|(?P<backend>BackendCompilerFailed)|"
    r"torch\._inductor\.exc\.(?P<inductor>\w+)"
)


def _compile_error(chain: list[BaseException], text: str) -> tuple[str, str] | None:
    """compile_error with graph_break, backend_compiler or dynamo, for a failure of
    torch.compile itself (an op the backend's compiler lacks is a missing_lowering, read
    from the message before this)."""
    names = [
        type(error).__name__
        for error in chain
        if type(error).__module__.startswith(("torch._dynamo", "torch._inductor"))
    ]
    if not names:
        names = [m["name"] or m["backend"] or m["inductor"] for m in _COMPILE_TEXT.finditer(text)]
    if not names:
        return None
    if "BackendCompilerFailed" in names:
        return "compile_error", "backend_compiler"
    if any(name in _GRAPH_BREAKS for name in names):
        return "compile_error", "graph_break"
    return "compile_error", "dynamo"


# Upstream skip reasons that say the test does not apply to this device.
_NOT_APPLICABLE = re.compile(
    r"Only runs on (?:(?P<only>\w+)|\[(?P<onlylist>[^\]]*)\])|(?P<notfound>CUDA) not found|"
    r"\b(?P<decorator>\w+)(?: \[[^\]]*\])? ?: doesn't run on \w+|"
    r"doesn't run on (?P<not>\w+)|fewer than \d+ devices|Skip as torch has no module of|"
    r"(?:CUDA|ROCm|cuDNN|MPS|XPU|GPU|Triton|NCCL|distributed)\w* (?:is )?not available|"
    r"[Rr]equires? (?:a )?(?P<needs>CUDA|GPU|ROCm|cuDNN|MPS|XPU|accelerator)|"
    r"onlyAccelerator|Insufficient \w+ memory|test skipped for CUDA version|"
    r"only one GPU detected|(?P<fused>is not supported for fused on \w+)|"
    r"Excluded from (?P<excluded>CUDA) tests|(?P<unavailable>CUDA) unavailable|needs cudnn|"
    r"CUDNN (?:or multi-gpu )?not available|multi-GPU not supported|"
    r"(?P<eager>runs eager only)",
)
# A package the test needs is not installed where it ran: the environment's problem.
_MISSING_PACKAGE = re.compile(
    r"\b(?P<package>SciPy|Scipy|scipy|psutil|numba|librosa|expecttest|hypothesis)\b "
    r"(?:is )?(?:required|not (?:found|installed|available))|"
    r"(?:[Rr]equires?|[Nn]eeds?) (?P<package2>SciPy|Scipy|scipy|psutil|numba|librosa)\b"
)
# A file the test downloads could not be fetched (a machine without the network).
_NO_NETWORK = re.compile(r"could not download test file")
# torch's largeTensorTest has no memory check for PrivateUse1 devices and skips on them.
_NO_MEMORY_CHECK = re.compile(r"^Unknown device type$")
_SKIP_DTYPE = re.compile(
    rf"(?:does not support|unsupported|not supported for) (?:dtype:? )?(?:torch\.)?(?P<dtype>{_DTYPE_WORD})\b|"
    rf"\bdtype:? (?:torch\.)?(?P<dtype2>{_DTYPE_WORD}) (?:is )?not supported|"
    r"dtypes? (?:is |are )?(?:not supported|unsupported)",
    re.IGNORECASE,
)


def classify_skip(reason: str) -> tuple[str, str]:
    """(category, detail) for a test skipped by upstream's own decorators or code.

    ``not implemented: <error>`` (torch's ``skip_exception_type`` and the assertRaises
    variant that skips on NotImplementedError) is classified as the error it wraps:
    missing_lowering with the operator, unsupported_feature, unsupported_dtype. Device
    restrictions (``Only runs on cuda``, ``onlyNativeDeviceTypes: doesn't run on emu``, an
    optimizer's fused implementation declared for other device types) are not_applicable
    with the device required, the decorator or ``fused``; dtype refusals are
    unsupported_dtype with the dtype when named; the backend's own
    ``unsupported feature '<name>'`` is unsupported_feature; a package the test needs and
    the environment lacks (``Scipy required for the test``) is environment, with the
    package; torch's largeTensorTest, which cannot check a PrivateUse1 device's memory, is
    torch_limitation; everything else is upstream_skip, with detail ``slow`` for slow-test
    skips.
    """
    text = reason.removeprefix("Skipped: ").strip()
    wrapped = re.match(r"not[ _]implemented: (?P<error>.*)", text, re.S)
    if wrapped:
        error = wrapped["error"]
        found = _missing_kernel(error) or _feature(error) or _unsupported_dtype(error)
    else:
        # Outside a wrapped error only explicit refusals count: upstream reasons often
        # just mention a feature ("Skipped! sparse backward not supported" is upstream's).
        feature = _UNSUPPORTED_FEATURE.search(text)
        found = _missing_kernel(text) or (
            ("unsupported_feature", feature["feature"]) if feature else None
        )
    if found:
        return found
    match = _SKIP_DTYPE.search(text)
    if match:
        dtype = match["dtype"] or match["dtype2"] or ""
        return "unsupported_dtype", _dtype(dtype) if dtype else ""
    match = _NOT_APPLICABLE.search(text)
    if match:
        if match["eager"]:
            return "not_applicable", "eager_only"
        if match["fused"]:  # the OptimizerInfo's supports_fused_on names device types
            return "not_applicable", "fused"
        if match["onlylist"] is not None:
            return "not_applicable", ",".join(re.findall(r"\w+", match["onlylist"].lower()))
        required = (
            match["only"]
            or match["needs"]
            or match["notfound"]
            or match["excluded"]
            or match["unavailable"]
            or ""
        )
        return "not_applicable", required.lower() or match["decorator"] or match["not"] or ""
    match = _MISSING_PACKAGE.search(text)
    if match:
        return "environment", (match["package"] or match["package2"]).lower()
    if _NO_NETWORK.search(text):
        return "environment", "network"
    if _NO_MEMORY_CHECK.search(text):
        return "torch_limitation", "largeTensorTest"
    if "PYTORCH_TEST_WITH_SLOW" in text or re.search(r"\bslow\b", text, re.I):
        return "upstream_skip", "slow"
    return "upstream_skip", ""
