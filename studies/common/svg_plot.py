"""A log-log line figure as a small self-contained SVG, for study reports (markdown embeds it as
an image; no JavaScript, no network, a few kB in git)."""

from __future__ import annotations

import math
from html import escape
from typing import Sequence

#: Line colours, one per series in order (repeats past the last).
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")


def loglog_svg(series: Sequence[dict], title: str, xlabel: str, ylabel: str, width: int = 760, height: int = 460,
               note: str = "") -> str:
    """An SVG of ``series``, each ``{"name", "points": [(x, y, hollow)], "dash": bool}`` (x, y > 0;
    ``hollow``: a point that is only a lower bound, drawn open with an upward tick), on log axes
    with decade ticks; ``note`` goes under the plot."""
    pts = [(x, y) for s in series for x, y, _ in s["points"]]
    if not pts:
        raise ValueError("loglog_svg: no points")
    lx = [math.log10(x) for x, _ in pts]
    ly = [math.log10(y) for _, y in pts]
    x0, x1 = math.floor(min(lx)), math.ceil(max(lx)) if max(lx) > math.floor(min(lx)) else math.floor(min(lx)) + 1
    y0, y1 = math.floor(min(ly)), math.ceil(max(ly)) if max(ly) > math.floor(min(ly)) else math.floor(min(ly)) + 1
    left, right, top, bottom = 70, 230, 40, 70
    pw, ph = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (math.log10(x) - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return top + ph - (math.log10(y) - y0) / (y1 - y0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           'font-size="12">', f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14">{escape(title)}</text>']
    for e in range(x0, x1 + 1):
        x = left + (e - x0) / (x1 - x0) * pw
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{top + ph + 16}" text-anchor="middle">{10 ** e:g}</text>')
    for e in range(y0, y1 + 1):
        y = top + ph - (e - y0) / (y1 - y0) * ph
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{10 ** e:g}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 30}" text-anchor="middle">{escape(xlabel)}</text>')
    out.append(f'<text x="16" y="{top + ph / 2}" text-anchor="middle" transform="rotate(-90 16 {top + ph / 2})">'
               f'{escape(ylabel)}</text>')
    for k, s in enumerate(series):
        c = COLOURS[k % len(COLOURS)]
        p = sorted(s["points"])
        dash = ' stroke-dasharray="6 4"' if s.get("dash") else ""
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2"{dash} points="'
                   + " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y, _ in p) + '"/>')
        for x, y, hollow in p:
            fill = "white" if hollow else c
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{fill}" stroke="{c}" stroke-width="2"/>')
            if hollow:
                out.append(f'<line x1="{px(x):.1f}" y1="{py(y) - 5:.1f}" x2="{px(x):.1f}" y2="{py(y) - 14:.1f}" '
                           f'stroke="{c}" stroke-width="2"/>')
        ly_ = top + 14 + 18 * k
        out.append(f'<line x1="{left + pw + 12}" y1="{ly_ - 4}" x2="{left + pw + 36}" y2="{ly_ - 4}" stroke="{c}" '
                   f'stroke-width="2"{dash}/>')
        out.append(f'<text x="{left + pw + 42}" y="{ly_}">{escape(s["name"])}</text>')
    if note:
        out.append(f'<text x="{left}" y="{height - 10}" font-size="11" fill="#555">{escape(note)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
