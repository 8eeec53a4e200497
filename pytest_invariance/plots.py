"""Inline SVG charts for matrix.html.

Hand-written SVG rather than matplotlib: the HTML report must be a single
self-contained file, render identically for the same records (no fonts,
timestamps or random ids embedded), and work where only the plugin's light
dependencies are installed. Every function returns an ``<svg>`` string.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from .oracles.classes import ClassRanges, format_ranges

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#bab0ac")
RED = "#d62728"
GREEN = "#2ca02c"
GREY = "#999999"

_LABEL_W = 430
_PLOT_W = 520
_ROW_H = 22
_TOP = 34
_BOTTOM = 40
_MAX_LABEL = 70


def _f(x: float) -> str:
    return f"{x:.1f}"


def _short(label: str, limit: int = _MAX_LABEL) -> str:
    """Cut the middle, not the end: a label's tail (the shape, the oracle) tells rows apart."""
    if len(label) <= limit:
        return label
    head = (limit - 1) // 2
    return label[:head] + "…" + label[len(label) - (limit - 1 - head) :]


def _svg(width: float, height: float, body: list[str], title: str) -> str:
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_f(width)}" height="{_f(height)}" '
        f'viewBox="0 0 {_f(width)} {_f(height)}" role="img" aria-label="{escape(title)}" '
        'font-family="sans-serif" font-size="11">'
    )
    t = f'<text x="4" y="16" font-size="13" font-weight="bold">{escape(title)}</text>'
    return "\n".join([head, t, *body, "</svg>"])


class LogAxis:
    """log2 axis over positive integers (batch sizes, concurrency levels)."""

    def __init__(self, lo: float, hi: float, x0: float, width: float) -> None:
        self.lo = math.log2(max(lo, 1))
        self.hi = math.log2(max(hi, lo, 1))
        if self.hi - self.lo < 1:
            self.hi = self.lo + 1
        self.x0, self.width = x0, width

    def __call__(self, v: float) -> float:
        return self.x0 + (math.log2(max(v, 1)) - self.lo) / (self.hi - self.lo) * self.width

    def ticks(self) -> list[int]:
        return [2**e for e in range(math.floor(self.lo), math.ceil(self.hi) + 1) if self.lo <= e <= self.hi]


def _x_axis(axis: LogAxis, y: float, label: str) -> list[str]:
    out = [
        f'<line x1="{_f(axis.x0)}" y1="{_f(y)}" x2="{_f(axis.x0 + axis.width)}" y2="{_f(y)}" stroke="#333"/>'
    ]
    for t in axis.ticks():
        x = axis(t)
        out.append(f'<line x1="{_f(x)}" y1="{_f(y)}" x2="{_f(x)}" y2="{_f(y + 4)}" stroke="#333"/>')
        out.append(f'<text x="{_f(x)}" y="{_f(y + 15)}" text-anchor="middle">{t}</text>')
    out.append(
        f'<text x="{_f(axis.x0 + axis.width / 2)}" y="{_f(y + 30)}" text-anchor="middle">{escape(label)}</text>'
    )
    return out


def _x_axis_top(axis: LogAxis, y: float) -> list[str]:
    """Tick labels above the first row too, so a tall strip can be read without scrolling down."""
    out = [f'<line x1="{_f(axis.x0)}" y1="{_f(y)}" x2="{_f(axis.x0 + axis.width)}" y2="{_f(y)}" stroke="#333"/>']
    for t in axis.ticks():
        x = axis(t)
        out.append(f'<line x1="{_f(x)}" y1="{_f(y - 4)}" x2="{_f(x)}" y2="{_f(y)}" stroke="#333"/>')
        out.append(f'<text x="{_f(x)}" y="{_f(y - 7)}" text-anchor="middle">{t}</text>')
    return out


def _y_label(x: float, y_mid: float, text: str) -> str:
    """A y-axis title written upwards, centred on ``y_mid``."""
    return (f'<text x="{_f(x)}" y="{_f(y_mid)}" transform="rotate(-90 {_f(x)} {_f(y_mid)})" '
            f'text-anchor="middle">{escape(text)}</text>')  # fmt: skip


def _row_label(y: float, label: str) -> str:
    return (
        f'<text x="{_LABEL_W - 8}" y="{_f(y + 4)}" text-anchor="end"><title>{escape(label)}</title>'
        f"{escape(_short(label))}</text>"
    )


def divergence_strip(series: Sequence[tuple[str, dict[int, tuple[int, int]]]], title: str) -> str:
    """One row per series; at each batch size N a dot: red, sized and shaded by the share of
    configurations whose probe row differed at N; hollow green where N was tested and never differed.

    ``series`` maps a label to ``{N: (differing, tested)}``.
    """
    sizes = [n for _, pts in series for n in pts]
    axis = LogAxis(min(sizes, default=1), max(sizes, default=2), _LABEL_W, _PLOT_W)
    top = _TOP + 34  # room for the legend and the upper axis
    body: list[str] = [
        f'<circle cx="{_LABEL_W + 6}" cy="{_TOP - 6}" r="5" fill="{RED}"/>',
        f'<text x="{_LABEL_W + 16}" y="{_TOP - 2}">differed at N (larger, darker: more configurations)</text>',
        f'<circle cx="{_LABEL_W + 326}" cy="{_TOP - 6}" r="3" fill="none" stroke="{GREEN}"/>',
        f'<text x="{_LABEL_W + 336}" y="{_TOP - 2}">tested at N, never differed</text>',
        *_x_axis_top(axis, top - 2),
    ]
    for i, (label, pts) in enumerate(series):
        y = top + i * _ROW_H + _ROW_H / 2
        body.append(_row_label(y, label))
        body.append(
            f'<line x1="{_f(axis.x0)}" y1="{_f(y)}" x2="{_f(axis.x0 + axis.width)}" y2="{_f(y)}" stroke="#eee"/>'
        )
        for n in sorted(pts):
            bad, total = pts[n]
            tip = f"N={n}: {bad}/{total} configuration(s) differ"
            if bad:
                share = bad / total if total else 1.0
                r = 3 + 4 * share
                body.append(
                    f'<circle cx="{_f(axis(n))}" cy="{_f(y)}" r="{_f(r)}" fill="{RED}" '
                    f'fill-opacity="{0.35 + 0.65 * share:.2f}"><title>{tip}</title></circle>'
                )
            else:
                body.append(
                    f'<circle cx="{_f(axis(n))}" cy="{_f(y)}" r="3" fill="none" stroke="{GREEN}">'
                    f"<title>{tip}</title></circle>"
                )
    y_axis = top + len(series) * _ROW_H + 4
    body += _x_axis(axis, y_axis, "batch size N (log scale)")
    return _svg(_LABEL_W + _PLOT_W + 20, y_axis + _BOTTOM, body, title)


def histogram(bars: Sequence[tuple[str, int]], title: str, xlabel: str, colour: str = RED) -> str:
    """Vertical bars over categorical x values (already in display order)."""
    bar_w, gap, plot_h, left = 26, 6, 120, 36
    top = _TOP
    peak = max((c for _, c in bars), default=1) or 1
    body: list[str] = []
    for i, (name, count) in enumerate(bars):
        h = plot_h * count / peak
        x = left + i * (bar_w + gap)
        body.append(
            f'<rect x="{_f(x)}" y="{_f(top + plot_h - h)}" width="{bar_w}" height="{_f(h)}" fill="{colour}">'
            f"<title>{escape(xlabel)} {escape(name)}: {count}</title></rect>"
        )
        body.append(
            f'<text x="{_f(x + bar_w / 2)}" y="{_f(top + plot_h - h - 3)}" text-anchor="middle">{count}</text>'
        )
        body.append(
            f'<text x="{_f(x + bar_w / 2)}" y="{_f(top + plot_h + 14)}" text-anchor="middle">{escape(name)}</text>'
        )
    width = max(left + len(bars) * (bar_w + gap) + 20, 260, 8 + 7.5 * len(title))
    body.append(
        f'<line x1="{left - 2}" y1="{top + plot_h}" x2="{_f(width - 10)}" y2="{top + plot_h}" stroke="#333"/>'
    )
    body.append(f'<text x="{left}" y="{top + plot_h + 32}">{escape(xlabel)}</text>')
    return _svg(width, top + plot_h + 44, body, title)


def class_bands(series: Sequence[tuple[str, ClassRanges]], title: str) -> str:
    """One row per series; batch sizes coloured by equivalence class (same colour = bit-identical
    probe output), so kernel switch points and bucket edges show as colour changes. ``[lo, hi]``
    spans every *tested* size from lo to hi, so it is drawn as one bar."""
    parsed = [(label, format_ranges(ranges), ranges) for label, ranges in series]
    ends = [v for _, _, cls in parsed for c in cls for span in c for v in span]
    axis = LogAxis(min(ends, default=1), max(ends, default=2), _LABEL_W, _PLOT_W)
    body: list[str] = []
    for i, (label, text, cls) in enumerate(parsed):
        y = _TOP + i * _ROW_H
        body.append(_row_label(y + _ROW_H / 2, label))
        for k, spans in enumerate(cls):
            colour = PALETTE[k % len(PALETTE)]
            for lo, hi in spans:
                x0 = axis(lo) - 2
                w = max(axis(hi) - axis(lo) + 4, 4)
                body.append(
                    f'<rect x="{_f(x0)}" y="{_f(y + 4)}" width="{_f(w)}" height="{_ROW_H - 8}" fill="{colour}">'
                    f"<title>class {k + 1}: {lo}..{hi} — {escape(text)}</title></rect>"
                )
    y_axis = _TOP + len(parsed) * _ROW_H + 4
    body += _x_axis(axis, y_axis, "batch size N (log scale); one colour per class of identical output")
    return _svg(_LABEL_W + _PLOT_W + 20, y_axis + _BOTTOM, body, title)


def small_multiples(
    series: Sequence[tuple[str, list[tuple[float, float]]]], title: str, xlabel: str, ylabel: str, per_row: int = 3
) -> str:
    """One small chart per series in a grid, each with its own label and axes: lines that share
    their values (1 unique sample everywhere) no longer hide each other."""
    cell_w, cell_h, plot_w, plot_h, left = 330, 150, 250, 80, 50
    y_hi = max(max((y for _, pts in series for _, y in pts), default=1), 1)
    xs = [x for _, pts in series for x, _ in pts]
    body: list[str] = []
    for i, (label, pts) in enumerate(series):
        ox = (i % per_row) * cell_w
        oy = _TOP + (i // per_row) * cell_h
        axis = LogAxis(min(xs, default=1), max(xs, default=2), ox + left, plot_w)
        top = oy + 26

        def ypos(v: float, top: float = top) -> float:
            return top + plot_h - v / y_hi * plot_h

        body.append(f'<text x="{_f(ox + 4)}" y="{_f(oy + 12)}"><title>{escape(label)}</title>{escape(_short(label, 52))}</text>')
        body.append(f'<line x1="{_f(ox + left)}" y1="{_f(top)}" x2="{_f(ox + left)}" y2="{_f(top + plot_h)}" stroke="#333"/>')
        for v in sorted({0, y_hi}):
            body.append(f'<text x="{_f(ox + left - 4)}" y="{_f(ypos(v) + 4)}" text-anchor="end">{v:g}</text>')
        body.append(_y_label(ox + 12, top + plot_h / 2, ylabel))
        pts = sorted(pts)
        colour = RED if any(y > 1 for _, y in pts) else GREEN
        if len(pts) > 1:
            path = " ".join(f"{_f(axis(x))},{_f(ypos(y))}" for x, y in pts)
            body.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y in pts:
            body.append(
                f'<circle cx="{_f(axis(x))}" cy="{_f(ypos(y))}" r="3" fill="{colour}">'
                f"<title>{escape(label)}: {escape(xlabel)} {x:g} → {y:g}</title></circle>"
            )
        body += _x_axis(axis, top + plot_h, xlabel)
    rows = -(-len(series) // per_row)
    width = min(len(series), per_row) * cell_w + 10
    return _svg(max(width, 340, 8 * len(title) + 20), _TOP + rows * cell_h + 10, body, title)  # one chart: the title sets the width


def drift_chart(series: Sequence[tuple[str, list[tuple[str, float]], str | None]], title: str) -> str:
    """Max ULP per layer after the culprit (log2 scale), one line per localization, the culprit's
    layer marked: where a one-op difference grows as it flows through the model."""
    left, plot_w, plot_h = 60, 720, 150
    peak = max((math.log2(u + 1) for _, layers, _ in series for _, u in layers), default=1.0) or 1.0
    body: list[str] = [f'<line x1="{left}" y1="{_TOP}" x2="{left}" y2="{_TOP + plot_h}" stroke="#333"/>']
    for v in sorted({0, round(peak)}):
        y = _TOP + plot_h - v / peak * plot_h
        body.append(f'<text x="{left - 4}" y="{_f(y + 4)}" text-anchor="end">2^{v:g}</text>')
    body.append(_y_label(12, _TOP + plot_h / 2, "max ULP + 1"))
    for i, (label, layers, culprit) in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        n = max(len(layers) - 1, 1)
        pts = [(left + k / n * plot_w, _TOP + plot_h - math.log2(u + 1) / peak * plot_h) for k, (_, u) in enumerate(layers)]
        body.append(f'<polyline points="{" ".join(f"{_f(x)},{_f(y)}" for x, y in pts)}" fill="none" '
                    f'stroke="{colour}" stroke-width="2"/>')  # fmt: skip
        for (x, y), (name, ulp) in zip(pts, layers, strict=True):
            mark = culprit is not None and culprit.startswith(name + ".")
            body.append(f'<circle cx="{_f(x)}" cy="{_f(y)}" r="{5 if mark else 2.5}" fill="{RED if mark else colour}">'
                        f"<title>{escape(label)}: {escape(name)} max ULP {ulp:g}"
                        f"{' (culprit inside)' if mark else ''}</title></circle>")  # fmt: skip
    y_axis = _TOP + plot_h
    body.append(f'<line x1="{left}" y1="{y_axis}" x2="{left + plot_w}" y2="{y_axis}" stroke="#333"/>')
    body.append(f'<text x="{left + plot_w / 2}" y="{y_axis + 16}" text-anchor="middle">layers in model order '
                "(red: the layer holding the culprit)</text>")  # fmt: skip
    legend_y = y_axis + 36
    for i, (label, _, culprit) in enumerate(series):
        y = legend_y + i * 16
        body.append(f'<rect x="{left}" y="{y - 9}" width="10" height="10" fill="{PALETTE[i % len(PALETTE)]}"/>')
        body.append(f'<text x="{left + 16}" y="{y}">{escape(_short(label, 80))}: culprit '
                    f"{escape(culprit or 'none')}</text>")  # fmt: skip
    return _svg(left + plot_w + 20, legend_y + len(series) * 16 + 8, body, title)
