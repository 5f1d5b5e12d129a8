"""Fit the latency model's own parameters to measured microkernels (``perfmodel fit DIR``).

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

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..cost.gemm import gemm_format
from ..cost.memory import memory_time
from ..dtypes import bytes_per_element
from ..errors import InputError
from ..graph import Step
from ..io import write_text_atomic
from ..models import Model
from ..predict import op_from_params
from ..profile import DEFAULTS, MEMORY_OP_KINDS, Profile, save_profile
from ..projection import evaluate_step
from ..scenario import Scenario
from ..spec import HardwareSpec
from ..energy.fit import fit_power
from ..energy.fit import report_text as power_text
from ..train.fit import fit_training, training_markdown
from .store import ENVIRONMENT, MEASUREMENTS, read_rows

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


def is_held_out(case_id: str, share: float, seed: int = 0) -> bool:
    """Whether a shape is held out. The attention backend is not part of the key: a shape is held out
    under every backend or under none, so no backend's rows leak a held-out shape into the fit."""
    key = "|".join(part for part in case_id.split("|") if not part.startswith("backend="))
    h = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64 < share


def row_backend(r: dict) -> str | None:
    """The attention backend a row measured: the forced one, or the one plain dispatch ran (None when the
    suite could not see it, as on a CPU)."""
    from ..attention_kernels import KERNELS

    backend = r["params"].get("backend", "default")
    if backend == "default":
        backend = r.get("dispatched")
    return backend if backend in KERNELS else None


def well_formed(r) -> bool:
    """A row the fitter can use: an object with a string id and kind, a params object, and a positive finite
    time in seconds (a measured row; error rows carry none)."""
    t = r.get("time_s") if isinstance(r, dict) else None
    return (isinstance(r, dict) and isinstance(r.get("id"), str) and isinstance(r.get("kind"), str)
            and isinstance(r.get("params"), dict) and isinstance(t, (int, float)) and not isinstance(t, bool)
            and math.isfinite(t) and t > 0)


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
        return ("moe", p["dtype"], p.get("scaling"))
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
                         "bf16", "standalone")
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
    module also writes the new K and V into the cache) adds those ops' times."""
    from ..cost import time_op
    from ..ops import kv_write

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
                   _field("gemm_power_drop", 1e-3, 0.6), _field("gemm_power_tau", 1e-6, 0.1),
                   _field("gemm_mem_ctas", 0.05, 16.0)]
        if any(_misaligned(c) for c in gemms):
            params.append(_field("gemm_misaligned_eta", 0.01, 1.0))
        # a format's own streaming efficiency, relative to the bf16 kernels' (enough memory-bound rows needed)
        for f in fmts:
            if f != "bf16" and sum(1 for c in gemms if _format(c) == f and c.params["m"] <= 64) >= 10:
                params.append(_dict_entry("gemm_mem_eta_scale", f, 0.2, 1.25, start=1.0))
        # an engine's quantized formats run other kernel families than bf16: their own power drop (the large
        # products that reach the power limit) and their own split-K limit (skinny products over a long K)
        engine_fmts = sorted({_format(c) for c in gemms if c.params.get("quant_input")})
        for f in engine_fmts:
            sub = [c for c in gemms if _format(c) == f]
            if sum(1 for c in sub if min(c.params["m"], c.params["n"], c.params["k"]) >= 2048) >= 10:
                params.append(_dict_entry("gemm_format_power_drop", f, 1e-3, 0.7, start=prof.gemm_power_drop))
            if sum(1 for c in sub if c.params["k"] >= 8 * prof.gemm_splitk_min_k
                   and c.params["m"] * c.params["n"] <= 256 * 1024) >= 10:
                params.append(_dict_entry("gemm_max_split", f, 1.0, 256.0, start=16.0))
        prof, _ = _least_squares(params, prof, lambda p: _log_residuals(gemms, hw, p))
    # MoE modules (uniformly routed rows only: the model routes uniformly; skewed rows stay as validation):
    # the grouped kernels' efficiency per format relative to the dense ones, their fixed cost, the permutes
    moe = [c for c in train if c.kind == "moe" and c.params.get("distribution", "balanced") == "balanced"]
    if len(moe) >= MIN_ATTENTION_ROWS:
        fmts = sorted({gemm_format(c.params["dtype"], c.params.get("scaling")) for c in moe})
        params = [_field("gemm_grouped_overhead_s", 1e-8, 1e-3)]
        params += [_dict_entry("gemm_grouped_eta", f, 0.02, 2.0, start=0.7) for f in fmts]
        params += [_dict_entry("gemm_grouped_mem", f, 0.02, 2.0, start=0.7) for f in fmts]
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
RESEMBLES = {"kv_write": "copy", "embedding": "copy", "moe_permute": "copy", "quantize": "copy", "layernorm": "rmsnorm",
             "gelu": "residual", "topk": "reduce", "fused": "residual"}


def _inherit_unmeasured(prof: Profile, measured: set[str]) -> Profile:
    eta, alpha, row = dict(prof.mem_eta), dict(prof.mem_alpha_s), dict(prof.row_s)
    for kind, like in RESEMBLES.items():
        if kind not in measured and like in measured:
            eta[kind], alpha[kind] = eta[like], alpha[like]
            if like in row:
                row[kind] = row[like]
    return prof.with_(mem_eta=eta, mem_alpha_s=alpha, row_s=row)


def _misaligned(c: Case) -> bool:
    e = bytes_per_element(c.params["dtype"])
    return (c.params["n"] * e) % 16 != 0 or (c.params["k"] * e) % 16 != 0


def fit_launch(prof: Profile, launches: list[dict]) -> Profile:
    """Launch gaps from the launch family: per-kernel time of back-to-back tiny kernels, less what such a
    kernel costs on its own (the smallest fitted memory-kernel alpha)."""
    by_mode = {}
    for r in launches:
        by_mode.setdefault(r["params"].get("mode"), []).append(float(r["time_s"]))
    own = float(memory_time("residual", 6.0, 1.0e12, prof)[0])  # a one-element add inside a stream
    kw = {}
    if "graph" in by_mode:
        kw["launch_graph_s"] = max(2e-7, float(np.median(by_mode["graph"])) - own)
    if "eager" in by_mode:
        kw["launch_eager_s"] = float(np.median(by_mode["eager"]))
    return prof.with_(**kw) if kw else prof


COMM_SIZE_CLASSES = ((0.0, 64 * 1024, "latency (<= 64 KiB)"), (64 * 1024, 16 * 2**20, "middle"),
                     (16 * 2**20, float("inf"), "bandwidth (> 16 MiB)"))  # by per-rank buffer bytes
MIN_COMM_SIZES = 3  # a collective at one world size measured at fewer sizes keeps the defaults


def _comm_rows(rows: list[dict]) -> list[dict]:
    from ..cost.comm import COLLECTIVE_KINDS

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
    from scipy.optimize import nnls

    from ..cost.comm import bus_factor
    from ..cost.overlap import fit_overlap
    from .collectives import validate_tp_layers

    all_comms = _comm_rows(rows)
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


# --- validation -------------------------------------------------------------------------------------

def _errors(pred, meas) -> dict:
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
                summary.setdefault(split, {})[cls] = _errors(np.array([r["predicted_s"] for r in sel]),
                                                             np.array([r["measured_s"] for r in sel]))
    return summary, rows


def layer_model(params: dict) -> Model:
    return Model(key=str(params.get("model", "layer")), name=str(params.get("model", "layer")), family="llama",
                 hidden=int(params["hidden"]), layers=1, heads=int(params["heads"]), kv_heads=int(params["kv_heads"]),
                 head_dim=int(params["head_dim"]), intermediate=int(params["intermediate"]), vocab=32000)


def layer_scenario(params: dict) -> Scenario:
    """The scenario a measured layer row ran under: plain PyTorch, launched eagerly or replayed from a graph."""
    dt = params.get("dtype", "bf16")
    return Scenario(tp=int(params.get("tp", 1)), dtype=dt, act_dtype=dt, kv_dtype=dt,
                    launch="graph" if params.get("graph") else "eager", kernels="torch")


def layer_step(params: dict) -> Step:
    if params["phase"] == "prefill":
        return Step("prefill", int(params["batch"]), int(params["seq"]), 0)
    return Step("decode", int(params["batch"]), 1, int(params["context"]))


def predict_layer(params: dict, hw: HardwareSpec, prof: Profile) -> float:
    """A measured decoder layer (one TP shard, no all-reduce) as the projection would time it: the shares of the
    step (perfmodel.step_accounting) of its layer's ops other than collectives."""
    acc = evaluate_step(layer_model(params), hw, layer_scenario(params), prof, layer_step(params)).account
    return float(acc.total([s.op.scope == "layer" and not s.collective for s in acc.ops]))


def validate_layers(layers: list[dict], hw: HardwareSpec, prof: Profile) -> tuple[dict, list[dict]]:
    rows = []
    for r in layers:
        try:
            pred = predict_layer(r["params"], hw, prof)
        except (KeyError, ValueError, InputError):
            continue
        rows.append({"id": r["id"], "phase": r["params"]["phase"], "graph": bool(r["params"].get("graph")),
                     "measured_s": float(r["time_s"]), "predicted_s": pred, "error": pred / float(r["time_s"]) - 1.0})
    summary = {}
    for phase in ("prefill", "decode"):
        sel = [x for x in rows if x["phase"] == phase]
        if sel:
            summary[phase] = _errors(np.array([x["predicted_s"] for x in sel]), np.array([x["measured_s"] for x in sel]))
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


# --- the command ------------------------------------------------------------------------------------

def _environment(path: Path) -> dict:
    """The device description of environment.json; empty when the file is missing or unreadable (a run
    killed while writing it): the rows carry the same description."""
    import sys

    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        print(f"perfmodel: warning: {path} is not readable JSON; using the rows' environment", file=sys.stderr)
        return {}
    if not isinstance(doc, dict):
        return {}
    env = doc.get("env", doc)  # the suite nests the device description under "env"
    return env if isinstance(env, dict) else {}


def _families_measured(cases, launches, comm_info, training, power) -> list[str]:
    """The cost-model families this folder's rows measured (perfmodel.evidence picks each family's source by
    them): a family fitted from defaults alone is not listed."""
    out = []
    if any(c.kind == "gemm" for c in cases):
        out.append("gemm")
    if any(c.kind == "attention" for c in cases):
        out.append("attention")
    # kernels that come with another family (the cache write with attention, input quantization with the GEMMs)
    # do not make a folder a source of the memory family
    if any(c.kind in MEMORY_OP_KINDS and c.kind not in ("kv_write", "quantize") for c in cases):
        out.append("memory")
    if any(c.kind == "moe" for c in cases):
        out.append("moe")
    if launches:
        out.append("launch")
    if comm_info.get("fits"):
        out.append("comm")
    if training.get("rows"):
        out.append("training")
    if power is not None:
        out.append("power")
    return out


def _import_provenance(path: Path) -> dict:
    """Where imported measurements came from (``environment.json``'s ``import`` object), or nothing."""
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError):
        return {}
    imp = doc.get("import") if isinstance(doc, dict) else None
    return imp if isinstance(imp, dict) else {}


def match_spec(env: dict, arch: str | None) -> HardwareSpec:
    from ..spec import list_specs, load_spec

    if arch:
        return load_spec(arch)
    if isinstance(env.get("spec_key"), str) and env["spec_key"]:  # imported tables name their spec
        return load_spec(env["spec_key"])
    name = str(env.get("device_name", "")).lower()
    words = set(name.replace("nvidia", "").split())
    best = None
    for s in list_specs():
        sw = set(s.name.lower().replace("nvidia", "").split())
        if words and words <= sw and (best is None or len(sw) < len(set(best.name.lower().split()))):
            best = s
    if best is None:
        raise InputError(f"no hardware spec matches device {env.get('device_name')!r}; pass --arch", field="--arch")
    return best


def fit_directory(directory, *, spec: str | None = None, holdout: float = 0.25, seed: int = 0) -> str:
    d = Path(directory)
    path = d / MEASUREMENTS
    if not path.is_file() and (d / (MEASUREMENTS + ".gz")).is_file():
        path = d / (MEASUREMENTS + ".gz")  # imported tables ship compressed
    if not path.is_file():
        raise InputError(f"no {MEASUREMENTS} here; run `perfmodel calibrate --out {d}` (or `perfmodel import`) "
                         "first", file=str(d))
    if not (isinstance(holdout, (int, float)) and math.isfinite(holdout) and 0.0 <= holdout < 1.0):
        raise InputError(f"expected a share in [0, 1), got {holdout!r}", field="--holdout")
    rows = read_rows(path)
    imported = _import_provenance(d / ENVIRONMENT)
    env = _environment(d / ENVIRONMENT)
    if not env:
        env = next((r["env"] for r in rows if isinstance(r, dict) and isinstance(r.get("env"), dict)), {})
    hw = match_spec(env, spec)
    started = time.time()
    cases, layers, launches, comms = load_cases(rows, holdout, seed)
    if not cases and not comms:
        raise InputError("no usable measurements to fit", file=str(path))
    attn_default, dispatch_seen = dispatch_defaults(rows, DEFAULTS)
    prof = fit_profile(cases, hw, DEFAULTS.with_(attn_default=attn_default))
    prof = fit_launch(prof, launches)
    prof, comm_info = fit_collectives(prof, rows, hw)
    summary, val_rows = validate_cases(cases, hw, prof)
    layer_summary, layer_rows = validate_layers(layers, hw, prof)
    prof, training = fit_training(prof, rows, hw)
    power = None
    if any(r.get("kind") == "power" for r in rows if isinstance(r, dict)):
        prof, power = fit_power(prof, rows, hw)
    formats = sorted({c.params["dtype"] for c in cases if c.kind == "gemm"})
    validation = {"ops": summary, "layers": layer_summary, "holdout_share": holdout, "seed": seed,
                  "training": {k: v for k, v in training.items() if k in ("rows", "train_step_summary")}}
    if power is not None:
        validation["power"] = prof.validation["power"]
    prof = prof.with_(
        name=d.name, fitted=True, device=str(env.get("device_name", "")), spec_key=hw.key,
        engine=str(env.get("engine") or "torch"),
        description=f"fitted to {len(cases)} measured shapes ({sum(c.held_out for c in cases)} held out) "
                    f"on {env.get('device_name', 'unknown device')}",
        residual_quantiles=residual_quantiles(val_rows, DEFAULTS),
        validation=validation,
        provenance={"environment": env, "measurements": str(path.name), "rows": len(rows),
                    "measured_formats": formats, "collectives": comm_info, "fit_seconds": round(time.time() - started, 2),
                    "attention_dispatch": dispatch_seen,
                    "measured_families": _families_measured(cases, launches, comm_info, training, power),
                    "module_kernels": sorted({"kv_write" for c in cases if c.params.get("includes") == "kv_write"}
                                             | {"quantize" for c in cases if c.kind == "quantize"}),
                    "attention_backends": sorted({c.backend for c in cases if c.kind == "attention"}),
                    "command": f"perfmodel fit {d}" + (f" --arch {spec}" if spec else ""),
                    **({"import": imported} if imported else {})},
    )
    save_profile(prof, d / "profile.json")
    per_row = json.dumps({"summary": validation, "ops": val_rows, "layers": layer_rows, "training": training,
                          "power": power}, indent=1, allow_nan=False) + "\n"
    if path.suffix == ".gz":  # imported tables: thousands of rows, kept compressed like their measurements
        import gzip

        from ..io import write_bytes_atomic

        write_bytes_atomic(d / "validation.json.gz", gzip.compress(per_row.encode("utf-8"), mtime=0))
    else:
        write_text_atomic(d / "validation.json", per_row)
    text = validation_markdown(prof, hw) + "\n" + training_markdown(training)
    if power is not None:
        text += "\n## Power\n\n```\n" + power_text(power) + "\n```\n"
    write_text_atomic(d / "validation.md", text)
    return text


def validation_markdown(prof: Profile, hw: HardwareSpec) -> str:
    v = prof.validation
    lines = [f"# Calibration `{prof.name}` on {prof.device or hw.name}", "",
             f"{prof.description}. Spec: `{hw.key}`.", "",
             "| split | class | shapes | median abs error | P90 abs error |", "|---|---|---|---|---|"]
    for split in ("held_out", "train"):
        for cls, e in v.get("ops", {}).get(split, {}).items():
            lines.append(f"| {split} | {cls} | {e['n']} | {e['median_abs_error']:.1%} | {e['p90_abs_error']:.1%} |")
    for phase, e in v.get("layers", {}).items():
        lines.append(f"| whole layers | {phase} | {e['n']} | {e['median_abs_error']:.1%} | {e['p90_abs_error']:.1%} |")
    lines.append("")
    lines.append("Fitted parameters (`*_eta`: ratios to the datasheet's dense rate or to the bandwidth; a compute")
    lines.append("ratio may pass 1 because datasheet rates are quoted at a sustained clock below the maximum boost):")
    lines.append("")
    skip = {"validation", "provenance", "residual_quantiles", "description"}
    for k, val in asdict(prof).items():
        if k not in skip:
            lines.append(f"- `{k}`: {json.dumps(val)}")
    return "\n".join(lines) + "\n"
