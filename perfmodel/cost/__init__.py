"""Operator -> time. One module per operator family; this one dispatches and labels the binding resource.

``mode="latency"`` is the calibrated model; ``mode="sol"`` the pure roofline (FLOPs / peak against bytes /
bandwidth, link bytes / link bandwidth, no overheads), for speed-of-light answers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..attention_kernels import AUTO, FP8_ETA_RATIO
from ..attention_kernels import resolve as resolve_kernel
from ..dtypes import TENSOR_RATE_KEY, bytes_per_element
from ..ops import COMM_KINDS, COMPUTE_KINDS, Op
from ..profile import Profile
from ..spec import HardwareSpec
from .attention import attention_time
from . import comm_tables
from .comm import collective_time, per_node_bytes
from .gemm import gemm_format, gemm_time, mem_scale, quant_prologue
from .scan import scan_time
from .backend import NP, STACKED
from .memory import memory_time
from .memory import standalone as standalone_time
from . import tables

BOUNDS = ("compute", "memory", "latency", "network")


@dataclass(frozen=True)
class OpTime:
    op: Op
    time: Any  # seconds for one run of the op (float or array)
    compute: Any  # the compute-limited part
    memory: Any  # the bandwidth-limited part
    bound: Any  # compute | memory | latency | network

    @property
    def total(self):
        """Time of all ``count`` runs in the step."""
        return self.time * self.op.count


def matmul_rate(hw: HardwareSpec, dtype: str, prof: Profile, scaling: str | None = None) -> tuple[float, float]:
    """(peak FLOP/s, achievable fraction) for a matrix product in ``dtype`` (``scaling``: how a quantized
    format is scaled, :func:`.gemm.gemm_format`)."""
    if dtype == "fp32":  # plain fp32 (no TF32): the vector units
        return hw.vector_fp32_flops, prof.gemm_eta.get("fp32", 0.85)
    key = TENSOR_RATE_KEY[dtype]
    fmt = gemm_format(dtype, scaling)
    for k in (key, "fp8", "bf16") if key in ("fp4", "int8") else (key, "bf16"):
        if k in hw.tensor_flops:
            # a format measured on its own (fp16 beside bf16, block-scaled fp8 beside per-tensor) keeps its own
            # efficiency; an unmeasured variant takes its dtype's
            eta = prof.gemm_eta.get(fmt) if k == key else None
            if eta is None and k == key:
                eta = prof.gemm_eta.get(dtype)
            return hw.tensor_flops[k], eta if eta is not None else prof.gemm_eta.get(k, prof.gemm_eta["bf16"])
    return hw.tensor_rate(key), prof.gemm_eta.get(key, prof.gemm_eta["bf16"])


def _label(t_c, t_m, t_total):
    """Which resource binds: the larger of compute and memory, or latency when fixed costs dominate."""
    fixed = t_total - np.maximum(t_c, t_m)
    return np.where(fixed > np.maximum(t_c, t_m), "latency", np.where(t_c >= t_m, "compute", "memory"))


def mem_kind(op: Op) -> str:
    """The efficiency class of a memory-bound op: a fused activation runs as one simple kernel."""
    return "fused" if op.params.get("fused") else op.kind


def _rows(op: Op) -> dict:
    """Rows and row length of a row-wise kernel (PyTorch's norms), else nothing."""
    if op.kind in ("rmsnorm", "layernorm") and not op.params.get("fused"):
        return {"rows": op.params["tokens"], "row_len": op.params["hidden"]}
    return {}


def _scalar(x):
    a = np.asarray(x)
    return a.item() if a.ndim == 0 else a


_UNSET = object()


def time_op(op: Op, hw: HardwareSpec, prof: Profile, *, mode: str = "latency", world: int = 1, xp=NP,
            standalone: bool = False, sustained=None, ratio=_UNSET) -> OpTime:
    """Time one op as it runs inside a step (a stream of kernels), or ``standalone``: timed on its own,
    as a microbenchmark times it (:func:`.memory.standalone`). ``sustained``: the power demand of the step it
    runs in (:func:`step_demand`), which sets the power-limited clock; None: timed alone. ``ratio``: the op's
    :func:`table_ratio` where the caller has it already (the same op timed at two clocks).

    With ``xp=XL`` (:mod:`.backend`) and Expr-valued shapes, spec figures and profile parameters, the
    result's ``time`` is the Excel formula of the same model (``bound`` is then None). Where the part's own
    measured table covers the op's shape, it anchors the numeric result (:mod:`.tables`)."""
    t, t_c, t_m = _time_parts(op, hw, prof, mode=mode, world=world, xp=xp, sustained=sustained)
    if mode != "sol" and xp.numeric and op.kind in tables.TABLE_KINDS:
        # where the part's own measured table covers the shape, it replaces the fitted alone time (:mod:`.tables`;
        # the workbook multiplies its formulas by the same ratio itself)
        if ratio is _UNSET:
            ratio = table_ratio(op, hw, prof)
        if ratio is not None:
            t, t_c, t_m = t * ratio, t_c * ratio, t_m * ratio
    if standalone and mode != "sol" and op.kind not in COMM_KINDS:
        t = standalone_time(op.kind, t, prof, op.bytes, hw.l2_bytes, hw.hbm_bandwidth, xp)
    if not xp.numeric:
        return OpTime(op, t, t_c, t_m, None)
    bound = "network" if op.kind in COMM_KINDS else _scalar(_label(t_c, t_m, t))
    return OpTime(op, _scalar(t), _scalar(t_c), _scalar(t_m), bound)


def table_ratio(op: Op, hw: HardwareSpec, prof: Profile):
    """The part's own measured table's anchor ratio for ``op`` (t_table / t_fit_alone, :mod:`.tables`): 1 where
    no table covers its shape; where no table applies to its family, the router's skew an engine's tables measured
    (:func:`.tables.skew_ratio`, for an op of a MoE module), else None."""
    if op.kind in COMM_KINDS:  # a collective: the folder's own collective rows (.comm_tables)
        return comm_tables.ratio(op, hw, prof)
    ratio = None
    if any(getattr(prof, f) for f in tables.TABLE_FIELD.values()):
        # a table's attention classes are keyed by the kernel they timed, which may be one the profile carries
        # from another backend's fit (SGLang's Triton kernels, timed as FlashAttention-2): the kernel the op runs
        kernel = attention_kernel(op, hw, prof).kernel.key if op.kind == "attention" else None
        ratio = tables.anchor_ratio(op, hw, prof, price=_alone_time, backend=kernel)
    return tables.skew_ratio(op, prof) if ratio is None else ratio


def _alone_time(op: Op, hw: HardwareSpec, prof: Profile):
    """An op's time alone, in a stream (no step around it): what a table row's module is fitted as."""
    return time_op(op, hw, prof).time


def _time_parts(op: Op, hw, prof: Profile, *, mode: str, world: int, xp, sustained):
    """(time, compute part, memory part) of one run of ``op``, on the backend ``xp``."""
    sol = mode == "sol"
    bw = hw.hbm_bandwidth
    k = op.kind
    p = op.params
    shape = (lambda x: np.asarray(x, dtype=float)) if xp.numeric else (lambda x: x)
    if k in COMM_KINDS:
        return collective_time(k, p["bytes"], p["group"], world, hw, prof, sol=sol, xp=xp,
                               kernel=p.get("kernel", ""), experts=p.get("experts", 0),
                               scaleout_bytes=per_node_bytes(p.get("per_node"), p["group"], hw),
                               scaleout_kernel=(p.get("per_node") or {}).get("kernel")), 0.0, 0.0
    if k in COMPUTE_KINDS:
        peak, eta = matmul_rate(hw, p["dtype"], prof, p.get("scaling"))
        if sol:
            t_c, t_m = op.flops / peak, op.bytes / bw
            return xp.maximum(t_c, t_m), t_c, t_m
        if k == "scan":  # Gated DeltaNet's chunked prefill: a latency-bound walk over chunks (.scan)
            t = scan_time(shape(p["sequences"]), shape(p["tokens"]), p["value_heads"], p["head_dim_v"], hw.sm_count,
                          prof.deltanet_scan, xp)
            return t, ideal_compute(op, hw, prof), op.bytes / bw
        if k == "gemm":
            fmt = gemm_format(p["dtype"], p.get("scaling"))
            stream = mem_scale(prof, fmt)
            if p.get("grouped"):  # an MoE's grouped kernel: its own compute and streaming efficiency
                kernel_fmt = gemm_format(p["dtype"], p.get("scaling"), p.get("weights"))
                eta = eta * grouped_scale(prof.gemm_grouped_eta, kernel_fmt)
                stream = stream * grouped_scale(prof.gemm_grouped_mem, kernel_fmt)
            t, t_c, t_m = gemm_time(shape(p["m"]), shape(p["n"]), shape(p["k"]), p["groups"], op.bytes, peak,
                                    hw.sm_count, bw, prof, eta, xp=xp, elem_bytes=bytes_per_element(p["dtype"]),
                                    sustained=sustained, mem_scale=stream, fmt=fmt,
                                    vector_peak=hw.vector_fp32_flops)
            if p.get("grouped"):
                t = t + prof.gemm_grouped_overhead_s
                if "pairs" in p:
                    t = t + p["pairs"] * pair_time(prof, kernel_fmt)
            if p.get("quant_input"):
                t = t + quant_prologue(shape(p["m"]) * p["groups"], shape(p["k"]), fmt, p["dtype"], bw, prof)
            return t, (ideal_compute(op, hw, prof) if t_c is None else t_c), t_m
        causal = np.asarray(p["causal"]) if xp.numeric else p["causal"]
        kernel = attention_kernel(op, hw, prof)
        return attention_time(shape(p["batch"]), p["heads_q"], p["heads_kv"], shape(p["seq_q"]), shape(p["seq_kv"]),
                              p["head_dim"], p["head_dim_v"], causal, op.bytes, peak, hw.sm_count, bw, prof, xp=xp,
                              packed=p.get("packed", False), sustained=sustained, backend=kernel.backend,
                              clock=hw.boost_clock_hz, kv_dtype=p.get("kv_dtype"), window=p.get("window", 0),
                              eta_scale=fp8_attention_scale(prof, kernel.backend) if p["dtype"] == "fp8" else 1.0,
                              fmt=p["dtype"], decode=op.phase == "decode")
    if sol:
        return op.bytes / bw, 0.0, op.bytes / bw
    t, t_m = memory_time(mem_kind(op), op.bytes, bw, prof, **_rows(op), sms=hw.sm_count, xp=xp)
    return t, 0.0, t_m


def pair_time(prof: Profile, fmt: str) -> float:
    """Routing time per token-expert pair of a MoE module (``moe_pair_s``): the format's own where its tables
    measured it, else none (each format's MoE runs a kernel family of its own; no other's floor applies)."""
    return prof.moe_pair_s.get(fmt, 0.0)


def grouped_scale(table: dict, fmt: str) -> float:
    """A grouped (MoE) kernel's efficiency relative to the dense one of its format: fitted per format where an
    engine's MoE tables measured it, else the dtype's, else any measured format's (the kernel family's), else 1."""
    if fmt in table:
        return table[fmt]
    base = fmt.split("_")[0]
    if base in table:
        return table[base]
    return table.get("bf16", next(iter(table.values()), 1.0))


def fp8_attention_scale(prof: Profile, backend: str) -> float:
    """fp8 attention's efficiency relative to the backend's bf16 one: fitted where the profile measured fp8
    attention (``attn_eta["<backend>.fp8"]``), else the FA3 paper's ratio (FP8_ETA_RATIO)."""
    own = prof.attn_eta.get(f"{backend}.fp8")
    return own / prof.attn_eta[backend] if own is not None else FP8_ETA_RATIO


def attention_kernel(op: Op, hw: HardwareSpec, prof: Profile):
    """The attention kernel an attention op runs on ``hw`` (:func:`perfmodel.attention_kernels.resolve`)."""
    return resolve_kernel(op.params.get("kernel", AUTO), attention_phase(op), hw.generation, prof.attn_default,
                          own_attention_backends(prof))


def own_attention_backends(prof: Profile) -> tuple[str, ...]:
    """Attention kernels ``prof`` has fitted parameters of their own for (beyond PyTorch's SDPA backends,
    which every profile has, measured or as defaults)."""
    return tuple(k for k in prof.attn_eta if "." not in k)


def attention_phase(op: Op) -> str:
    """decode for one query a sequence, else prefill (a standalone op is told by its shape)."""
    if op.phase in ("prefill", "decode"):
        return op.phase
    return "decode" if np.all(np.asarray(op.params["seq_q"]) <= 1) else "prefill"


def time_ops(ops: list[Op], hw: HardwareSpec, prof: Profile, *, mode: str = "latency", world: int = 1) -> list[OpTime]:
    """Times of a step's ops in a stream, the power-limited clock set by the step's power demand."""
    sustained = None if mode == "sol" else step_demand(ops, hw, prof)
    return [time_op(op, hw, prof, mode=mode, world=world, sustained=sustained if op.kind in COMPUTE_KINDS else None)
            for op in ops]


def time_steps(steps: list[list[Op]], hw: HardwareSpec, prof: Profile, *, mode: str = "latency",
               world: int = 1) -> list[list[OpTime]]:
    """:func:`time_ops` of several steps of one layout (a generation's decode steps at its first, middle and last
    context), each element exactly what :func:`time_ops` gives that step. An op the steps have alike (a GEMM's shape
    does not change with the context) is priced once: stacked over the steps' power-limited clocks (the
    :data:`.backend.STACKED` backend prices each element as alone), or once outright where no clock applies to it.
    Ops that differ, and steps with array shapes or figures (a sweep), are priced step by step."""
    stackable = len(steps) > 1 and len({len(ops) for ops in steps}) == 1 and _numbers(hw)
    demands = [None if mode == "sol" else step_demand(ops, hw, prof) for ops in steps]
    if not stackable or any(np.ndim(d) for d in demands):
        return [[time_op(op, hw, prof, mode=mode, world=world, sustained=d if op.kind in COMPUTE_KINDS else None)
                 for op in ops] for ops, d in zip(steps, demands)]
    out: list[list[OpTime]] = [[] for _ in steps]
    for alike in zip(*steps):
        first = alike[0]
        clocked = first.kind in COMPUTE_KINDS and mode != "sol"
        if not (all(_numeric_op(op) for op in alike) and all(op == first for op in alike[1:])):
            for j, op in enumerate(alike):
                out[j].append(time_op(op, hw, prof, mode=mode, world=world, sustained=demands[j] if clocked else None))
        elif not clocked:  # the same op, no clock to it: the same time in every step
            t = time_op(first, hw, prof, mode=mode, world=world)
            for j, op in enumerate(alike):
                out[j].append(OpTime(op, t.time, t.compute, t.memory, t.bound))
        else:
            t = time_op(first, hw, prof, mode=mode, world=world, xp=STACKED, sustained=np.array(demands))
            parts = [np.broadcast_to(np.asarray(x), (len(alike),)) for x in (t.time, t.compute, t.memory, t.bound)]
            for j, op in enumerate(alike):
                out[j].append(OpTime(op, *(x[j].item() for x in parts)))
    return out


def _numeric_op(op: Op) -> bool:
    """Whether an op's shape is numbers (no array of a sweep's)."""
    return not any(isinstance(v, np.ndarray) for v in (op.flops, op.bytes, op.count, op.kernels, *op.params.values()))


def _numbers(hw: HardwareSpec) -> bool:
    """Whether a spec's figures are numbers (no array of a sweep's)."""
    return not any(isinstance(v, np.ndarray) for v in (*vars(hw).values(), *hw.tensor_flops.values()))


def ideal_compute(op: Op, hw: HardwareSpec, prof: Profile):
    """An op's FLOPs at its format's achievable rate: its share of the step's compute-bound time."""
    peak, eta = matmul_rate(hw, op.params["dtype"], prof, op.params.get("scaling"))
    return op.flops / (peak * eta)


def demand_seconds(op: Op, hw: HardwareSpec, prof: Profile):
    """An op's power demand times its duration (:mod:`perfmodel.power_clock`): its FLOPs over the format's
    datasheet peak at the format's demand at peak, its minimal bytes over the bandwidth at the demand of
    streaming; a collective draws none (its link time is not counted either)."""
    from ..power_clock import clock_model

    if op.kind in COMM_KINDS:
        return 0.0
    model = clock_model(prof)
    out = model.demand_per_bandwidth * op.bytes / hw.hbm_bandwidth
    if op.kind in COMPUTE_KINDS:
        peak, _ = matmul_rate(hw, op.params["dtype"], prof, op.params.get("scaling"))
        out = out + model.format_demand(gemm_format(op.params["dtype"], op.params.get("scaling"))) * op.flops / peak
    return out


def time_estimate(op: Op, hw: HardwareSpec, prof: Profile, xp=NP):
    """A quick estimate of an op's time for its step's power demand: the larger of its FLOPs at the achievable
    rate and its bytes at the streaming efficiency (a collective: none)."""
    if op.kind in COMM_KINDS:
        return 0.0
    eta_m = prof.gemm_mem_eta if op.kind in COMPUTE_KINDS else prof.mem_eta.get(mem_kind(op), prof.mem_eta["copy"])
    t_m = op.bytes / (hw.hbm_bandwidth * eta_m)
    return xp.maximum(ideal_compute(op, hw, prof), t_m) if op.kind in COMPUTE_KINDS else t_m


def demand_parts(ops: list[Op], hw: HardwareSpec, prof: Profile):
    """(sum of demand-seconds, sum of estimated seconds) over a step's ops, every run counted."""
    num = den = 0.0
    for op in ops:
        if op.kind in COMM_KINDS:
            continue
        num = num + demand_seconds(op, hw, prof) * op.count
        den = den + time_estimate(op, hw, prof) * op.count
    return num, den


def step_demand(ops: list[Op], hw: HardwareSpec, prof: Profile):
    """The step's power demand (:mod:`perfmodel.power_clock`): the time-weighted mean of its ops' demands, which
    sets the power-limited clock of its compute ops: the controller follows power over tens of milliseconds, a
    step's kernels are far shorter."""
    num, den = demand_parts(ops, hw, prof)
    return num / np.maximum(den, 1e-12)


def clock_info(times: list[OpTime], hw: HardwareSpec, prof: Profile) -> dict:
    """The power-limited clock of one evaluated step (:mod:`perfmodel.power_clock`), for ``--format json``: the
    step's demand, the stretch it settles to under a repeated load and from rest, and each compute op's time in
    the step over its time alone (as its table timed it)."""
    from ..power_clock import clock_model, from_rest_stretch, steady_stretch

    model = clock_model(prof)
    ops = [t.op for t in times]
    demand = step_demand(ops, hw, prof)
    compute_s = sum(float(np.max(ideal_compute(o, hw, prof))) * float(np.max(o.count)) for o in ops
                    if o.kind in COMPUTE_KINDS)
    rows = []
    for t in times:
        if t.op.kind not in COMPUTE_KINDS:
            continue
        alone = float(np.max(time_op(t.op, hw, prof).time))
        rows.append({"name": t.op.name, "phase": t.op.phase, "alone_ms": round(alone * 1e3, 6),
                     "in_step_ms": round(float(np.max(t.time)) * 1e3, 6),
                     "in_step_over_alone": round(float(np.max(t.time)) / alone, 4) if alone > 0 else None})
    d = float(np.max(demand))
    return {"step_demand": round(d, 4), "steady_stretch": round(float(steady_stretch(d, model.alpha)), 4),
            "from_rest_stretch": round(float(from_rest_stretch(model, d, compute_s)), 4),
            "compute_stretch_ms": round(compute_s * 1e3, 4), "model": model.source, "ops": rows}


def family(kind: str) -> str:
    """The residual family an op kind's uncertainty comes from."""
    if kind in ("gemm", "attention"):
        return kind
    if kind in COMM_KINDS:
        return "comm"
    return "memory"
