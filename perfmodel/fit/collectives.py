"""Fit collective alpha and bus bandwidth, and the overlap parameters, to the suite's collective and overlap rows
(measured by ``perfmodel.measure.collectives``); predict the measured whole TP layers (``tp_layer`` rows) as the
projection times them, with their all-reduces, as the check."""
from __future__ import annotations

import math
import statistics

import numpy as np

from ..cost.comm import COLLECTIVE_KINDS, bus_factor
from ..cost.overlap import fit_overlap
from ..profile import Profile
from ..projection import evaluate_step
from ..resolve import resolve_scenario
from ..spec import HardwareSpec
from ..step_accounting import Rules, account
from .latency import well_formed
from .layers import layer_model, layer_scenario, layer_step, predict_layer


COMM_SIZE_CLASSES = ((0.0, 64 * 1024, "latency (<= 64 KiB)"), (64 * 1024, 16 * 2**20, "middle"),
                     (16 * 2**20, float("inf"), "bandwidth (> 16 MiB)"))  # by per-rank buffer bytes
MIN_COMM_SIZES = 3  # a collective at one world size measured at fewer sizes keeps the defaults


def comm_rows(rows: list[dict]) -> list[dict]:
    out, seen = [], set()
    for r in rows:
        if not well_formed(r) or r.get("error") or r.get("kind") != "collective" or r["id"] in seen:
            continue
        p = r["params"]
        w, b = p.get("world_size"), p.get("bytes")
        if p.get("op") not in COLLECTIVE_KINDS or not isinstance(w, int) or isinstance(w, bool) or w < 2:
            continue
        if not (isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) and b > 0):
            continue
        seen.add(r["id"])
        out.append(r)
    return out


def fit_collectives(prof: Profile, rows: list[dict], hw: HardwareSpec) -> tuple[Profile, dict]:
    """Alpha and bus bandwidth of every collective at every measured world size (``Profile.comm_alpha_s``,
    ``comm_eta``: bus bandwidth / the spec's scale-up bandwidth), and the overlap parameters
    (``Profile.overlap``, :func:`perfmodel.cost.overlap.fit_overlap`), from the suite's collective and
    overlap rows. Per (collective, world size): time = alpha + bus_bytes / bus_bandwidth, by non-negative
    least squares weighted by 1/time (relative error, so small messages count as much as large ones).
    The report (``provenance["collectives"]``) gives each fit's bus bandwidth, rows and its error per size
    class, the overlap checks, and the error on whole TP layers (``tp_layer`` rows: predicted, never
    fitted). Rows of one backend only: NCCL where there are any (gloo rows are a CPU code-path test)."""
    from scipy.optimize import nnls  # scipy loads only when a fit runs (CLI start-up time)

    all_comms = comm_rows(rows)
    backends = {r["params"].get("backend") for r in all_comms}
    backend = "nccl" if "nccl" in backends else (sorted(b for b in backends if b) or [None])[0]
    comms = [r for r in all_comms if r["params"].get("backend") == backend]
    by_key: dict[str, list[dict]] = {}
    for r in comms:
        by_key.setdefault(f"{r['params']['op']}:{r['params']['world_size']}", []).append(r)
    # beside NCCL, a serving engine's own all-reduce (TensorRT-LLM's one-shot/two-shot kernels, vLLM's and
    # SGLang's custom all-reduce), imported from the engine's tables: fitted as engine_all_reduce, and a
    # projection takes the faster of the two at each size, as the engines' automatic choice does
    if backend == "nccl":
        for r in all_comms:
            b = r["params"].get("backend")
            if b not in ("nccl", "gloo", None) and r["params"]["op"] == "all_reduce":
                by_key.setdefault(f"engine_all_reduce:{r['params']['world_size']}", []).append(r)
    alpha, eta, fits = dict(prof.comm_alpha_s), dict(prof.comm_eta), {}
    for key, rs in sorted(by_key.items()):
        if len({r["params"]["bytes"] for r in rs}) < MIN_COMM_SIZES:
            continue
        op, w = key.split(":")[0], int(key.split(":")[1])
        op = "all_reduce" if op == "engine_all_reduce" else op
        # bus bytes of the per-rank input (all_gather: the gathered output is w times it)
        full = np.array([float(r["params"]["bytes"]) * (w if op == "all_gather" else 1) for r in rs])
        bus = bus_factor(op, w) * full
        t = np.array([float(r["time_s"]) for r in rs])
        a = np.stack([np.ones_like(bus), bus], axis=1) / t[:, None]
        (a0, inv_bw), _ = nnls(a, np.ones_like(t))
        if not (a0 > 0 and inv_bw > 0):
            continue  # a degenerate fit (e.g. all sizes latency-bound): keep the defaults for this key
        bw = 1.0 / inv_bw
        pred = a0 + bus * inv_bw
        err = pred / t - 1.0
        classes = {}
        for lo, hi, name in COMM_SIZE_CLASSES:
            sel = [abs(e) for e, r in zip(err, rs) if lo < float(r["params"]["bytes"]) <= hi]
            if sel:
                classes[name] = {"n": len(sel), "median_abs_error": float(np.median(sel)), "max_abs_error": float(max(sel))}
        alpha[key] = float(a0)
        eta[key] = float(min(bw / hw.scaleup_bandwidth, 2.0))
        fits[key] = {"alpha_s": float(a0), "bus_bw_B_s": float(bw), "eta": eta[key], "rows": len(rs),
                     "median_abs_error": float(np.median(np.abs(err))), "size_classes": classes}
    def multi_rank(r, kind):  # a one-rank smoke test (--worlds 1) measures no communication
        p = r.get("params") if isinstance(r, dict) and r.get("kind") == kind else None
        return (isinstance(p, dict) and isinstance(p.get("world_size"), int) and p["world_size"] >= 2
                and (backend is None or p.get("backend") == backend))

    overlap, overlap_report = fit_overlap([r for r in rows if multi_rank(r, "overlap")])
    if fits or overlap:
        prof = prof.with_(comm_alpha_s=alpha, comm_eta=eta, overlap={**prof.overlap, **overlap})
    tp_rows = [r for r in rows if multi_rank(r, "tp_layer")]
    tp_layers = validate_tp_layers(tp_rows, hw, prof) if tp_rows else {}
    if not (fits or overlap or tp_layers.get("rows")):
        return prof, {}
    # whole TP layers (with their all-reduces) are predicted, never fitted: their error is the check
    return prof, {"backend": backend, "rows": sum(len(v) for v in by_key.values()), "fits": fits, "link_bandwidth_B_s": hw.scaleup_bandwidth,
                  "overlap": overlap_report, "tp_layers": tp_layers}


def predict_tp_layer(params: dict, hw, prof) -> tuple[float, float]:
    """(predicted seconds, of which the two all-reduces) of a measured tp_layer row: the shard as
    :func:`perfmodel.fit.layers.predict_layer` times it, plus the layer's collectives as the projection
    times them, run after their GEMMs (plain PyTorch does not overlap them) and, eagerly, each issued by the
    host (perfmodel.step_accounting: the host floor on collectives)."""
    shard = predict_layer(params, hw, prof)
    sc = layer_scenario(params).with_(tp=int(params["tp"]), overlap=0.0)
    sc = resolve_scenario(sc, hw, None)  # a collective alone: no model
    ph = evaluate_step(layer_model(params), hw, sc, prof, layer_step(params))
    acc = account(ph.times, Rules.of(sc, ph.name, host_floor_collectives=True), prof, hw=hw, world=sc.gpus)
    comm = float(acc.total([s.op.scope == "layer" and s.collective for s in acc.ops]))
    return shard + comm, comm


def validate_tp_layers(rows: list[dict], hw, prof) -> dict:
    """Error of the model on the measured tp_layer rows, per phase: median and max absolute error, and each row."""
    out: dict = {"rows": []}
    for r in rows:
        t = r.get("time_s") if isinstance(r, dict) else None
        if r.get("kind") != "tp_layer" or r.get("error") or not isinstance(t, (int, float)) or not (t > 0 and math.isfinite(t)):
            continue
        try:
            pred, comm = predict_tp_layer(r["params"], hw, prof)
        except (KeyError, TypeError, ValueError):
            continue
        out["rows"].append({"id": r["id"], "phase": r["params"]["phase"], "tp": r["params"]["tp"], "measured_s": float(t),
                            "predicted_s": pred, "predicted_comm_s": comm, "error": pred / float(t) - 1.0})
    for phase in ("prefill", "decode"):
        errs = [abs(x["error"]) for x in out["rows"] if x["phase"] == phase]
        if errs:
            out[phase] = {"n": len(errs), "median_abs_error": statistics.median(errs), "max_abs_error": max(errs)}
    return out
