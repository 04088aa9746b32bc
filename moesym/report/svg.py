"""Small inline-SVG charts for the HTML report: no plotting library, no script, no network.

Each function returns one ``<svg>`` element as text, sized in CSS pixels, with a ``<title>`` on
every mark so a browser shows the exact number on hover.

>>> s = bars([("a", 1.0, "#4477aa"), ("b", 2.0, "#ee6677")], "us", "two bars")
>>> s.startswith("<svg") and s.count("<rect") >= 2
True
"""

from __future__ import annotations

import math
from html import escape

__all__ = ["bars", "lines", "stack", "gantt", "scatter", "PALETTE"]

#: colour-blind-safe qualitative palette (Paul Tol's "bright" scheme)
PALETTE = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb", "#000000")
_FONT = 'font-family="sans-serif" font-size="12"'


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e4 or a < 1e-2:
        return f"{v:.3g}"
    return f"{v:.4g}"


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">'
            f'<title>{escape(title)}</title>' + "".join(body) + "</svg>")


def bars(items, unit: str, title: str, width: int = 720) -> str:
    """Horizontal bars: ``items`` = [(label, value, colour)] (values >= 0)."""
    row, left = 22, 230
    h = row * len(items) + 40
    top = max((v for _, v, _ in items), default=0.0) or 1.0
    span = width - left - 90
    body = [f'<text x="{left}" y="16" {_FONT} font-weight="bold">{escape(title)}</text>']
    for i, (label, v, colour) in enumerate(items):
        y = 26 + i * row
        w = span * v / top
        body.append(f'<text x="{left - 6}" y="{y + 14}" text-anchor="end" {_FONT}>'
                    f'{escape(label)}</text>')
        body.append(f'<rect x="{left}" y="{y + 2}" width="{w:.2f}" height="{row - 6}" '
                    f'fill="{colour}"><title>{escape(label)}: {_fmt(v)} {unit}</title></rect>')
        body.append(f'<text x="{left + w + 4:.2f}" y="{y + 14}" {_FONT}>{_fmt(v)} {unit}</text>')
    return _svg(width, h, body, title)


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        return [10.0 ** e for e in range(a, b + 1) if lo <= 10.0 ** e <= hi] or [lo, hi]
    span = (hi - lo) or 1.0
    # the largest 1-2-5 step that still gives four intervals
    step = max(m * 10.0 ** e for e in range(math.floor(math.log10(span)) - 2,
                                             math.floor(math.log10(span)) + 1)
               for m in (1, 2, 5) if span / (m * 10.0 ** e) >= 4)
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 1)]


def lines(x, series, xlabel: str, ylabel: str, title: str, log_x: bool = True,
          marks=(), width: int = 720, height: int = 300) -> str:
    """Line chart of ``series`` = [(label, ys, colour)] over ``x``; ``marks`` = [(x, label)]
    vertical markers (a crossover, say)."""
    left, right, top, bottom = 70, 20, 30, 45
    xs = [float(v) for v in x]
    ys_all = [float(v) for _, ys, _ in series for v in ys if math.isfinite(float(v))]
    x0, x1 = min(xs), max(xs)
    y0, y1 = 0.0, (max(ys_all) if ys_all else 1.0) * 1.05 or 1.0

    def px(v):
        if log_x:
            f = (math.log(v) - math.log(x0)) / ((math.log(x1) - math.log(x0)) or 1.0)
        else:
            f = (v - x0) / ((x1 - x0) or 1.0)
        return left + f * (width - left - right)

    def py(v):
        return height - bottom - (v - y0) / (y1 - y0) * (height - top - bottom)

    body = [f'<text x="{left}" y="18" {_FONT} font-weight="bold">{escape(title)}</text>',
            f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" '
            'stroke="#444"/>',
            f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#444"/>']
    for t in _ticks(x0, x1, log_x):
        body.append(f'<text x="{px(t):.1f}" y="{height - bottom + 16}" text-anchor="middle" '
                    f'{_FONT}>{_fmt(t)}</text>')
    for t in _ticks(y0, y1, False):
        body.append(f'<text x="{left - 6}" y="{py(t) + 4:.1f}" text-anchor="end" {_FONT}>'
                    f'{_fmt(t)}</text>')
        body.append(f'<line x1="{left}" y1="{py(t):.1f}" x2="{width - right}" y2="{py(t):.1f}" '
                    'stroke="#ddd"/>')
    body.append(f'<text x="{(left + width - right) / 2}" y="{height - 8}" text-anchor="middle" '
                f'{_FONT}>{escape(xlabel)}</text>')
    body.append(f'<text x="14" y="{(top + height - bottom) / 2}" text-anchor="middle" {_FONT} '
                f'transform="rotate(-90 14 {(top + height - bottom) / 2})">{escape(ylabel)}</text>')
    for n, (label, ys, colour) in enumerate(series):
        pts = [(px(a), py(float(b))) for a, b in zip(xs, ys) if math.isfinite(float(b))]
        path = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
        body.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2">'
                    f'<title>{escape(label)}</title></polyline>')
        body.append(f'<text x="{width - right - 4}" y="{top + 14 * (n + 1)}" text-anchor="end" '
                    f'{_FONT} fill="{colour}">{escape(label)}</text>')
    for v, label in marks:
        if x0 <= v <= x1:
            body.append(f'<line x1="{px(v):.1f}" y1="{top}" x2="{px(v):.1f}" y2="{height - bottom}" '
                        f'stroke="#aa3377" stroke-dasharray="4 3"><title>{escape(label)}</title></line>')
            body.append(f'<text x="{px(v) + 4:.1f}" y="{top + 12}" {_FONT} fill="#aa3377">'
                        f'{escape(label)}</text>')
    return _svg(width, height, body, title)


def scatter(points, xlabel: str, ylabel: str, title: str, width: int = 720,
            height: int = 300) -> str:
    """Points ``(x, y, label, colour)`` joined in x order (a Pareto front, say)."""
    pts = sorted(points)
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    chart = lines(xs, [("front", ys, PALETTE[0])], xlabel, ylabel, title, log_x=False,
                  width=width, height=height)
    left, right, top, bottom = 70, 20, 30, 45
    x0, x1 = min(xs), max(xs)
    y1 = max(ys) * 1.05 or 1.0
    dots = []
    for x, y, label, colour in pts:
        cx = left + (x - x0) / ((x1 - x0) or 1.0) * (width - left - right)
        cy = height - bottom - y / y1 * (height - top - bottom)
        dots.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{colour}">'
                    f'<title>{escape(label)}</title></circle>')
    return chart[:-len("</svg>")] + "".join(dots) + "</svg>"


def stack(items, unit: str, title: str, width: int = 720) -> str:
    """One stacked horizontal bar of ``items`` = [(label, value, colour)] with a legend."""
    total = sum(max(v, 0.0) for _, v, _ in items) or 1.0
    left, span = 10, width - 20
    body = [f'<text x="{left}" y="16" {_FONT} font-weight="bold">{escape(title)}</text>']
    x = float(left)
    for label, v, colour in items:
        w = span * max(v, 0.0) / total
        body.append(f'<rect x="{x:.2f}" y="26" width="{w:.2f}" height="28" fill="{colour}">'
                    f'<title>{escape(label)}: {_fmt(v)} {unit}</title></rect>')
        x += w
    for i, (label, v, colour) in enumerate(items):
        col, rowi = i % 3, i // 3
        lx, ly = left + col * (span / 3), 72 + rowi * 18
        body.append(f'<rect x="{lx:.1f}" y="{ly - 10}" width="10" height="10" fill="{colour}"/>')
        body.append(f'<text x="{lx + 14:.1f}" y="{ly}" {_FONT}>{escape(label)} {_fmt(v)} {unit}</text>')
    return _svg(width, 80 + 18 * ((len(items) + 2) // 3), body, title)


def gantt(events, title: str, width: int = 720) -> str:
    """One row per (stream, micro-batch) of ``events`` = [{name, stream, micro_batch, start_s,
    end_s}], bars in microseconds."""
    rows = sorted({(e["stream"], e["micro_batch"]) for e in events})
    t1 = max((e["end_s"] for e in events), default=0.0) or 1.0
    left, row = 130, 26
    span = width - left - 20
    h = 40 + row * len(rows) + 24
    body = [f'<text x="{left}" y="16" {_FONT} font-weight="bold">{escape(title)}</text>']
    names = sorted({e["name"] for e in events})
    colour = {n: PALETTE[i % (len(PALETTE) - 1)] for i, n in enumerate(names)}
    for i, (stream, mb) in enumerate(rows):
        y = 28 + i * row
        body.append(f'<text x="{left - 6}" y="{y + 16}" text-anchor="end" {_FONT}>{escape(stream)} '
                    f'mb{mb}</text>')
        for e in (e for e in events if (e["stream"], e["micro_batch"]) == (stream, mb)):
            if e["end_s"] <= e["start_s"]:
                continue
            x = left + span * e["start_s"] / t1
            w = span * (e["end_s"] - e["start_s"]) / t1
            us = (e["end_s"] - e["start_s"]) * 1e6
            body.append(f'<rect x="{x:.2f}" y="{y + 2}" width="{w:.2f}" height="{row - 6}" '
                        f'fill="{colour[e["name"]]}" stroke="#fff"><title>{escape(e["name"])}: '
                        f'{e["start_s"] * 1e6:.1f} - {e["end_s"] * 1e6:.1f} us ({us:.1f} us)'
                        f'</title></rect>')
            if w > 60:
                body.append(f'<text x="{x + 3:.2f}" y="{y + 16}" {_FONT} fill="#fff">'
                            f'{escape(e["name"])}</text>')
    body.append(f'<text x="{left}" y="{h - 6}" {_FONT}>0 us</text>')
    body.append(f'<text x="{width - 20}" y="{h - 6}" text-anchor="end" {_FONT}>{t1 * 1e6:.1f} us'
                '</text>')
    return _svg(width, h, body, title)
