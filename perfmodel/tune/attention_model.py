"""Predicted time of the Triton flash-attention forward of :mod:`.kernels` for one configuration.

A CTA owns BLOCK_M query rows of one head and walks BLOCK_N keys a step (only up to the diagonal when
causal). A step is two MMAs (Q K^T and P V: 4 x BLOCK_M x BLOCK_N x HEAD_DIM FLOPs), the online softmax
(one exp2 an element on the special-function units, about six fp32 operations an element and the
rescaling of the accumulator), the K and V blocks through L2 -> SM and shared memory. One CTA runs these
in sequence; CTAs resident together on an SM (and the warpgroups of one CTA) overlap one's softmax with
another's MMAs, so the SM's
throughput is set by the busiest unit (*resource time*) while a lone CTA pays their sum. Loads are
hidden by ``num_stages - 1`` steps in flight. Occupancy, waves, HBM and the p-norm join are as in
:mod:`.gemm_model`.
"""
from __future__ import annotations

from ..dtypes import bytes_per_element
from .gemm_model import Prediction, _ceil_div, pnorm
from .machine import FP32_OPS_PER_CLK, SFU_OPS_PER_CLK, STEP_OVERHEAD_CLK, Machine
from .resources import attention_footprint

FP32_OPS_PER_SCORE = 6.0  # scale, mask select, running max, subtract, row sum, convert (count of the kernel's ops)


def key_blocks(seq_q: int, seq_kv: int, block_m: int, block_n: int, causal: bool) -> list[int]:
    """Key blocks each query block walks, in launch order."""
    nq = _ceil_div(seq_q, block_m)
    if not causal:
        return [_ceil_div(seq_kv, block_n)] * nq
    shift = seq_kv - seq_q
    return [_ceil_div(min(seq_kv, (i + 1) * block_m + shift), block_n) for i in range(nq)]


def predict_attention(batch: int, heads_q: int, heads_kv: int, seq_q: int, seq_kv: int, head_dim: int,
                      causal: bool, cfg, mach: Machine, hw, prof, dtype: str = "bf16") -> Prediction:
    fp = attention_footprint(hw, cfg, head_dim, dtype)
    if fp.invalid:
        return Prediction(cfg, False, None, fp, {"bound": "invalid"}, [fp.invalid])
    e = bytes_per_element(dtype)
    bm, bn, d = cfg.block_m, cfg.block_n, head_dim
    blocks = key_blocks(seq_q, seq_kv, bm, bn, causal)
    heads = batch * heads_q
    ctas = len(blocks) * heads
    nb_avg = sum(blocks) / len(blocks)
    nb_max = max(blocks)

    t_tc = 4.0 * bm * bn * d / mach.mma_rate(fp.mma)
    t_soft = (bm * bn / (SFU_OPS_PER_CLK * mach.clock_hz)
              + (FP32_OPS_PER_SCORE * bm * bn + bm * d) / (FP32_OPS_PER_CLK * mach.clock_hz))
    kv_bytes = 2.0 * bn * d * e
    readers = max(1, cfg.num_warps // 4) if fp.mma == "wgmma" else max(1, min(cfg.num_warps, bm // 16))
    spills = fp.spill_regs * 4.0 * fp.threads * 2.0  # stored and reloaded once a step
    t_smem = (kv_bytes * (1 + readers) + spills) / mach.smem_bw_sm
    t_l2 = kv_bytes / mach.l2_bw_sm
    t_res = max(t_tc, t_soft, t_smem, t_l2)
    # a lone CTA's warpgroups take turns: one's softmax runs under another's MMAs
    groups = max(1, cfg.num_warps // 4)
    t_serial = (max(t_tc, t_soft, (t_tc + t_soft) / groups, t_smem, t_l2) + STEP_OVERHEAD_CLK / mach.clock_hz
                + spills / mach.smem_bw_sm)
    lat = mach.load_latency_s
    in_flight = cfg.num_stages - 1
    t_step_alone = t_serial + lat if in_flight < 1 else max(t_serial, lat / in_flight)
    edges = 2.0 * bm * d * e / mach.l2_bw_sm  # load Q, store O
    c = fp.ctas_per_sm
    q = _ceil_div(ctas, mach.sms)
    t_sm_res = q * (nb_avg * t_res + edges)
    t_sm_lat = max(_ceil_div(q, c) * (lat + nb_avg * t_step_alone + edges), lat + nb_max * t_step_alone + edges)
    t_sm = max(t_sm_res, t_sm_lat)

    qo_bytes = 2.0 * heads * seq_q * d * e
    kv_total = 2.0 * batch * heads_kv * seq_kv * d * e
    heads_in_flight = max(1.0, min(ctas, mach.sms * c) / len(blocks))
    if heads_in_flight * 2.0 * seq_kv * d * e > 0.5 * mach.l2_bytes:  # K, V of the running heads spill L2
        kv_total = ctas * nb_avg * kv_bytes
    t_hbm = (qo_bytes + kv_total) / mach.hbm_bw
    total = pnorm(t_sm, t_hbm, prof.gemm_softness) + mach.launch_s

    resource = {t_tc: "tensor", t_soft: "softmax", t_smem: "shared memory", t_l2: "L2->SM"}[t_res]
    bound = "HBM" if t_hbm >= t_sm else ("latency/issue" if t_sm_lat > t_sm_res else resource)
    parts = {"bound": bound, "ctas": ctas, "ctas_per_sm": c, "occupancy_limit": fp.limit, "busiest_sm_ctas": q,
             "waves": ctas / (mach.sms * c), "key_blocks_avg": nb_avg, "key_blocks_max": nb_max, "sm_s": t_sm,
             "hbm_s": t_hbm, "mma": fp.mma, "smem_bytes": fp.smem_bytes, "regs": fp.regs}
    reasons = [f"{bound}-bound", f"{ctas} CTAs, {c}/SM ({fp.limit})"]
    if fp.mma != "wgmma" and mach.generation != "ampere":
        reasons.append("mma.sync path")
    if t_soft > t_tc:
        reasons.append(f"softmax {t_soft / t_tc:.2f}x the MMA time a step")
    if fp.spill_regs:
        reasons.append(f"~{fp.regs} registers/thread: spills")
    return Prediction(cfg, True, total, fp, parts, reasons)
