"""Operator -> time. One module per operator family; this one dispatches and labels the binding resource.

``mode="latency"`` is the calibrated model; ``mode="sol"`` the pure roofline (FLOPs / peak against bytes /
bandwidth, link bytes / link bandwidth, no overheads), for speed-of-light answers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import TENSOR_RATE_KEY, bytes_per_element
from ..ops import COMM_KINDS, COMPUTE_KINDS, Op
from ..profile import Profile
from ..spec import HardwareSpec
from .attention import attention_time
from .comm import collective_time
from .gemm import gemm_time
from .memory import memory_time
from .memory import standalone as standalone_time

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


def _rate(hw: HardwareSpec, dtype: str, prof: Profile) -> tuple[float, float]:
    """(peak FLOP/s, achievable fraction) for a matrix product in ``dtype``."""
    if dtype == "fp32":  # plain fp32 (no TF32): the vector units
        return hw.vector_fp32_flops, prof.gemm_eta.get("fp32", 0.85)
    key = TENSOR_RATE_KEY[dtype]
    for k in (key, "fp8", "bf16") if key in ("fp4", "int8") else (key, "bf16"):
        if k in hw.tensor_flops:
            # a format measured on its own (fp16 beside bf16) keeps its own efficiency
            eta = prof.gemm_eta.get(dtype) if k == key else None
            return hw.tensor_flops[k], eta if eta is not None else prof.gemm_eta.get(k, prof.gemm_eta["bf16"])
    return hw.tensor_rate(key), prof.gemm_eta.get(key, prof.gemm_eta["bf16"])


def _label(t_c, t_m, t_total):
    """Which resource binds: the larger of compute and memory, or latency when fixed costs dominate."""
    fixed = t_total - np.maximum(t_c, t_m)
    return np.where(fixed > np.maximum(t_c, t_m), "latency", np.where(t_c >= t_m, "compute", "memory"))


def _mem_kind(op: Op) -> str:
    """The efficiency class of a memory-bound op: a fused activation runs as one simple kernel."""
    return "fused" if op.params.get("fused") else op.kind


def _rows(op: Op) -> dict:
    """Rows and row length of a row-wise kernel (norms), else nothing."""
    if op.kind in ("rmsnorm", "layernorm"):
        return {"rows": op.params["tokens"], "row_len": op.params["hidden"]}
    return {}


def _arr(x):
    return np.asarray(x, dtype=float)


def _scalar(x):
    a = np.asarray(x)
    return a.item() if a.ndim == 0 else a


def time_op(op: Op, hw: HardwareSpec, prof: Profile, *, mode: str = "latency", world: int = 1, xp=None,
            standalone: bool = False, sustained=None) -> OpTime:
    """Time one op as it runs inside a step (a stream of kernels), or ``standalone``: timed on its own,
    as a microbenchmark times it (:func:`.memory.standalone`).

    With ``xp=XL`` (:mod:`.backend`) and Expr-valued shapes, spec figures and profile parameters, the
    result's ``time`` is the Excel formula of the same model (``bound`` is then None)."""
    if xp is not None:
        return _time_op_expr(op, hw, prof, mode=mode, world=world, xp=xp, sustained=sustained)
    t = _time_op(op, hw, prof, mode=mode, world=world, sustained=sustained)
    if standalone and mode != "sol" and op.kind not in COMM_KINDS:
        total = standalone_time(op.kind, t.time, prof, op.bytes, hw.l2_bytes, hw.hbm_bandwidth)
        return OpTime(op, _scalar(total), t.compute, t.memory, _scalar(_label(t.compute, t.memory, total)))
    return t


def _time_op(op: Op, hw: HardwareSpec, prof: Profile, *, mode: str, world: int, sustained=None) -> OpTime:
    sol = mode == "sol"
    bw = hw.hbm_bandwidth
    k = op.kind
    if k in COMM_KINDS:
        t = collective_time(k, op.params["bytes"], op.params["group"], world, hw, prof, sol=sol)
        return OpTime(op, _scalar(t), 0.0, 0.0, "network")
    if k == "gemm":
        peak, eta = _rate(hw, op.params["dtype"], prof)
        if sol:
            t_c, t_m = op.flops / peak, op.bytes / bw
            t = np.maximum(t_c, t_m)
        else:
            p = op.params
            t, t_c, t_m = gemm_time(_arr(p["m"]), _arr(p["n"]), _arr(p["k"]), p["groups"], op.bytes, peak,
                                    hw.sm_count, bw, prof, eta, elem_bytes=bytes_per_element(p["dtype"]),
                                    sustained=sustained)
    elif k == "attention":
        peak, _ = _rate(hw, op.params["dtype"], prof)
        if sol:
            t_c, t_m = op.flops / peak, op.bytes / bw
            t = np.maximum(t_c, t_m)
        else:
            p = op.params
            t, t_c, t_m = attention_time(_arr(p["batch"]), p["heads_q"], p["heads_kv"], _arr(p["seq_q"]),
                                         _arr(p["seq_kv"]), p["head_dim"], p["head_dim_v"], np.asarray(p["causal"]),
                                         op.bytes, peak, hw.sm_count, bw, prof, packed=p.get("packed", False),
                                         sustained=sustained)
    else:
        if sol:
            t_m = op.bytes / bw
            t, t_c = t_m, 0.0
        else:
            t, t_m = memory_time(_mem_kind(op), op.bytes, bw, prof, **_rows(op), sms=hw.sm_count)
            t_c = 0.0
    return OpTime(op, _scalar(t), _scalar(t_c), _scalar(t_m), _scalar(_label(t_c, t_m, t)))


def time_ops(ops: list[Op], hw: HardwareSpec, prof: Profile, *, mode: str = "latency", world: int = 1) -> list[OpTime]:
    """Times of a step's ops in a stream, the power-limited clock set by the step's whole compute time."""
    first = [time_op(op, hw, prof, mode=mode, world=world) for op in ops]
    if mode == "sol":
        return first
    sustained = sustained_compute(ops, hw, prof)
    return [time_op(t.op, hw, prof, mode=mode, world=world, sustained=sustained) if t.op.kind in COMPUTE_KINDS else t
            for t in first]


def ideal_compute(op: Op, hw: HardwareSpec, prof: Profile):
    """An op's FLOPs at its format's achievable rate: its share of the step's compute-bound time."""
    peak, eta = _rate(hw, op.params["dtype"], prof)
    return op.flops / (peak * eta)


def sustained_compute(ops: list[Op], hw: HardwareSpec, prof: Profile):
    """How long a step keeps the tensor cores busy (GEMM and attention FLOPs at their achievable rates,
    every run counted): the stretch that sets the power-limited clock."""
    total = 0.0
    for op in ops:
        if op.kind in COMPUTE_KINDS:
            total = total + ideal_compute(op, hw, prof) * op.count
    return total


def family(kind: str) -> str:
    """The residual family an op kind's uncertainty comes from."""
    if kind in ("gemm", "attention"):
        return kind
    if kind in COMM_KINDS:
        return "comm"
    return "memory"


def _time_op_expr(op: Op, hw, prof, *, mode: str, world: int, xp, sustained=None) -> OpTime:
    sol = mode == "sol"
    bw = hw.hbm_bandwidth
    k = op.kind
    p = op.params
    if k in COMM_KINDS:
        return OpTime(op, collective_time(k, p["bytes"], p["group"], world, hw, prof, sol=sol), 0.0, 0.0, None)
    if k in ("gemm", "attention"):
        peak, eta = _rate(hw, p["dtype"], prof)
        if sol:
            t_c, t_m = op.flops / peak, op.bytes / bw
            return OpTime(op, xp.maximum(t_c, t_m), t_c, t_m, None)
        if k == "gemm":
            t, t_c, t_m = gemm_time(p["m"], p["n"], p["k"], p["groups"], op.bytes, peak, hw.sm_count, bw, prof, eta,
                                    xp=xp, elem_bytes=bytes_per_element(p["dtype"]), sustained=sustained)
            t_c = ideal_compute(op, hw, prof) if t_c is None else t_c
        else:
            t, t_c, t_m = attention_time(p["batch"], p["heads_q"], p["heads_kv"], p["seq_q"], p["seq_kv"], p["head_dim"],
                                         p["head_dim_v"], p["causal"], op.bytes, peak, hw.sm_count, bw, prof, xp=xp,
                                         packed=p.get("packed", False), sustained=sustained)
        return OpTime(op, t, t_c, t_m, None)
    if sol:
        return OpTime(op, op.bytes / bw, 0.0, op.bytes / bw, None)
    t, t_m = memory_time(_mem_kind(op), op.bytes, bw, prof, **_rows(op), sms=hw.sm_count, xp=xp)
    return OpTime(op, t, 0.0, t_m, None)
