"""Charts are inline SVG drawn at generation time: labels are escaped, values scale."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from reports.svg import line_chart, stacked_bars

SVG = "{http://www.w3.org/2000/svg}"


def test_stacked_bars_scale_to_the_largest_total_and_escape_labels() -> None:
    chart = stacked_bars(
        ["<script>", "b"], [("passed", [3, 1], "passed"), ("failed", [1, 0], "failed")]
    )
    root = ET.fromstring(str(chart))  # well-formed XML, so nothing was injected
    bars = [r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    titles = [r.find(f"{SVG}title").text for r in bars]
    assert titles == ["<script>: passed 3", "<script>: failed 1", "b: passed 1"]
    heights = [float(r.attrib["height"]) for r in bars]
    assert heights[0] == 3 * heights[2]  # same scale for every bar
    assert "<script>" not in str(chart)


def test_line_chart_puts_a_point_per_value_on_a_percent_axis() -> None:
    chart = line_chart(["r1", "r2", "r3"], [("pass rate", [0.0, 50.0, 100.0], "passed")])
    root = ET.fromstring(str(chart))
    ys = [float(c.attrib["cy"]) for c in root.iter(f"{SVG}circle")]
    assert ys[0] > ys[1] > ys[2] and abs((ys[0] + ys[2]) / 2 - ys[1]) < 0.2
    assert stacked_bars([], []) == "" and line_chart([], []) == ""
