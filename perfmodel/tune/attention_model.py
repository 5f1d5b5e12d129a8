"""Predicted time of the Triton flash-attention forward of :mod:`.kernels` for configurations of one shape.

A CTA owns BLOCK_M query rows of one head and walks BLOCK_N keys a step (only up to the diagonal when
causal). A step is two MMAs (Q K^T and P V: 4 x BLOCK_M x BLOCK_N x HEAD_DIM FLOPs), the online softmax
(one exp2 an element on the special-function units, ``attn_fp32_ops_per_score`` fp32 operations an element
and the rescaling of the accumulator), the K and V blocks through L2 -> SM and shared memory. One CTA runs
these in sequence; CTAs resident together on an SM (and the warpgroups of one CTA) overlap one's softmax
with another's MMAs, so the SM's throughput is set by the busiest unit (*resource time*) while a lone CTA
pays their sum. When the score tile is split over warps along the key axis (BLOCK_M too short for all the
warps: a 64-row tile on two warpgroups, or mma.sync warps beyond BLOCK_M / 16), the row max and row sum
cross warps through shared memory and P is re-laid-out before P @ V: ``attn_split_clk`` of SM time a
step for each extra warp column, which co-resident CTAs do not hide. Loads go ``num_stages - 1`` steps ahead (the latency
model of :mod:`.gemm_model`).
Occupancy, waves, HBM and the p-norm joins are as in :mod:`.gemm_model`; L2 serves the K/V re-reads
while the heads running at once (a query head's consecutive blocks first, GQA heads sharing one K/V
head) fit in half of it, and a proportionally smaller share of them when they do not.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import bytes_per_element
from .gemm_model import Prediction, ceil_div, expected_wait, pnorm, pnorm3, sm_rounds
from .machine import FP32_OPS_PER_CLK, SFU_OPS_PER_CLK, Machine
from .resources import attention_footprint

FEATURES = ("batch", "hq", "hkv", "sq", "skv", "d", "nq", "nb_avg", "nb_max", "bm", "bn", "w", "st", "wgmma", "c",
            "spill", "threads", "smem")


def key_blocks(seq_q: int, seq_kv: int, block_m: int, block_n: int, causal: bool) -> list[int]:
    """Key blocks each query block walks, in launch order."""
    nq = ceil_div(seq_q, block_m)
    if not causal:
        return [ceil_div(seq_kv, block_n)] * nq
    shift = seq_kv - seq_q
    return [ceil_div(min(seq_kv, (i + 1) * block_m + shift), block_n) for i in range(nq)]


def attention_features(shape: dict, configs, footprints) -> dict:
    f = {name: [] for name in FEATURES}
    for cfg, fp in zip(configs, footprints):
        blocks = key_blocks(shape["seq_q"], shape["seq_kv"], cfg.block_m, cfg.block_n, bool(shape["causal"]))
        for name, v in (("batch", shape["batch"]), ("hq", shape["heads_q"]), ("hkv", shape["heads_kv"]),
                        ("sq", shape["seq_q"]), ("skv", shape["seq_kv"]), ("d", shape["head_dim"]),
                        ("nq", len(blocks)), ("nb_avg", sum(blocks) / len(blocks)), ("nb_max", max(blocks)),
                        ("bm", cfg.block_m), ("bn", cfg.block_n), ("w", cfg.num_warps), ("st", cfg.num_stages),
                        ("wgmma", fp.mma == "wgmma"), ("c", fp.ctas_per_sm), ("spill", fp.spill_regs),
                        ("threads", fp.threads), ("smem", fp.smem_bytes)):
            f[name].append(v)
    return {k: np.asarray(v, dtype=bool if k == "wgmma" else float) for k, v in f.items()}


def concat_features(parts: list[dict]) -> dict:
    return {name: np.concatenate([p[name] for p in parts]) for name in FEATURES}


def warp_columns(f: dict):
    """Warps (mma.sync) or warpgroups (wgmma) the score tile is split over along the key axis."""
    groups = np.maximum(1, f["w"] // 4)
    wg_cols = np.maximum(1, groups // np.maximum(1, np.minimum(groups, f["bm"] // 64)))
    ms_cols = np.maximum(1, f["w"] // np.maximum(1, np.minimum(f["w"], f["bm"] // 16)))
    return np.where(f["wgmma"], wg_cols, ms_cols)


def attention_times(f: dict, mach: Machine, e: float = 2.0) -> dict:
    c = mach.c
    bm, bn, d = f["bm"], f["bn"], f["d"]
    clock = mach.clock_hz
    heads = f["batch"] * f["hq"]
    ctas = f["nq"] * heads

    t_tc = 4.0 * bm * bn * d / mach.mma_rate(f["wgmma"])
    t_soft = (bm * bn / (SFU_OPS_PER_CLK * clock)
              + (c.attn_fp32_ops_per_score * bm * bn + bm * d) / (FP32_OPS_PER_CLK * clock))
    kv_bytes = 2.0 * bn * d * e
    readers = np.where(f["wgmma"], np.maximum(1, f["w"] // 4), np.maximum(1, np.minimum(f["w"], bm // 16)))
    t_spill = mach.spill_time(f["spill"], f["threads"], np.maximum(f["c"], 1), f["smem"])
    t_smem = kv_bytes * (1 + readers) / mach.smem_bw_sm + t_spill
    t_l2 = kv_bytes / mach.l2_bw_sm
    # the cross-warp softmax of a split score tile holds the SM (barriers, shared-memory round trips):
    # co-resident CTAs do not hide it
    split = (warp_columns(f) - 1) * c.attn_split_clk / clock
    t_res = np.maximum(pnorm3(t_tc, t_smem, t_l2, c.resource_join), t_soft) + split
    # a lone CTA's warpgroups take turns: one's softmax runs under another's MMAs
    groups = np.maximum(1, f["w"] // 4)
    overlap = np.maximum(np.maximum(t_tc, t_soft), (t_tc + t_soft) / groups)
    t_serial = np.maximum(overlap, np.maximum(t_smem, t_l2)) + c.step_overhead_clk / clock + split + t_spill
    lat = c.load_latency_s + c.latency_tail_s
    t_step_alone = t_serial + expected_wait((f["st"] - 1) * t_serial, c.load_latency_s, c.latency_tail_s)
    edges = 2.0 * bm * d * e / mach.l2_bw_sm  # load Q, store O
    cps = np.maximum(f["c"], 1)
    q = ceil_div(ctas, mach.sms)
    t_rounds, t_sm_res, t_sm_lat = sm_rounds(q, cps, f["nb_avg"] * t_res + edges,
                                             lat + f["nb_avg"] * t_step_alone + edges, c.overlap_join)
    t_sm = np.maximum(t_rounds, lat + f["nb_max"] * t_step_alone + edges)  # the longest causal row

    qo_bytes = 2.0 * heads * f["sq"] * d * e
    kv_distinct = 2.0 * f["batch"] * f["hkv"] * f["skv"] * d * e
    kv_reads = ctas * f["nb_avg"] * kv_bytes  # every CTA's K/V blocks, as read from L2
    group = f["hq"] / f["hkv"]
    heads_in_flight = np.maximum(1.0, np.minimum(ctas, mach.sms * cps) / f["nq"])
    kv_heads_in_flight = np.maximum(1.0, np.ceil(heads_in_flight / group))
    # the share of re-reads L2 serves: all while the running heads' K/V fit in half of it, then less
    working_set = kv_heads_in_flight * 2.0 * f["skv"] * d * e
    reuse = np.minimum(1.0, 0.5 * mach.l2_bytes / working_set)
    kv_total = kv_distinct + (1.0 - reuse) * np.maximum(kv_reads - kv_distinct, 0.0)
    writeback = c.flush_writeback * np.minimum(qo_bytes + kv_distinct, mach.l2_bytes)
    t_hbm = (qo_bytes + kv_total + writeback) / mach.hbm_bw
    total = pnorm(t_sm, t_hbm, c.softness) + c.launch_s
    return {"time": total, "t_tc": t_tc, "t_soft": t_soft, "t_smem": t_smem, "t_l2": t_l2, "sm_s": t_sm,
            "sm_res_s": t_sm_res, "sm_lat_s": t_sm_lat, "hbm_s": t_hbm, "ctas": ctas, "split_s": split}


def predict_attention_space(shape: dict, configs, mach: Machine, hw, dtype: str = "bf16") -> list[Prediction]:
    fps = [attention_footprint(hw, cfg, shape["head_dim"], dtype, bool(shape["causal"])) for cfg in configs]
    out: list[Prediction | None] = [None] * len(configs)
    valid = [i for i, fp in enumerate(fps) if not fp.invalid]
    for i, fp in enumerate(fps):
        if fp.invalid:
            out[i] = Prediction(configs[i], False, None, fp, {"bound": "invalid"}, [fp.invalid])
    if valid:
        t = attention_times(attention_features(shape, [configs[i] for i in valid], [fps[i] for i in valid]), mach,
                            bytes_per_element(dtype))
        for j, i in enumerate(valid):
            fp = fps[i]
            named = {"tensor": t["t_tc"][j], "softmax": t["t_soft"][j], "shared memory": t["t_smem"][j],
                     "L2->SM": t["t_l2"][j]}
            resource = max(named, key=named.get)
            bound = ("HBM" if t["hbm_s"][j] >= t["sm_s"][j]
                     else ("latency/issue" if t["sm_lat_s"][j] > t["sm_res_s"][j] else resource))
            parts = {"bound": bound, "ctas": int(t["ctas"][j]), "ctas_per_sm": fp.ctas_per_sm,
                     "occupancy_limit": fp.limit, "sm_s": float(t["sm_s"][j]), "hbm_s": float(t["hbm_s"][j]),
                     "mma": fp.mma, "smem_bytes": fp.smem_bytes, "regs": fp.regs}
            reasons = [f"{bound}-bound", f"{parts['ctas']} CTAs, {fp.ctas_per_sm}/SM ({fp.limit})"]
            if fp.mma != "wgmma" and mach.generation != "ampere":
                reasons.append("mma.sync path")
            if t["t_soft"][j] > t["t_tc"][j]:
                reasons.append(f"softmax {t['t_soft'][j] / t['t_tc'][j]:.2f}x the MMA time a step")
            if t["split_s"][j] > 0:
                reasons.append("score tile split over warps along the keys: cross-warp softmax")
            if fp.spill_regs:
                reasons.append(f"~{fp.regs} registers/thread: spills")
            out[i] = Prediction(configs[i], True, float(t["time"][j]), fp, parts, reasons)
    return out  # type: ignore[return-value]


def predict_attention(batch: int, heads_q: int, heads_kv: int, seq_q: int, seq_kv: int, head_dim: int,
                      causal: bool, cfg, mach: Machine, hw, prof=None, dtype: str = "bf16") -> Prediction:
    shape = {"batch": batch, "heads_q": heads_q, "heads_kv": heads_kv, "seq_q": seq_q, "seq_kv": seq_kv,
             "head_dim": head_dim, "causal": causal}
    return predict_attention_space(shape, [cfg], mach, hw, dtype)[0]
