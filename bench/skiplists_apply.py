"""Benchmark: a 5,000-entry skiplist applied to 154,000 collected tests, and linted; and
the run-time check of 154,000 failures against 2,000 cause entries.

Targets: apply in at most 1 s, lint in at most 5 s, the cause check in at most 0.5 s
(printed beside the collection pass). The items are lightweight stand-ins with the
attributes ``apply_to_items`` uses (nodeid, user_properties, add_marker); the skiplists
are real TOML files loaded by the real loader.

    python bench/skiplists_apply.py [--tests 154000] [--entries 5000] [--causes 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from conformance.model import TestIdentity
from skiplists import apply_to_items, load
from skiplists.lint import lint

APPLY_TARGET_S = 1.0
LINT_TARGET_S = 5.0
CAUSE_TARGET_S = 0.5
FEATURES = ("sparse", "nested", "forward_ad", "dynamic_shapes", "per_channel_quant")
DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "complex64", "bool")


class StandInItem:
    """What apply_to_items touches on a pytest item."""

    __slots__ = ("markers", "nodeid", "user_properties")

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.user_properties: list[tuple[str, str]] = []
        self.markers: list[object] = []

    def add_marker(self, marker: object) -> None:
        self.markers.append(marker)


def synthetic_tests(count: int) -> list[TestIdentity]:
    """Upstream-shaped tests: files, classes, templates over ops and dtypes."""
    tests = []
    per_op = len(DTYPES)
    for index in range(count):
        op_index, dtype_index = divmod(index, per_op)
        file = f"test_file{op_index % 40}.py"
        test_class = f"TestClass{op_index % 7}"
        template = f"test_tmpl{op_index % 90}"
        op = f"op{op_index % 600}"
        dtype = DTYPES[dtype_index]
        name = f"{template}_{op}_v{op_index}_{dtype}"  # unique, as real test_ids are
        tests.append(
            TestIdentity(
                nodeid=f"{file}::{test_class}PRIVATEUSE1::{template}_{op}_v{op_index}_emu_{dtype}",
                test_id=f"{file}::{test_class}::{name}",
                file=file,
                test_class=test_class,
                template=template,
                op=op,
                dtype=dtype,
                device="emu",
            )
        )
    return tests


def synthetic_skiplist(tests: list[TestIdentity], count: int, rng: random.Random) -> str:
    """60% exact test_ids, 30% structured fields, 10% patterns; every entry distinct."""
    blocks = []
    tiers = ("xfail", "skip", "deselect")
    exact = rng.sample(tests, int(count * 0.6))
    for test in exact:
        blocks.append(f'test_id = "{test.test_id}"')
    seen = set()
    while len(seen) < int(count * 0.3):
        test = rng.choice(tests)
        shape = rng.randrange(3)
        if shape == 0:
            key = f'op = "{test.op}"\ndtypes = ["{test.dtype}"]'
        elif shape == 1:
            key = f'class = "{test.test_class}"\ntemplate = "{test.template}"\nop = "{test.op}"'
        else:
            key = f'file = "{test.file}"\ntemplate = "{test.template}"\ndtypes = ["{test.dtype}"]'
        seen.add(key)
    blocks.extend(sorted(seen))
    patterns = set()
    while len(patterns) < count - len(blocks):
        test = rng.choice(tests)
        patterns.add(
            f"pattern = '{test.file.replace('.', chr(92) + '.')}::{test.test_class}::"
            f"{test.template}_{test.op}_v\\d+_(float|int)\\d+'"
        )
    blocks.extend(sorted(patterns))
    entries = []
    for index, block in enumerate(blocks):
        tier = tiers[index % 3]
        entries.append(
            f'[[skip]]\n{block}\ntier = "{tier}"\ncategory = "known_bug"\n'
            f'reason = "synthetic entry {index}"\n'
        )
    return "\n".join(entries)


def synthetic_causes(tests: list[TestIdentity], count: int, rng: random.Random) -> str:
    """Cause entries as ``update`` writes them: one per missing overload or feature, a
    quarter of them narrowed to a template or a file."""
    blocks = [f'cause = "{feature}"' for feature in FEATURES]
    for index in range(count - len(blocks)):
        block = f'cause = "aten::op{index}.out"'
        test = rng.choice(tests)
        narrowing = rng.randrange(8)
        if narrowing == 0:
            block += f'\ntemplate = "{test.template}"'
        elif narrowing == 1:
            block += f'\nfile = "{test.file}"'
        blocks.append(block)
    return "\n".join(
        f'[[skip]]\n{block}\nreason = "synthetic cause {index}"\n'
        for index, block in enumerate(blocks)
    )


def synthetic_failures(
    tests: list[TestIdentity], causes: int, rng: random.Random
) -> list[tuple[TestIdentity, str, str]]:
    """One failure per test, as the classifier reads them: half a listed missing overload,
    a tenth a feature, a fifth an overload no entry names, the rest a numerical mismatch."""
    failures = []
    for test in tests:
        draw = rng.random()
        if draw < 0.5:
            failures.append((test, "missing_lowering", f"aten::op{rng.randrange(causes)}.out"))
        elif draw < 0.6:
            failures.append((test, "unsupported_feature", rng.choice(FEATURES)))
        elif draw < 0.8:
            failures.append((test, "missing_lowering", f"aten::other{rng.randrange(999)}.out"))
        else:
            failures.append((test, "numerical_mismatch", "values"))
    return failures


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=154_000)
    parser.add_argument("--entries", type=int, default=5_000)
    parser.add_argument("--causes", type=int, default=2_000, help="cause entries")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rng = random.Random(5)
    tests = synthetic_tests(args.tests)
    text = synthetic_skiplist(tests, args.entries, rng)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "bench.toml"
        path.write_text(text, encoding="utf-8")
        start = time.perf_counter()
        skiplist = load([path], backend="emu", torch_version="2.13.0")
        load_s = time.perf_counter() - start

    identities = {t.nodeid: t for t in tests}
    apply_times = []
    for _ in range(args.repeat):
        items = [StandInItem(t.nodeid) for t in tests]
        start, start_cpu = time.perf_counter(), time.process_time()
        deselected = apply_to_items(items, skiplist, identities)
        apply_times.append((time.perf_counter() - start, time.process_time() - start_cpu))
    selected = sum(1 for item in items if item.user_properties)

    lint_times = []
    for _ in range(args.repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        findings = lint(skiplist, tests)
        lint_times.append((time.perf_counter() - start, time.process_time() - start_cpu))
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "causes.toml"
        path.write_text(synthetic_causes(tests, args.causes, rng), encoding="utf-8")
        causes = load([path], backend="emu", torch_version="2.13.0")
    failures = synthetic_failures(tests, args.causes, rng)
    cause_times = []
    for _ in range(args.repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        explained = sum(
            causes.match_cause(test, category, detail) is not None
            for test, category, detail in failures
        )
        cause_times.append((time.perf_counter() - start, time.process_time() - start_cpu))

    # The best of the repeats: what the code costs, without what other processes took.
    apply_s, apply_cpu = min(apply_times)
    lint_s, lint_cpu = min(lint_times)
    cause_s, cause_cpu = min(cause_times)

    print(
        f"{len(skiplist)} entries, {len(tests)} tests: {selected} selected, "
        f"{len(deselected)} deselected, {len(findings)} lint findings"
    )
    # CPU time beside wall time: on a shared machine the wall clock also counts waiting.
    print(f"load   {load_s:6.3f} s wall   (apply and lint: best of {args.repeat})")
    print(
        f"{len(causes)} cause entries, {len(failures)} failures: {explained} explained at run time"
    )
    for name, wall, cpu, target in (
        ("apply", apply_s, apply_cpu, APPLY_TARGET_S),
        ("lint", lint_s, lint_cpu, LINT_TARGET_S),
        ("cause", cause_s, cause_cpu, CAUSE_TARGET_S),
    ):
        print(
            f"{name:6} {wall:6.3f} s wall {cpu:6.3f} s cpu   target {target:.1f} s   "
            f"ratio wall {wall / target:.2f} cpu {cpu / target:.2f}"
        )
    print(f"cause check over the collection pass: {cause_s / apply_s:.2f}x")
    met = apply_s <= APPLY_TARGET_S and lint_s <= LINT_TARGET_S and cause_s <= CAUSE_TARGET_S
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
