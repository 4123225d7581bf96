"""Synthetic runs with a realistic mix of outcomes, for tests and the scale benchmark.

The mix follows what a young PrivateUse1 backend sees against the upstream suite: about
45% passed (some only through the CPU fallback), about 45% skipped (a third of those for a
missing lowering, concentrated on a few operators), failures spread over the categories,
a few crashes and timeouts, and messages that include hostile text (markup, control
characters, very long lines).

Generation is deterministic for a given ``seed``: row *i* always draws the same random
numbers, so two runs made with the same seed and different ``progress`` differ only where
progress fixed something, as consecutive nightly runs would.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conformance.model import RECORD_COLUMNS, RunMeta
from reports._synthetic_suite import (
    DTYPES,
    FEATURES,
    FILES_WITH_OPS,
    FILES_WITHOUT_OPS,
    OPS,
    OVERLOAD_SUFFIXES,
)

if TYPE_CHECKING:
    import pandas

__all__ = [
    "HOSTILE_MESSAGES",
    "synthetic_op_coverage",
    "synthetic_run",
    "write_run",
]

#: Messages a report must show as text and never run or mangle.
HOSTILE_MESSAGES = (
    '<script>window.__hostile = 1; alert("xss")</script>',
    '</pre></td></tr></table><img src=x onerror="window.__hostile=2">',
    "control characters: \x00 NUL \x07 BEL \x1b[31m ANSI red\x1b[0m \x08 BS \x0c FF \x7f DEL",
    "bidi override \u202egnp.exe and a zero width joiner \u200d and an emoji \U0001f525",
    "A" * 20000 + " a very long line without spaces",
    "]]> CDATA end and & ampersands & \"quotes\" 'apostrophes' {{ jinja }} {% raw %}",
)

# Shares of the outcome mix, in the order drawn: (outcome, category, share).
_MIX = (
    ("passed", "", 0.457),
    ("skipped", "missing_lowering", 0.12),
    ("skipped", "unsupported_dtype", 0.10),
    ("skipped", "unsupported_feature", 0.07),
    ("skipped", "not_applicable", 0.05),
    ("skipped", "upstream_skip", 0.08),
    ("xfailed", "known_bug", 0.02),
    ("failed", "numerical_mismatch", 0.025),
    ("failed", "wrong_error", 0.01),
    ("failed", "missing_lowering", 0.008),
    ("failed", "other", 0.008),
    ("flaky", "flaky", 0.004),
    ("error", "other", 0.005),
    ("crashed", "crash", 0.004),
    ("timeout", "timeout", 0.003),
    ("xpassed", "known_bug", 0.002),
    ("deselected", "crash", 0.004),
)


def _stable_fraction(text: str) -> float:
    return zlib.crc32(text.encode()) / 2**32


def _aten(op: str, suffix_pick: float) -> str:
    base = op.rsplit(".", 1)[-1]
    suffix = OVERLOAD_SUFFIXES[int(suffix_pick * len(OVERLOAD_SUFFIXES))]
    return f"aten::{base}{suffix}"


def _identities(n: int) -> list[tuple[str, str, str, str, str]]:
    """``n`` distinct (file, class, template, op, dtype) tuples, spread over the files."""
    streams: list[list[tuple[str, str, str, str, str]]] = []
    for file, (cls, templates) in FILES_WITH_OPS.items():
        streams.append([(file, cls, t, op, d) for op in OPS for t in templates for d in DTYPES])
    for file, (cls, count) in FILES_WITHOUT_OPS.items():
        streams.append(
            [(file, cls, f"test_case_{k:03d}", "", d) for k in range(count) for d in DTYPES]
        )
    # Round-robin over the files so any n gives every file a share, like a real suite.
    out: list[tuple[str, str, str, str, str]] = []
    # Different (template, op) pairs can spell the same name (test_non_contig + index_add
    # and test_non_contig_index + add): keep the first, as test ids must be unique.
    names: set[tuple[str, str]] = set()
    position = 0
    while len(out) < n:
        added = False
        for stream in streams:
            if position < len(stream):
                added = True
                file, _, template, op, dtype = stream[position]
                key = (file, f"{template}_{op.replace('.', '_')}_{dtype}")
                if key in names:
                    continue
                names.add(key)
                out.append(stream[position])
                if len(out) == n:
                    break
        if not added:
            raise ValueError(f"synthetic suite has only {len(out)} distinct tests, asked for {n}")
        position += 1
    return out


def synthetic_run(
    n: int = 1000,
    *,
    seed: int = 0,
    run_id: str = "synthetic",
    backend: str = "emu",
    torch_version: str = "2.13.0",
    progress: float = 0.0,
    hostile: bool = True,
    start_time: str = "2026-11-01T00:00:00+00:00",
) -> tuple[RunMeta, pandas.DataFrame]:
    """A run of ``n`` tests as (RunMeta, DataFrame with RECORD_COLUMNS).

    ``progress`` (0..1) is the share of missing lowerings and failures that a later run has
    fixed; ``hostile`` puts HOSTILE_MESSAGES into a few failure messages.
    """
    import numpy
    import pandas

    generator = numpy.random.default_rng(seed)
    draws_array = generator.random((n, 5))
    shares = numpy.array([share for _, _, share in _MIX])
    edges = numpy.cumsum(shares / shares.sum())
    picks = numpy.searchsorted(edges, draws_array[:, 0], side="right").clip(0, len(_MIX) - 1)
    picks = picks.tolist()
    draws = draws_array.tolist()  # Python floats: indexing numpy scalars is slow
    # A few operators carry most missing lowerings, as in real backends.
    missing_ops = [op for op in OPS if _stable_fraction(op) < 0.22]
    rows: list[dict[str, Any]] = []
    for i, (file, cls, template, op, dtype) in enumerate(_identities(n)):
        u = draws[i]
        outcome, category, _ = _MIX[picks[i]]
        if op in missing_ops and u[1] < 0.3 and outcome == "passed":
            outcome, category = "skipped", "missing_lowering"
        fixed = u[2] < progress
        if fixed and outcome in ("failed", "error", "crashed", "timeout", "xpassed"):
            outcome, category = "passed", ""
        if fixed and category == "missing_lowering":
            outcome, category = "passed", ""
        name = f"{template}_{op.replace('.', '_')}_{dtype}" if op else f"{template}_{dtype}"
        detail, message = _detail_and_message(outcome, category, op, dtype, u, i, hostile)
        # Each operator dispatches one overload; tests without an operator hit the missing
        # ones with a skewed distribution, so a few lowerings block most tests.
        overload = _aten(op, _stable_fraction(op + ".overload")) if op else ""
        if category == "missing_lowering" and op not in missing_ops:
            owner = missing_ops[int(u[4] ** 3 * len(missing_ops))]
            blocker = _aten(owner, _stable_fraction(owner + ".overload"))
        else:
            blocker = overload
        fallback = [overload] if outcome == "passed" and u[1] > 0.88 else []
        rows.append(
            {
                "run_id": run_id,
                "nodeid": f"{file}::{cls}PRIVATEUSE1::{name.replace(dtype, backend + '_' + dtype)}",
                "test_id": f"{file}::{cls}::{name}",
                "file": file,
                "test_class": cls,
                "template": template,
                "op": op,
                "variant": "",
                "dtype": dtype,
                "params": "",
                "device": backend,
                "outcome": outcome,
                "category": category,
                "detail": detail if category != "missing_lowering" else blocker,
                "message": message.replace("{overload}", blocker),
                "duration_s": round(float(u[3]) * 0.4, 4) if outcome != "timeout" else 300.0,
                "skip_entry": f"skiplists/{backend}.toml:{1 + int(u[4] * 900)}"
                if outcome in ("skipped", "xfailed", "deselected") and category != "upstream_skip"
                else "",
                "ops_dispatched": sorted({overload, blocker} - {""}),
                "ops_fallback": fallback,
                "worker": f"gw{i % 2}",
                "shard": "",
                "rerun": 1 if category == "flaky" else 0,
                "attempts": _attempts(message, u) if category == "flaky" else [],
                "sample_index": int(u[4] * 12) if outcome in ("failed", "error") else -1,
            }
        )
    frame = pandas.DataFrame.from_records(rows, columns=list(RECORD_COLUMNS))
    meta = RunMeta(
        run_id=run_id,
        start_time=start_time,
        end_time=start_time,
        torch_version=torch_version,
        backend=backend,
        backend_version="0.1.0",
        harness_version="0.1.0",
        suite="synthetic",
        host="synthetic",
        command=["conformance", "run", "--synthetic"],
        collected=n,
        expected=n,
        complete=True,
    )
    return meta, frame


def _detail_and_message(
    outcome: str, category: str, op: str, dtype: str, u: Any, i: int, hostile: bool
) -> tuple[str, str]:
    if outcome == "passed":
        return "", ""
    if hostile and i % 997 == 13:
        return "", f"RuntimeError: {HOSTILE_MESSAGES[(i // 997) % len(HOSTILE_MESSAGES)]}"
    mismatched = 1 + int(u[3] * 50)
    if category == "missing_lowering":
        return "", (
            "NotImplementedError: Could not run '{overload}' with arguments from the "
            "'PrivateUse1' backend. 'aten::{overload}' is only available for these "
            "backends: [CPU, Meta]."
        )
    if category == "unsupported_dtype":
        return dtype, f"emu does not support dtype torch.{dtype}"
    if category == "unsupported_feature":
        feature = FEATURES[int(u[3] * len(FEATURES))]
        return feature, f"{feature} tensors are not supported on emu"
    if category == "not_applicable":
        return "", "Only runs on cuda"
    if category == "upstream_skip":
        return "", f"Skipped! {op or 'test'} does not support {dtype} on this device type"
    if category == "known_bug":
        return "", f"known bug: emu#{100 + int(u[4] * 80)} wrong result for strided input"
    if category == "numerical_mismatch":
        return "", (
            "AssertionError: Tensor-likes are not close!\n\n"
            f"Mismatched elements: {mismatched} / {mismatched * 7} ({100 / 7:.1f}%)\n"
            f"Greatest absolute difference: {u[4]:.6f} at index ({i % 5}, {i % 3}) "
            "(up to 1e-05 allowed)\n"
            f"Greatest relative difference: {u[3]:.6f} at index ({i % 4}, 0) "
            "(up to 1.3e-06 allowed)"
        )
    if category == "wrong_error":
        return "", f'AssertionError: "expected {dtype}" does not match "emu: kernel {i} failed"'
    if category == "flaky":  # the detail: its first attempt's category
        return "numerical_mismatch", (
            f"AssertionError: Scalars are not equal! Expected {i} but got {i + 1}"
        )
    if category == "crash":
        return "", f"worker 'gw{i % 2}' crashed while running the test (signal 11, pid {4000 + i})"
    if category == "timeout":
        return "", "Timeout (>300.0s) from pytest-timeout."
    return "", f"RuntimeError: emu: internal error at 0x7f{i:08x}: stream {i % 9} out of range"


def _attempts(message: str, u: Any) -> list[dict[str, Any]]:
    """A flaky test's two attempts: a mismatch, then a pass in a fresh process."""
    seconds = round(float(u[3]) * 0.4, 4)
    first = {"outcome": "failed", "category": "numerical_mismatch", "detail": ""}
    again = {"outcome": "passed", "category": "", "detail": ""}
    return [
        {**first, "message": message, "duration_s": seconds},
        {**again, "message": "", "duration_s": seconds},
    ]


def synthetic_op_coverage(frame: pandas.DataFrame) -> dict[str, Any]:
    """An ``op_coverage.json`` document consistent with a synthetic run: overloads named as
    a missing lowering are ``missing``, those that fell back are ``fallback``."""
    blocked = frame.loc[frame["category"] == "missing_lowering", "detail"].value_counts()
    fallback = {name for names in frame["ops_fallback"] for name in names}
    seen = {name for names in frame["ops_dispatched"] for name in names} | set(blocked.index)
    ops = []
    for name in sorted(seen):
        if name in blocked.index:
            status = "missing"
        elif name in fallback:
            status = "fallback"
        else:
            status = "composite" if _stable_fraction(name) < 0.2 else "native"
        ops.append(
            {
                "op": name,
                "status": status,
                "source": ""
                if status in ("missing", "fallback")
                else f"emu/ops.py:{len(ops) + 10}",
                "in_core": _stable_fraction(name + "core") < 0.6,
                "tests_blocked": int(blocked.get(name, 0)),
            }
        )
    return {"meta": {"format_version": 1, "backend": "emu"}, "ops": ops}


def write_run(run_dir: str | Path, meta: RunMeta, frame: pandas.DataFrame) -> Path:
    """Write a finished run folder in the results store layout (meta.json and
    outcomes.parquet), as the runner leaves it when a run ends."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pandas(frame[list(RECORD_COLUMNS)], preserve_index=False)
    pq.write_table(table, run_dir / "outcomes.parquet")
    (run_dir / "meta.json").write_text(json.dumps(meta.to_dict(), indent=2) + "\n", "utf-8")
    return run_dir
