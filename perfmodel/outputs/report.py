"""The HTML report: one self-contained file (inline CSS and SVG, no script, no network).

``render_report(parts, model, scenario, ...)`` projects the scenario on each part, builds the charts
(:mod:`.charts`) and renders ``templates/report.html.j2`` with jinja2 (autoescape on: every name a user
supplies comes out as text).
"""
from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass

import numpy as np

from .. import __version__
from ..cost import family
from ..ops import COMM_KINDS
from ..spec import SPEC_FIELDS, spec_value
from ..units import format_si
from . import charts
from .common import command_line, field_unit, spec_files

FAMILY_LABELS = {"gemm": "GEMM", "attention": "attention", "memory": "memory-bound kernels",
                 "comm": "collectives (after overlap)", "host": "host dispatch floor (eager)",
                 "launch gaps": "launch gaps (graph)"}
FAMILIES = ("gemm", "attention", "memory", "comm", "host", "launch gaps")

@dataclass
class Part:
    hw: object
    prof: object
    proj: object
    color: str
    baseline: bool = False
    scenario: object = None  # the part's own scenario (its parallelism), batch as requested
    layout_note: str = ""  # how its parallelism was chosen


@dataclass(frozen=True)
class PartRequest:
    """One ``--arch`` (or ``--baseline``) value: the spec and any parallelism given for this part alone,
    written ``NAME:tp=2`` or ``NAME:tp=4,pp=2,ep=4``."""

    spec: str
    layout: tuple = ()  # (("tp", 2), ...)

    @property
    def given(self) -> dict:
        return dict(self.layout)


_LAYOUT_KEYS = ("tp", "pp", "ep")
_LAYOUT_RE = re.compile(r"^(.+?):((?:tp|pp|ep)=[^,:]*(?:,(?:tp|pp|ep)=[^,:]*)*)$")


def parse_part(text) -> PartRequest:
    """``h100-sxm``, ``h100-sxm:tp=2`` or ``path/to/spec.yaml:tp=4,pp=2`` -> a :class:`PartRequest`."""
    from ..errors import InputError

    if not isinstance(text, str):
        return PartRequest(text)
    m = _LAYOUT_RE.match(text.strip())
    if not m:
        if re.search(r":(tp|pp|ep)\b", text):
            raise InputError(f"expected NAME:tp=N[,pp=N][,ep=N], got {text!r}", field="--arch")
        return PartRequest(text)
    layout = []
    for item in m.group(2).split(","):
        k, _, v = item.partition("=")
        if k in dict(layout):
            raise InputError(f"{k} given twice in {text!r}", field="--arch")
        try:
            n = int(v)
        except ValueError:
            raise InputError(f"{k} must be a positive integer, got {v!r} (in {text!r})", field="--arch") from None
        if n < 1:
            raise InputError(f"{k} must be a positive integer, got {n} (in {text!r})", field="--arch")
        layout.append((k, n))
    return PartRequest(m.group(1), tuple(layout))


def _ms(x: float) -> str:
    x = float(x)
    return f"{x:.3g} ms" if x < 100 else f"{x:,.0f} ms"


def _tok(x: float) -> str:
    return f"{float(x):,.0f}" if x >= 100 else f"{float(x):.3g}"


def _family_times(phase, sc=None, prof=None) -> dict[str, float]:
    """The step's time by operator class, from the shares of its account (perfmodel.step_accounting), adding up to
    ``phase.time_s``: collectives after ``overlap`` hides part of them, an eager op at least its host
    dispatch cost (the excess shown as its own class), and the launch gaps of a graph replay.
    (tests/test_hostile_outputs.py checks the sum against ``time_s``.) ``sc`` and ``prof``: unused, the
    account holds the rules the phase was timed by."""
    out = {f: 0.0 for f in FAMILIES}
    for s in phase.account.ops:
        out["comm" if s.collective else family(s.op.kind)] += float(np.sum(s.device_s))
        out["host"] += float(np.sum(s.host_s))
    out["launch gaps"] = float(phase.kernels_s)
    return out


def _top_op(phase):
    items = sorted(phase.times, key=lambda t: -float(t.total))
    if not items:
        return None
    t = items[0]
    return {"name": t.op.name, "kind": t.op.kind, "share": float(t.total) / float(phase.time_s),
            "bound": str(t.bound)}


def _summary(part: Part, base: Part | None, comparison: dict | None) -> dict:
    from ..serialize import phase_bound

    p = part.proj
    sc = p.scenario
    gpus = sc.gpus
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
        "layout": layout_text(sc), "layout_note": part.layout_note, "gpus": gpus,
        "energy": _energy_text(p),
    }
    if comparison is not None:
        out["comparison"] = comparison
    bound = out["bound_decode"] or out["bound_prefill"]
    reason = f"{key_phase.name} is {bound}-bound"
    if top:
        reason += f"; top operator {top['name']} ({top['kind']}, {top['share']:.0%} of the {key_phase.name} step)"
    out["reason"] = reason
    return out


def layout_text(sc) -> str:
    parts = [f"TP {sc.tp}"]
    if sc.pp > 1:
        parts.append(f"PP {sc.pp}")
    if sc.attention_dp > 1:
        parts.append(f"attention DP {sc.attention_dp}")
    if sc.ep > 1:
        parts.append(f"EP {sc.ep}")
    return ", ".join(parts) + f" ({sc.gpus} GPU{'s' if sc.gpus > 1 else ''} per replica)"


# ---------------------------------------------------------------------------------------------------
# Comparisons against the baseline: at a matched batch, or at a matched latency target
# ---------------------------------------------------------------------------------------------------


def comparison_basis(requested_batch) -> str:
    """``batch`` when every part runs the batch asked for; ``latency`` with ``--batch max``, where the parts'
    largest batches differ and a like-for-like ratio holds the latency fixed instead."""
    return "latency" if requested_batch == "max" else "batch"


def _best_at_latency(part: Part, target_s: float, metric: str):
    """(batch, throughput per GPU, latency) of the largest-throughput batch of ``part`` whose ``metric``
    (tpot_s or ttft_s) is at most ``target_s``; None when not even batch 1 meets it."""
    from .. import capacity
    from ..projection import serving_times

    sc = part.proj.scenario
    cap = int(capacity.max_batch(part.proj.model, sc, part.hw))
    cap = min(cap, sc.max_batch) if sc.max_batch else cap  # the engine's scheduler limit
    if cap < 1:
        return None
    batches = np.arange(1, cap + 1) if cap <= 4096 else np.unique(np.round(np.geomspace(1, cap, 4096)).astype(int))
    st = serving_times(part.proj.model, part.hw, sc, part.prof, batches)
    lat = np.broadcast_to(np.asarray(getattr(st, metric), dtype=float), batches.shape)
    thr = np.broadcast_to(np.asarray(st.throughput_tok_s, dtype=float), batches.shape) / sc.gpus
    ok = lat <= target_s * (1 + 1e-9)
    if not ok.any():
        return None
    i = int(np.argmax(np.where(ok, thr, -np.inf)))
    return int(batches[i]), float(thr[i]), float(lat[i])


def _sequences(n: int) -> str:
    return f"{n} sequence" + ("s" if n != 1 else "")


def compare(part: Part, base: Part, basis: str) -> dict:
    """The ratios shown on a part's card, and the words that say what was held equal."""
    p, bp = part.proj, base.proj
    if basis == "batch":
        out = {"basis": "batch", "thr": p.throughput_tok_s_per_gpu / bp.throughput_tok_s_per_gpu,
               "tpot": (bp.tpot_s / p.tpot_s) if p.decode is not None and bp.decode is not None else None,
               "ttft": bp.ttft_s / p.ttft_s,
               "text": f"at the same batch ({_sequences(p.batch)} per replica)"}
        return out
    metric, label = ("tpot_s", "TPOT") if bp.decode is not None and p.decode is not None else ("ttft_s", "TTFT")
    target = float(getattr(bp, metric))
    best = _best_at_latency(part, target, metric)
    if best is None:
        return {"basis": "latency", "thr": None, "tpot": None, "ttft": None,
                "text": f"cannot reach the baseline's {label} of {_ms(target * 1e3)} at any batch"}
    batch, thr, lat = best
    return {"basis": "latency", "thr": thr / bp.throughput_tok_s_per_gpu, "tpot": None, "ttft": None,
            "text": f"throughput per GPU at the baseline's {label} of {_ms(target * 1e3)} (its largest batch, "
                    f"{bp.batch}): batch {batch} here, {label} {_ms(lat * 1e3)}, {_tok(thr)} tok/s per GPU"}


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
            unit = field_unit(f)
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
    desc = ("each bar adds up to the step time: collectives after the overlap that hides them, eager operators "
            "at least their host dispatch cost, graph replays with their launch gaps")
    return charts.stacked_bars(cats, stacks, title=f"Latency of one {what}, by operator class", xlabel="milliseconds",
                               name=f"latency-{phase_name}", value_format=lambda v: f"{v:.3g}",
                               totals_format=lambda v: f"{v:.3g} ms", desc=desc)


def _roofline_chart(part: Part, index: int):
    from ..cost import matmul_rate

    p = part.proj
    hw = part.hw
    peak, _ = matmul_rate(hw, p.scenario.dtype, p.profile)
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
        cap = int(capacity.max_batch(p.model, sc, part.hw))
        cap = min(cap, sc.max_batch) if sc.max_batch else cap  # the engine's scheduler limit
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

    from .common import validation_rows
    from .sensitivity import sensitivity

    base = next((p for p in parts if p.baseline), parts[0])
    basis = comparison_basis(scenario.batch)
    summaries = [_summary(p, base, compare(p, base, basis) if p is not base else None) for p in parts]
    sens = [sensitivity(p.hw, model, p.scenario or scenario, p.prof, base=p.proj) for p in parts]
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
        stats, facts = validation_rows(p.prof.validation or {})
        provenance.append({
            "name": p.hw.name, "key": p.hw.key, "sha256": p.hw.sha256, "files": spec_files(p.hw),
            "calibration": p.prof.label, "fitted": p.prof.fitted, "description": p.prof.description,
            "validation": stats, "validation_facts": facts, "assumptions": p.proj.assumptions,
            "layout": layout_text(p.proj.scenario), "layout_note": p.layout_note,
        })
    if basis == "batch":
        basis_text = (f"Ratios against {base.hw.name} are at the same batch ({_sequences(summaries[0]['batch'])} per "
                      f"replica), throughput per GPU, so parts with different GPU counts per replica compare fairly.")
    else:
        basis_text = (f"With --batch max each part runs its own largest batch, so ratios against {base.hw.name} hold "
                      f"the latency fixed instead: each part's best throughput per GPU at the baseline's "
                      f"{'TPOT' if base.proj.decode is not None else 'TTFT'} at its largest batch.")
    return {
        "title": f"{model.name}: " + " vs ".join(p.hw.name for p in parts),
        "tool": f"perfmodel {__version__}",
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command_line(argv),
        "model": {"name": model.name, "key": model.key, "params": model.param_count() / 1e9,
                  "active": model.active_param_count() / 1e9, "notes": list(model.notes)},
        "scenario": {"isl": sc.isl, "osl": sc.osl, "batch": scenario.batch, "dtype": sc.dtype, "kv": sc.kv,
                     "batching": sc.batching, "mode": sc.mode, "launch": sc.launch, "overlap": sc.overlap,
                     "engines": ", ".join(dict.fromkeys(_engine_name(p.proj.scenario.engine) for p in parts))},
        "layouts": [{"name": p.hw.name, "layout": layout_text(p.proj.scenario), "note": p.layout_note}
                    for p in parts],
        "basis": basis, "basis_text": basis_text,
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


TP_CANDIDATES = (1, 2, 4, 8, 16, 32, 64)


def smallest_fitting_tp(hw, model, sc, prof):
    """(scenario, projection) at the smallest tensor-parallel degree (1, 2, 4, ... up to the part's scale-up
    domain) at which the scenario fits in memory (:func:`perfmodel.capacity.max_batch`) and projects. Raises
    the one-line error of the last degree tried when none does."""
    from .. import capacity
    from ..errors import InputError
    from ..projection import project_resolved
    from ..resolve import resolve_scenario

    want = 1 if sc.batch == "max" else int(sc.batch)
    limit = max(int(hw.scaleup_domain), 1)
    last = None
    for tp in TP_CANDIDATES:
        if tp > limit and last is not None:
            break
        if tp % sc.ep:
            continue
        try:
            trial = sc.with_(tp=tp).validated()
            resolved = resolve_scenario(trial, hw, model)  # the engine's preset at this TP
            # raises (one line) when it does not fit; the projection may refuse a layout too
            capacity.check_fits(model, resolved, hw, capacity.max_batch(model, resolved, hw), batch=want)
            return trial, project_resolved(hw, model, resolved, prof)
        except InputError as e:
            last = e
    raise InputError(f"{hw.name}: no tensor-parallel degree up to {limit} (its scale-up domain) fits; last "
                     f"tried: {last}; give the layout with --arch {hw.key}:tp=N[,pp=N]", field="--arch")


def resolve_part(req: PartRequest, mdl, scenario, calibration, *, auto_tp: bool):
    """(hw, prof, scenario as asked for the part, projection, note) for one requested part: its own layout when
    given with the name, else the global flags (auto_tp: the smallest TP that fits). ``calibration`` as for
    :func:`perfmodel.resolve.setup`."""
    from ..projection import project_resolved
    from ..resolve import resolve_scenario, setup

    s = setup(req.spec, mdl, calibration=calibration, engine=scenario.engine)
    hw, prof = s.hardware, s.profile
    given = req.given
    sc = scenario.with_(**given)
    if "ep" not in given and sc.tp % sc.ep:
        sc = sc.with_(ep=1)  # a global --ep that does not divide this part's TP
    notes = ["set for this part (" + ", ".join(f"{k}={v}" for k, v in req.layout) + ")"] if given else []
    if auto_tp and "tp" not in given:
        sc, proj = smallest_fitting_tp(hw, mdl, sc, prof)
        notes.insert(0, "TP: the smallest that fits")
    else:
        sc = sc.validated()
        proj = project_resolved(hw, mdl, resolve_scenario(sc, hw, mdl), prof)
        if not given:
            notes.append("as given by --tp/--pp/--ep")
    return hw, prof, sc, proj, "; ".join(notes)


def render_report(hardware: list, model, scenario, *, baseline=None, calibration=None, argv=None,
                  auto_tp: bool = False) -> str:
    """Project ``scenario`` on each of ``hardware`` (and ``baseline``, shown first) and render the report.

    Each entry of ``hardware`` (and ``baseline``) is a spec name or path, optionally with its own layout
    (``"h100-sxm:tp=2"``, see :func:`parse_part`). Parts without one use the scenario's TP/PP/EP, or with
    ``auto_tp`` the smallest TP that fits (:func:`smallest_fitting_tp`); the report states which.
    ``calibration`` as for ``--calibration`` (None: automatic per part)."""
    from ..resolve import resolve_model

    mdl = resolve_model(model)
    reqs = [parse_part(h) for h in hardware]
    base_req = parse_part(baseline) if baseline is not None else None
    order = ([base_req] if base_req is not None else []) + [r for r in reqs if r != base_req]
    parts = []
    seen = set()
    for i, req in enumerate(order):
        hw, prof, sc, proj, note = resolve_part(req, mdl, scenario, calibration,
                                                auto_tp=auto_tp)
        if (hw.key, sc.tp, sc.pp, sc.ep) in seen:
            continue  # the baseline named again among the parts
        seen.add((hw.key, sc.tp, sc.pp, sc.ep))
        parts.append(Part(hw, prof, proj, charts.PALETTE[len(parts) % len(charts.PALETTE)],
                          baseline=base_req is not None and i == 0, scenario=sc, layout_note=note))
    ctx = build_context(parts, mdl, scenario, argv=argv)
    return environment().get_template("report.html.j2").render(**ctx)


def _engine_name(key: str) -> str:
    from ..engines import ENGINES

    return ENGINES[key].name if key in ENGINES else key


def _energy_text(p) -> str:
    """Energy per output token and average power per GPU (perfmodel.energy), as one phrase."""
    from ..energy import projection_energy

    e = projection_energy(p)
    j, w = e["joules_per_token"]["output"], e["avg_power_w"]
    if j is None or w is None:
        return ""
    return f"{j:.3g} J per output token at {w:,.0f} W per GPU ({e['power_model']})"
