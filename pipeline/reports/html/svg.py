"""Inline SVG charts for the HTML report, drawn in Python (no JavaScript, no library).

Every function returns the text of one ``<svg>`` element. Numbers are written with a fixed
number of decimals and series keep the order they are given in, so the same data gives the
same bytes. Every label goes through :func:`html.escape`. A chart with no data is a small SVG
that says so (still an SVG with content, so a page never shows a blank box).
"""

from __future__ import annotations

import math
from html import escape
from typing import Sequence

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
FONT = 11


def _n(value: float) -> str:
    """A coordinate: one decimal, no negative zero."""
    text = f"{value:.1f}"
    return "0.0" if text == "-0.0" else text


def color(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def human(value: float) -> str:
    """12,345 -> 12.3k; 1,234,567 -> 1.2M (axis labels)."""
    magnitude = abs(value)
    if magnitude >= 1e9:
        return f"{value / 1e9:.1f}G"
    if magnitude >= 1e6:
        return f"{value / 1e6:.1f}M"
    if magnitude >= 1e3:
        return f"{value / 1e3:.1f}k"
    if float(value).is_integer():
        return f"{int(value)}"
    return f"{value:.2f}"


def nice_ticks(low: float, high: float, count: int = 5, *, integer: bool = False) -> list[float]:
    """Round tick values covering [low, high] (about ``count`` of them); ``integer``: whole
    steps only (turn numbers)."""
    if high <= low:
        high = low + 1
    raw = (high - low) / max(1, count)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    if integer:
        step = max(1, math.ceil(step))
    start = math.floor(low / step) * step
    ticks = []
    value = start
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < high:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def _open(width: float, height: float, title: str) -> list[str]:
    return [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" role="img" '
            f'width="{_n(width)}" height="{_n(height)}" viewBox="0 0 {_n(width)} {_n(height)}">',
            f"<title>{escape(title)}</title>",
            f'<text x="8" y="16" class="chart-title">{escape(title)}</text>']


def empty_chart(title: str, message: str = "no data") -> str:
    parts = _open(420, 60, title)
    parts.append(f'<text x="8" y="42" class="chart-empty">{escape(message)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _legend(parts: list[str], names: Sequence[str], x: float, y: float) -> None:
    for index, name in enumerate(names):
        top = y + index * 16
        parts.append(f'<rect x="{_n(x)}" y="{_n(top)}" width="10" height="10" '
                     f'fill="{color(index)}"/>')
        parts.append(f'<text x="{_n(x + 14)}" y="{_n(top + 9)}">{escape(name)}</text>')


def _y_axis(parts: list[str], ticks: list[float], left: float, right: float, top: float,
            bottom: float, scale) -> None:
    for tick in ticks:
        y = scale(tick)
        parts.append(f'<line x1="{_n(left)}" y1="{_n(y)}" x2="{_n(right)}" y2="{_n(y)}" '
                     'class="grid"/>')
        parts.append(f'<text x="{_n(left - 4)}" y="{_n(y + 4)}" text-anchor="end">'
                     f"{escape(human(tick))}</text>")
    parts.append(f'<line x1="{_n(left)}" y1="{_n(top)}" x2="{_n(left)}" y2="{_n(bottom)}" '
                 'class="axis"/>')


def stacked_bars(categories: Sequence[str], series: Sequence[tuple[str, Sequence[float]]],
                 title: str, y_label: str = "tokens") -> str:
    """Vertical bars, one per category (e.g. a day), stacked by series (e.g. token kind)."""
    totals = [sum(values[i] for _name, values in series) for i in range(len(categories))]
    if not categories or not any(totals):
        return empty_chart(title)
    bar, gap = 18.0, 6.0
    left, top, legend_w = 64.0, 28.0, 150.0
    plot_w = max(260.0, len(categories) * (bar + gap))
    plot_h = 200.0
    width, height = left + plot_w + legend_w, top + plot_h + 70
    ticks = nice_ticks(0, max(totals))
    span = ticks[-1] or 1

    def scale(v: float) -> float:
        return top + plot_h - plot_h * v / span

    parts = _open(width, height, title)
    _y_axis(parts, ticks, left, left + plot_w, top, top + plot_h, scale)
    parts.append(f'<text x="12" y="{_n(top + plot_h / 2)}" transform="rotate(-90 12 '
                 f'{_n(top + plot_h / 2)})" text-anchor="middle">{escape(y_label)}</text>')
    every = max(1, math.ceil(len(categories) / max(1, plot_w // 60)))
    for i, category in enumerate(categories):
        x = left + gap / 2 + i * (bar + gap)
        base = 0.0
        for index, (name, values) in enumerate(series):
            value = values[i]
            if value <= 0:
                continue
            y0, y1 = scale(base), scale(base + value)
            parts.append(f'<rect x="{_n(x)}" y="{_n(y1)}" width="{_n(bar)}" '
                         f'height="{_n(max(0.5, y0 - y1))}" fill="{color(index)}">'
                         f"<title>{escape(category)} {escape(name)}: {value:,.0f}</title></rect>")
            base += value
        if i % every == 0:
            lx, ly = x + bar / 2, top + plot_h + 10
            parts.append(f'<text x="{_n(lx)}" y="{_n(ly)}" transform="rotate(45 {_n(lx)} '
                         f'{_n(ly)})">{escape(category)}</text>')
    _legend(parts, [name for name, _values in series], left + plot_w + 14, top)
    parts.append("</svg>")
    return "".join(parts)


def hbars(rows: Sequence[tuple[str, float, str]], title: str) -> str:
    """Horizontal bars: (label, value, text shown after the bar), in the order given."""
    rows = [r for r in rows if r[1] > 0]
    if not rows:
        return empty_chart(title)
    label_w, bar_w, note_w, row_h, top = 200.0, 300.0, 180.0, 18.0, 28.0
    width, height = label_w + bar_w + note_w, top + row_h * len(rows) + 8
    peak = max(value for _label, value, _note in rows) or 1
    parts = _open(width, height, title)
    for index, (label, value, note) in enumerate(rows):
        y = top + index * row_h
        shown = label if len(label) <= 30 else label[:29] + "…"
        w = max(1.0, bar_w * value / peak)
        parts.append(f'<text x="{_n(label_w - 6)}" y="{_n(y + 12)}" text-anchor="end">'
                     f"<title>{escape(label)}</title>{escape(shown)}</text>")
        parts.append(f'<rect x="{_n(label_w)}" y="{_n(y + 2)}" width="{_n(w)}" height="13" '
                     f'fill="{color(index)}"/>')
        parts.append(f'<text x="{_n(label_w + w + 6)}" y="{_n(y + 12)}">{escape(note)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _x_axis_and_labels(parts: list[str], xticks, sx, left: float, top: float, plot_w: float,
                       plot_h: float, x_label: str, y_label: str) -> None:
    """The x tick labels under a plot and both axis titles (the y one turned)."""
    for tick in xticks:
        parts.append(f'<text x="{_n(sx(tick))}" y="{_n(top + plot_h + 14)}" '
                     f'text-anchor="middle">{escape(human(tick))}</text>')
    parts.append(f'<text x="{_n(left + plot_w / 2)}" y="{_n(top + plot_h + 34)}" '
                 f'text-anchor="middle">{escape(x_label)}</text>')
    parts.append(f'<text x="12" y="{_n(top + plot_h / 2)}" transform="rotate(-90 12 '
                 f'{_n(top + plot_h / 2)})" text-anchor="middle">{escape(y_label)}</text>')


def lines(series: Sequence[tuple[str, Sequence[tuple[float, float]]]], title: str,
          x_label: str, y_label: str, *, dashed_first: bool = False) -> str:
    """Line chart: one polyline per (name, points); ``dashed_first`` dashes the baseline."""
    points = [p for _name, pts in series for p in pts]
    if not points:
        return empty_chart(title)
    left, top, plot_w, plot_h, legend_w = 64.0, 28.0, 520.0, 220.0, 300.0
    width, height = left + plot_w + legend_w, top + plot_h + 46
    x_max = max(x for x, _y in points)
    x_min = min(x for x, _y in points)
    xticks = nice_ticks(x_min, x_max if x_max > x_min else x_min + 1, integer=True)
    yticks = nice_ticks(0, max(y for _x, y in points))
    x_span = (xticks[-1] - xticks[0]) or 1
    y_span = yticks[-1] or 1

    def sx(x: float) -> float:
        return left + plot_w * (x - xticks[0]) / x_span

    def sy(y: float) -> float:
        return top + plot_h - plot_h * y / y_span

    parts = _open(width, height, title)
    _y_axis(parts, yticks, left, left + plot_w, top, top + plot_h, sy)
    _x_axis_and_labels(parts, xticks, sx, left, top, plot_w, plot_h, x_label, y_label)
    for index, (name, pts) in enumerate(series):
        if not pts:
            continue
        coords = " ".join(f"{_n(sx(x))},{_n(sy(y))}" for x, y in pts)
        dash = ' stroke-dasharray="5 3"' if dashed_first and index == 0 else ""
        parts.append(f'<polyline fill="none" stroke="{color(index)}" stroke-width="1.6"{dash} '
                     f'points="{coords}"><title>{escape(name)}</title></polyline>')
    _legend(parts, [name for name, _pts in series], left + plot_w + 14, top)
    parts.append("</svg>")
    return "".join(parts)


def scatter(points: Sequence[tuple[float, float, str]], title: str, x_label: str,
            y_label: str) -> str:
    """One labelled dot per (x, y, label); the y axis includes 0."""
    if not points:
        return empty_chart(title)
    left, top, plot_w, plot_h = 64.0, 28.0, 480.0, 220.0
    width, height = left + plot_w + 200, top + plot_h + 46
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    xticks = nice_ticks(min(0.0, min(xs)), max(xs) if max(xs) > min(0.0, min(xs)) else 1)
    yticks = nice_ticks(min(0.0, min(ys)), max(0.0, max(ys)) or 1)
    x_span = (xticks[-1] - xticks[0]) or 1
    y_span = (yticks[-1] - yticks[0]) or 1

    def sx(x: float) -> float:
        return left + plot_w * (x - xticks[0]) / x_span

    def sy(y: float) -> float:
        return top + plot_h - plot_h * (y - yticks[0]) / y_span

    parts = _open(width, height, title)
    _y_axis(parts, yticks, left, left + plot_w, top, top + plot_h, sy)
    _x_axis_and_labels(parts, xticks, sx, left, top, plot_w, plot_h, x_label, y_label)
    grouped: dict[tuple[str, str], list[str]] = {}
    for x, y, label in points:
        grouped.setdefault((_n(sx(x)), _n(sy(y))), []).append(label)
    for index, ((cx, cy), labels) in enumerate(grouped.items()):
        parts.append(f'<circle cx="{cx}" cy="{cy}" r="4.5" fill="{color(index)}">'
                     f"<title>{escape(', '.join(labels))}</title></circle>")
        for k, label in enumerate(labels):
            parts.append(f'<text x="{_n(float(cx) + 7)}" y="{_n(float(cy) - 4 + 12 * k)}">'
                         f"{escape(label)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def boxes(rows: Sequence[tuple[str, Sequence[float]]], title: str, x_label: str) -> str:
    """Horizontal box plots (min, quartiles, median, max; a diamond at the mean), one per row."""
    rows = [(label, list(values)) for label, values in rows if values]
    if not rows:
        return empty_chart(title)
    label_w, plot_w, row_h, top = 220.0, 420.0, 26.0, 28.0
    width, height = label_w + plot_w + 30, top + row_h * len(rows) + 40
    every = [v for _label, values in rows for v in values]
    ticks = nice_ticks(min(0.0, min(every)), max(0.0, max(every)) or 1)
    span = (ticks[-1] - ticks[0]) or 1

    def sx(x: float) -> float:
        return label_w + plot_w * (x - ticks[0]) / span

    parts = _open(width, height, title)
    bottom = top + row_h * len(rows)
    for tick in ticks:
        x = sx(tick)
        parts.append(f'<line x1="{_n(x)}" y1="{_n(top)}" x2="{_n(x)}" y2="{_n(bottom)}" '
                     'class="grid"/>')
        parts.append(f'<text x="{_n(x)}" y="{_n(bottom + 14)}" text-anchor="middle">'
                     f"{escape(human(tick))}</text>")
    parts.append(f'<text x="{_n(label_w + plot_w / 2)}" y="{_n(bottom + 32)}" '
                 f'text-anchor="middle">{escape(x_label)}</text>')
    for index, (label, values) in enumerate(rows):
        y = top + index * row_h + row_h / 2
        lo, q1, med, q3, hi = (_quantile(values, q) for q in (0, 0.25, 0.5, 0.75, 1))
        mean = sum(values) / len(values)
        parts.append(f'<text x="{_n(label_w - 6)}" y="{_n(y + 4)}" text-anchor="end">'
                     f"{escape(label)}</text>")
        parts.append(f'<line x1="{_n(sx(lo))}" y1="{_n(y)}" x2="{_n(sx(hi))}" y2="{_n(y)}" '
                     'class="axis"/>')
        parts.append(f'<rect x="{_n(sx(q1))}" y="{_n(y - 8)}" width="{_n(max(1.0, sx(q3) - sx(q1)))}" '
                     f'height="16" fill="{color(index)}" fill-opacity="0.5" stroke="{color(index)}">'
                     f"<title>{escape(label)}: median {med:.1f}, mean {mean:.1f}, "
                     f"{len(values)} sessions</title></rect>")
        parts.append(f'<line x1="{_n(sx(med))}" y1="{_n(y - 8)}" x2="{_n(sx(med))}" '
                     f'y2="{_n(y + 8)}" stroke="#222" stroke-width="2"/>')
        mx = sx(mean)
        parts.append(f'<path d="M{_n(mx)},{_n(y - 5)} L{_n(mx + 5)},{_n(y)} L{_n(mx)},{_n(y + 5)} '
                     f'L{_n(mx - 5)},{_n(y)} Z" fill="#222"/>')
    parts.append("</svg>")
    return "".join(parts)
