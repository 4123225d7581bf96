"""Machine outputs: the versioned JSON summary, Markdown, JUnit XML and the HUD record
agree with the dashboard and survive hostile messages."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from reports.build import build_model
from reports.machine import JSON_FORMAT, MARKDOWN_LIMIT, hud_record, json_summary, markdown_summary
from reports.render import render_report
from tests.reports.conftest import write_small_run


def test_json_summary_has_a_meta_block_and_the_breakdown(runs_root: Path) -> None:
    model = build_model(
        runs_root / "run-b",
        compare_dir=runs_root / "run-a",
        baseline_dir=runs_root.parent / "baseline" / "cpu",
    )
    data = json_summary(model)
    assert data["meta"]["format"] == JSON_FORMAT
    assert data["meta"]["run"]["run_id"] == "run-b"
    assert (data["meta"]["compare_run"], data["meta"]["baseline_run"]) == ("run-a", "cpu")
    assert data["totals"]["total"] == 12 and data["pass_rate"] == "25.0%"
    assert data["breakdown"]["passed_via_fallback"] == 1
    assert data["missing_lowerings"][1]["overload"] == "aten::cumsum.out"
    assert data["diff"]["removed"] == ["test_ops.py::TestCommon::test_out_removed_float32"]
    assert data["baseline"]["backend_only_failures"] == 4
    json.dumps(data)  # serialisable as is


def test_hud_record_has_the_ingested_shape(tmp_path: Path) -> None:
    record = hud_record(build_model(write_small_run(tmp_path)))
    assert record["test_results"] == {
        "passed": 3,
        "failed": 6,
        "skipped": 3,
        "flaky": 0,
        "total": 12,
    }
    assert record["conclusion"] == "failure" and record["status"] == "completed"
    assert len(record["failed_tests"]) == 6 and not record["failed_tests_truncated"]


def test_markdown_summary_for_ci(runs_root: Path) -> None:
    model = build_model(runs_root / "run-b", compare_dir=runs_root / "run-a")
    text = markdown_summary(model)
    assert text.startswith("## Conformance: emu on torch 2.13.0")
    assert "**12** outcomes, **3** passed (25.0%), of which 1 via CPU fallback" in text
    assert "| New failures | 2 |" in text
    assert "- `test_ops.py::TestCommon::test_out_add_int64` (passed → failed)" in text
    assert "| `aten::cumsum.out` | 2 | 0 | cumsum |" in text
    assert len(text) < MARKDOWN_LIMIT and "<script>" not in text.split("### Top")[0]


def test_junit_xml_parses_and_counts_match(tmp_path: Path) -> None:
    out = tmp_path / "out"
    render_report(build_model(write_small_run(tmp_path)), out, ["junit"])
    root = ET.parse(out / "junit.xml").getroot()  # hostile control characters would break this
    assert root.attrib["tests"] == "12"
    assert (root.attrib["failures"], root.attrib["errors"], root.attrib["skipped"]) == (
        "4",
        "2",
        "3",
    )
    cases = root.findall(".//testcase")
    assert len(cases) == 12
    suites = {s.attrib["name"]: int(s.attrib["tests"]) for s in root.findall("testsuite")}
    assert suites == {"test_ops.py": 7, "test_torch.py": 5}
    hostile = next(c for c in cases if c.attrib["name"] == "test_hostile_megabyte")
    body = hostile.find("failure").text
    assert "\\x00" in body and "\x00" not in body and "more characters not shown" in body
    assert len(body) < 10000
