"""Charts as inline SVG, drawn when the report is generated: they need no script, no
network and no font files, and they print.

Every label goes through ``markupsafe.escape``; the only markup here is built from numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

__all__ = ["line_chart", "stacked_bars"]

_LEFT, _BOTTOM, _TOP, _RIGHT = 48, 54, 12, 12


def _frame(width: int, height: int, top_value: float, unit: str) -> list[str]:
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} '
        f'{height}" width="{width}" height="{height}" role="img">'
    ]
    plot_h = height - _TOP - _BOTTOM
    for step in range(5):
        value = top_value * step / 4
        y = _TOP + plot_h - plot_h * step / 4
        parts.append(
            f'<line class="grid" x1="{_LEFT}" x2="{width - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
        )
        label = f"{value:.0f}{unit}" if unit else f"{value:,.0f}"
        parts.append(
            f'<text class="axis" x="{_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{label}</text>'
        )
    return parts


def _x_labels(parts: list[str], labels: Sequence[str], xs: Sequence[float], height: int) -> None:
    # Thin the labels so they never overlap: at most ~12 shown.
    stride = max(1, -(-len(labels) // 12))
    for i, (label, x) in enumerate(zip(labels, xs, strict=True)):
        if i % stride == 0 or i == len(labels) - 1:
            text = escape(label[:16])
            parts.append(
                f'<text class="axis" x="{x:.1f}" y="{height - _BOTTOM + 14}" '
                f'text-anchor="end" transform="rotate(-30 {x:.1f} '
                f'{height - _BOTTOM + 14})">{text}</text>'
            )


def _legend(parts: list[str], names: Sequence[tuple[str, str]], width: int, height: int) -> None:
    x = _LEFT
    for name, css in names:
        parts.append(
            f'<rect class="{escape(css)}" x="{x}" y="{height - 12}" width="10" '
            f'height="10"/><text class="axis" x="{x + 14}" y="{height - 3}">'
            f"{escape(name)}</text>"
        )
        x += 20 + 7 * len(name)


def stacked_bars(
    labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[int], str]],
    *,
    width: int = 720,
    height: int = 260,
) -> Markup:
    """One bar per label, stacked from ``series`` (name, values, CSS class); each segment
    has a tooltip with its label, name and value."""
    if not labels:
        return Markup("")
    totals = [sum(values[i] for _, values, _ in series) for i in range(len(labels))]
    top = max(max(totals), 1)
    parts = _frame(width, height, top, "")
    plot_w = width - _LEFT - _RIGHT
    plot_h = height - _TOP - _BOTTOM
    slot = plot_w / len(labels)
    bar = min(48.0, max(1.0, slot * 0.7))  # a few runs must not make slabs
    xs = []
    for i, label in enumerate(labels):
        x = _LEFT + slot * i + (slot - bar) / 2
        xs.append(x + bar / 2)
        y = _TOP + plot_h
        for name, values, css in series:
            h = plot_h * values[i] / top
            y -= h
            if values[i]:
                parts.append(
                    f'<rect class="{escape(css)}" x="{x:.1f}" y="{y:.1f}" '
                    f'width="{bar:.1f}" height="{h:.1f}"><title>{escape(label)}: '
                    f"{escape(name)} {values[i]:,}</title></rect>"
                )
    _x_labels(parts, labels, xs, height)
    _legend(parts, [(name, css) for name, _, css in series], width, height)
    parts.append("</svg>")
    return Markup("".join(parts))


def line_chart(
    labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float], str]],
    *,
    width: int = 720,
    height: int = 240,
    percent: bool = True,
) -> Markup:
    """One polyline per series (name, values, CSS class) over the labels, with a point and
    tooltip per value; ``percent`` fixes the axis to 0..100."""
    if not labels:
        return Markup("")
    top = 100.0 if percent else max(max(v) for _, v, _ in series) or 1.0
    parts = _frame(width, height, top, "%" if percent else "")
    plot_w = width - _LEFT - _RIGHT
    plot_h = height - _TOP - _BOTTOM
    # Inset the first and last points so their labels and dots are not cut off.
    inset = 24
    step = (plot_w - 2 * inset) / (len(labels) - 1) if len(labels) > 1 else 0
    xs = [
        _LEFT + inset + step * i if len(labels) > 1 else _LEFT + plot_w / 2
        for i in range(len(labels))
    ]
    for name, values, css in series:
        points = [(x, _TOP + plot_h - plot_h * v / top) for x, v in zip(xs, values, strict=True)]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        parts.append(f'<polyline class="{escape(css)}" fill="none" points="{path}"/>')
        for (x, y), label, value in zip(points, labels, values, strict=True):
            shown = f"{value:.1f}%" if percent else f"{value:,.0f}"
            parts.append(
                f'<circle class="{escape(css)}" cx="{x:.1f}" cy="{y:.1f}" r="3">'
                f"<title>{escape(label)}: {escape(name)} {shown}</title></circle>"
            )
    _x_labels(parts, labels, xs, height)
    _legend(parts, [(name, css) for name, _, css in series], width, height)
    parts.append("</svg>")
    return Markup("".join(parts))
