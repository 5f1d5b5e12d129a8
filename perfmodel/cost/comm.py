"""Collectives: an alpha-beta model over the scale-up domain and the scale-out network.

Ring algorithms over p ranks: all-reduce takes 2(p-1) steps moving 2(p-1)/p of the buffer per rank;
all-gather, reduce-scatter and all-to-all take p-1 steps moving (p-1)/p; point-to-point one step. A
group that fits in one scale-up (NVLink) domain uses its per-direction bandwidth; a larger group runs
hierarchically: the part inside each domain over NVLink, the part across domains over the scale-out
network with 1/domain of the bytes per rank. ``eta`` is the fraction of link bandwidth achieved (NCCL's
bus bandwidth), ``alpha`` the latency of one step, plus a fixed launch cost.

How much of a collective hides under compute is a scenario assumption (``Scenario.overlap``), applied by
the projection, not here.
"""
from __future__ import annotations

from ..profile import Profile

_STEPS = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}


def _ring(kind: str, nbytes, p, bw, alpha):
    if kind == "p2p":
        return alpha + nbytes / bw
    f = _STEPS[kind]
    return f * (p - 1.0) * alpha + f * (p - 1.0) / p * nbytes / bw


def collective_time(kind: str, nbytes, group, world, hw, prof: Profile, *, sol: bool = False):
    """Time of one collective; ``group`` ranks take part, ``world`` GPUs make up the model replica."""
    domain = hw.scaleup_domain
    up_bw = hw.scaleup_bandwidth * (1.0 if sol else prof.scaleup_eta)
    out_bw = hw.scaleout_bandwidth * (1.0 if sol else prof.scaleout_eta)
    up_a = 0.0 if sol else prof.scaleup_alpha_s
    out_a = 0.0 if sol else prof.scaleout_alpha_s
    base = 0.0 if sol else prof.comm_base_s
    if kind == "p2p":
        crosses = world > domain
        bw, a = (out_bw, out_a) if crosses else (up_bw, up_a)
        return base + _ring("p2p", nbytes, 2, bw, a)
    if group <= 1:
        return 0.0 * nbytes
    if group <= domain:
        return base + _ring(kind, nbytes, group, up_bw, up_a)
    inner = domain
    outer = group / domain
    t_inner = _ring(kind, nbytes, inner, up_bw, up_a)
    t_outer = _ring(kind, nbytes / inner, outer, out_bw, out_a)
    return base + t_inner + t_outer
