"""DeepEP's dispatch and combine: constants per direction from an engine's measured tables.

aiconfigurator-core times SGLang's DeepEP kernels (:mod:`perfmodel.imports.aiconfigurator` imports them as rows of
kind ``deepep``): the low-latency ones of decode on one node of each part (``wideep_deepep_ll_perf``: tokens per
rank, hidden size, experts, top-k), the normal ones of prefill on one node of each part and on two to eight Hopper
nodes (``wideep_deepep_normal_perf``). Inside one node each rank sends every routed token-expert pair of its tokens
as a message of its own (low-latency: :func:`perfmodel.graph.deepep_ll_dispatch_bytes` out, ``2 hidden`` back) or a
token once to every rank holding any of its experts (normal), and signals every expert of the model its count, so a
call is

    t = alpha + expert_s * experts + bytes per rank / (eta * scale-up link bandwidth)

fitted per direction by non-negative least squares on relative error (a 16 us call at one token weighs as much as
a 1 ms call at 2,048), with a quarter of the shapes held out by a hash of the shape. Without the per-expert term
the same tables miss more, worst on the 8- and 16-expert rows (docs/tools/deepep_check.py prints both).

Across nodes the normal kernels send a token once to every other node holding any of its experts, over the NIC to
the same-index GPU there, which forwards it over NVLink (:func:`perfmodel.routing.nodes_per_token`), and the
low-latency ones every routed pair bound for another node's rank straight over RDMA; the NIC binds, so a call is

    t = alpha + bytes over the NIC per rank / (eta * scale-out bandwidth per GPU)

fitted per direction and node count (the normal kernels' bandwidth falls from 4 to 8 nodes where the low-latency
ones' holds), and priced between node counts by :func:`perfmodel.cost.comm.deepep_scaleout_fit`.
"""
from __future__ import annotations

import hashlib
import math

import numpy as np
from scipy.optimize import nnls

from ..cost.comm import linked_bytes
from ..profile import Profile
from ..spec import HardwareSpec

DEEPEP_DIRECTIONS = ("ll.dispatch", "ll.combine", "normal.dispatch", "normal.combine")
MNNVL_DIRECTIONS = ("mnnvl.dispatch", "mnnvl.combine")  # TensorRT-LLM's NVLink one-sided all-to-all
DIRECTIONS = DEEPEP_DIRECTIONS + MNNVL_DIRECTIONS
ACROSS_DIRECTIONS = DEEPEP_DIRECTIONS  # the kernels measured across nodes (DeepEP's, on Hopper)
MIN_ROWS = 8  # fewer shapes than this fit nothing (three constants over a spread of sizes)
HOLDOUT = 0.25


def deepep_rows(rows: list[dict], *, across: bool = False) -> list[dict]:
    """The rows a fit can use: one node's calls (``across``: those of several nodes, with their bytes over the
    NIC) with a positive time and positive shape fields."""
    out = []
    for r in rows:
        if not isinstance(r, dict) or r.get("kind") != "deepep" or r.get("error"):
            continue
        p, t = r.get("params") or {}, r.get("time_s")
        nodes = p.get("nodes")
        if not isinstance(nodes, int) or (nodes > 1) != across or nodes < 1:
            continue
        if p.get("direction") not in (ACROSS_DIRECTIONS if across else DIRECTIONS):
            continue
        if across and not (isinstance(p.get("scaleout_bytes"), (int, float)) and p["scaleout_bytes"] > 0):
            continue
        if not (isinstance(t, (int, float)) and math.isfinite(t) and t > 0):
            continue
        if all(isinstance(p.get(k), (int, float)) and p[k] > 0 for k in ("bytes", "experts", "tokens")):
            out.append(r)
    return out


def _held_out(r: dict) -> bool:
    p = r["params"]
    key = f"{p['direction']}:{p['hidden']}:{p['tokens']}:{p['top_k']}:{p['experts']}".encode()
    if p["nodes"] > 1:  # (one node's keys as they were)
        key += f":{p['nodes']}".encode()
    return int(hashlib.sha256(key).hexdigest()[:8], 16) / 0xFFFFFFFF < HOLDOUT


def _design(rows: list[dict], link_bw: float) -> tuple[np.ndarray, np.ndarray]:
    t = np.array([r["time_s"] for r in rows], dtype=float)
    a = np.c_[np.ones(len(rows)), [r["params"]["experts"] for r in rows],
              [linked_bytes(r["params"]["direction"], r["params"]["bytes"], r["params"].get("ranks", 8)) / link_bw
               for r in rows]]
    return a, t


MAX_ETA = 1.0  # a call moves its bytes at most at the link's bandwidth


def solve(rows: list[dict], link_bw: float) -> tuple[float, float, float] | None:
    """(alpha s, s per expert, eta) of one direction's rows, or None with too few or a degenerate fit. Rows of
    one expert count fit no per-expert time (it would be their fixed time under another name). Where the best fit
    moves the bytes faster than the link (calls flat in their bytes: TensorRT-LLM's low-latency dispatch holds
    70-78 us from 1 to 96 tokens on the H200), the bandwidth is the link's and the rest refitted: the best fit
    within that bound lies on it (the problem is convex)."""
    if len(rows) < MIN_ROWS:
        return None
    a, t = _design(rows, link_bw)
    if len({r["params"]["experts"] for r in rows}) == 1:
        a[:, 1] = 0.0
    w = a / t[:, None]
    x, _ = nnls(w, np.ones(len(t)))
    if x[2] <= 0:  # no bandwidth term: the rows do not grow with the bytes
        return None
    if x[2] < 1.0 / MAX_ETA:
        x2 = 1.0 / MAX_ETA
        x01, _ = nnls(w[:, :2], 1.0 - w[:, 2] * x2)
        x = np.array([x01[0], x01[1], x2])
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


def _across_design(rows: list[dict], nic_bw: float) -> tuple[np.ndarray, np.ndarray]:
    t = np.array([r["time_s"] for r in rows], dtype=float)
    return np.c_[np.ones(len(rows)), [r["params"]["scaleout_bytes"] / nic_bw for r in rows]], t


def solve_across(rows: list[dict], nic_bw: float) -> tuple[float, float] | None:
    """(alpha s, eta over the NIC) of one direction's calls at one node count, or None."""
    if len(rows) < MIN_ROWS:
        return None
    a, t = _across_design(rows, nic_bw)
    x, _ = nnls(a / t[:, None], np.ones(len(t)))
    if x[1] <= 0:
        return None
    return float(x[0]), float(1.0 / x[1])


def _across_errors(rows: list[dict], fit: tuple[float, float], nic_bw: float) -> dict:
    if not rows:
        return {"n": 0}
    a, t = _across_design(rows, nic_bw)
    e = np.abs(a @ np.array([fit[0], 1.0 / fit[1]]) / t - 1.0)
    return {"n": len(rows), "median_abs_error": float(np.median(e)), "p90_abs_error": float(np.quantile(e, 0.9))}


def fit_across(rows: list[dict], hw: HardwareSpec) -> tuple[dict, dict, dict]:
    """(alpha s, eta, report) keyed "<direction>:<nodes>" from the calls across nodes in ``rows``."""
    usable = deepep_rows(rows, across=True)
    nic_bw = hw.scaleout_bandwidth
    alpha, eta, report = {}, {}, {}
    for key in sorted({f"{r['params']['direction']}:{r['params']['nodes']}" for r in usable},
                      key=lambda k: (k.rpartition(":")[0], int(k.rpartition(":")[2]))):
        direction, _, nodes = key.rpartition(":")
        mine = [r for r in usable if r["params"]["direction"] == direction and r["params"]["nodes"] == int(nodes)]
        train = [r for r in mine if not _held_out(r)]
        held = [r for r in mine if _held_out(r)]
        fit = solve_across(train, nic_bw)
        if fit is None:
            continue
        alpha[key], eta[key] = fit
        report[key] = {"alpha_s": fit[0], "eta": fit[1], "bandwidth_gbs": fit[1] * nic_bw / 1e9,
                       "train": _across_errors(train, fit, nic_bw), "held_out": _across_errors(held, fit, nic_bw),
                       "sources": sorted({str(r.get("source", "")) for r in mine})}
    return alpha, eta, report


def fit_keys(rows: list[dict]) -> dict[int, str]:
    """Each row's fit (by ``id``): its direction, or ``direction@format`` where the rows time that direction with
    payloads of several formats (TensorRT-LLM's tables: bf16, fp8 and NVFP4 calls, which one bandwidth does not
    price: its NVFP4 dispatch takes 0.56 of the bf16 one's time for 0.28 of the bytes). An engine whose tables time
    one format (SGLang's, vLLM's) keeps one fit a direction."""
    formats: dict[str, set] = {}
    for r in rows:
        formats.setdefault(r["params"]["direction"], set()).add(r["params"].get("format"))
    return {id(r): (f"{r['params']['direction']}@{r['params']['format']}"
                    if len(formats[r["params"]["direction"]]) > 1 and r["params"].get("format")
                    else r["params"]["direction"]) for r in rows}


def fit_deepep(prof: Profile, rows: list[dict], hw: HardwareSpec) -> tuple[Profile, dict | None]:
    """The profile with ``deepep_*`` fitted from ``rows`` where they hold a direction's calls (else unchanged),
    and the fit's report (None without any): one node's per direction, across nodes per direction and node count
    (under ``"across"``)."""
    usable = deepep_rows(rows)
    link_bw = hw.scaleup_bandwidth
    alpha, expert, eta, report = {}, {}, {}, {}
    keys = fit_keys(usable)
    for key in sorted(set(keys.values()), key=lambda k: (DIRECTIONS.index(k.partition("@")[0]), k)):
        mine = [r for r in usable if keys[id(r)] == key]
        train = [r for r in mine if not _held_out(r)]
        held = [r for r in mine if _held_out(r)]
        fit = solve(train, link_bw)
        if fit is None:
            continue
        alpha[key], expert[key], eta[key] = fit
        report[key] = {"alpha_s": fit[0], "expert_s": fit[1], "eta": fit[2],
                             "bandwidth_gbs": fit[2] * link_bw / 1e9,
                             "train": _errors(train, fit, link_bw), "held_out": _errors(held, fit, link_bw),
                             "sources": sorted({str(r.get("source", "")) for r in mine})}
    across_alpha, across_eta, across = fit_across(rows, hw)
    if across:
        report["across"] = across
    if not report:
        return prof, None
    return prof.with_(deepep_alpha_s=alpha, deepep_expert_s=expert, deepep_eta=eta,
                      deepep_scaleout_alpha_s=across_alpha, deepep_scaleout_eta=across_eta), report


SECTION = "## DeepEP dispatch and combine"
OLD_SECTIONS = ("## DeepEP low-latency dispatch and combine",)  # earlier titles a refit replaces


def section(report: dict) -> str:
    """The fit's section of a folder's validation.md (its last)."""
    return f"\n{SECTION}\n\n" + report_text(report)


def report_text(report: dict) -> str:
    lines = ["| direction | fixed (us) | per expert (ns) | bandwidth (GB/s) | shapes fitted | median / P90 abs error "
             "| shapes held out | median / P90 abs error |", "|---|---|---|---|---|---|---|---|"]
    one_node = {k: v for k, v in report.items() if k != "across"}
    for direction, f in one_node.items():
        tr, ho = f["train"], f["held_out"]
        held = (f"{ho['median_abs_error']:.1%} / {ho['p90_abs_error']:.1%}" if ho["n"] else "")
        lines.append(f"| {direction} | {f['alpha_s'] * 1e6:.1f} | {f['expert_s'] * 1e9:.1f} | "
                     f"{f['bandwidth_gbs']:.0f} | {tr['n']} | {tr['median_abs_error']:.1%} / "
                     f"{tr['p90_abs_error']:.1%} | {ho['n']} | {held} |")
    sources = sorted({s for f in one_node.values() for s in f["sources"]})
    text = "\n".join(lines) + f"\n\nFrom {', '.join(sources)} (one node; perfmodel.fit.deepep).\n"
    across = report.get("across") or {}
    if across:
        rows = ["| direction | nodes | fixed (us) | bandwidth over the NIC (GB/s) | shapes fitted | median / P90 abs "
                "error | shapes held out | median / P90 abs error |", "|---|---|---|---|---|---|---|---|"]
        for key, f in across.items():
            direction, _, nodes = key.rpartition(":")
            tr, ho = f["train"], f["held_out"]
            held = (f"{ho['median_abs_error']:.1%} / {ho['p90_abs_error']:.1%}" if ho["n"] else "")
            rows.append(f"| {direction} | {nodes} | {f['alpha_s'] * 1e6:.1f} | {f['bandwidth_gbs']:.1f} | {tr['n']} | "
                        f"{tr['median_abs_error']:.1%} / {tr['p90_abs_error']:.1%} | {ho['n']} | {held} |")
        srcs = sorted({s for f in across.values() for s in f["sources"]})
        text += ("\nAcross nodes, on the bytes each rank sends over its NIC (normal: a token once per remote node; "
                 "low-latency: every routed pair bound for another node's rank):\n\n" + "\n".join(rows)
                 + f"\n\nFrom {', '.join(srcs)} (perfmodel.fit.deepep).\n")
    return text

