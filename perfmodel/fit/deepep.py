"""DeepEP's low-latency dispatch and combine: three constants per direction from an engine's measured tables.

aiconfigurator-core times SGLang's DeepEP low-latency kernels on one node of each part
(``wideep_deepep_ll_perf``: tokens per rank, hidden size, experts, top-k; :mod:`perfmodel.imports.aiconfigurator`
imports them as rows of kind ``deepep``). Each rank sends every routed token-expert pair of its tokens as a message
of its own (:func:`perfmodel.graph.deepep_ll_dispatch_bytes` out, ``2 hidden`` back), and signals every expert of
the model its count, so a call is

    t = alpha + expert_s * experts + bytes per rank / (eta * scale-up link bandwidth)

fitted per direction by non-negative least squares on relative error (a 16 us call at one token weighs as much as
a 1 ms call at 2,048), with a quarter of the shapes held out by a hash of the shape. Without the per-expert term
the same tables miss more, worst on the 8- and 16-expert rows (docs/tools/deepep_check.py prints both).
Only one node's rows are fitted (``node_num`` 1, inside the NVLink domain); across nodes the collective model
prices the exchange (:func:`perfmodel.cost.comm.collective_time`).
"""
from __future__ import annotations

import hashlib
import math

import numpy as np
from scipy.optimize import nnls

from ..profile import Profile
from ..spec import HardwareSpec

DIRECTIONS = ("ll.dispatch", "ll.combine")
MIN_ROWS = 8  # fewer shapes than this fit nothing (three constants over a spread of sizes)
HOLDOUT = 0.25


def deepep_rows(rows: list[dict]) -> list[dict]:
    """The rows a fit can use: one node's low-latency calls with a positive time and positive shape fields."""
    out = []
    for r in rows:
        if not isinstance(r, dict) or r.get("kind") != "deepep" or r.get("error"):
            continue
        p, t = r.get("params") or {}, r.get("time_s")
        if p.get("direction") not in DIRECTIONS or p.get("nodes") != 1:
            continue
        if not (isinstance(t, (int, float)) and math.isfinite(t) and t > 0):
            continue
        if all(isinstance(p.get(k), (int, float)) and p[k] > 0 for k in ("bytes", "experts", "tokens")):
            out.append(r)
    return out


def _held_out(r: dict) -> bool:
    p = r["params"]
    key = f"{p['direction']}:{p['hidden']}:{p['tokens']}:{p['top_k']}:{p['experts']}".encode()
    return int(hashlib.sha256(key).hexdigest()[:8], 16) / 0xFFFFFFFF < HOLDOUT


def _design(rows: list[dict], link_bw: float) -> tuple[np.ndarray, np.ndarray]:
    t = np.array([r["time_s"] for r in rows], dtype=float)
    a = np.c_[np.ones(len(rows)), [r["params"]["experts"] for r in rows],
              [r["params"]["bytes"] / link_bw for r in rows]]
    return a, t


def solve(rows: list[dict], link_bw: float) -> tuple[float, float, float] | None:
    """(alpha s, s per expert, eta) of one direction's rows, or None with too few or a degenerate fit."""
    if len(rows) < MIN_ROWS:
        return None
    a, t = _design(rows, link_bw)
    x, _ = nnls(a / t[:, None], np.ones(len(t)))
    if x[2] <= 0:  # no bandwidth term: the rows do not grow with the bytes
        return None
    return float(x[0]), float(x[1]), float(1.0 / x[2])


def predict(rows: list[dict], alpha: float, per_expert: float, eta: float, link_bw: float) -> np.ndarray:
    a, _ = _design(rows, link_bw)
    return a @ np.array([alpha, per_expert, 1.0 / eta])


def _errors(rows: list[dict], fit: tuple[float, float, float], link_bw: float) -> dict:
    if not rows:
        return {"n": 0}
    t = np.array([r["time_s"] for r in rows])
    e = np.abs(predict(rows, *fit, link_bw) / t - 1.0)
    return {"n": len(rows), "median_abs_error": float(np.median(e)), "p90_abs_error": float(np.quantile(e, 0.9))}


def fit_deepep(prof: Profile, rows: list[dict], hw: HardwareSpec) -> tuple[Profile, dict | None]:
    """The profile with ``deepep_*`` fitted from ``rows`` where they hold a direction's calls (else unchanged),
    and the fit's report (None without any)."""
    usable = deepep_rows(rows)
    link_bw = hw.scaleup_bandwidth
    alpha, expert, eta, report = {}, {}, {}, {}
    for direction in DIRECTIONS:
        mine = [r for r in usable if r["params"]["direction"] == direction]
        train = [r for r in mine if not _held_out(r)]
        held = [r for r in mine if _held_out(r)]
        fit = solve(train, link_bw)
        if fit is None:
            continue
        alpha[direction], expert[direction], eta[direction] = fit
        report[direction] = {"alpha_s": fit[0], "expert_s": fit[1], "eta": fit[2],
                             "bandwidth_gbs": fit[2] * link_bw / 1e9,
                             "train": _errors(train, fit, link_bw), "held_out": _errors(held, fit, link_bw),
                             "sources": sorted({str(r.get("source", "")) for r in mine})}
    if not report:
        return prof, None
    return prof.with_(deepep_alpha_s=alpha, deepep_expert_s=expert, deepep_eta=eta), report


SECTION = "## DeepEP low-latency dispatch and combine"


def section(report: dict) -> str:
    """The fit's section of a folder's validation.md (its last)."""
    return f"\n{SECTION}\n\n" + report_text(report)


def report_text(report: dict) -> str:
    lines = ["| direction | fixed (us) | per expert (ns) | bandwidth (GB/s) | shapes fitted | median / P90 abs error "
             "| shapes held out | median / P90 abs error |", "|---|---|---|---|---|---|---|---|"]
    for direction, f in report.items():
        tr, ho = f["train"], f["held_out"]
        held = (f"{ho['median_abs_error']:.1%} / {ho['p90_abs_error']:.1%}" if ho["n"] else "")
        lines.append(f"| {direction} | {f['alpha_s'] * 1e6:.1f} | {f['expert_s'] * 1e9:.1f} | "
                     f"{f['bandwidth_gbs']:.0f} | {tr['n']} | {tr['median_abs_error']:.1%} / "
                     f"{tr['p90_abs_error']:.1%} | {ho['n']} | {held} |")
    sources = sorted({s for f in report.values() for s in f["sources"]})
    return "\n".join(lines) + f"\n\nFrom {', '.join(sources)} (one node; perfmodel.fit.deepep).\n"

