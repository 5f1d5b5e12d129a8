"""Fitting the power model to the calibration suite's ``power`` rows, and validating the held-out ones.

A ``power`` row (one JSON object a line of measurements.jsonl) is a sustained loop of one workload with
NVML's energy counter read around it: ``params.workload`` is idle, gemm, copy, attention or layer (with the
shape parameters of that workload), ``energy_j`` the joules over ``duration_s`` seconds of ``iterations``
back-to-back runs, ``flops`` and ``bytes`` one run's work, ``power_limit_w`` the enforced limit.

The fit, on the rows not ``held_out`` (gemm, copy, attention; idle rows give ``idle_w``):

    energy per run = static_w * t + min(sum_f j_per_flop[f] * FLOPs_f + j_per_byte * bytes,
                                        (power_limit_w - static_w) * t),   t = duration_s / iterations

by least squares on relative errors, in log space (the parameters stay positive), with a weak prior at the
documented values (:data:`PRIOR_WEIGHT`; static power's prior is the idle rows' power). A row at the power
limit ran at a throttled clock: it says only that its work needs at least the limit, so it bounds the
energy per FLOP from below and the prior does the rest; the report says which parameters the rows
constrained.

Held-out rows (whole decoder layers, prefill and decode) are predicted two ways: with their measured time
(the power model alone) and with the latency model's time (what a projection would say, end to end).
"""
from __future__ import annotations

import math

import numpy as np

from ..energy.model import default_power, flop_energy, op_energy
from ..errors import InputError
from ..graph import Step
from ..ops import COMM_KINDS, COMPUTE_KINDS
from ..projection import evaluate_step
from ..resolve import resolve_scenario
from ..scenario import Scenario
from .layers import layer_model, predict_layer

AT_LIMIT = 0.97  # a row at or above this share of its power limit is counted as power-capped (report only)
# weight of the prior (documented values, static power at the idle row's) against relative errors of rows:
# a parameter moves a factor e from its prior when that buys 2% on one row; parameters the rows cannot
# tell apart (every row at the limit says only "at least this much") stay near the prior
PRIOR_WEIGHT = 0.02
ACTIVE_WORKLOADS = ("gemm", "copy", "attention")
WORKLOADS = ("idle",) + ACTIVE_WORKLOADS + ("layer",)


class _Row:
    """One usable power row: its work (FLOPs by format, bytes), time per run and measured energy per run."""

    def __init__(self, r: dict, flops: dict[str, float], nbytes: float, layer=None):
        self.id = str(r.get("id"))
        self.params = r["params"]
        self.workload = r["params"]["workload"]
        self.held_out = bool(r["params"].get("held_out", False) or r.get("held_out", False))
        it = float(r["iterations"])
        self.t = float(r["duration_s"]) / it
        self.energy = float(r["energy_j"]) / it
        self.power = float(r["energy_j"]) / float(r["duration_s"])
        self.limit = float(r.get("power_limit_w") or 0.0)
        self.flops = flops
        self.bytes = nbytes
        self.layer = layer  # (model times of the layer's ops, its ops) for layer rows


def _finite_positive(r: dict, key: str) -> bool:
    v = r.get(key)
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _layer_parts(params: dict, hw, prof):
    """A measured decoder layer's timed ops (one TP shard, no collectives), as the latency model builds it."""
    dtype = params.get("dtype", "bf16")
    sc = Scenario(tp=int(params.get("tp", 1)), dtype=dtype, act_dtype=dtype, kv_dtype=dtype,
                  launch="graph" if params.get("graph") else "eager", kernels="torch")
    sc = resolve_scenario(sc, hw, None)  # kernels alone: no model
    if params["phase"] == "prefill":
        step = Step("prefill", int(params["batch"]), int(params["seq"]), 0)
    else:
        step = Step("decode", int(params["batch"]), 1, int(params["context"]))
    phase = evaluate_step(layer_model(params), hw, sc, prof, step)
    return [t for t in phase.times if t.op.scope == "layer" and t.op.kind not in COMM_KINDS]


def _work(times) -> tuple[dict[str, float], float]:
    flops: dict[str, float] = {}
    nbytes = 0.0
    for t in times:
        op = t.op
        nbytes += float(op.bytes) * op.count
        if op.kind in COMPUTE_KINDS:
            f = op.params["dtype"]
            flops[f] = flops.get(f, 0.0) + float(op.flops) * op.count
    return flops, nbytes


def parse_rows(rows: list[dict], hw, prof) -> tuple[list[_Row], list[float], dict[str, int]]:
    """(active rows, idle powers, skipped counts by reason) from measurements.jsonl rows."""
    active: list[_Row] = []
    idle: list[float] = []
    skipped: dict[str, int] = {}

    def skip(reason):
        skipped[reason] = skipped.get(reason, 0) + 1

    for r in rows:
        if r.get("kind") != "power":
            continue
        params = r.get("params") or {}
        w = params.get("workload")
        if r.get("error"):
            skip("error")
            continue
        if w not in WORKLOADS:
            skip(f"unknown workload {w!r}")
            continue
        if not all(_finite_positive(r, k) for k in ("energy_j", "duration_s")):
            skip("energy_j or duration_s missing or not positive")
            continue
        if w == "idle":
            idle.append(float(r["energy_j"]) / float(r["duration_s"]))
            continue
        if not _finite_positive(r, "iterations"):
            skip("iterations missing or not positive")
            continue
        try:
            if w == "layer":
                times = _layer_parts(params, hw, prof)
                flops, nbytes = _work(times)
                active.append(_Row(r, flops, nbytes, layer=times))
                continue
            nbytes = float(r.get("bytes") or 0.0)
            flops = {}
            if w in ("gemm", "attention"):
                flops[str(params.get("dtype", "bf16"))] = float(r.get("flops") or 0.0)
            active.append(_Row(r, flops, nbytes))
        except (KeyError, TypeError, ValueError, InputError):
            skip(f"{w} row with incomplete params")
    return active, idle, skipped


def row_energy(row: _Row, params: dict, limit_w: float, time_s: float | None = None) -> float:
    """Predicted joules of one run of a row's workload, with its measured time (or ``time_s``), the power
    limit held over the run (as :mod:`.model` holds it over a step)."""
    t = row.t if time_s is None else time_s
    headroom = max((row.limit or limit_w) - params["static_w"], 0.0)
    if row.layer is not None:
        dyn = sum(float(op_energy(x.op, params)) * x.op.count for x in row.layer)
    else:
        dyn = params["j_per_byte"] * row.bytes + sum(flop_energy(params, f) * v for f, v in row.flops.items())
    return params["static_w"] * t + min(dyn, headroom * t)


def _predict(rows: list[_Row], static_w: float, j_byte: float, j_flop: dict, limit_w: float) -> np.ndarray:
    """Energy per run of non-layer rows: static_w * t + min(dynamic, (limit - static_w) * t)."""
    out = np.empty(len(rows))
    for i, r in enumerate(rows):
        dyn = j_byte * r.bytes + sum(j_flop[f] * v for f, v in r.flops.items())
        cap = (r.limit or limit_w) - static_w
        out[i] = static_w * r.t + min(dyn, max(cap, 0.0) * r.t)
    return out


def fit_power(prof, rows: list[dict], hw) -> tuple:
    """Fit ``prof.power`` from the suite's ``power`` rows (module doc). Returns (profile with the fitted
    parameters and ``validation["power"]``, the report)."""
    from scipy.optimize import least_squares

    active, idle, skipped = parse_rows(rows, hw, prof)
    train = [r for r in active if not r.held_out and r.workload in ACTIVE_WORKLOADS]
    held = [r for r in active if r.held_out or r.workload == "layer"]
    if not train:
        raise InputError("no usable power rows to fit (expected idle, gemm, copy and attention workloads)",
                         field="power rows")
    limits = [r.limit for r in active if r.limit > 0]
    measured_limit = float(np.median(limits)) if limits else float(hw.tdp_w)
    prior = default_power(hw)
    idle_w = float(np.median(idle)) if idle else prior["idle_w"]
    formats = sorted({f for r in train for f, v in r.flops.items() if v > 0})
    names = ["static_w", "j_per_byte"] + [f"j_per_flop.{f}" for f in formats]
    x0 = np.array([idle_w if idle else prior["static_w"], prior["j_per_byte"]]
                  + [flop_energy(prior, f) for f in formats])
    meas = np.array([r.energy for r in train])

    def unpack(u):
        x = x0 * np.exp(u)
        return x[0], x[1], dict(zip(formats, x[2:]))

    def residuals(u):
        s, b, f = unpack(u)
        data = _predict(train, s, b, f, measured_limit) / meas - 1.0
        return np.concatenate([data, PRIOR_WEIGHT * u])

    sol = least_squares(residuals, np.zeros(len(x0)), method="trf", x_scale=1.0)
    static_w, j_byte, j_flop = unpack(sol.x)
    jac = sol.jac[: len(train)]
    constrained = {n: bool(np.linalg.norm(jac[:, i]) > PRIOR_WEIGHT) for i, n in enumerate(names)}
    params = {"idle_w": idle_w, "static_w": float(static_w), "j_per_byte": float(j_byte),
              "j_per_flop": {f: float(v) for f, v in j_flop.items()}, "tdp_w": float(hw.tdp_w),
              "limit_w_measured": measured_limit, "fitted": 1.0}
    full = {**prior, **params, "j_per_flop": {**prior["j_per_flop"], **params["j_per_flop"]}}
    pred = _predict(train, static_w, j_byte, full["j_per_flop"], measured_limit)
    report = {
        "rows": {"fitted": len(train), "held_out": len(held), "idle": len(idle), "skipped": skipped,
                 "at_limit": int(sum(r.power >= AT_LIMIT * (r.limit or measured_limit) for r in train))},
        "parameters": params, "prior": {n: float(v) for n, v in zip(names, x0)},
        "constrained_by_data": constrained,
        "train": _errors(pred, meas),
        "train_rows": [{"id": r.id, "measured_j": r.energy, "predicted_j": float(p), "error": float(p / r.energy - 1),
                        "measured_w": r.power} for r, p in zip(train, pred)],
    }
    report.update(_validate_held_out(held, full, measured_limit, hw, prof))
    new = prof.with_(power=params, validation={**(prof.validation or {}), "power": _summary(report)})
    return new, report


def _errors(pred, meas) -> dict:
    if not len(meas):
        return {"n": 0}
    err = np.asarray(pred, dtype=float) / np.asarray(meas, dtype=float) - 1.0
    return {"n": int(err.size), "median_abs_error": float(np.median(np.abs(err))),
            "p90_abs_error": float(np.percentile(np.abs(err), 90)), "median_error": float(np.median(err))}


def _validate_held_out(held: list[_Row], params: dict, limit_w: float, hw, prof) -> dict:
    """Held-out rows: with the measured time, and end to end with the latency model's time."""

    rows = []
    for r in held:
        given = row_energy(r, params, limit_w)
        entry = {"id": r.id, "measured_j": r.energy, "predicted_j": given, "error": given / r.energy - 1.0,
                 "measured_w": r.power, "measured_s": r.t}
        if r.layer is not None:
            try:
                t_model = predict_layer(r.params, hw, prof)
            except (KeyError, ValueError, InputError):
                t_model = None
            if t_model:
                e2e = row_energy(r, params, limit_w, time_s=t_model)
                entry.update({"predicted_s": t_model, "predicted_end_to_end_j": e2e,
                              "error_end_to_end": e2e / r.energy - 1.0})
        rows.append(entry)
    out = {"held_out": _errors([x["predicted_j"] for x in rows], [x["measured_j"] for x in rows]),
           "held_out_rows": rows}
    e2e = [x for x in rows if "predicted_end_to_end_j" in x]
    out["held_out_end_to_end"] = _errors([x["predicted_end_to_end_j"] for x in e2e], [x["measured_j"] for x in e2e])
    return out


def _summary(report: dict) -> dict:
    return {k: report[k] for k in ("rows", "train", "held_out", "held_out_end_to_end") if k in report}


def report_text(report: dict) -> str:
    """The fit as a short text table: parameters, then every row measured against predicted."""
    p = report["parameters"]
    lines = [f"idle {p['idle_w']:.1f} W, static {p['static_w']:.1f} W, {p['j_per_byte'] * 1e12:.1f} pJ/byte, "
             + ", ".join(f"{f} {v * 1e12:.3f} pJ/FLOP" for f, v in p["j_per_flop"].items())
             + f"; limit {p['limit_w_measured']:.0f} W"]
    for split in ("train", "held_out", "held_out_end_to_end"):
        s = report.get(split) or {}
        if s.get("n"):
            lines.append(f"{split}: {s['n']} rows, median |error| {100 * s['median_abs_error']:.1f}%, "
                         f"P90 {100 * s['p90_abs_error']:.1f}%")
    lines.append(f"{'row':<96} {'W':>5} {'meas. J':>9} {'pred. J':>9} {'error':>7} {'end-to-end':>10}")
    for r in report.get("train_rows", []) + report.get("held_out_rows", []):
        e2e = f"{100 * r['error_end_to_end']:+.1f}%" if "error_end_to_end" in r else ""
        lines.append(f"{r['id'][:96]:<96} {r['measured_w']:>5.0f} {r['measured_j']:>9.4g} {r['predicted_j']:>9.4g} "
                     f"{100 * r['error']:>+6.1f}% {e2e:>10}")
    return "\n".join(lines)
