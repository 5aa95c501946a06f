"""Line charts as inline SVG, drawn on the server: the viewer and its export load no script or font."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from admire.viz.data import Series

PALETTE = ("#1c7ed6", "#e8590c", "#2f9e44", "#ae3ec9", "#f59f00", "#0ca678", "#e03131", "#495057")
WIDTH, HEIGHT = 460, 230
LEFT, RIGHT, TOP, BOTTOM = 46, 12, 22, 58


def line_chart(title: str, series: Sequence[Series], y_range: tuple[float, float] | None = None) -> str:
    """One chart with axes, ticks and a legend; ``y_range`` fixes the y axis (rates use 0..1)."""
    points = [p for s in series for p in s.points]
    head = (f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
            f'role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>'
            f'<text x="{LEFT}" y="14" font-size="12" font-weight="bold">{escape(title)}</text>')
    if not points:
        return head + f'<text x="{LEFT}" y="{HEIGHT / 2:g}" font-size="12" fill="#868e96">no data yet</text></svg>'
    x_lo, x_hi = min(p[0] for p in points), max(p[0] for p in points)
    if y_range is None:
        y_lo, y_hi = min(p[1] for p in points), max(p[1] for p in points)
        y_lo, y_hi = min(y_lo, 0.0), max(y_hi, 0.0)
    else:
        y_lo, y_hi = y_range
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 0.5, x_hi + 0.5
    if y_hi == y_lo:
        y_lo, y_hi = y_lo - 0.5, y_hi + 0.5
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + (x - x_lo) / (x_hi - x_lo) * plot_w

    def sy(y: float) -> float:
        return TOP + (1 - (y - y_lo) / (y_hi - y_lo)) * plot_h

    parts = [head, f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#ced4da"/>']
    for tick in _ticks(y_lo, y_hi):
        y = sy(tick)
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#f1f3f5"/>'
                     f'<text x="{LEFT - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end">{_fmt(tick)}</text>')
    for tick in _ticks(x_lo, x_hi, integers=True):
        x = sx(tick)
        parts.append(f'<text x="{x:.1f}" y="{TOP + plot_h + 13}" font-size="10" text-anchor="middle">'
                     f"{_fmt(tick)}</text>")
    parts.append(f'<text x="{LEFT + plot_w / 2:g}" y="{TOP + plot_h + 26}" font-size="10" text-anchor="middle" '
                 'fill="#495057">epoch</text>')
    for i, line in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in line.points)
        dash = ' stroke-dasharray="4 3"' if line.dashed else ""
        parts.append(f'<polyline class="series" data-name="{escape(line.name)}" points="{coords}" fill="none" '
                     f'stroke="{colour}" stroke-width="1.8"{dash}/>')
        if line.markers or len(line.points) == 1:
            parts.extend(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.8" fill="{colour}"/>' for x, y in line.points)
        lx = LEFT + (i % 3) * (plot_w / 3)
        ly = HEIGHT - 18 + (i // 3) * 13
        parts.append(f'<line x1="{lx:.1f}" x2="{lx + 14:.1f}" y1="{ly - 4}" y2="{ly - 4}" stroke="{colour}" '
                     f'stroke-width="2"{dash}/><text x="{lx + 18:.1f}" y="{ly}" font-size="10">'
                     f"{escape(line.name)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _ticks(lo: float, hi: float, integers: bool = False, target: int = 5) -> list[float]:
    span = hi - lo
    raw = span / target
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    if integers:
        step = max(1.0, round(step))
    start = math.ceil(lo / step) * step
    ticks = []
    value = start
    while value <= hi + 1e-9 and len(ticks) < 50:
        ticks.append(round(value, 10))
        value += step
    return ticks


def _fmt(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2g}"
