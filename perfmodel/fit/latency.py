"""Fit the latency model's own kernel parameters to measured microkernels (``perfmodel fit DIR`` runs it
through :mod:`perfmodel.fit.directory`).

The fitter never stores times: it finds the :class:`~perfmodel.profile.Profile` parameters (GEMM tile
efficiency, K-loop overhead, per-format fraction of peak, memory-kernel alpha and beta, attention block
efficiency, launch costs, collective alpha and beta) that make the cost model's formulas reproduce the
measurements, by least squares on log(predicted / measured) with scipy.

Whole shapes are held out: every distinct shape is one row, and a deterministic hash of its id puts a
share of them (``holdout``) aside before fitting; the error on those is what ``validation`` reports,
per operator family, with median and P90 absolute error. Their log residuals become the uncertainty
bands (P10/P50/P90) that projections carry. Whole decoder layers are never fitted, only predicted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..cost.gemm import gemm_format
from ..cost.memory import memory_time
from ..dtypes import bytes_per_element
from ..errors import InputError
from ..measure.store import is_held_out  # noqa: F401  (the fit's held-out split, defined beside the row ids)
from ..predict import op_from_params
from ..profile import DEFAULTS, MEMORY_OP_KINDS, Profile
from ..sampling import SAMPLE_PASSES
from ..spec import HardwareSpec


FIT_KINDS = ("gemm", "attention") + MEMORY_OP_KINDS
MIN_ATTENTION_ROWS = 8  # a backend measured on fewer training shapes keeps its defaults


@dataclass
class Case:
    """One measured shape: the op it describes and its median time, timed on its own (standalone) or
    back to back with copies of itself inside a CUDA graph (in-stream)."""

    id: str
    kind: str
    params: dict
    op: object
    time_s: float
    held_out: bool
    standalone: bool = True
    backend: str | None = None  # attention: the SDPA backend that ran (the dispatched one for "default")


def row_backend(r: dict) -> str | None:
    """The attention backend a row measured: the forced one, or the one plain dispatch ran (None when the
    suite could not see it, as on a CPU)."""
    from ..attention_kernels import KERNELS

    backend = r["params"].get("backend", "default")
    if backend == "default":
        backend = r.get("dispatched")
    return backend if backend in KERNELS else None


# A measured time no GPU operation falls outside: a launch alone takes about a microsecond and CUDA events
# resolve half of one; an hour is no kernel (time_s 1e-300 had read as an infinite rate in `perfmodel sustained`)
MIN_ROW_TIME_S = 1e-8
MAX_ROW_TIME_S = 3600.0


def well_formed(r) -> bool:
    """A row the fitter can use: an object with a string id and kind, a params object, and a time in seconds
    within what a GPU operation takes (a measured row; error rows carry none)."""
    t = r.get("time_s") if isinstance(r, dict) else None
    return (isinstance(r, dict) and isinstance(r.get("id"), str) and isinstance(r.get("kind"), str)
            and isinstance(r.get("params"), dict) and isinstance(t, (int, float)) and not isinstance(t, bool)
            and math.isfinite(t) and MIN_ROW_TIME_S <= t <= MAX_ROW_TIME_S)


def load_cases(rows: list[dict], holdout: float, seed: int) -> tuple[list[Case], list[dict], list[dict], list[dict]]:
    """(fit/holdout cases, layer rows, launch rows, collective rows), skipping failed measurements."""
    cases, layers, launches, comms = [], [], [], []
    seen = set()
    for r in rows:
        if not well_formed(r) or r.get("error"):
            continue
        if str(r.get("check", "ok")).startswith("FAIL"):
            continue
        kind = r.get("kind")
        if r["id"] in seen:
            continue
        seen.add(r["id"])
        if kind == "moe":  # an engine's fused MoE module (imported tables)
            p = r["params"]
            needed = ("tokens", "hidden", "inter", "top_k", "experts", "tp", "ep", "dtype")
            if all(k in p for k in needed) and p["experts"] % p["ep"] == 0 and p["inter"] >= p["tp"]:
                cases.append(Case(r["id"], "moe", p, None, float(r["time_s"]), is_held_out(r["id"], holdout, seed),
                                  False))
            continue
        if kind == "layer":
            layers.append(r)
        elif kind == "launch":
            launches.append(r)
        elif kind == "collective":
            comms.append(r)
        elif kind in FIT_KINDS or kind == "instream":
            standalone = kind != "instream"
            params = r["params"]
            if not standalone:
                kind = params["op"]
                params = {k: v for k, v in params.items() if k not in ("op", "copies")}
            backend = row_backend(r) if kind == "attention" else None
            if kind == "attention" and backend is None:
                continue  # which kernel ran is unknown: nothing to fit it to
            try:
                op = op_from_params(kind, {k: v for k, v in params.items() if k != "backend"})
            except (KeyError, TypeError, ValueError, InputError):
                continue
            cases.append(Case(r["id"], kind, params, op, float(r["time_s"]), is_held_out(r["id"], holdout, seed),
                              standalone, backend))
    return cases, layers, launches, comms


# --- predictions for arrays of cases ---------------------------------------------------------------

def _signature(c: Case) -> tuple:
    """Cases that one vectorised op can time together: same kind, formats, flags and kernel."""
    p = c.params
    if c.kind == "gemm":
        return ("gemm", p["dtype"], p.get("scaling"), bool(p.get("quant_input")), c.standalone)
    if c.kind == "attention":
        return ("attention", p.get("dtype", "bf16"), p.get("kv_dtype") or p.get("dtype", "bf16"), bool(p["causal"]),
                c.backend, bool(p.get("packed")), p.get("includes"), c.standalone)
    if c.kind == "moe":
        return ("moe", p["dtype"], p.get("scaling"), p.get("weights"))
    return (c.kind, p.get("dtype"), c.standalone)


def _predict_moe(cases: list[Case], hw: HardwareSpec, prof: Profile) -> np.ndarray:
    """Imported MoE module times: the routed-expert ops of perfmodel.graph.moe_expert_ops (the projection's own
    MoE ops), vectorised over the cases' shapes."""
    from ..cost import time_op
    from ..graph import moe_expert_ops

    col = lambda key: np.array([float(c.params[key]) for c in cases])  # noqa: E731
    p0 = cases[0].params
    width = np.ceil(col("inter") / col("tp"))
    ops = moe_expert_ops(col("tokens"), col("hidden"), width, col("top_k"), col("experts"), col("ep"), p0["dtype"],
                         "bf16", "standalone", weight_dtype=p0.get("weights"))
    total = np.zeros(len(cases))
    for op in ops:
        if op.kind == "gemm" and p0.get("scaling"):
            op = op.__class__(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, "scaling": p0["scaling"]},
                              op.count, op.scope)
        total = total + np.asarray(time_op(op, hw, prof).time, dtype=float) * op.count
    return total


def _array_params(cases: list[Case]) -> dict:
    """The cases' params as one dict: numeric fields as arrays, the rest (shared by the group) as is."""
    keys = dict.fromkeys(k for c in cases for k in c.params)
    out = {}
    for k in keys:
        # optional shape fields some rows leave out take the op's own default
        default = {"head_dim_v": "head_dim", "groups": None}.get(k, k)
        vals = [c.params.get(k, c.params.get(default, 1) if default else 1) if c.params.get(k) is None else c.params[k]
                for c in cases] if k in ("head_dim_v", "groups") else [c.params.get(k) for c in cases]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            out[k] = np.array(vals, dtype=float)
        else:
            out[k] = vals[0]
    return out


def predict_cases(cases: list[Case], hw: HardwareSpec, prof: Profile) -> np.ndarray:
    """Each case's time as the cost model gives it (:func:`perfmodel.cost.time_op`, the projection's own path),
    one vectorised op per group of like cases. A case whose module did more than its op (an engine's attention
    module also writes the new K and V into the cache) adds those ops' times. The fitted model alone: no measured
    table anchors it (:mod:`perfmodel.cost.tables`)."""
    from ..cost import time_op
    from ..cost.tables import without_tables
    from ..ops import kv_write

    prof = without_tables(prof)  # the fitted model alone: a table anchoring its own rows would validate nothing
    out = np.empty(len(cases))
    groups: dict[tuple, list[int]] = {}
    for i, c in enumerate(cases):
        groups.setdefault(_signature(c), []).append(i)
    for sig, idx in groups.items():
        sub = [cases[i] for i in idx]
        if sig[0] == "moe":
            out[idx] = _predict_moe(sub, hw, prof)
            continue
        params = _array_params(sub)
        params.pop("backend", None)
        op = op_from_params(sub[0].kind, params)
        if sub[0].kind == "attention":
            op = op.__class__(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, "kernel": sub[0].backend})
        t = np.asarray(time_op(op, hw, prof, standalone=sub[0].standalone).time, dtype=float)
        if sub[0].kind == "attention" and params.get("includes") == "kv_write":
            p = op.params
            kv = kv_write("kv_write", p["batch"] * p["seq_q"], p["heads_q"], p["heads_kv"], p["head_dim"],
                          act_dtype=p["dtype"] if p["dtype"] != "fp8" else "bf16", kv_dtype=p["kv_dtype"],
                          rope_q=sub[0].backend == "trtllm", head_dim_v=p["head_dim_v"])
            t = t + np.asarray(time_op(kv, hw, prof).time, dtype=float)
        out[idx] = np.broadcast_to(t, (len(idx),))
    return out


def _col(cases, key, default=None):
    return np.array([c.params.get(key, default) if c.params.get(key) is not None else default for c in cases],
                    dtype=float)


# --- fitting ------------------------------------------------------------------------------------------

@dataclass
class Param:
    """One fitted parameter: how to read and write it on a Profile, its bounds, fitted in log space."""

    name: str
    get: object
    set: object
    lo: float
    hi: float


def _field(name, lo, hi):
    return Param(name, lambda p, n=name: getattr(p, n), lambda p, v, n=name: p.with_(**{n: v}), lo, hi)


def _dict_entry(field, key, lo, hi, start=0.5):
    """A parameter stored in a dict field of the profile; ``start`` where neither profile nor defaults hold it."""
    def setter(p, v):
        d = dict(getattr(p, field))
        d[key] = v
        return p.with_(**{field: d})

    return Param(f"{field}[{key}]", lambda p: getattr(p, field).get(key, getattr(DEFAULTS, field).get(key, start)),
                 setter, lo, hi)


# Bandwidth efficiencies are bounded by 1: no kernel streams HBM faster than its bandwidth (the suite
# flushes L2, so nothing is served from cache). Compute efficiencies may pass 1 by the clock headroom.
def _least_squares(params: list[Param], prof: Profile, residual_fn) -> tuple[Profile, float]:
    from scipy.optimize import least_squares

    def apply(x):
        p = prof
        for par, v in zip(params, x):
            p = par.set(p, float(math.exp(v)))
        return p

    x0 = []
    for par in params:
        v = min(max(par.get(prof), par.lo * 1.0001), par.hi * 0.9999)
        x0.append(math.log(v))
    lo = [math.log(par.lo) for par in params]
    hi = [math.log(par.hi) for par in params]
    res = least_squares(lambda x: residual_fn(apply(x)), np.array(x0), bounds=(lo, hi), loss="soft_l1", f_scale=0.1,
                        x_scale=1.0, diff_step=1e-3, max_nfev=400)
    return apply(res.x), float(np.sqrt(np.mean(res.fun**2))) if len(res.fun) else 0.0


def _log_residuals(cases, hw, prof):
    if not cases:
        return np.zeros(0)
    pred = predict_cases(cases, hw, prof)
    meas = np.array([c.time_s for c in cases])
    return np.log(pred / meas)


def fit_profile(cases: list[Case], hw: HardwareSpec, base: Profile = DEFAULTS) -> Profile:
    """Fit every family that has measurements; families without any keep ``base``'s values."""
    train = [c for c in cases if not c.held_out]
    prof = base
    # Memory kernels first, jointly: alpha and beta per kind, the row latency of norms, the host floor of
    # kinds measured both standalone and in-stream, and the standalone launch overhead shared by all.
    mem = [c for c in train if c.kind in MEMORY_OP_KINDS]
    kinds = sorted({c.kind for c in mem if sum(1 for x in mem if x.kind == c.kind) >= 2})
    if kinds:
        params = []
        both = {c.kind for c in mem if not c.standalone} & {c.kind for c in mem if c.standalone}
        if both:
            params += [_field("standalone_overhead_s", 1e-8, 3e-5), _field("flush_writeback", 1e-3, 2.0)]
        for kind in kinds:
            params += [_dict_entry("mem_eta", kind, 0.01, 1.0), _dict_entry("mem_alpha_s", kind, 1e-8, 1e-3)]
            if kind in prof.row_s:
                params.append(_dict_entry("row_s", kind, 1e-12, 1e-6))
            if kind in both:
                params.append(_dict_entry("host_floor_s", kind, 1e-8, 1e-3))
        if any(k in prof.row_s for k in kinds):
            params.append(_field("rows_per_sm", 0.25, 64.0))
        sub = [c for c in mem if c.kind in kinds]
        prof, _ = _least_squares(params, prof, lambda p: _log_residuals(sub, hw, p))
        prof = _inherit_unmeasured(prof, set(kinds))
    gemms = [c for c in train if c.kind == "gemm"]
    if gemms:
        fmts = sorted({_format(c) for c in gemms})
        # above 1 only by the clock headroom: datasheet rates are quoted at a sustained clock below max boost
        params = [_dict_entry("gemm_eta", f, 0.005, 1.2) for f in fmts]
        # a linear module that quantizes its input pays a prologue per format (engine tables time the module)
        for f in sorted({_format(c) for c in gemms if c.params.get("quant_input")}):
            params += [_dict_entry("gemm_prologue_s", f, 1e-8, 1e-3, start=4e-6),
                       _dict_entry("gemm_prologue_eta", f, 0.02, 1.0, start=0.5)]
        params += [_field("gemm_k0", 1.0, 4096.0), _field("gemm_tile_c", 0.1, 500.0),
                   _field("gemm_overhead_s", 1e-8, 1e-3), _field("gemm_mem_eta", 0.05, 1.0),
                   _field("gemm_softness", 1.2, 30.0), _field("gemm_wave_q", 0.01, 1.0),
                   _field("gemm_mem_ctas", 0.05, 16.0)]
        if any(_misaligned(c) for c in gemms):
            params.append(_field("gemm_misaligned_eta", 0.01, 1.0))
        # a format's own streaming efficiency, relative to the bf16 kernels' (enough memory-bound rows needed)
        for f in fmts:
            if f != "bf16" and sum(1 for c in gemms if _format(c) == f and c.params["m"] <= 64) >= 10:
                params.append(_dict_entry("gemm_mem_eta_scale", f, 0.2, 1.25, start=1.0))
        # an engine's quantized formats run other kernel families than bf16: their own split-K limit (skinny
        # products over a long K); their power-limited clock is physics (perfmodel.power_clock)
        engine_fmts = sorted({_format(c) for c in gemms if c.params.get("quant_input")})
        for f in engine_fmts:
            sub = [c for c in gemms if _format(c) == f]
            if sum(1 for c in sub if c.params["k"] >= 8 * prof.gemm_splitk_min_k
                   and c.params["m"] * c.params["n"] <= 256 * 1024) >= 10:
                params.append(_dict_entry("gemm_max_split", f, 1.0, 256.0, start=16.0))
        prof, _ = _least_squares(params, prof, lambda p: _log_residuals(gemms, hw, p))
    # MoE modules (uniformly routed rows only: the model routes uniformly; skewed rows stay as validation):
    # the grouped kernels' efficiency per format relative to the dense ones, their fixed cost, the permutes
    moe = [c for c in train if c.kind == "moe" and c.params.get("distribution", "balanced") == "balanced"]
    if len(moe) >= MIN_ATTENTION_ROWS:
        eps: dict[str, set] = {}  # format -> the EP widths its rows span
        for c in moe:
            eps.setdefault(gemm_format(c.params["dtype"], c.params.get("scaling"), c.params.get("weights")),
                           set()).add(c.params["ep"])
        fmts = sorted(eps)
        params = [_field("gemm_grouped_overhead_s", 1e-8, 1e-3)]
        params += [_dict_entry("gemm_grouped_eta", f, 0.02, 2.0, start=0.7) for f in fmts]
        params += [_dict_entry("gemm_grouped_mem", f, 0.02, 2.0, start=0.7) for f in fmts]
        # the routing's time per token-expert pair, local or not: where the rows span EP widths (its floor at
        # wide EP; at EP 1 it is not told apart from the permutes)
        params += [_dict_entry("moe_pair_s", f, 1e-13, 1e-6, start=1e-10) for f in fmts if len(eps[f]) > 1]
        params += [_dict_entry("mem_eta", "moe_permute", 0.02, 1.0), _dict_entry("mem_alpha_s", "moe_permute", 1e-8, 1e-4)]
        prof = prof.with_(gemm_grouped_overhead_s=5e-6)
        prof, _ = _least_squares(params, prof, lambda p, m=moe: _log_residuals(m, hw, p))
    kv_write_fitted = False
    backends = {c.backend for c in train if c.kind == "attention"}
    # most rows first: the engine's own kernel before the others it also runs
    for backend in sorted(backends, key=lambda b: (-sum(1 for c in train if c.backend == b), b)):
        attn = [c for c in train if c.kind == "attention" and c.backend == backend]
        if len(attn) < MIN_ATTENTION_ROWS:
            continue
        prof = _with_block_shapes(prof, backend)
        params = []
        # an engine's attention module also writes the new K and V into the cache: fit that kernel with the
        # first backend measured so (the engine's own; later ones keep it)
        if any(c.params.get("includes") == "kv_write" for c in attn) and not kv_write_fitted:
            params += [_dict_entry("mem_eta", "kv_write", 0.05, 1.0), _dict_entry("mem_alpha_s", "kv_write", 1e-8, 1e-4)]
            kv_write_fitted = True
        params += [_dict_entry("attn_eta", backend, 0.005, 1.2), _dict_entry("attn_dec_eta", backend, 0.01, 1.0),
                  _dict_entry("attn_overhead_s", backend, 1e-8, 1e-3, start=8e-6),
                  _dict_entry("attn_cta_blocks", backend, 0.01, 16.0, start=1.0),
                  _dict_entry("attn_tail", backend, 1e-3, 4.0, start=0.1),
                  _dict_entry("attn_softness", backend, 1.2, 30.0, start=4.0)]
        # an engine's decode kernel (packed rows: XQA, FlashInfer's decode) is another kernel than its prefill one:
        # its own fixed cost; fp8 attention (products in fp8) its own efficiency
        packed = [c for c in attn if c.params.get("packed")]
        if len(packed) >= MIN_ATTENTION_ROWS:
            params.append(_dict_entry("attn_overhead_s", f"{backend}.decode", 1e-8, 1e-3, start=8e-6))
            # decode over another KV format may be another kernel, with its own fixed cost
            for kv in sorted({c.params.get("kv_dtype") for c in packed} - {"bf16", None}):
                if sum(1 for c in packed if c.params.get("kv_dtype") == kv) >= MIN_ATTENTION_ROWS:
                    params.append(_dict_entry("attn_overhead_s", f"{backend}.decode.{kv}", 1e-8, 1e-3, start=8e-6))
            # many short sequences: bound by each CTA's latency; few CTAs: by loads in flight per SM
            params += [_dict_entry("attn_cta_cycles", backend, 1.0, 2e5, start=500.0),
                       _dict_entry("attn_mem_ctas", backend, 0.05, 16.0, start=1.0)]
        if sum(1 for c in attn if c.params.get("dtype") == "fp8") >= MIN_ATTENTION_ROWS:
            params.append(_dict_entry("attn_eta", f"{backend}.fp8", 0.005, 1.2, start=0.5))
        # softmax on the non-tensor units: identifiable when prefill rows span several head dims (its cost per
        # score does not grow with the head dim, the products' does)
        if len({c.params["head_dim"] for c in attn if c.params["seq_q"] > 1}) >= 2:
            params += [_dict_entry("attn_sfu_cycles", backend, 1e-3, 8.0, start=0.2),
                       _dict_entry("attn_sfu_p", backend, 1.0, 8.0, start=1.5)]
        prof, _ = _least_squares(params, prof, lambda p, a=attn: _log_residuals(a, hw, p))
    return prof


def _format(c: Case) -> str:
    return gemm_format(c.params["dtype"], c.params.get("scaling"))


def _with_block_shapes(prof: Profile, backend: str) -> Profile:
    """A backend measured for the first time (an engine's own kernel) takes the block shapes of the kernel
    it is otherwise carried from (perfmodel.attention_kernels), which are structural, not fitted."""
    from ..attention_kernels import KERNELS

    like = KERNELS[backend].measured_as if backend in KERNELS else "flash"
    bq, bk = dict(prof.attn_block_q), dict(prof.attn_block_k)
    for suffix in ("", ".decode"):
        bq.setdefault(backend + suffix, bq[like + suffix])
        bk.setdefault(backend + suffix, bk[like + suffix])
    return prof.with_(attn_block_q=bq, attn_block_k=bk)


# Kinds the suite does not measure take the parameters of the measured kind whose kernel they resemble.
# A sampling method without its own measurement reads the logits as the reduce kernel does, SAMPLE_PASSES times.
RESEMBLES = {"kv_write": "copy", "embedding": "copy", "moe_permute": "copy", "quantize": "copy", "layernorm": "rmsnorm",
             "gelu": "residual", "topk": "reduce", "fused": "residual",
             **{f"sample_{m}": "reduce" for m in SAMPLE_PASSES}}
PASSES = {f"sample_{m}": n for m, n in SAMPLE_PASSES.items()}  # the resembled kernel's passes a kind makes


def _inherit_unmeasured(prof: Profile, measured: set[str]) -> Profile:
    eta, alpha, row = dict(prof.mem_eta), dict(prof.mem_alpha_s), dict(prof.row_s)
    for kind, like in RESEMBLES.items():
        if kind not in measured and like in measured:
            eta[kind], alpha[kind] = eta[like] / PASSES.get(kind, 1.0), alpha[like]
            if like in row:
                row[kind] = row[like]
    return prof.with_(mem_eta=eta, mem_alpha_s=alpha, row_s=row)


def _misaligned(c: Case) -> bool:
    e = bytes_per_element(c.params["dtype"])
    return (c.params["n"] * e) % 16 != 0 or (c.params["k"] * e) % 16 != 0


def fit_launch(prof: Profile, launches: list[dict]) -> Profile:
    """Launch gaps from the launch family: per-kernel time of back-to-back tiny kernels (replayed from a graph,
    or launched one by one into a stream the host is far ahead of), less what such a kernel costs on its own
    (the smallest fitted memory-kernel alpha); the host's eager dispatch; a first token's greedy return to the
    host per vocabulary (perfmodel.measure.launch)."""
    by_mode: dict[str, list[float]] = {}
    returns: dict[str, list[float]] = {}
    for r in launches:
        p = r["params"]
        by_mode.setdefault(p.get("mode"), []).append(float(r["time_s"]))
        if p.get("mode") == "round_trip" and p.get("sampling") == "greedy":
            returns.setdefault(str(int(p["vocab"])), []).append(float(r["time_s"]))
    own = float(memory_time("residual", 6.0, 1.0e12, prof)[0])  # a one-element add inside a stream
    kw: dict = {}
    if "graph" in by_mode:
        kw["launch_graph_s"] = max(2e-7, float(np.median(by_mode["graph"])) - own)
    if "queued" in by_mode:
        queued = float(np.median(by_mode["queued"]))
        if "graph" in by_mode:  # what one-by-one launches add over a replay of the same kernels
            kw["launch_queued_s"] = kw["launch_graph_s"] + max(0.0, queued - float(np.median(by_mode["graph"])))
        else:
            kw["launch_queued_s"] = max(2e-7, queued - own)
    if "eager" in by_mode:
        kw["launch_eager_s"] = float(np.median(by_mode["eager"]))
    if returns:
        kw["token_return_s"] = {v: float(np.median(ts)) for v, ts in sorted(returns.items(), key=lambda x: int(x[0]))}
    return prof.with_(**kw) if kw else prof


# --- validation -------------------------------------------------------------------------------------

def error_summary(pred, meas) -> dict:
    err = np.abs(pred / meas - 1.0)
    return {"n": int(len(err)), "median_abs_error": float(np.median(err)) if len(err) else None,
            "p90_abs_error": float(np.percentile(err, 90)) if len(err) else None}


def op_class(kind: str) -> str:
    return kind if kind in ("gemm", "attention", "moe") else "memory"


def case_class(c: Case) -> str:
    """The validation class of a case: its family, the attention backend (and whether plain dispatch chose
    it), and whether it was timed in a stream of kernels."""
    cls = op_class(c.kind) + ("" if c.standalone or c.kind == "moe" else " in-stream")
    if c.kind == "moe":
        dist = c.params.get("distribution", "balanced")
        return cls + ("" if dist == "balanced" else f" ({dist} routing, never fitted)")
    if c.kind == "attention":
        forced = c.params.get("backend", "default") != "default"
        cls += f" ({c.backend})" if forced else f" (default: {c.backend})"
    return cls


def validate_cases(cases: list[Case], hw: HardwareSpec, prof: Profile) -> tuple[dict, list[dict]]:
    pred = predict_cases(cases, hw, prof) if cases else np.zeros(0)
    rows = []
    for c, p in zip(cases, pred):
        rows.append({"id": c.id, "kind": c.kind, "class": case_class(c), "backend": c.backend,
                     "held_out": c.held_out,
                     "measured_s": c.time_s, "predicted_s": float(p), "error": float(p / c.time_s - 1.0)})
    summary = {}
    order = sorted({r["class"] for r in rows}, key=lambda k: (k.split()[0] != "gemm", k.split()[0] != "attention",
                                                              "in-stream" in k, k))
    for split in ("held_out", "train"):
        for cls in order:
            sel = [r for r in rows if r["class"] == cls and r["held_out"] == (split == "held_out")]
            if sel:
                summary.setdefault(split, {})[cls] = error_summary(np.array([r["predicted_s"] for r in sel]),
                                                             np.array([r["measured_s"] for r in sel]))
    return summary, rows


def residual_quantiles(val_rows: list[dict], base: Profile) -> dict:
    """P10/P50/P90 of log(measured / predicted) over held-out shapes: per family, and for attention per
    backend too (``attention:cudnn``), so a projection's band follows the kernel it uses."""
    q = dict(base.residual_quantiles)
    groups: dict[str, list[float]] = {}
    for r in val_rows:
        if not r["held_out"]:
            continue
        fam = r["class"].split()[0]
        log = math.log(r["measured_s"] / r["predicted_s"])
        groups.setdefault(fam, []).append(log)
        if fam == "attention" and r.get("backend"):
            groups.setdefault(f"attention:{r['backend']}", []).append(log)
    for key, logs in groups.items():
        if len(logs) >= 5 and key.split(":")[0] in ("gemm", "attention", "memory"):
            q[key] = [float(np.percentile(logs, 10)), float(np.percentile(logs, 50)), float(np.percentile(logs, 90))]
    return q


def dispatch_defaults(rows: list[dict], base: Profile) -> tuple[dict, dict]:
    """Which backend plain PyTorch dispatched to, per phase (the majority over the default rows), and
    how many rows agreed; the base profile's choice where the suite could not see the dispatch."""
    from ..attention_kernels import KERNELS

    seen: dict[str, dict[str, int]] = {}
    for r in rows:
        if not well_formed(r) or r["kind"] not in ("attention", "instream") or r.get("error"):
            continue
        if not isinstance(r.get("dispatched"), str) or r["params"].get("backend", "default") != "default":
            continue
        seq_q = r["params"].get("seq_q", 1)
        phase = "decode" if isinstance(seq_q, (int, float)) and seq_q <= 1 else "prefill"
        seen.setdefault(phase, {}).setdefault(r["dispatched"], 0)
        seen[phase][r["dispatched"]] += 1
    chosen = dict(base.attn_default)
    for phase, counts in seen.items():
        best = max(counts, key=counts.get)
        if best in KERNELS:
            chosen[phase] = best
    return chosen, seen
