"""Training operator -> time, through the inference cost model plus the fitted training factors.

Every forward op, data-gradient and weight-gradient GEMM, memory-bound backward kernel and collective is
timed by :func:`perfmodel.cost.time_op` (the same tile, wave, roofline and alpha-beta formulas as
inference). On top, ``Profile.training`` (fitted by :mod:`perfmodel.fit.training` from the suite's
``train_kernel`` rows) holds what only training kernels show:

- ``gemm_dgrad_scale`` / ``gemm_wgrad_scale``: measured time of the transposed-operand GEMMs of the backward
  over the model's time for the same (m, n, k) (cuBLAS picks other kernels for NT and TN layouts);
- ``attn_bwd_ratio[backend]``: fused attention backward over the model's forward time of the same shape,
  per SDPA backend that ran (flash, cudnn, efficient), keyed as the forward op's kernel resolves;
- ``mem_bwd_scale[kind]``: RMSNorm and SwiGLU backward over the model's time for their backward bytes;
- ``loss_scale``: cross-entropy forward + backward over the model's time for their minimal bytes;
- ``adamw_eta`` / ``adamw_alpha_s``: the fused optimizer streams ``bytes / (eta x HBM bandwidth) + alpha``;
- ``grouped_gemm_eta`` / ``grouped_gemm_rows0`` (keyed ``<format>.<pass>``, fitted by
  :func:`perfmodel.fit.training.fit_grouped` from a folder's ``grouped-gemm/`` rows,
  :mod:`perfmodel.measure.grouped_gemm`): a routed expert's product (:func:`.graph.expert_pass`: forward, data
  gradient, weight gradient) runs a grouped kernel over the local experts, timed as the dense GEMM model's time
  over ``eta`` (the grouped kernel's rate relative to the dense model's) times ``1 + rows0 / rows`` (each expert
  pays ``rows0`` rows of work beyond its own ``rows``: per-expert scheduling and tile set-up; for the weight
  gradient, whose reduction runs over the expert's rows, its K-loop's fill and the write of a whole expert's
  weights). Empty (no grouped rows measured): factor 1, the dense GEMM model alone;
- ``fp8_split_over_fast`` (fitted by :func:`perfmodel.fit.training.fit_fp8_accumulation` from a folder's
  ``fp8-accumulation*/`` rows, :mod:`perfmodel.measure.fp8_accumulation`): a per-tensor fp8 product's time with
  split accumulation over fast; the passes a recipe accumulates fast (the forward) take the dense model's time
  over it (:func:`accumulation_factor`).

Collectives run over a group whose neighbours sit ``stride`` ranks apart in Megatron's order (TP fastest):
as many of its ranks share a scale-up domain as the domain holds strides, the rest cross the scale-out
network (:func:`group_spec`).
"""
from __future__ import annotations

from dataclasses import replace

from ..cost import time_op
from ..cost.gemm import gemm_format
from ..ops import COMPUTE_KINDS
from ..profile import Profile
from ..spec import HardwareSpec
from ..step_accounting import host_cost
from .graph import FP8_FAST_ACCUMULATION, TrainOp, expert_pass

# Documented defaults, each an estimate with its reason; a fitted profile's ``training`` dict overrides them.
TRAIN_DEFAULTS: dict = {
    # cuBLAS reaches its NN rate on the transposed layouts within a few percent on large shapes (estimate)
    "gemm_dgrad_scale": 1.0,
    "gemm_wgrad_scale": 1.0,
    # FlashAttention-2 (Dao 2023) runs its backward at ~63% of A100 peak against ~73% forward, with 2.5x the
    # FLOPs: 2.5 x 73 / 63 = 2.9 (estimate, the same for every backend until measured)
    "attn_bwd_ratio": {"flash": 2.9, "cudnn": 2.9, "efficient": 2.9},
    # a backward kernel streams its bytes as efficiently as the forward kernel of its kind (estimate)
    "mem_bwd_scale": {},
    # cross-entropy in a few fused kernels over the minimal bytes, at the reduce kernel's efficiency (estimate)
    "loss_scale": 1.0,
    # a fused multi-tensor AdamW streams parameters, gradients and states like a copy (estimate: ~0.8 of HBM
    # bandwidth) with a few launches
    "adamw_eta": 0.8,
    "adamw_alpha_s": 2.0e-5,
    # the routed experts' grouped kernel at the dense GEMM model's rate (no grouped-gemm rows measured: factor 1)
    "grouped_gemm_eta": {},
    "grouped_gemm_rows0": {},
    # a per-tensor fp8 product's time with split accumulation over its time with fast accumulation: the dense GEMM
    # model is fitted to split-accumulation rows (torch._scaled_mm's default), and the recipes run the forward fast
    # (perfmodel.train.graph.FP8_FAST_ACCUMULATION); 1 = no measurement, the forward priced as measured split
    "fp8_split_over_fast": 1.0,
}


def training_params(prof: Profile) -> dict:
    """The profile's fitted training parameters over the documented defaults (dicts merged key by key)."""
    out = {}
    fitted = prof.training or {}
    for k, v in TRAIN_DEFAULTS.items():
        f = fitted.get(k)
        if isinstance(v, dict):
            merged = dict(v)
            if isinstance(f, dict):
                merged.update({kk: float(vv) for kk, vv in f.items()})
            out[k] = merged
        else:
            out[k] = float(f) if isinstance(f, (int, float)) else v
    return out


def attention_backend(op, hw: HardwareSpec, prof: Profile) -> str:
    """The measured backend (flash, cudnn, efficient) that times an attention op's kernel on ``hw``."""
    try:
        from ..cost import attention_kernel
    except ImportError:  # a cost model with one (flash) attention backend
        return "flash"
    return attention_kernel(op, hw, prof).backend


def grouped_factor(t: TrainOp, params: dict) -> float:
    """The factor on the dense GEMM model's time of a routed expert's product (module doc): ``(1 + rows0 / rows)
    / eta`` of its pass, ``rows`` the expert's rows (the weight gradient's K); the format's own parameters where
    measured, else its dtype's, else bf16's, else any measured format's (a grouped kernel's rate relative to the
    dense kernel of its format carries to another format as the serving MoE ratios do,
    :func:`perfmodel.cost.grouped_scale`). 1 for any other op and where no grouped rows were measured."""
    step = expert_pass(t)
    eta, rows0 = params.get("grouped_gemm_eta") or {}, params.get("grouped_gemm_rows0") or {}
    if step is None or not eta:
        return 1.0
    p = t.op.params
    fmt = gemm_format(p["dtype"], p.get("scaling"), p.get("weights"))
    measured = sorted({k.rsplit(".", 1)[0] for k in eta})
    for key in (fmt, fmt.split("_")[0], "bf16", measured[0]):
        if f"{key}.{step}" in eta:
            rows = float(p["k"] if step == "wgrad" else p["m"])
            return (1.0 + rows0.get(f"{key}.{step}", 0.0) / max(rows, 1.0)) / eta[f"{key}.{step}"]
    return 1.0


def accumulation_factor(t: TrainOp, params: dict) -> float:
    """The factor on the dense GEMM model's time for how the recipe accumulates a per-tensor fp8 product: 1 /
    ``fp8_split_over_fast`` for a pass the recipe runs with fast accumulation (the forward), 1 for a split one (the
    model's own, measured so) and for every other product (bf16; block-scaled fp8, which splits every pass)."""
    p = t.op.params
    if t.op.kind != "gemm" or p.get("dtype") != "fp8" or gemm_format("fp8", p.get("scaling")) != "fp8":
        return 1.0
    return 1.0 / params["fp8_split_over_fast"] if FP8_FAST_ACCUMULATION.get(t.role, False) else 1.0


def bwd_ratio(params: dict, backend: str) -> float:
    r = params["attn_bwd_ratio"]
    for key in (backend, "default", "flash"):
        if key in r:
            return float(r[key])
    return TRAIN_DEFAULTS["attn_bwd_ratio"]["default"]


def group_spec(hw: HardwareSpec, stride: int) -> HardwareSpec:
    """The spec as a group whose neighbours are ``stride`` ranks apart sees it: its scale-up domain holds
    ``domain // stride`` of the group's ranks (one when the stride spans a whole domain or more)."""
    if stride <= 1:
        return hw
    return replace(hw, scaleup_domain=max(1, hw.scaleup_domain // stride))


def p2p_world(hw: HardwareSpec, stride: int) -> int:
    """The ``world`` that makes :func:`perfmodel.cost.comm.collective_time` send a point-to-point message over
    NVLink (neighbours in one domain) or the scale-out network."""
    return 2 if stride < hw.scaleup_domain else hw.scaleup_domain + 1


def optimizer_time(nbytes: float, hw: HardwareSpec, params: dict, mode: str) -> float:
    if mode == "sol":
        return nbytes / hw.hbm_bandwidth
    return params["adamw_alpha_s"] + nbytes / (params["adamw_eta"] * hw.hbm_bandwidth)


def time_train_op(t: TrainOp, hw: HardwareSpec, prof: Profile, params: dict, *, mode: str = "latency",
                  sustained=None, standalone: bool = False) -> tuple[float, str]:
    """(seconds for one run, binding resource) of a training op."""
    op = t.op
    sol = mode == "sol"
    if t.is_comm:
        if op.kind == "p2p":
            r = time_op(op, hw, prof, mode=mode, world=p2p_world(hw, t.stride))
        else:
            r = time_op(op, group_spec(hw, t.stride), prof, mode=mode)
        return float(r.time), "network"
    if t.role == "optimizer":
        return optimizer_time(float(op.bytes), hw, params, mode), "memory"
    sus = sustained if op.kind in COMPUTE_KINDS else None
    if t.role == "attn_bwd" and not sol and t.fwd is not None:
        r = time_op(t.fwd, hw, prof, mode=mode, sustained=sus, standalone=standalone)
        time = float(r.time) * bwd_ratio(params, attention_backend(t.fwd, hw, prof))
    else:
        r = time_op(op, hw, prof, mode=mode, sustained=sus, standalone=standalone)
        time = float(r.time)
    if not sol:
        time *= grouped_factor(t, params) * accumulation_factor(t, params)
        if t.role == "dgrad":
            time *= params["gemm_dgrad_scale"]
        elif t.role == "wgrad":
            time *= params["gemm_wgrad_scale"]
        elif t.role == "mem_bwd":
            time *= params["mem_bwd_scale"].get(op.kind, 1.0)
        elif t.role in ("loss", "loss_bwd"):
            time *= params["loss_scale"]
        if not standalone:
            time = max(time, host_cost(op, prof))  # training runs eagerly: the host must issue each kernel
    return time, str(r.bound)
