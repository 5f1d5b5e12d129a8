"""The HTML report: one self-contained file (inline CSS and SVG, no script, no network).

``render_report(parts, model, scenario, ...)`` projects the scenario on each part, builds the charts
(:mod:`.charts`) and renders ``templates/report.html.j2`` with jinja2 (autoescape on: every name a user
supplies comes out as text).
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass

import numpy as np

from .. import __version__
from ..cost import family
from ..ops import COMM_KINDS
from ..spec import SPEC_FIELDS, spec_value
from ..units import format_si
from . import charts
from .common import command_line, spec_files, unit_of

FAMILY_LABELS = {"gemm": "GEMM", "attention": "attention", "memory": "memory-bound kernels",
                 "comm": "collectives", "launch gaps": "launch gaps"}
FAMILIES = ("gemm", "attention", "memory", "comm", "launch gaps")


@dataclass
class Part:
    hw: object
    prof: object
    proj: object
    color: str
    baseline: bool = False


def _ms(x: float) -> str:
    x = float(x)
    return f"{x:.3g} ms" if x < 100 else f"{x:,.0f} ms"


def _tok(x: float) -> str:
    return f"{float(x):,.0f}" if x >= 100 else f"{float(x):.3g}"


def _family_times(phase) -> dict[str, float]:
    out = {f: 0.0 for f in FAMILIES}
    for t in phase.times:
        out[family(t.op.kind)] += float(np.sum(t.total))
    out["launch gaps"] = float(phase.kernels_s)
    return out


def _top_op(phase):
    items = sorted(phase.times, key=lambda t: -float(t.total))
    if not items:
        return None
    t = items[0]
    return {"name": t.op.name, "kind": t.op.kind, "share": float(t.total) / float(phase.time_s),
            "bound": str(t.bound)}


def _summary(part: Part, base: Part | None) -> dict:
    from ..serialize import phase_bound

    p = part.proj
    gpus = p.scenario.gpus
    b = p.bands
    key_phase = p.decode if p.decode is not None else p.prefill
    top = _top_op(key_phase)
    out = {
        "name": p.hardware.name, "key": p.hardware.key, "color": part.color, "baseline": part.baseline,
        "ttft": _ms(p.ttft_s * 1e3), "ttft_band": (_ms(b["ttft_ms"][0]), _ms(b["ttft_ms"][2])),
        "tpot": _ms(p.tpot_s * 1e3) if p.decode is not None else "n/a",
        "tpot_band": (_ms(b["tpot_ms"][0]), _ms(b["tpot_ms"][2])) if p.decode is not None else None,
        "thr_gpu": _tok(p.throughput_tok_s_per_gpu),
        "thr_gpu_band": (_tok(b["throughput_tok_s"][0] / gpus), _tok(b["throughput_tok_s"][2] / gpus)),
        "e2e": _ms(p.e2e_s * 1e3), "batch": p.batch,
        "bound_prefill": phase_bound(p.prefill), "bound_decode": phase_bound(p.decode) if p.decode else None,
        "top": top, "key_phase": key_phase.name, "calibration": p.profile.label,
        "mfu": p.mfu, "mbu": p.mbu,
    }
    if base is not None and base is not part:
        bp = base.proj
        out["speedup_thr"] = p.throughput_tok_s_per_gpu / bp.throughput_tok_s_per_gpu
        out["speedup_tpot"] = (bp.tpot_s / p.tpot_s) if p.decode is not None and bp.decode is not None else None
        out["speedup_ttft"] = bp.ttft_s / p.ttft_s
    bound = out["bound_decode"] or out["bound_prefill"]
    reason = f"{key_phase.name} is {bound}-bound"
    if top:
        reason += f"; top operator {top['name']} ({top['kind']}, {top['share']:.0%} of the {key_phase.name} step)"
    out["reason"] = reason
    return out


def _hardware_rows(parts: list[Part]) -> list[dict]:
    rows = []
    for f in SPEC_FIELDS:
        cells = []
        for part in parts:
            hw = part.hw
            v = spec_value(hw, f.attr)
            fig = hw.figures.get(f.path)
            if v is None:
                cells.append(None)
                continue
            unit = unit_of(f.dimension)
            shown = format_si(v, unit) if unit else f"{v:g}"
            cells.append({"value": shown, "text": (fig.text if fig else ""), "source": fig.source if fig else "derived",
                          "ref": " ".join(x for x in ((fig.ref if fig else ""), (getattr(fig, "note", "") or "")) if x)})
        if any(c is not None for c in cells):
            rows.append({"label": f.label, "attr": f.attr, "cells": cells})
    return rows


def _latency_chart(parts: list[Part], phase_name: str):
    cats, per = [], []
    for part in parts:
        ph = part.proj.prefill if phase_name == "prefill" else part.proj.decode
        if ph is None:
            continue
        cats.append(part.hw.name)
        per.append(_family_times(ph))
    if not cats:
        return None
    stacks = [(FAMILY_LABELS[f], [d[f] * 1e3 for d in per], charts.FAMILY_COLORS[f]) for f in FAMILIES
              if any(d[f] > 0 for d in per)]
    what = ("prefill step (TTFT)" if phase_name == "prefill"
            else "decode step at the middle of the generation")
    return charts.stacked_bars(cats, stacks, title=f"Latency of one {what}, by operator class", xlabel="milliseconds",
                               name=f"latency-{phase_name}", value_format=lambda v: f"{v:.3g}",
                               totals_format=lambda v: f"{v:.3g} ms")


def _roofline_chart(part: Part, index: int):
    from ..cost import _rate

    p = part.proj
    hw = part.hw
    peak, _ = _rate(hw, p.scenario.dtype, p.profile)
    points = []
    for ph in (p.prefill, p.decode):
        if ph is None:
            continue
        for t in ph.times:
            op = t.op
            if op.kind in COMM_KINDS:
                continue
            fl, by, tm = float(op.flops), float(op.bytes), float(t.time)
            if fl <= 0 or by <= 0 or tm <= 0:
                continue
            points.append((fl / by, fl / tm, f"{ph.name} {op.name} ({op.kind})", family(op.kind), ph.name))
    return charts.roofline([{"name": hw.name, "peak": peak, "bw": hw.hbm_bandwidth, "color": part.color,
                             "points": points}],
                           title=f"Roofline: {hw.name} ({p.scenario.dtype} peak {format_si(peak, 'FLOP/s')}, "
                                 f"HBM {format_si(hw.hbm_bandwidth, 'B/s')})",
                           name=f"roofline-{index}",
                           desc="circles: prefill operators; squares: decode operators")


def _curve_chart(parts: list[Part]):
    from .. import capacity
    from ..projection import serving_times

    series = []
    for part in parts:
        p = part.proj
        sc = p.scenario
        cap = int(capacity.max_batch(p.model, sc, part.hw.hbm_bytes))
        if cap < 1 or p.decode is None:
            continue
        b = np.unique(np.round(np.geomspace(1, cap, min(cap, 48))).astype(int))
        st = serving_times(p.model, part.hw, sc, p.profile, b)
        tpot = np.asarray(st.tpot_s, dtype=float)
        thr = np.asarray(st.throughput_tok_s, dtype=float) / sc.gpus
        labels = [f"{part.hw.name}: batch {int(x)}, {1 / t:.1f} tok/s/user, {y:,.0f} tok/s/GPU"
                  for x, t, y in zip(b, tpot, thr)]
        series.append(charts.Series(part.hw.name, list(1.0 / tpot), list(thr), part.color, labels))
    if not series:
        return None
    return charts.line_chart(series, title="Throughput per GPU against speed per user (batch 1 to the largest that fits)",
                             xlabel="output tokens/s per user (1 / TPOT)", ylabel="output tokens/s per GPU",
                             name="throughput-latency", logx=True,
                             desc="each point is one batch size; left: large batches, right: small ones")


def _memory_chart(parts: list[Part]):
    cats = [part.hw.name for part in parts]
    cols = {"weights": "#1f6fb2", "KV cache": "#e07b39", "activations": "#3a9d5d", "workspace": "#9aa3ab"}
    mems = [part.proj.memory for part in parts]
    stacks = [("weights", [m.weights / 1e9 for m in mems], cols["weights"]),
              ("KV cache", [float(m.kv_cache) / 1e9 for m in mems], cols["KV cache"]),
              ("activations", [float(m.activations) / 1e9 for m in mems], cols["activations"]),
              ("workspace", [m.workspace / 1e9 for m in mems], cols["workspace"])]
    caps = {part.hw.name: part.proj.memory.capacity / 1e9 for part in parts}
    return charts.stacked_bars(cats, stacks, title="Memory per GPU at the projected batch", xlabel="GB",
                               name="memory", value_format=lambda v: f"{v:.4g}",
                               totals_format=lambda v: f"{v:.4g} GB",
                               desc="usable capacity: " + ", ".join(f"{k} {v:.4g} GB" for k, v in caps.items()))


def _tornado_charts(part: Part, sens, index: int):
    out = []
    for metric, label in (("throughput", "output tokens/s per GPU"), ("tpot", "TPOT")):
        rows = [(r.label, getattr(r, metric)[0], getattr(r, metric)[1]) for r in sens.rows]
        rows = [(lab, lo if lo is not None else float("nan"), hi) for lab, lo, hi in rows]
        out.append(charts.tornado(rows, title=f"{part.hw.name}: {label}, each figure \u00b1{sens.step:.0%}",
                                  xlabel=f"change in {label} (%)", name=f"tornado-{metric}-{index}",
                                  low_label=f"figure -{sens.step:.0%}", high_label=f"figure +{sens.step:.0%}"))
    return out


def build_context(parts: list[Part], model, scenario, *, argv=None) -> dict:
    from markupsafe import Markup

    from .sensitivity import sensitivity

    base = next((p for p in parts if p.baseline), parts[0])
    summaries = [_summary(p, base) for p in parts]
    sens = [sensitivity(p.hw, model, scenario, p.prof, base=p.proj) for p in parts]
    M = Markup
    chart = {
        "latency_prefill": M(_latency_chart(parts, "prefill") or ""),
        "latency_decode": M(_latency_chart(parts, "decode") or ""),
        "rooflines": [M(_roofline_chart(p, i)) for i, p in enumerate(parts)],
        "curve": M(_curve_chart(parts) or ""),
        "memory": M(_memory_chart(parts)),
        "tornados": [[M(s) for s in _tornado_charts(p, se, i)] for i, (p, se) in enumerate(zip(parts, sens))],
    }
    sc = parts[0].proj.scenario
    provenance = []
    for p in parts:
        v = p.prof.validation or {}
        provenance.append({
            "name": p.hw.name, "key": p.hw.key, "sha256": p.hw.sha256, "files": spec_files(p.hw),
            "calibration": p.prof.label, "fitted": p.prof.fitted, "description": p.prof.description,
            "validation": [(k, v[k]) for k in sorted(v)], "assumptions": p.proj.assumptions,
        })
    return {
        "title": f"{model.name}: " + " vs ".join(p.hw.name for p in parts),
        "tool": f"perfmodel {__version__}",
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command_line(argv),
        "model": {"name": model.name, "key": model.key, "params": model.param_count() / 1e9,
                  "active": model.active_param_count() / 1e9, "notes": list(model.notes)},
        "scenario": {"isl": sc.isl, "osl": sc.osl, "batch": scenario.batch, "tp": sc.tp, "pp": sc.pp, "ep": sc.ep,
                     "dtype": sc.dtype, "kv": sc.kv, "batching": sc.batching, "mode": sc.mode, "launch": sc.launch,
                     "overlap": sc.overlap, "gpus": sc.gpus},
        "baseline": base.hw.name,
        "summaries": summaries,
        "parts": [{"name": p.hw.name, "key": p.hw.key, "color": p.color} for p in parts],
        "hardware": _hardware_rows(parts),
        "charts": chart,
        "sensitivity": [{"name": p.hw.name, "rows": s.rows, "unmoved": s.unmoved, "skipped": s.skipped,
                         "step": s.step} for p, s in zip(parts, sens)],
        "provenance": provenance,
    }


def environment():
    import jinja2

    from ..paths import templates_dir

    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())),
                              autoescape=jinja2.select_autoescape(["html", "j2", "xml"], default=True,
                                                                  default_for_string=True),
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def render_report(hardware: list, model, scenario, *, baseline=None, calibration=None, argv=None) -> str:
    """Project ``scenario`` on each of ``hardware`` (and ``baseline``, shown first) and render the report.
    ``calibration`` as for ``--calibration`` (None: automatic per part)."""
    from ..projection import project_resolved
    from ..resolve import resolve_hardware, resolve_model, resolve_profile

    mdl = resolve_model(model)
    hws = [resolve_hardware(h) for h in hardware]
    base = resolve_hardware(baseline) if baseline is not None else None
    order = ([base] if base is not None else []) + [h for h in hws if base is None or h.key != base.key]
    parts = []
    for i, hw in enumerate(order):
        prof = resolve_profile(calibration, hw)
        parts.append(Part(hw, prof, project_resolved(hw, mdl, scenario, prof), charts.PALETTE[i % len(charts.PALETTE)],
                          baseline=base is not None and i == 0))
    ctx = build_context(parts, mdl, scenario, argv=argv)
    return environment().get_template("report.html.j2").render(**ctx)
