"""Sensitivity: how much TPOT and throughput move when each hardware figure moves by +-20%.

Each numeric figure in :data:`perfmodel.spec.SPEC_FIELDS` that the part has is scaled with
:func:`perfmodel.spec.spec_with` and the scenario re-projected (with ``--batch max`` the largest batch
is found again, so HBM capacity matters through it). Figures that move nothing in this scenario are
listed as such; the scale-up domain (a GPU count that decides the collective algorithm) is not scaled.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InputError
from ..spec import SPEC_FIELDS, spec_value, spec_with

EPS = 1e-6  # relative change below this counts as none


@dataclass
class SensRow:
    attr: str
    label: str
    base: float
    low: float
    high: float
    tpot: tuple  # % change at low, at high (None where it does not fit)
    throughput: tuple
    ttft: tuple
    note: str = ""


@dataclass
class Sensitivity:
    rows: list[SensRow] = field(default_factory=list)  # figures that move something, largest effect first
    unmoved: list[str] = field(default_factory=list)  # labels of figures that move nothing
    skipped: list[str] = field(default_factory=list)  # (label: reason)
    step: float = 0.2


def _pct(new, base):
    if new is None or base == 0:
        return None
    return (new / base - 1.0) * 100.0


def sensitivity(hw, model, sc, prof, *, step: float = 0.2, base=None) -> Sensitivity:
    from ..projection import project_resolved
    from ..resolve import resolve_scenario

    sc = resolve_scenario(sc, hw, model)  # the scenario as asked (a report part's) or resolved
    base = base or project_resolved(hw, model, sc, prof)
    out = Sensitivity(step=step)
    for f in SPEC_FIELDS:
        v = spec_value(hw, f.attr)
        if v is None:
            continue
        if f.attr == "scaleup_domain":
            out.skipped.append(f"{f.label}: a GPU count that picks the collective algorithm; not scaled")
            continue
        res = {}
        vals = {}
        for side, k in (("low", 1.0 - step), ("high", 1.0 + step)):
            nv = v * k
            if f.dimension == "count":
                nv = float(max(1, round(nv)))
            vals[side] = nv
            try:
                p = project_resolved(spec_with(hw, **{f.attr: nv}), model, sc, prof)
                res[side] = p
            except InputError:
                res[side] = None  # does not fit any more
        def ch(metric):
            return tuple(_pct(getattr(res[s], metric) if res[s] is not None else None, getattr(base, metric))
                         for s in ("low", "high"))
        tpot, thr, ttft = ch("tpot_s"), ch("throughput_tok_s"), ch("ttft_s")
        moved = [abs(x) for x in (*tpot, *thr, *ttft) if x is not None]
        misfit = any(r is None for r in res.values())
        if not misfit and (not moved or max(moved) < EPS * 100):
            out.unmoved.append(f.label)
            continue
        note = "does not fit at -20%" if res["low"] is None else ""
        out.rows.append(SensRow(f.attr, f.label, v, vals["low"], vals["high"], tpot, thr, ttft, note))
    out.rows.sort(key=lambda r: -max([abs(x) for x in (*r.throughput, *r.tpot) if x is not None] + [0.0]))
    return out
