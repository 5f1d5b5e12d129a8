"""Fit the training factors (``Profile.training``) to the suite's ``train_kernel`` rows; validate on ``train_step``.

Each factor is the median ratio of measured time to the inference cost model's time for the same work, so
the fitted profile's own GEMM, attention and memory-kernel parameters stay the base and the training rows
only say how training kernels differ (:mod:`perfmodel.train.cost` has what each factor means):

- ``gemm_dgrad_scale`` / ``gemm_wgrad_scale``: per forward shape, (measured / model) of the backward GEMM
  (the model timing the product the backward computes, standalone as the suite times it) over
  (measured / model) of the forward ``F.linear`` of the same shape: how the backward layouts differ from the
  forward's, leaving the inference GEMM model's own error on these shapes (reported as a check) to it;
- ``attn_bwd_ratio[backend]``: measured backward over measured forward of the same inputs on the backend
  that ran (``backend_ran``, read from the autograd node: a plain-dispatch row counts for the backend it
  dispatched to; a math fallback is not used); the projection multiplies the model's forward time by it;
- ``mem_bwd_scale[rmsnorm|swiglu]``: measured over the model's time for the backward's bytes;
- ``loss_scale``: measured cross-entropy forward + backward over the model's loss ops;
- ``adamw_eta`` and ``adamw_alpha_s``: least squares of ``t = alpha + bytes / (eta x bandwidth)`` over sizes;
- ``grouped_gemm_eta`` / ``grouped_gemm_rows0`` (``<format>.<pass>``): from the ``grouped_gemm`` rows of a
  folder's ``grouped-gemm/`` measurement (:mod:`perfmodel.measure.grouped_gemm`: forward, data and weight gradient
  of MoE expert products over 4 to 128 local experts), the grouped kernel's rate relative to the dense GEMM
  model's and the rows of work each expert pays on top of its own (:func:`fit_grouped`), each row priced as the
  training graph builds it.

Ratios are medians of log ratios (robust to one bad row). ``train_step`` rows are never fitted: each is
predicted by :func:`perfmodel.train.project.microbatch_time` with the fitted profile and compared.
With no training rows, :data:`perfmodel.train.cost.TRAIN_DEFAULTS` apply (each an estimate with its reason).
The fit reads training's step accounting (``train.scenario``, ``graph``, ``cost``, ``project``: layers 2 to 5 of
docs/developing.md), never its workflows (``search``, ``validate``, ...): tests/test_architecture.py holds it so.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..models import Model
from ..ops import Op, bytes_per_element
from ..ops import attention as attention_op
from ..ops import gemm as gemm_op
from ..ops import rmsnorm as rmsnorm_op
from ..ops import swiglu as swiglu_op
from ..profile import MAX_ETA, Profile
from ..spec import HardwareSpec
from ..train.cost import TRAIN_DEFAULTS, optimizer_time, time_train_op, training_params
from ..train.graph import BWD_STREAMS, EXPERT_GEMMS, FP8_FAST_ACCUMULATION, TrainOp, backward
from ..train.project import microbatch_time
from ..train.scenario import TrainScenario


def _usable(r: dict) -> bool:
    t = r.get("time_s")
    return (not r.get("error") and isinstance(t, (int, float)) and t > 0 and math.isfinite(t)
            and not str(r.get("check", "ok")).startswith("FAIL"))


def _standalone(op: Op, hw: HardwareSpec, prof: Profile, role: str = "fwd", params: dict | None = None) -> float:
    """The cost model's time for ``op`` timed on its own, with no training factor applied."""
    p = params or {**TRAIN_DEFAULTS, "gemm_dgrad_scale": 1.0, "gemm_wgrad_scale": 1.0, "mem_bwd_scale": {},
                   "loss_scale": 1.0}
    t, _ = time_train_op(TrainOp(op, "forward", role), hw, prof, p, standalone=True)
    return t


def kernel_prediction(row: dict, hw: HardwareSpec, prof: Profile) -> tuple[str, float] | None:
    """(factor name, the cost model's base time) for one ``train_kernel`` row (GEMMs: the op's name, paired
    by :func:`fit_training`); None for AdamW rows and attention run on the math fallback."""
    p = row["params"]
    op = p.get("op")
    dt = p.get("dtype", "bf16")
    if op in ("gemm_fwd", "gemm_dgrad", "gemm_wgrad"):
        m, n, k = p["m"], p["n"], p["k"]
        shape = {"gemm_fwd": (m, n, k), "gemm_dgrad": (m, k, n), "gemm_wgrad": (n, k, m)}[op]
        return op, _standalone(gemm_op(op, *shape, dt), hw, prof)
    if op == "sdpa_bwd":
        ran = str(row.get("backend_ran") or "").split()[0]
        if ran not in ("flash", "cudnn", "efficient"):
            return None  # the math fallback is not a fused kernel a projection would use
        fwd = attention_op("attn", p["batch"], p["heads_q"], p["heads_kv"], p["seq"], p["seq"], p["head_dim"],
                           causal=bool(p["causal"]), dtype=dt, phase="prefill")
        fwd = Op(fwd.name, fwd.kind, fwd.phase, fwd.flops, fwd.bytes, {**fwd.params, "kernel": ran})
        return f"attn_bwd_ratio.{ran}", _standalone(fwd, hw, prof)
    if op == "rmsnorm_bwd":
        base = rmsnorm_op("norm", p["tokens"], p["hidden"], dt, phase="prefill")
        bw = Op(base.name, base.kind, base.phase, base.flops * 1.5, base.bytes * BWD_STREAMS["rmsnorm"], base.params)
        return "mem_bwd_scale.rmsnorm", _standalone(bw, hw, prof)
    if op == "swiglu_bwd":
        base = swiglu_op("swiglu", p["tokens"], p["width"], dt, phase="prefill")
        bw = Op(base.name, base.kind, base.phase, base.flops, base.bytes * BWD_STREAMS["swiglu"], base.params)
        return "mem_bwd_scale.swiglu", _standalone(bw, hw, prof)
    if op == "cross_entropy":
        t, v = p["tokens"], p["vocab"]  # the loss ops of graph.head_forward and its backward
        e = 2.0
        fwd = Op("loss.xent", "reduce", "prefill", 5.0 * t * v, t * v * (e + 4.0), {"elems": t * v})
        bwd = Op("loss.xent.bwd", "reduce", "prefill", t * v, t * v * (4.0 + e), {"elems": t * v})
        return "loss_scale", _standalone(fwd, hw, prof) + _standalone(bwd, hw, prof)
    return None


def _median_ratio(pairs: list[tuple[float, float]]) -> float:
    return math.exp(statistics.median(math.log(meas / pred) for meas, pred in pairs))


def _fit_adamw(rows: list[dict], hw: HardwareSpec) -> dict:
    """alpha and eta of the fused optimizer: t = alpha + bytes / (eta bw), least squares in relative error."""
    pts = [(float(r["bytes"] if r.get("bytes") else 28.0 * r["params"]["params"]), float(r["time_s"]))
           for r in rows]
    if not pts:
        return {}
    if len(pts) == 1:
        b, t = pts[0]
        eta = min(1.0, b / (hw.hbm_bandwidth * max(t - TRAIN_DEFAULTS["adamw_alpha_s"], 1e-9)))
        return {"adamw_eta": eta}
    # weighted (1/t) linear least squares of t = a + c x, x = bytes / bw
    sw = sx = sy = sxx = sxy = 0.0
    for b, t in pts:
        w = 1.0 / (t * t)
        x = b / hw.hbm_bandwidth
        sw += w
        sx += w * x
        sy += w * t
        sxx += w * x * x
        sxy += w * x * t
    det = sw * sxx - sx * sx
    if det <= 0:
        return {}
    c = (sw * sxy - sx * sy) / det
    a = (sy - c * sx) / sw
    eta = min(1.0, max(0.05, 1.0 / c)) if c > 0 else 1.0
    return {"adamw_eta": eta, "adamw_alpha_s": max(a, 1e-7)}


# --- MoE expert products: the grouped kernel's rate relative to the dense GEMM model ----------------------------

# The scenario a measured expert product is built in: bf16, Megatron's fp32 main gradients (only the dtypes and
# the recipe of a scenario reach a single product's backward)
GROUPED_SCENARIO = TrainScenario(gpus=8, global_batch=8, seq=4096, dtype="bf16")
GROUPED_KEYS = ("grouped_gemm_eta", "grouped_gemm_rows0", "grouped_gemm_rows", "grouped_gemm_measured_on",
                "fp8_split_over_fast", "fp8_accumulation_measured_on")  # what fit_grouped, fit_fp8_accumulation write


def grouped_usable(rows: list[dict]) -> list[dict]:
    """The ``grouped_gemm`` rows a fit takes: fp8 ones at fast accumulation only, every pass. The grouped kernel
    stands in for TransformerEngine's grouped linear, which runs cuBLAS per expert on several streams
    (``nvte_multi_tensor_gemm``); what split accumulation costs is cuBLAS's, measured on dense products
    (:func:`fit_fp8_accumulation`), where the stand-in's own split-accumulation kernels pick configurations 2-3x
    slower at a few hundred rows an expert of small experts. Its split rows stay evidence."""
    return [r for r in rows if r.get("kind") == "grouped_gemm" and _usable(r) and r["params"].get("fast_accum", True)]


# a dense product is compute-bound enough for the accumulation to show where its fast run reaches this share of
# the part's dense fp8 rate (streaming-bound products run alike either way)
ACCUMULATION_BOUND_SHARE = 0.5


def fit_fp8_accumulation(rows: list[dict], hw: HardwareSpec) -> tuple[dict, dict]:
    """``fp8_split_over_fast``: the median, over the per-tensor fp8 products measured both ways
    (:mod:`perfmodel.measure.fp8_accumulation`, on ``hw``) whose fast run reaches ``ACCUMULATION_BOUND_SHARE`` of
    ``hw``'s dense fp8 rate, of the split run's time over the fast run's. Returns (the training entries, a
    summary); no such pair: ({}, {})."""
    runs: dict[tuple, dict[bool, float]] = {}
    for r in rows:
        p = r.get("params") or {}
        if (r.get("kind") == "gemm" and p.get("dtype") == "fp8" and "fast_accum" in p
                and p.get("scaling", "tensor") == "tensor" and _usable(r)):
            runs.setdefault((p["m"], p["n"], p["k"]), {})[bool(p["fast_accum"])] = float(r["time_s"])
    peak = hw.tensor_flops.get("fp8", 0.0)
    pairs = [(v[False] / v[True], 2.0 * m * n * k / v[True]) for (m, n, k), v in runs.items() if len(v) == 2]
    bound = [ratio for ratio, rate in pairs if peak and rate >= ACCUMULATION_BOUND_SHARE * peak]
    if not bound:
        return {}, {}
    device = device_of(rows, hw)
    ratio = statistics.median(bound)
    summary = {"n": len(bound), "pairs": len(pairs), "median_all": statistics.median(r for r, _ in pairs),
               "fp8_split_over_fast": ratio, "measured_on": device, "part": hw.key}
    return {"fp8_split_over_fast": ratio, "fp8_accumulation_measured_on": device}, summary


def grouped_op(p: dict) -> TrainOp:
    """One measured pass of an expert product (a ``grouped_gemm`` row's params) as the training graph builds it:
    the forward ``moe.<product>`` over ``experts`` groups of ``rows`` rows, its data and weight gradient as
    :func:`perfmodel.train.graph.backward` derives them, the weight gradient writing its product in the row's
    format as the measurement's ``torch._grouped_mm`` does (the graph also reads and writes the fp32 main
    gradient there, Megatron's gradient-accumulation fusion, which the measurement does not run)."""
    dt = p.get("dtype", "bf16")
    name = f"moe.{p['product']}"
    assert name in EXPERT_GEMMS, name
    fwd = TrainOp(gemm_op(name, p["rows"], p["n"], p["k"], dt, groups=p["experts"], phase="prefill"), "forward", "fwd")
    ops = {"fwd": fwd, **{t.role: t for t in backward([fwd], GROUPED_SCENARIO)}}
    t = ops[p["pass"]]
    if p["pass"] == "wgrad":
        g = bytes_per_element(GROUPED_SCENARIO.grad_dtype)
        extra = p["experts"] * p["k"] * p["n"] * (2.0 * g - bytes_per_element(dt))
        t = TrainOp(Op(t.op.name, t.op.kind, t.op.phase, t.op.flops, t.op.bytes - extra, t.op.params, t.op.count,
                       t.op.scope), t.pass_, t.role, t.model_flops)
    return t


def grouped_parts(rows: list[dict], hw: HardwareSpec, prof: Profile, params: dict) -> list[tuple[float, float, float]]:
    """Per usable row (measured seconds, the dense model's seconds, rows an expert): the dense model as
    :func:`perfmodel.train.cost.time_train_op` prices the op standalone (as the measurement times it) with the
    other training factors of ``params`` and no grouped efficiency, at the row's own accumulation (an fp8 row
    timed fast is priced fast whatever its pass)."""
    base = {**params, "grouped_gemm_eta": {}, "grouped_gemm_rows0": {}}
    c = float(base.get("fp8_split_over_fast", 1.0))
    out = []
    for r in rows:
        p = r["params"]
        t = grouped_op(p)
        model, _ = time_train_op(t, hw, prof, base, standalone=True)
        if "fast_accum" in p and bool(p["fast_accum"]) != FP8_FAST_ACCUMULATION[p["pass"]]:
            model = model / c if p["fast_accum"] else model * c
        out.append((float(r["time_s"]), float(model), float(p["rows"])))
    return out


def grouped_price(part: tuple[float, float, float], eta: float, rows0: float) -> float:
    """The training graph's seconds for a measured product (:func:`grouped_parts`) at grouped efficiency ``eta``
    with ``rows0`` rows of per-expert cost (:func:`perfmodel.train.cost.grouped_factor`)."""
    _, model, rows = part
    return model / eta * (1.0 + rows0 / rows)


MAX_ROWS0 = 4096.0  # the fit's bound on the per-expert cost in rows (the largest rows an expert measured)


def solve_grouped(parts: list[tuple[float, float, float]]) -> tuple[float, float]:
    """(eta, rows0) minimising a robust (soft-L1, 3% scale) sum of log(predicted / measured): each row counts
    alike, a few odd ones do not pull the fit (as the medians of the other training factors). One row or one
    rows-an-expert value cannot separate the two: rows0 is then 0 and eta the median ratio."""
    import numpy as np
    from scipy.optimize import least_squares

    if not parts:
        raise ValueError("no rows")
    meas, model, rows = (np.array(c, dtype=float) for c in zip(*parts))
    if len(set(rows.tolist())) < 2:
        return float(np.exp(np.median(np.log(model / meas)))), 0.0

    def resid(th):
        return np.log(model * np.exp(-th[0]) * (1.0 + th[1] / rows) / meas)

    # th = (log eta, rows0): eta in [0.05, MAX_ETA], rows0 in [0, MAX_ROWS0]; started inside the bounds
    fit = least_squares(resid, [math.log(0.9), 16.0], bounds=([math.log(0.05), 0.0], [math.log(MAX_ETA), MAX_ROWS0]),
                        loss="soft_l1", f_scale=0.03)
    return float(math.exp(fit.x[0])), float(fit.x[1])


def _errors(parts, fitted: dict[str, tuple[float, float]], passes: list[str]) -> list[float]:
    return [grouped_price(x, *fitted.get(p, (1.0, 0.0))) / x[0] - 1.0 for x, p in zip(parts, passes)]


def _error_summary(errs: list[float]) -> dict:
    a = sorted(abs(e) for e in errs)
    return {"n": len(errs), "median_abs_error": statistics.median(a), "signed_median": statistics.median(errs),
            "p90_abs_error": a[min(len(a) - 1, int(math.ceil(0.9 * len(a))) - 1)]}


def fit_passes(parts: list[tuple[float, float, float]], passes: list[str]) -> dict[str, tuple[float, float]]:
    """Per pass, (eta, rows0) of :func:`solve_grouped` over that pass's rows."""
    return {p: solve_grouped([x for x, q in zip(parts, passes) if q == p]) for p in sorted(set(passes))}


@dataclass(frozen=True)
class GroupedSource:
    """Expert-product rows measured on one part, priced against the dense GEMM model of ``prof`` on that part (the
    fitted profile itself on its own part, carried by the transfer rules to another)."""
    rows: list[dict]
    hw: HardwareSpec
    prof: Profile


def fit_grouped(rows: list[dict], hw: HardwareSpec, prof: Profile, params: dict | None = None, *,
                elsewhere: tuple[GroupedSource, ...] = ()) -> tuple[dict, dict]:
    """Fit the expert products' grouped efficiency from ``grouped_gemm`` rows: per format and pass (forward, data
    gradient, weight gradient), the grouped kernel's rate relative to the dense GEMM model's (``eta``) and the
    rows of work each expert pays on top of its own (``rows0``), :func:`solve_grouped`. Returns (the training
    entries to set: ``grouped_gemm_eta`` and ``grouped_gemm_rows0``, keyed ``<format>.<pass>``, and the device
    each format was measured on, ``grouped_gemm_measured_on``; a summary per format: the dense model's and the
    fitted model's in-sample errors, and a leave-one-model-out check: the parameters fitted without each model's
    shapes, priced on that model's). No usable rows: ({}, {}).

    ``rows`` were measured on ``hw``. ``elsewhere``: rows measured on other parts, each priced against the dense
    model carried there. A format ``hw``'s rows measure is fitted from them alone; a format only another part
    measured is fitted from that part's rows (the ratio is a part's grouped kernel against its own dense model, and
    carries unchanged: the rule that carries it to every part); where both measured a format, the summary's
    ``other_parts`` says how the ratio fitted here prices the other part's rows, a check of that rule."""
    sources = [GroupedSource(rows, hw, prof), *elsewhere]
    usable_by = [(src, grouped_usable(src.rows)) for src in sources]
    usable_by = [(src, use) for src, use in usable_by if use]
    if not usable_by:
        return {}, {}
    priced = []  # (source index, row, parts)
    for i, (src, use) in enumerate(usable_by):
        base = params if (params is not None and src.hw.key == hw.key) else training_params(src.prof)
        priced += [(i, r, x) for r, x in zip(use, grouped_parts(use, src.hw, src.prof, base))]
    eta, rows0, measured_on, summary = {}, {}, {}, {}
    for fmt in sorted({r["params"].get("dtype", "bf16") for _, r, _ in priced}):
        of_fmt = [(i, r, x) for i, r, x in priced if r["params"].get("dtype", "bf16") == fmt]
        first = min(i for i, _, _ in of_fmt)  # the fitted part's own rows where it measured the format
        mine = [(r, x) for i, r, x in of_fmt if i == first]
        sub = [x for _, x in mine]
        passes = [r["params"]["pass"] for r, _ in mine]
        names = [r["params"].get("model", "") for r, _ in mine]
        fitted = fit_passes(sub, passes)
        for p, (e, r0) in fitted.items():
            eta[f"{fmt}.{p}"], rows0[f"{fmt}.{p}"] = e, r0
        src = usable_by[first][0]
        measured_on[fmt] = device_of(src.rows, src.hw)
        held = {}
        for m in sorted(set(names)) if len(set(names)) > 1 else ():
            train = [(x, p) for x, p, n in zip(sub, passes, names) if n != m]
            test = [(x, p) for x, p, n in zip(sub, passes, names) if n == m]
            f_m = fit_passes([x for x, _ in train], [p for _, p in train])
            held[m] = {"fitted": {p: {"eta": e, "rows0": r0} for p, (e, r0) in f_m.items()},
                       **_error_summary(_errors([x for x, _ in test], f_m, [p for _, p in test]))}
        others = {}
        for j in sorted({i for i, _, _ in of_fmt if i != first}):
            theirs = [(r, x) for i, r, x in of_fmt if i == j]
            t_sub, t_passes = [x for _, x in theirs], [r["params"]["pass"] for r, _ in theirs]
            own = fit_passes(t_sub, t_passes)
            others[device_of(usable_by[j][0].rows, usable_by[j][0].hw)] = {
                "n": len(theirs), "part": usable_by[j][0].hw.key,
                "own_fit": {p: {"eta": e, "rows0": r0} for p, (e, r0) in own.items()},
                "dense_model": _error_summary([x[1] / x[0] - 1.0 for x in t_sub]),
                "carried_fit": _error_summary(_errors(t_sub, fitted, t_passes)),
            }
        summary[fmt] = {
            "n": len(sub),
            "measured_on": measured_on[fmt], "part": src.hw.key,
            "fitted_parameters": {p: {"eta": e, "rows0": r0} for p, (e, r0) in fitted.items()},
            "dense_model": _error_summary([x[1] / x[0] - 1.0 for x in sub]),
            "fitted": _error_summary(_errors(sub, fitted, passes)),
            "held_out_by_model": held,
            **({"other_parts": others} if others else {}),
        }
    n_fitted = sum(s["n"] for s in summary.values())
    return {"grouped_gemm_eta": eta, "grouped_gemm_rows0": rows0, "grouped_gemm_rows": float(n_fitted),
            "grouped_gemm_measured_on": measured_on}, summary


def device_of(rows: list[dict], hw: HardwareSpec) -> str:
    """The device measured rows name (their ``env``), else the part's name."""
    for r in rows:
        name = (r.get("env") or {}).get("device_name")
        if name:
            return str(name)
    return hw.name


def fit_grouped_profile(prof: Profile, rows: list[dict], hw: HardwareSpec, *,
                        elsewhere: tuple[GroupedSource, ...] = ()) -> tuple[Profile, dict]:
    """:func:`fit_grouped` into ``prof.training`` (its other entries kept), relative to the dense GEMM model of
    ``prof`` as a projection prices with it: fit it last, once every family (the power-limited clock included)
    is in ``prof``. No usable rows: ``prof`` unchanged and an empty summary."""
    entries, summary = fit_grouped(rows, hw, prof, elsewhere=elsewhere)
    if not entries:
        return prof, {}
    return prof.with_(training={**(prof.training or {}), **entries}), summary


def fit_training(prof: Profile, rows: list[dict], hw: HardwareSpec) -> tuple[Profile, dict]:
    """Fit the training factors from ``train_kernel`` rows into ``prof.training``; predict ``train_step`` rows.
    A grouped efficiency the profile has already (:func:`fit_grouped_profile`) is kept.

    Returns (the profile with ``training`` set, a summary: fitted values, per-factor spread, the
    train_step validation). With no usable training rows the profile is returned unchanged."""
    kept = {k: v for k, v in (prof.training or {}).items() if k in GROUPED_KEYS}
    kernels = [r for r in rows if r.get("kind") == "train_kernel" and _usable(r)]
    steps = [r for r in rows if r.get("kind") == "train_step" and _usable(r)]
    groups: dict[str, list[tuple[float, float]]] = {}
    gemm: dict[tuple, dict[str, float]] = {}  # forward shape -> op -> measured / model
    for r in kernels:
        op = r["params"].get("op")
        if op == "adamw":
            continue
        if op == "sdpa_bwd":  # the kernels' own backward / forward ratio, both measured
            ran = str(r.get("backend_ran") or "").split()[0]
            fwd = r.get("fwd_s")
            if ran in ("flash", "cudnn", "efficient") and isinstance(fwd, (int, float)) and fwd > 0:
                groups.setdefault(f"attn_bwd_ratio.{ran}", []).append((float(r["time_s"]), float(fwd)))
            continue
        try:
            got = kernel_prediction(r, hw, prof)
        except (KeyError, TypeError, ValueError):
            continue
        if got is None or not got[1] > 0:
            continue
        if op.startswith("gemm_"):
            p = r["params"]
            gemm.setdefault((p["m"], p["n"], p["k"], p.get("dtype")), {})[op] = float(r["time_s"]) / got[1]
            continue
        groups.setdefault(got[0], []).append((float(r["time_s"]), got[1]))
    # backward GEMM layouts relative to the forward F.linear of the same shape, both against the model: the
    # factor says how the layout differs, not how far the base GEMM model is off for these shapes
    for op in ("gemm_dgrad", "gemm_wgrad"):
        pairs = [(v[op], v["gemm_fwd"]) for v in gemm.values() if op in v and "gemm_fwd" in v]
        if pairs:
            groups[f"{op}_scale"] = pairs
    base = [(v["gemm_fwd"], 1.0) for v in gemm.values() if "gemm_fwd" in v]
    fitted: dict = {}
    spread: dict = {}
    for key, pairs in sorted(groups.items()):
        ratio = _median_ratio(pairs)
        logs = [math.log(meas / pred / ratio) for meas, pred in pairs]
        spread[key] = {"n": len(pairs), "ratio": ratio,
                       "median_abs_error": statistics.median(abs(math.exp(x) - 1.0) for x in logs)}
        if "." in key:
            top, sub = key.split(".", 1)
            fitted.setdefault(top, {})[sub] = ratio
        else:
            fitted[key] = ratio
    if base:  # reported, not applied: the inference GEMM model's own error on these forward shapes
        ratio = _median_ratio(base)
        spread["gemm_fwd (model check, not applied)"] = {
            "n": len(base), "ratio": ratio,
            "median_abs_error": statistics.median(abs(m / ratio - 1.0) for m, _ in base)}
    adam = _fit_adamw([r for r in kernels if r["params"].get("op") == "adamw"], hw)
    fitted.update(adam)
    if adam:
        pts = [r for r in kernels if r["params"].get("op") == "adamw"]
        params = training_params(prof.with_(training=fitted))
        errs = [abs(optimizer_time(float(r.get("bytes") or 28.0 * r["params"]["params"]), hw, params, "latency")
                    / float(r["time_s"]) - 1.0) for r in pts]
        spread["adamw"] = {"n": len(pts), "eta": adam.get("adamw_eta"), "alpha_s": adam.get("adamw_alpha_s"),
                           "median_abs_error": statistics.median(errs)}
    if not fitted and not steps:
        return prof, {"rows": 0, "note": "no training rows: documented defaults apply"}
    if fitted:
        fitted["rows"] = float(len(kernels))
        prof = prof.with_(training={**fitted, **kept})
    step_rows = validate_steps(steps, hw, prof)
    summary = {"rows": len(kernels), "fitted": fitted, "factors": spread, "train_step": step_rows}
    errs = [abs(x["error"]) for x in step_rows]
    if errs:
        summary["train_step_summary"] = {"n": len(errs), "median_abs_error": statistics.median(errs),
                                         "max_abs_error": max(errs)}
        prof = prof.with_(training={**(prof.training or {}), "train_step_median_abs_error": statistics.median(errs),
                                    "train_step_rows": float(len(errs))})
    return prof, summary


def step_scenario(p: dict):
    """The model and one-GPU scenario a ``train_step`` row measured (plain PyTorch, no embedding)."""
    model = Model(key=str(p.get("model", "step")), name=str(p.get("model", "step")), family="llama",
                  hidden=int(p["hidden"]), layers=int(p["layers"]), heads=int(p["heads"]), kv_heads=int(p["kv_heads"]),
                  head_dim=int(p["head_dim"]), intermediate=int(p["intermediate"]), vocab=int(p["vocab"]))
    ts = TrainScenario(gpus=1, tp=1, pp=1, global_batch=int(p["batch"]), micro_batch=int(p["batch"]),
                       seq=int(p["seq"]), kernels="torch", grad_dtype="bf16", zero=0, recompute="none")
    return model, ts


def validate_steps(steps: list[dict], hw: HardwareSpec, prof: Profile) -> list[dict]:
    out = []
    for r in steps:
        try:
            model, ts = step_scenario(r["params"])
            pred = microbatch_time(hw, model, ts, prof, embedding=False, head=True)
        except (KeyError, TypeError, ValueError):
            continue
        meas = float(r["time_s"])
        out.append({"id": r["id"], "measured_s": meas, "predicted_s": pred, "error": pred / meas - 1.0})
    return out


def training_markdown(summary: dict) -> str:
    """The fit summary as a short Markdown section (for validation.md)."""
    lines = ["## Training kernels", ""]
    if not summary.get("rows") and not summary.get("train_step") and not summary.get("grouped_gemm"):
        return "\n".join(lines + ["No training rows: documented defaults (perfmodel/train/cost.py)."]) + "\n"
    if summary.get("factors"):
        lines += ["| factor | rows | fitted | median abs error after fit |", "|---|---|---|---|"]
    for k, v in summary.get("factors", {}).items():
        val = v.get("ratio", v.get("eta"))
        lines.append(f"| {k} | {v['n']} | {val:.3g} | {v['median_abs_error']:.1%} |")
    st = summary.get("train_step") or []
    if st:
        lines += ["", "| train_step (never fitted) | measured | predicted | error |", "|---|---|---|---|"]
        for x in st:
            lines.append(f"| {x['id']} | {x['measured_s'] * 1e3:.2f} ms | {x['predicted_s'] * 1e3:.2f} ms | "
                         f"{x['error']:+.1%} |")
        s = summary["train_step_summary"]
        lines.append(f"\nWhole training steps: median |error| {s['median_abs_error']:.1%} over {s['n']} "
                     f"(max {s['max_abs_error']:.1%}).")
    for fmt, g in (summary.get("grouped_gemm") or {}).items():
        where = f"measured on the {g['measured_on']}" if g.get("measured_on") else "`grouped-gemm/`"
        lines += ["", f"MoE expert products ({fmt}, {where}): per pass the grouped kernel's rate over the dense "
                  "GEMM model's and the rows each expert pays on top of its own: "
                  + ", ".join(f"{p} {v['eta']:.3f} and {v['rows0']:.1f}" for p, v in g["fitted_parameters"].items())
                  + ".", "",
                  "| expert products | rows | median signed error | median abs error | P90 abs error |",
                  "|---|---|---|---|---|"]
        for label, e in (("dense GEMM model (before)", g["dense_model"]), ("fitted, in-sample", g["fitted"]),
                         *((f"held out: {m} (fitted on the other models)", v)
                           for m, v in g["held_out_by_model"].items())):
            lines.append(f"| {label} | {e['n']} | {e['signed_median']:+.1%} | {e['median_abs_error']:.1%} | "
                         f"{e['p90_abs_error']:.1%} |")
        for device, o in (g.get("other_parts") or {}).items():
            lines.append(f"| measured on the {device}, priced by this fit carried there | {o['n']} | "
                         f"{o['carried_fit']['signed_median']:+.1%} | {o['carried_fit']['median_abs_error']:.1%} | "
                         f"{o['carried_fit']['p90_abs_error']:.1%} |")
    acc = summary.get("fp8_accumulation")
    if acc:
        lines += ["", f"fp8 split accumulation over fast (`{acc['folder']}/`, measured on the {acc['measured_on']}): "
                  f"{acc['fp8_split_over_fast']:.3f}, the median of {acc['n']} compute-bound products of {acc['pairs']} "
                  f"timed both ways ({acc['median_all']:.3f} over all)."]
    return "\n".join(lines) + "\n"
