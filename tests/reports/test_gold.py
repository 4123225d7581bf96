"""The whole report of the small run, compared file by file with tests/reports/gold/.

Timestamps of generation and the tool version are scrubbed first; everything else must
match byte for byte. To accept a deliberate change, render the gold files again with
``REPORTS_UPDATE_GOLD=1 pytest tests/reports/test_gold.py`` and review the diff in git.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
from pathlib import Path

from reports.build import build_model
from reports.render import render_report

GOLD = Path(__file__).parent / "gold"
SCRUBS = (
    (re.compile(r'<span class="generated">[^<]*</span>'), '<span class="generated">TIME</span>'),
    (re.compile(r'"generated": "[^"]*"'), '"generated": "TIME"'),
    (re.compile(r"torch-conformance \d+\.\d+\.\d+\S*"), "torch-conformance VERSION"),
    (re.compile(r'"version": "[^"]*"'), '"version": "VERSION"'),
)
# Static assets are package files copied as they are; the gold holds what is generated.
SKIP = ("static/", ".gitignore", ".conformance-report")


def scrub(text: str) -> str:
    for pattern, replacement in SCRUBS:
        text = pattern.sub(replacement, text)
    return text


def generated_files(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): scrub(p.read_text(encoding="utf-8"))
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not str(p.relative_to(folder)).startswith(SKIP)
    }


def compare_with_gold(case: str, out: Path) -> None:
    actual = generated_files(out)
    gold_dir = GOLD / case
    if os.environ.get("REPORTS_UPDATE_GOLD") == "1":
        shutil.rmtree(gold_dir, ignore_errors=True)
        for name, text in actual.items():
            (gold_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (gold_dir / name).write_text(text, encoding="utf-8")
    expected = generated_files(gold_dir)
    assert sorted(actual) == sorted(expected), "the report's files differ from the gold files"
    for name, text in expected.items():
        if actual[name] != text:
            diff = "".join(
                list(
                    difflib.unified_diff(
                        text.splitlines(True),
                        actual[name].splitlines(True),
                        f"gold/{case}/{name}",
                        f"actual/{name}",
                    )
                )[:60]
            )
            raise AssertionError(
                f"{name} differs from the gold file (output kept in {out}):\n{diff}"
            )


def test_full_report_matches_gold(runs_root: Path, tmp_path: Path) -> None:
    model = build_model(
        runs_root / "run-b",
        compare_dir=runs_root / "run-a",
        baseline_dir=runs_root.parent / "baseline" / "cpu",
        history_root=runs_root,
    )
    out = tmp_path / "report"
    render_report(model, out, ["html", "json", "md", "junit", "hud"])
    compare_with_gold("full", out)


def test_scrub_removes_only_generation_time_and_version() -> None:
    text = (
        '<span class="generated">2026-11-29T22:00:00+00:00</span> run 2026-11-02T01:00:00 '
        'torch-conformance 0.1.0 "generated": "x" "start_time": "2026"'
    )
    assert scrub(text) == (
        '<span class="generated">TIME</span> run 2026-11-02T01:00:00 '
        'torch-conformance VERSION "generated": "TIME" "start_time": "2026"'
    )
