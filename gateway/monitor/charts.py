"""Server-rendered SVG charts (no front-end build, no script): lines or stacked bars over time.

Every mark carries its numbers as attributes (``data-series``, ``data-ts``, ``data-value``) and a
``<title>`` tooltip, so the page needs no JavaScript and a test can read the chart back. Colours are SVG
presentation attributes (the pages' CSP forbids inline styles, not those). Labels are escaped: series
names include agent and task names.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from markupsafe import escape

from gateway.monitor.series import Point

PALETTE = (
    "#2f6fde", "#1f8a4c", "#c23b32", "#b86e00", "#7b4bd1", "#0a8f98", "#d6458f", "#5b6b2f",
    "#8a5a2b", "#3d5a80", "#e07a1f", "#6c757d",
)  # fmt: skip
WIDTH, HEIGHT = 640, 250
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 40, 60


@dataclass
class Line:
    label: str
    points: list[Point]


def nice_max(value: float) -> float:
    """A round axis maximum at or above ``value``."""
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * exp:
            return step * exp
    return 10 * exp


def fmt(value: float) -> str:
    if value and abs(value) < 0.01:
        return f"{value:.2g}"
    if abs(value) >= 1e6:
        return f"{value / 1e6:.1f}M"
    if abs(value) >= 1e4:
        return f"{value / 1e3:.0f}k"
    return f"{value:.4g}"


def _clock(ts: float, span: float) -> str:
    return time.strftime("%H:%M" if span <= 2 * 86400 else "%m-%d %H:%M", time.gmtime(ts))


def render_chart(
    title: str,
    lines: list[Line],
    kind: str = "line",
    unit: str = "",
    chart_id: str = "",
    axis: str = "",
    window: str = "",
) -> str:
    """One chart; ``kind`` ``line`` (one polyline per series) or ``bars`` (stacked per bucket). Its title
    on top, ``axis`` (what the y axis counts, per which bucket) under it, ``window`` under the times."""
    stamps = sorted({p.ts for line in lines for p in line.points})
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    if kind == "bars":
        totals: dict[float, float] = {}
        for line in lines:
            for p in line.points:
                totals[p.ts] = totals.get(p.ts, 0.0) + max(0.0, p.value)
        top = nice_max(max(totals.values(), default=0.0))
    else:
        top = nice_max(max((p.value for line in lines for p in line.points), default=0.0))
    t0 = stamps[0] if stamps else time.time()
    t1 = stamps[-1] if len(stamps) > 1 else t0 + 60
    span = max(1.0, t1 - t0)
    step = (stamps[1] - stamps[0]) if len(stamps) > 1 else 60.0

    def x(ts: float) -> float:
        return (
            LEFT + (ts - t0) / span * plot_w if kind == "line" else LEFT + (ts - t0) / (span + step) * plot_w
        )

    def y(value: float) -> float:
        return TOP + plot_h - (value / top) * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(title)}" '
        f'data-chart="{escape(chart_id or title)}" data-max="{top:g}">',
        f"<title>{escape(title)}</title>",
        f'<text class="chart-title" x="{LEFT}" y="16" font-size="13" font-weight="600" fill="#1d232b">'
        f"{escape(title)}</text>",
        f'<text class="chart-axis" x="{LEFT}" y="{TOP - 8}" font-size="10" fill="#6b7480">'
        f"{escape(axis)}</text>",
        f'<text class="chart-window" x="{WIDTH - RIGHT}" y="{HEIGHT - BOTTOM + 28}" text-anchor="end" '
        f'font-size="10" fill="#6b7480">{escape(window)}</text>',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#ffffff" stroke="#dde1e7"/>',
    ]
    for i in range(5):
        value = top * i / 4
        yy = y(value)
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#eef1f4"/>')
        out.append(
            f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" text-anchor="end" font-size="10" fill="#6b7480">'
            f"{escape(fmt(value))}{escape(unit) if i == 4 else ''}</text>"
        )
    for ts, anchor in ((t0, "middle"), (t0 + span / 2, "middle"), (t1, "end")):  # the last one in view
        out.append(
            f'<text x="{x(ts):.1f}" y="{HEIGHT - BOTTOM + 14}" text-anchor="{anchor}" font-size="10" '
            f'fill="#6b7480">{_clock(ts, span)}</text>'
        )
    if not stamps:
        out.append(
            f'<text x="{LEFT + plot_w / 2}" y="{TOP + plot_h / 2}" text-anchor="middle" font-size="12" '
            'fill="#6b7480">no data yet</text>'
        )
    bar_w = max(1.0, plot_w / max(1, len(stamps)) * 0.8) if kind == "bars" else 0.0
    base: dict[float, float] = {}
    for n, line in enumerate(lines):
        colour = PALETTE[n % len(PALETTE)]
        label = escape(line.label)
        total = sum(p.value for p in line.points)
        out.append(f'<g class="series" data-series="{label}" data-total="{total:g}">')
        if kind == "bars":
            for p in line.points:
                if p.value <= 0:
                    continue
                below = base.get(p.ts, 0.0)
                y_top, y_bottom = y(below + p.value), y(below)
                base[p.ts] = below + p.value
                out.append(
                    f'<rect x="{x(p.ts):.1f}" y="{y_top:.1f}" width="{bar_w:.1f}" '
                    f'height="{max(0.5, y_bottom - y_top):.1f}" fill="{colour}" data-ts="{p.ts:.0f}" '
                    f'data-value="{p.value:g}"><title>{label} {_clock(p.ts, span)}: {escape(fmt(p.value))}'
                    f"{escape(unit)}</title></rect>"
                )
        elif line.points:
            # One bucket (a swarm younger than a step): a level segment across it, not a lone dot.
            ends = line.points if len(line.points) > 1 else [line.points[0], Point(t1, line.points[0].value)]
            coords = " ".join(f"{x(p.ts):.1f},{y(p.value):.1f}" for p in ends)
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.8" points="{coords}"/>')
            for p in line.points:
                out.append(
                    f'<circle cx="{x(p.ts):.1f}" cy="{y(p.value):.1f}" r="1.6" fill="{colour}" '
                    f'data-ts="{p.ts:.0f}" data-value="{p.value:g}"><title>{label} {_clock(p.ts, span)}: '
                    f"{escape(fmt(p.value))}{escape(unit)}</title></circle>"
                )
        out.append("</g>")
    # Legend under the plot.
    lx = LEFT
    for n, line in enumerate(lines[:8]):
        colour = PALETTE[n % len(PALETTE)]
        text = line.label if len(line.label) <= 22 else line.label[:21] + "…"
        out.append(f'<rect x="{lx}" y="{HEIGHT - 18}" width="10" height="10" fill="{colour}"/>')
        out.append(
            f'<text x="{lx + 14}" y="{HEIGHT - 9}" font-size="10" fill="#1d232b">{escape(text)}</text>'
        )
        lx += 20 + 6 * len(text)
        if lx > WIDTH - 60:
            break
    out.append("</svg>")
    return "".join(out)
