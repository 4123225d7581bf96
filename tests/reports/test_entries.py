"""Expected failures by skiplist entry: a cause entry's count reads the same in the summary
page, the entries page, the Markdown and JSON summaries, and beside the overload in the
triage table, as the comment skiplist update writes above the entry."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from reports.build import build_model, model_from_frame
from reports.entries import EntryRow, build_entries
from reports.machine import json_summary, markdown_summary
from reports.render import render_report
from reports.synthetic import synthetic_run
from reports.viewmodel import prepare
from tests.reports.conftest import (
    CAUSE,
    EXACT,
    cause_records,
    frame_of,
    record,
    small_meta,
    write_small_run,
)


@pytest.fixture
def report(tmp_path: Path) -> Path:
    run = write_small_run(tmp_path, "run-c", records=cause_records(), coverage=False)
    out = tmp_path / "report"
    render_report(build_model(run), out, ["html", "json", "md"])
    return out


def _rows(html: str) -> list[list[str]]:
    """The cells of each body row of the first table in ``html``, as text."""
    body = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return [
        [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", body, flags=re.S)
    ]


EXPECTED_ROWS = [
    [CAUSE, "missing_lowering aten::lgamma.out", "3", "2"],
    [EXACT, "known_bug", "4", "1"],
]


def test_entries_count_expected_failures_cause_entries_first() -> None:
    frame = prepare(frame_of(cause_records()))
    assert build_entries(frame) == [
        EntryRow(CAUSE, "missing_lowering", "aten::lgamma.out", 3, 2, cause=True),
        EntryRow(EXACT, "known_bug", "", 4, 1, cause=False),
    ]


def test_summary_and_entries_pages_show_the_counts(report: Path) -> None:
    index = (report / "index.html").read_text(encoding="utf-8")
    section = index.split("<h2>Expected failures by skiplist entry</h2>", 1)[1]
    assert _rows(section) == EXPECTED_ROWS
    assert '<a href="entries.html">All 2 entries</a></p>' in section
    entries = (report / "entries.html").read_text(encoding="utf-8")
    assert _rows(entries) == EXPECTED_ROWS
    assert "<p>7 tests expected to fail (xfailed) by 2 skiplist entries," in entries
    # The cause links to the search for its expected failures.
    assert (
        'href="search.html?outcome=xfailed&amp;category=missing_lowering&amp;'
        'detail=aten%3A%3Algamma.out"'
    ) in entries


def test_triage_shows_the_expected_failures_beside_the_blocked_tests(report: Path) -> None:
    triage = (report / "triage.html").read_text(encoding="utf-8")
    head = re.findall(r"<th[^>]*>(.*?)</th>", triage.split("</thead>", 1)[0])
    (row,) = _rows(triage)
    cells = dict(zip(head, row, strict=True))
    assert cells["overload"] == "aten::lgamma.out"
    assert (cells["blocked"], cells["expected to fail"]) == ("5", "3")
    assert (cells["skipped"], cells["failed"]) == ("4", "1")


def test_markdown_and_json_give_the_same_numbers(report: Path) -> None:
    text = (report / "summary.md").read_text(encoding="utf-8")
    section = text.split("### Expected failures by skiplist entry\n\n", 1)[1].split("\n\n")[0]
    assert section.splitlines() == [
        f"- `{CAUSE}` missing_lowering aten::lgamma.out: 3 tests expected to fail (2 templates)",
        f"- `{EXACT}` known_bug: 4 tests expected to fail (1 template)",
    ]
    assert "| `aten::lgamma.out` | 5 | 3 | lgamma |" in text
    data = json.loads((report / "summary.json").read_text(encoding="utf-8"))
    assert data["meta"]["format"] == 9
    assert data["expected_failures_by_entry"] == [
        {
            "entry": CAUSE,
            "category": "missing_lowering",
            "detail": "aten::lgamma.out",
            "tests": 3,
            "templates": 2,
            "cause": True,
        },
        {
            "entry": EXACT,
            "category": "known_bug",
            "detail": "",
            "tests": 4,
            "templates": 1,
            "cause": False,
        },
    ]
    (lgamma,) = data["missing_lowerings"]
    assert (lgamma["overload"], lgamma["skipped"], lgamma["failed"], lgamma["xfailed"]) == (
        "aten::lgamma.out",
        4,
        1,
        3,
    )


def test_summaries_list_the_top_entries_and_count_the_rest(tmp_path: Path) -> None:
    # Entry k expected k + 1 tests to fail: entry 24 comes first, entry 0 last.
    records = [
        record(f"a.py::C::test_t{k}_{n}", "xfailed", "known_bug", skip_entry=f"s.toml:{k}")
        for k in range(25)
        for n in range(k + 1)
    ]
    model = model_from_frame(small_meta(), frame_of(records))
    text = markdown_summary(model)
    section = text.split("### Expected failures by skiplist entry\n\n", 1)[1].split("\n\n")[0]
    lines = section.splitlines()
    assert len(lines) == 11 and lines[-1] == "- … and 15 more entries"
    assert lines[0] == "- `s.toml:24` known_bug: 25 tests expected to fail (25 templates)"
    assert len(json_summary(model)["expected_failures_by_entry"]) == 25
    render_report(model, tmp_path / "out", ["html"])
    index = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    section = index.split("<h2>Expected failures by skiplist entry</h2>", 1)[1]
    shown = _rows(section)
    assert len(shown) == 20 and shown[0] == ["s.toml:24", "known_bug", "25", "25"]
    assert '<a href="entries.html">All 25 entries</a> (5 not shown here)</p>' in section
    entries = _rows((tmp_path / "out" / "entries.html").read_text(encoding="utf-8"))
    assert len(entries) == 25 and entries[-1] == ["s.toml:0", "known_bug", "1", "1"]


def test_an_entry_whose_records_differ_is_no_cause() -> None:
    records = [
        record("a.py::C::test_x_float32", "xfailed", "missing_lowering", detail="aten::x.out",
               skip_entry="s.toml:1"),
        record("a.py::C::test_x_float64", "xfailed", "missing_lowering", detail="aten::y.out",
               skip_entry="s.toml:1"),
        record("a.py::C::test_z_float32", "xfailed", "unsupported_feature", detail="sparse",
               skip_entry="s.toml:2"),
        record("a.py::C::test_z_float64", "xfailed", "known_bug", detail="sparse",
               skip_entry="s.toml:3"),
        record("a.py::C::test_w_float64", "xfailed", "known_bug", detail="sparse",
               skip_entry="s.toml:3"),
        record("a.py::C::test_v_float64", "xfailed", "missing_lowering", detail="sparse"),
    ]  # fmt: skip
    rows = build_entries(prepare(frame_of(records)))
    assert [(r.entry, r.category, r.detail, r.tests, r.cause) for r in rows] == [
        ("s.toml:2", "unsupported_feature", "sparse", 1, True),
        ("s.toml:3", "known_bug", "sparse", 2, False),  # 2 templates
        ("s.toml:1", "missing_lowering", "", 2, False),  # 1 template
    ]
    assert rows[2].cause_text == "missing_lowering"
    assert build_entries(prepare(frame_of(records[-1:]))) == []


def test_entries_add_up_to_the_expected_failures_of_a_synthetic_run() -> None:
    meta, frame = synthetic_run(5000, seed=2)
    model = model_from_frame(meta, frame)
    listed = model.frame.loc[
        (model.frame["outcome"] == "xfailed") & (model.frame["skip_entry"] != "")
    ]
    assert sum(row.tests for row in model.entries) == len(listed) > 0
    assert [r.tests for r in model.entries] == sorted(
        (r.tests for r in model.entries), reverse=True
    )
    by_entry = listed.groupby("skip_entry")["test_id"].nunique()
    assert {r.entry: r.tests for r in model.entries} == by_entry.to_dict()
