"""Hand-written SVG charts: small, crisp, printable, no dependencies.

Every piece of text goes through :func:`esc`; every data mark carries ``class="mark"`` (the report's
browser test counts them). Charts scale with their container (``viewBox``; width 100%).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

PALETTE = ("#1f6fb2", "#e07b39", "#3a9d5d", "#b84a62", "#7b5ea7", "#8c6d31", "#2a9fa8", "#c9a227", "#5b6770",
           "#d16ba5")
FAMILY_COLORS = {"gemm": "#1f6fb2", "attention": "#e07b39", "memory": "#3a9d5d", "comm": "#b84a62",
                 "host": "#c9a227", "launch gaps": "#9aa3ab"}


def esc(text) -> str:
    return escape(str(text), quote=True)


def _num(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".")


@dataclass
class Series:
    name: str
    xs: list
    ys: list
    color: str | None = None
    labels: list | None = None  # per point, shown as tooltips


def _finite(v) -> bool:
    try:
        return v is not None and math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


class Scale:
    def __init__(self, lo: float, hi: float, a: float, b: float, log: bool = False):
        if log:
            lo, hi = max(lo, 1e-300), max(hi, 1e-300)
            lo, hi = 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi))
            if lo == hi:
                lo, hi = lo / 10, hi * 10
        else:
            if lo == hi:
                lo, hi = (lo - 1, hi + 1) if lo == 0 else (lo * 0.9, hi * 1.1) if lo > 0 else (lo * 1.1, hi * 0.9)
            step = _nice((hi - lo) / 5)
            lo, hi = math.floor(lo / step) * step, math.ceil(hi / step) * step
        self.lo, self.hi, self.a, self.b, self.log = lo, hi, a, b, log

    def __call__(self, v: float) -> float:
        if self.log:
            v = max(v, 1e-300)
            f = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            f = (v - self.lo) / (self.hi - self.lo)
        return self.a + f * (self.b - self.a)

    def ticks(self) -> list[float]:
        if self.log:
            lo, hi = int(round(math.log10(self.lo))), int(round(math.log10(self.hi)))
            step = max(1, math.ceil((hi - lo) / 8))
            return [10.0**e for e in range(lo, hi + 1, step)]
        step = _nice((self.hi - self.lo) / 5)
        n = int(round((self.hi - self.lo) / step))
        return [self.lo + i * step for i in range(n + 1)]


def _nice(x: float) -> float:
    if x <= 0:
        return 1.0
    e = math.floor(math.log10(x))
    f = x / 10**e
    return (1 if f <= 1 else 2 if f <= 2 else 2.5 if f <= 2.5 else 5 if f <= 5 else 10) * 10**e


def fmt_tick(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    for s, f in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if a >= f:
            return f"{v / f:.3g}{s}"
    if a >= 1:
        return f"{v:.4g}"
    return f"{v:.3g}"


class _Canvas:
    def __init__(self, name: str, title: str, width: int, height: int, desc: str = ""):
        self.name, self.title, self.w, self.h = name, title, width, height
        self.parts: list[str] = []
        self.desc = desc

    def add(self, s: str) -> None:
        self.parts.append(s)

    def text(self, x, y, s, *, anchor="start", size=12, cls="", weight="normal", rotate=None, fill="#222") -> None:
        rot = f' transform="rotate({rotate} {_num(x)} {_num(y)})"' if rotate is not None else ""
        c = f' class="{cls}"' if cls else ""
        self.add(f'<text x="{_num(x)}" y="{_num(y)}" text-anchor="{anchor}" font-size="{size}" '
                 f'font-weight="{weight}" fill="{fill}"{c}{rot}>{esc(s)}</text>')

    def svg(self) -> str:
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{esc(self.name)}" '
                f'viewBox="0 0 {self.w} {self.h}" width="100%" role="img" aria-label="{esc(self.title)}" '
                f'font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif">'
                f'<title>{esc(self.title)}</title>' + (f"<desc>{esc(self.desc)}</desc>" if self.desc else ""))
        return head + "".join(self.parts) + "</svg>"


def _axes(cv: _Canvas, xs: Scale, ys: Scale, box, xlabel, ylabel, x_format=None, y_format=None, xticks=None):
    x0, y0, x1, y1 = box  # plot area: left, top, right, bottom
    cv.add(f'<rect x="{x0}" y="{y0}" width="{x1 - x0}" height="{y1 - y0}" fill="none" stroke="#bbb"/>')
    for t in ys.ticks():
        y = ys(t)
        cv.add(f'<line x1="{x0}" y1="{_num(y)}" x2="{x1}" y2="{_num(y)}" stroke="#eee"/>')
        cv.text(x0 - 6, y + 4, (y_format or fmt_tick)(t), anchor="end", size=11, fill="#555")
    ticks = xticks if xticks is not None else [(t, (x_format or fmt_tick)(t)) for t in xs.ticks()]
    for t, label in ticks:
        x = xs(t)
        cv.add(f'<line x1="{_num(x)}" y1="{y0}" x2="{_num(x)}" y2="{y1}" stroke="#eee"/>')
        cv.text(x, y1 + 16, label, anchor="middle", size=11, fill="#555")
    cv.text((x0 + x1) / 2, y1 + 34, xlabel, anchor="middle", size=12)
    cv.text(16, (y0 + y1) / 2, ylabel, anchor="middle", size=12, rotate=-90)


def _legend(cv: _Canvas, items, x, y, width) -> int:
    """Legend entries left to right, wrapping; returns the height used."""
    cx, cy = x, y
    for label, color in items:
        w = 18 + 7 * len(str(label)) + 14
        if cx + w > x + width and cx > x:
            cx, cy = x, cy + 18
        cv.add(f'<rect x="{_num(cx)}" y="{_num(cy - 9)}" width="12" height="12" fill="{color}"/>')
        cv.text(cx + 17, cy + 1, label, size=11)
        cx += w
    return cy - y + 18


def line_chart(series: list[Series], *, title: str, xlabel: str, ylabel: str, logx=False, logy=False, xticks=None,
               x_format=None, y_format=None, name="line", width=720, height=400, markers=True, desc="",
               connect=None) -> str:
    """Lines through each series' points; ``connect`` (a set of series names) limits the lines to those
    series, the rest drawn as points only (a scatter)."""
    cv = _Canvas(name, title, width, height, desc)
    cv.text(12, 22, title, size=14, weight="bold")
    legend_h = _legend(cv, [(s.name, s.color or PALETTE[i % len(PALETTE)]) for i, s in enumerate(series)],
                       60, 44, width - 80)
    box = (70, 44 + legend_h, width - 20, height - 50)
    pts = [(x, y) for s in series for x, y in zip(s.xs, s.ys) if _finite(x) and _finite(y)
           and (not logx or x > 0) and (not logy or y > 0)]
    if not pts:
        cv.text(width / 2, height / 2, "no data", anchor="middle")
        return cv.svg()
    xs = Scale(min(p[0] for p in pts), max(p[0] for p in pts), box[0], box[2], logx)
    lo_y = min(p[1] for p in pts)
    ys = Scale(0.0 if not logy and lo_y > 0 else lo_y, max(p[1] for p in pts), box[3], box[1], logy)
    _axes(cv, xs, ys, box, xlabel, ylabel, x_format, y_format, xticks)
    for i, s in enumerate(series):
        color = s.color or PALETTE[i % len(PALETTE)]
        seg = [(xs(x), ys(y), (s.labels[k] if s.labels else None), x, y)
               for k, (x, y) in enumerate(zip(s.xs, s.ys))
               if _finite(x) and _finite(y) and (not logx or x > 0) and (not logy or y > 0)]
        if len(seg) > 1 and (connect is None or s.name in connect):
            d = " ".join(f"{'M' if k == 0 else 'L'}{_num(px)},{_num(py)}" for k, (px, py, *_r) in enumerate(seg))
            cv.add(f'<path class="mark line" d="{d}" fill="none" stroke="{color}" stroke-width="2"/>')
        if markers and (connect is None or s.name not in connect):
            for px, py, lab, x, y in seg:
                tip = lab if lab is not None else f"{s.name}: {fmt_tick(x)}, {fmt_tick(y)}"
                cv.add(f'<circle class="mark point" cx="{_num(px)}" cy="{_num(py)}" r="3" fill="{color}">'
                       f'<title>{esc(tip)}</title></circle>')
    return cv.svg()


def stacked_bars(categories: list[str], stacks: list[tuple[str, list[float], str]], *, title: str, xlabel: str,
                 name="bars", width=720, value_format=None, desc="", totals_format=None) -> str:
    """Horizontal stacked bars, one per category; ``stacks`` = (label, values per category, color)."""
    bar_h, gap = 24, 12
    legend_w = width - 40
    label_w = min(300, max(90, int(7.6 * max((len(c) for c in categories), default=10)) + 12))
    cv = _Canvas(name, title, width, 0, desc)
    cv.text(12, 22, title, size=14, weight="bold")
    legend_h = _legend(cv, [(lab, col) for lab, _, col in stacks], 20, 44, legend_w)
    top = 44 + legend_h + 4
    height = int(top + len(categories) * (bar_h + gap) + 50)
    cv.h = height
    totals = [sum(max(0.0, float(v[i])) for _, v, _ in stacks) for i in range(len(categories))]
    hi = max(totals) if totals and max(totals) > 0 else 1.0
    x0, x1 = label_w + 10, width - 70
    xs = Scale(0.0, hi, x0, x1)
    y1 = top + len(categories) * (bar_h + gap)
    for t in xs.ticks():
        x = xs(t)
        cv.add(f'<line x1="{_num(x)}" y1="{top - 4}" x2="{_num(x)}" y2="{y1}" stroke="#eee"/>')
        cv.text(x, y1 + 14, (value_format or fmt_tick)(t), anchor="middle", size=11, fill="#555")
    cv.text((x0 + x1) / 2, y1 + 32, xlabel, anchor="middle", size=12)
    for i, cat in enumerate(categories):
        y = top + i * (bar_h + gap)
        cv.text(x0 - 8, y + bar_h / 2 + 4, cat, anchor="end", size=12)
        acc = 0.0
        for lab, vals, col in stacks:
            v = max(0.0, float(vals[i]))
            if v <= 0:
                continue
            xa, xb = xs(acc), xs(acc + v)
            share = v / totals[i] if totals[i] else 0
            cv.add(f'<rect class="mark bar" x="{_num(xa)}" y="{y}" width="{_num(max(xb - xa, 0.5))}" '
                   f'height="{bar_h}" fill="{col}"><title>{esc(f"{cat}: {lab} {(value_format or fmt_tick)(v)} ({share:.0%})")}'
                   f'</title></rect>')
            acc += v
        cv.text(xs(acc) + 4, y + bar_h / 2 + 4, (totals_format or value_format or fmt_tick)(totals[i]), size=11)
    return cv.svg()


def roofline(parts: list[dict], *, title: str, name="roofline", width=720, height=440, desc="") -> str:
    """Log-log roofline. Each part: {name, peak, bw, color, points: [(ai, flop_s, label, family[, phase])]};
    the roof is min(peak, bw * ai). Prefill points are circles, decode points squares."""
    cv = _Canvas(name, title, width, height, desc)
    cv.text(12, 22, title, size=14, weight="bold")
    fams = sorted({p[3] for part in parts for p in part["points"]})
    items = [(f"{part['name']} roof", part["color"]) for part in parts]
    items += [(f, FAMILY_COLORS.get(f, "#555")) for f in fams]
    legend_h = _legend(cv, items, 60, 44, width - 80)
    box = (70, 44 + legend_h, width - 20, height - 50)
    ais = [p[0] for part in parts for p in part["points"] if p[0] > 0 and p[1] > 0]
    perf = [p[1] for part in parts for p in part["points"] if p[0] > 0 and p[1] > 0]
    peaks = [part["peak"] for part in parts]
    lo_x = min(ais + [1.0]) / 2
    hi_x = max(ais + [max(pk / part["bw"] for pk, part in zip(peaks, parts)) * 4])
    lo_y = min(perf + [min(part["bw"] * lo_x for part in parts)])
    hi_y = max(peaks) * 1.5
    xs = Scale(lo_x, hi_x, box[0], box[2], True)
    ys = Scale(lo_y, hi_y, box[3], box[1], True)
    _axes(cv, xs, ys, box, "arithmetic intensity (FLOP/byte)", "achieved FLOP/s")
    for part in parts:
        ridge = part["peak"] / part["bw"]
        a, b = xs.lo, xs.hi
        pts = [(a, part["bw"] * a), (ridge, part["peak"]), (b, part["peak"])]
        pts = [(max(x, xs.lo), max(y, ys.lo)) for x, y in pts]
        d = " ".join(f"{'M' if i == 0 else 'L'}{_num(xs(x))},{_num(ys(y))}" for i, (x, y) in enumerate(pts))
        cv.add(f'<path class="mark roof" d="{d}" fill="none" stroke="{part["color"]}" stroke-width="2">'
               f'<title>{esc(part["name"])}: peak {fmt_tick(part["peak"])}FLOP/s, {fmt_tick(part["bw"])}B/s</title></path>')
    shapes = ("circle", "square", "diamond", "triangle")
    by_phase = {"prefill": "circle", "decode": "square"}
    for k, part in enumerate(parts):
        for pt in part["points"]:
            ai, fs, label, fam = pt[:4]
            if not (ai > 0 and fs > 0):
                continue
            x, y = xs(ai), ys(fs)
            col = FAMILY_COLORS.get(fam, "#555")
            tip = esc(f"{part['name']}: {label} - {fmt_tick(ai)} FLOP/B, {fmt_tick(fs)}FLOP/s")
            shape = by_phase.get(pt[4], "diamond") if len(pt) > 4 else shapes[k % len(shapes)]
            if shape == "circle":
                m = f'<circle class="mark op" cx="{_num(x)}" cy="{_num(y)}" r="4"'
            elif shape == "square":
                m = f'<rect class="mark op" x="{_num(x - 4)}" y="{_num(y - 4)}" width="8" height="8"'
            elif shape == "diamond":
                m = f'<path class="mark op" d="M{_num(x)},{_num(y - 5)} L{_num(x + 5)},{_num(y)} L{_num(x)},{_num(y + 5)} L{_num(x - 5)},{_num(y)} Z"'
            else:
                m = f'<path class="mark op" d="M{_num(x)},{_num(y - 5)} L{_num(x + 5)},{_num(y + 4)} L{_num(x - 5)},{_num(y + 4)} Z"'
            cv.add(f'{m} fill="{col}" fill-opacity="0.75" stroke="{part["color"]}" stroke-width="1">'
                   f'<title>{tip}</title></{m.split()[0][1:]}>')
    return cv.svg()


def tornado(rows: list[tuple[str, float, float]], *, title: str, xlabel: str, name="tornado", width=720, desc="",
            low_label="figure -20%", high_label="figure +20%") -> str:
    """Horizontal bars around zero: (label, change at -20%, change at +20%) in percent, largest first."""
    bar_h, gap = 18, 8
    label_w = min(300, max(120, int(7.6 * max((len(r[0]) for r in rows), default=10)) + 12))
    cv = _Canvas(name, title, width, 0, desc)
    cv.text(12, 22, title, size=14, weight="bold")
    legend_h = _legend(cv, [(low_label, "#7fa7d1"), (high_label, "#e0a07a")], 20, 44, width - 40)
    top = 44 + legend_h + 4
    height = int(top + max(len(rows), 1) * (bar_h + gap) + 48)
    cv.h = height
    span = max([abs(float(v)) for r in rows for v in r[1:] if _finite(v)] + [1.0])
    x0, x1 = label_w + 10, width - 30
    xs = Scale(-span, span, x0, x1)
    y1 = top + max(len(rows), 1) * (bar_h + gap)
    for t in xs.ticks():
        x = xs(t)
        cv.add(f'<line x1="{_num(x)}" y1="{top - 4}" x2="{_num(x)}" y2="{y1}" stroke="#eee"/>')
        cv.text(x, y1 + 14, f"{t:+.0f}%" if t else "0", anchor="middle", size=11, fill="#555")
    zx = xs(0.0)
    cv.add(f'<line x1="{_num(zx)}" y1="{top - 4}" x2="{_num(zx)}" y2="{y1}" stroke="#888"/>')
    cv.text((x0 + x1) / 2, y1 + 32, xlabel, anchor="middle", size=12)
    for i, (label, lo, hi) in enumerate(rows):
        y = top + i * (bar_h + gap)
        cv.text(x0 - 8, y + bar_h / 2 + 4, label, anchor="end", size=12)
        for v, col, which in ((lo, "#7fa7d1", low_label), (hi, "#e0a07a", high_label)):
            if not _finite(v):
                continue
            xa, xb = sorted((zx, xs(v)))
            cv.add(f'<rect class="mark bar" x="{_num(xa)}" y="{y}" width="{_num(max(xb - xa, 1.0))}" '
                   f'height="{bar_h}" fill="{col}"><title>{esc(f"{label}, {which}: {v:+.1f}%")}</title></rect>')
    return cv.svg()
