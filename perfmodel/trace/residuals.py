"""The residual table (measured, predicted, error per operator) as text, CSV, JSON and an SVG chart, and
the refit: the mapped rows folded into a profile by perfmodel's own fitter."""
from __future__ import annotations

import math
from html import escape

from .mapping import Row

CSV_FIELDS = ("operator", "kind", "scope", "kernels", "measured_us", "predicted_us", "error")


def _us(x) -> str:
    return "" if x is None else f"{x * 1e6:.3f}"


def to_csv(rows: list[Row]) -> str:
    """The residual table as CSV, every cell through the one escaping rule (:func:`perfmodel.io.csv_safe`): an
    operator name from the trace that starts like a formula is written as text."""
    from ..io import csv_text

    return csv_text(CSV_FIELDS, ([r.name, r.kind, r.scope, f"{r.kernels:g}", _us(r.measured_s), _us(r.predicted_s),
                                  "" if r.error is None else f"{r.error:+.4f}"] for r in rows))


def summary(rows: list[Row]) -> dict:
    pred = [r for r in rows if r.predicted_s is not None]
    layer_m = sum(r.measured_s for r in rows if r.scope == "layer")
    layer_p = sum(r.predicted_s for r in pred if r.scope == "layer")
    errs = sorted(abs(r.error) for r in pred if r.error is not None)
    return {"rows": len(rows), "predicted_rows": len(pred),
            "layer_measured_s": layer_m, "layer_predicted_covered_s": layer_p,
            "layer_error": (layer_p / sum(r.measured_s for r in pred if r.scope == "layer") - 1.0)
            if any(r.scope == "layer" for r in pred) else None,
            "median_abs_error": errs[len(errs) // 2] if errs else None,
            "unmodelled_s": sum(r.measured_s for r in rows if r.predicted_s is None)}


def to_table(rows: list[Row], title: str) -> str:
    lines = [title, "", f"{'operator':<26} {'kind':<10} {'scope':<5} {'kern':>5} {'measured':>11} {'predicted':>11} "
                        f"{'error':>8}"]
    for r in rows:
        lines.append(f"{r.name[:26]:<26} {r.kind[:10]:<10} {r.scope:<5} {r.kernels:>5.3g} "
                     f"{r.measured_s * 1e6:>9.1f}us "
                     f"{(format(r.predicted_s * 1e6, '9.1f') + 'us') if r.predicted_s is not None else '-':>11} "
                     f"{format(r.error, '+.1%') if r.error is not None else '-':>8}")
    s = summary(rows)
    lines.append("")
    if s["layer_error"] is not None:
        lines.append(f"one decoder layer: measured {s['layer_measured_s'] * 1e6:.1f} us of kernels; predicted rows sum "
                     f"to {s['layer_predicted_covered_s'] * 1e6:.1f} us ({s['layer_error']:+.1%} on the rows the model "
                     f"covers); median |error| {s['median_abs_error']:.1%}")
    if s["unmodelled_s"] > 0:
        lines.append(f"kernel time the model has no operator for: {s['unmodelled_s'] * 1e6:.1f} us")
    return "\n".join(lines)


def to_svg(rows: list[Row], title: str) -> str:
    """Horizontal bars, measured against predicted, one pair per operator (no plotting library)."""
    shown = [r for r in rows if r.measured_s > 0]
    top = max([r.measured_s for r in shown] + [r.predicted_s or 0.0 for r in shown] + [1e-12])
    bar_h, gap, left, width = 9, 8, 190, 420
    height = 50 + len(shown) * (2 * bar_h + gap) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 120}" height="{height}" '
           f'font-family="sans-serif" font-size="11">',
           f'<text x="10" y="18" font-size="13">{escape(title)}</text>',
           '<rect x="10" y="28" width="10" height="8" fill="#4472c4"/><text x="24" y="36">measured</text>',
           '<rect x="90" y="28" width="10" height="8" fill="#ed7d31"/><text x="104" y="36">predicted</text>']
    y = 50
    for r in shown:
        out.append(f'<text x="{left - 6}" y="{y + bar_h + 3}" text-anchor="end">{escape(r.name)}</text>')
        wm = width * r.measured_s / top
        out.append(f'<rect x="{left}" y="{y}" width="{wm:.1f}" height="{bar_h}" fill="#4472c4"/>')
        label = f"{r.measured_s * 1e6:.1f} us"
        if r.predicted_s is not None:
            wp = width * r.predicted_s / top
            out.append(f'<rect x="{left}" y="{y + bar_h}" width="{wp:.1f}" height="{bar_h}" fill="#ed7d31"/>')
            label += f"  {r.error:+.0%}" if r.error is not None and math.isfinite(r.error) else ""
        out.append(f'<text x="{left + max(wm, (r.predicted_s or 0) / top * width) + 4:.1f}" '
                   f'y="{y + bar_h + 3}">{escape(label)}</text>')
        y += 2 * bar_h + gap
    out.append("</svg>")
    return "\n".join(out) + "\n"


REFIT_KINDS = ("gemm", "attention", "rmsnorm", "swiglu", "residual")


def cases_from_rows(rows: list[Row], tag: str) -> list:
    """Fitter cases (in-stream, none held out) from the rows that are one operator of a known shape."""
    from ..fit.latency import Case
    from ..predict import op_from_params

    out = []
    for r in rows:
        if r.kind not in REFIT_KINDS or not r.params or r.predicted_s is None or r.measured_s <= 0:
            continue
        try:
            op = op_from_params(r.kind, r.params)
        except (KeyError, TypeError, ValueError):
            continue
        out.append(Case(f"trace|{tag}|{r.name}", r.kind, r.params, op, r.measured_s, False, standalone=False))
    return out


def refit(cases: list, hw, prof):
    from ..fit.latency import fit_profile

    if not cases:
        from ..errors import InputError

        raise InputError("no mapped operator to refit (the trace needs the capture script's module annotations)",
                         field="--refit")
    return fit_profile(cases, hw, base=prof)
