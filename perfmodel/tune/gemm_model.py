"""Predicted time of the Triton matmul of :mod:`.kernels` for configurations of one shape.

The kernel's work is a grid of programs (CTAs), one per BLOCK_M x BLOCK_N output tile and K slice. The
model follows one CTA through its K loop and the CTAs through the SMs:

- *a K step* of one CTA (BLOCK_M x BLOCK_N x BLOCK_K) needs the tensor cores for 2*BM*BN*BK FLOPs at its
  MMA family's rate, the shared memory for the operand blocks written by the asynchronous copies and read
  by the MMAs (wgmma reads A once per warpgroup column and B once per 64-row instruction; mma.sync reads
  them once per warp row/column), and the L2 -> SM path for the operand blocks; the step takes about
  the longest of the three (*resource time*: their p-norm, ``resource_join``, so a step that keeps two of
  them near saturation pays for the queueing). A configuration that spills registers adds its spill traffic
  to the shared-memory/L1 path, which is the same SRAM;
- *latency*: a CTA keeps ``buffers - 1`` K steps of loads in flight (``buffers``: see
  :mod:`.resources`), issued that many steps ahead; a load's latency is a floor plus an exponential
  tail (:func:`expected_wait`), so a step waits less the further ahead its loads went: a deeper pipeline
  or a longer step hides more of the tail;
- *K rows not 16-byte aligned* (K not a multiple of 16 elements): no vector loads, no asynchronous copies,
  no pipeline (:mod:`.resources`): every operand element is loaded on its own (``unaligned_clk_per_element``
  of SM issue time), and a step waits its loads' whole latency;
- *occupancy and waves*: ``c`` CTAs fit on an SM (:mod:`.resources`); the busiest SM runs ``q = ceil(CTAs /
  SMs)`` of them in rounds of ``c`` (:func:`sm_rounds`): a round of j CTAs takes the longer of j x the
  resource time (they share the SM) and one CTA's time alone (CTAs resident together hide each other's
  latency and fixed costs). A grid just over a multiple of the SM count pays a whole extra CTA on some
  SMs (wave quantization), and a last round of fewer CTAs than fit is paid at one CTA's own speed;
- *tile quantization*: edge tiles compute their padding in full;
- *HBM*: the operands move once if they fit in half the L2; otherwise each wave of concurrent CTAs reads
  the A rows and B columns its tiles cover, which GROUP_M shapes (a wave covers GROUP_M tile rows and
  W / GROUP_M columns instead of one row and W columns). A benchmark's L2 flush leaves dirty lines that
  the kernel writes back as it reads (``flush_writeback``). SM time and HBM time join by a p-norm
  (``softness``), as in :mod:`perfmodel.cost.gemm`;
- *split-K*: SPLIT_K CTAs per tile each take 1/SPLIT_K of K, writing fp32 partials that a second kernel
  adds (a fixed cost, ``splitk_reduce_s``, plus streaming the partials).

The model is written on numpy arrays (one element a configuration, or a row of a fit), so that ranking a
whole space and fitting the constants to thousands of measured rows use the same formulas.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..dtypes import bytes_per_element
from .machine import Machine
from .resources import Footprint, gemm_footprint, k_aligned


@dataclass
class Prediction:
    config: object
    valid: bool
    time_s: float | None  # None when the configuration cannot run
    footprint: Footprint
    parts: dict = field(default_factory=dict)  # named components, seconds or counts
    reasons: list[str] = field(default_factory=list)

    @property
    def bound(self) -> str:
        return str(self.parts.get("bound", "invalid" if not self.valid else ""))


def ceil_div(a, b):
    return -(-a // b)


def expected_wait(ahead, floor: float, tail: float):
    """Mean wait of a load issued ``ahead`` seconds before it is needed, its latency ``floor`` plus an
    exponential tail of mean ``tail``: E[max(0, L - ahead)]."""
    ahead = np.asarray(ahead, dtype=float)
    past = np.maximum(ahead - floor, 0.0)
    return np.maximum(floor - ahead, 0.0) + tail * np.exp(-past / tail)


def sm_rounds(q, c, cta_res, cta_alone, p: float = 40.0):
    """Time of the busiest SM running ``q`` CTAs, ``c`` at a time: rounds of c CTAs and a last round of the
    rest; a round of j CTAs takes about the longer of j x the resource time (they share the SM) and one
    CTA's time alone (they overlap each other's latency and fixed costs, not their own), joined by a
    p-norm (``overlap_join``). Returns (time, the resource-bound total, the latency-bound total)."""
    full = np.floor(q / c)
    last = q - full * c
    t_full = pnorm(c * cta_res, cta_alone, p)
    t_last = np.where(last > 0, pnorm(last * cta_res, cta_alone, p), 0.0)
    rounds = full + (last > 0)
    return full * t_full + t_last, q * cta_res, rounds * cta_alone


def pnorm3(a, b, c, p):
    """(a^p + b^p + c^p)^(1/p): the time of a step that needs three resources, each with a queue."""
    a, b, c = (np.asarray(x, dtype=float) for x in (a, b, c))
    hi = np.maximum(np.maximum(np.maximum(a, b), c), 1e-30)
    return hi * ((a / hi) ** p + (b / hi) ** p + (c / hi) ** p) ** (1.0 / p)


def pnorm(a, b, p):
    """(a^p + b^p)^(1/p), computed without overflow; arrays or scalars."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    hi = np.maximum(np.maximum(a, b), 1e-30)
    return hi * ((a / hi) ** p + (b / hi) ** p) ** (1.0 / p)


# --- the features of a configuration on a shape that do not depend on the constants -------------------------

FEATURES = ("m", "n", "k", "bm", "bn", "bk", "g", "w", "st", "sk", "aligned", "wgmma", "c", "spill", "threads",
            "smem")


def gemm_features(m: int, n: int, k: int, configs, footprints) -> dict:
    """Arrays of the shape, the configurations and their footprints (valid configurations only)."""
    f = {name: [] for name in FEATURES}
    aligned = k_aligned(k)
    for cfg, fp in zip(configs, footprints):
        for name, v in (("m", m), ("n", n), ("k", k), ("bm", cfg.block_m), ("bn", cfg.block_n), ("bk", cfg.block_k),
                        ("g", cfg.group_m), ("w", cfg.num_warps), ("st", cfg.num_stages), ("sk", cfg.split_k),
                        ("aligned", aligned), ("wgmma", fp.mma == "wgmma"), ("c", fp.ctas_per_sm),
                        ("spill", fp.spill_regs), ("threads", fp.threads), ("smem", fp.smem_bytes)):
            f[name].append(v)
    return {k_: np.asarray(v, dtype=bool if k_ in ("aligned", "wgmma") else float) for k_, v in f.items()}


def concat_features(parts: list[dict]) -> dict:
    return {name: np.concatenate([p[name] for p in parts]) for name in FEATURES}


# --- the time -----------------------------------------------------------------------------------------------

def _smem_traffic(f: dict, e: float):
    """Shared-memory (and L1) bytes of one K step of one CTA, without spills."""
    bm, bn, bk, w = f["bm"], f["bn"], f["bk"], f["w"]
    groups = np.maximum(1, w // 4)
    wg_m = np.maximum(1, np.minimum(groups, bm // 64))
    wg_n = np.maximum(1, groups // wg_m)
    wg_reads = bm * bk * e * wg_n + (bm / 64) * bn * bk * e
    warp_m = np.maximum(1, np.minimum(w, bm // 16))
    warp_n = np.maximum(1, w // warp_m)
    ms_reads = bm * bk * e * warp_n + bn * bk * e * warp_m
    return np.where(f["wgmma"], wg_reads, ms_reads) + (bm + bn) * bk * e


def hbm_bytes(f: dict, e: float, eo, concurrent, l2_bytes: float):
    """HBM bytes of the main kernel: operand traffic with L2 reuse inside a wave, plus the output."""
    m, n, k, bm, bn, s = f["m"], f["n"], f["k"], f["bm"], f["bn"], f["sk"]
    grid_m, grid_n = ceil_div(m, bm), ceil_div(n, bn)
    tiles = grid_m * grid_n
    a_total, b_total = m * k * e, n * k * e
    w = np.minimum(tiles, concurrent)
    g = np.maximum(1, np.minimum(f["g"], grid_m))
    whole_rows = w >= g * grid_n  # a wave covers whole rows of tiles
    rows = np.where(whole_rows, np.minimum(grid_m, ceil_div(w, grid_n)), g)
    cols = np.where(whole_rows, grid_n, np.minimum(grid_n, ceil_div(w, g)))
    waves = tiles * s / w
    k_slice = k / s
    a_part = np.maximum(a_total, waves * np.minimum(rows * bm, m) * k_slice * e)
    b_part = np.maximum(b_total, waves * np.minimum(cols * bn, n) * k_slice * e)
    a_part = np.where(a_total <= 0.5 * l2_bytes, a_total, a_part)
    b_part = np.where(b_total <= 0.5 * l2_bytes, b_total, b_part)
    return a_part + b_part + m * n * eo * s


def gemm_times(f: dict, mach: Machine, e: float = 2.0) -> dict:
    """Predicted seconds (``time``) and the named components, one element a configuration."""
    c = mach.c
    out_e = max(e, 2.0)  # fp8 products write bf16
    bm, bn, bk, s = f["bm"], f["bn"], f["bk"], f["sk"]
    aligned = f["aligned"]
    eo = np.where(s > 1, 4.0, out_e)
    grid_m, grid_n = ceil_div(f["m"], bm), ceil_div(f["n"], bn)
    ctas = grid_m * grid_n * s
    iters = ceil_div(f["k"], bk * s)
    clock = mach.clock_hz

    t_spill = mach.spill_time(f["spill"], f["threads"], np.maximum(f["c"], 1), f["smem"])
    t_tc = 2.0 * bm * bn * bk / mach.mma_rate(f["wgmma"])
    t_smem = _smem_traffic(f, e) / mach.smem_bw_sm + t_spill
    t_l2 = (bm + bn) * bk * e / mach.l2_bw_sm
    t_ld = np.where(aligned, 0.0, c.unaligned_clk_per_element * (bm + bn) * bk / clock)
    t_res = np.maximum(pnorm3(t_tc, t_smem, t_l2, c.resource_join), t_ld)
    buffers = np.where(aligned, np.where(f["wgmma"], f["st"], np.maximum(1, f["st"] - 1)), 1)
    lat = c.load_latency_s + c.latency_tail_s  # mean latency: the pipeline's fill
    step_fixed = c.step_overhead_clk / clock
    # unaligned: the element loads, then the MMA, in sequence within a CTA
    t_serial = (np.where(aligned, t_res, t_ld + pnorm3(t_tc, t_smem, t_l2, c.resource_join)) + step_fixed
                + t_spill)
    t_step_alone = t_serial + expected_wait((buffers - 1) * t_serial, c.load_latency_s, c.latency_tail_s)
    epilogue = bm * bn * eo / mach.l2_bw_sm
    cta_res = iters * t_res + epilogue
    cta_alone = lat + iters * t_step_alone + epilogue
    cps = np.maximum(f["c"], 1)
    q = ceil_div(ctas, mach.sms)
    t_sm, t_sm_res, t_sm_lat = sm_rounds(q, cps, cta_res, cta_alone, c.overlap_join)
    concurrent = np.minimum(ctas, mach.sms * cps)
    nbytes = hbm_bytes(f, e, eo, concurrent, mach.l2_bytes)
    touched = (f["m"] + f["n"]) * f["k"] * e + f["m"] * f["n"] * eo * s
    writeback = c.flush_writeback * np.minimum(touched, mach.l2_bytes)
    t_hbm = (nbytes + writeback) / mach.hbm_bw
    t_main = pnorm(t_sm, t_hbm, c.softness) + c.launch_s
    reduce_bytes = s * f["m"] * f["n"] * 4.0 + f["m"] * f["n"] * out_e
    t_reduce = np.where(s > 1, c.splitk_reduce_s + reduce_bytes / mach.hbm_bw, 0.0)
    return {"time": t_main + t_reduce, "t_tc": t_tc, "t_smem": t_smem, "t_l2": t_l2, "t_ld": t_ld, "t_res": t_res,
            "t_serial": t_serial, "t_step_alone": t_step_alone, "sm_s": t_sm, "sm_res_s": t_sm_res,
            "sm_lat_s": t_sm_lat, "hbm_s": t_hbm, "hbm_bytes": nbytes, "reduce_s": t_reduce, "ctas": ctas,
            "busiest_sm_ctas": q, "k_steps": iters, "waves": ctas / (mach.sms * cps),
            "tile_util": f["m"] * f["n"] / (grid_m * bm * grid_n * bn)}


# --- predictions for configurations -------------------------------------------------------------------------

def _bound(t: dict, i: int) -> str:
    if t["hbm_s"][i] >= t["sm_s"][i]:
        return "HBM"
    if t["sm_lat_s"][i] > t["sm_res_s"][i]:
        if t["t_step_alone"][i] > 1.05 * t["t_serial"][i]:
            return "latency"  # loads not hidden by the stages in flight
        return "issue"  # one CTA an SM: the step's fixed costs and the pipeline fill are not overlapped
    named = {"tensor": t["t_tc"][i], "shared memory": t["t_smem"][i], "L2->SM": t["t_l2"][i],
             "element loads": t["t_ld"][i]}
    return max(named, key=named.get)


def predict_gemm_space(m: int, n: int, k: int, configs, mach: Machine, hw, dtype: str = "bf16") -> list[Prediction]:
    """A Prediction for every configuration (invalid ones with time None), in the order given."""
    aligned = k_aligned(k)
    fps = [gemm_footprint(hw, cfg, dtype, aligned, k % (cfg.block_k * cfg.split_k) == 0) for cfg in configs]
    out: list[Prediction | None] = [None] * len(configs)
    valid = [i for i, fp in enumerate(fps) if not fp.invalid]
    for i, fp in enumerate(fps):
        if fp.invalid:
            out[i] = Prediction(configs[i], False, None, fp, {"bound": "invalid"}, [fp.invalid])
    if valid:
        e = bytes_per_element(dtype)
        t = gemm_times(gemm_features(m, n, k, [configs[i] for i in valid], [fps[i] for i in valid]), mach, e)
        for j, i in enumerate(valid):
            fp, cfg = fps[i], configs[i]
            parts = {"bound": _bound(t, j), "ctas": int(t["ctas"][j]), "ctas_per_sm": fp.ctas_per_sm,
                     "occupancy_limit": fp.limit, "busiest_sm_ctas": int(t["busiest_sm_ctas"][j]),
                     "waves": float(t["waves"][j]), "k_steps": int(t["k_steps"][j]), "sm_s": float(t["sm_s"][j]),
                     "hbm_s": float(t["hbm_s"][j]), "hbm_bytes": float(t["hbm_bytes"][j]),
                     "reduce_s": float(t["reduce_s"][j]), "mma": fp.mma, "smem_bytes": fp.smem_bytes,
                     "regs": fp.regs, "aligned": aligned, "tile_util": float(t["tile_util"][j])}
            out[i] = Prediction(cfg, True, float(t["time"][j]), fp, parts,
                                _reasons(parts, fp, mach, cfg, float(t["t_res"][j]), float(t["t_tc"][j])))
    return out  # type: ignore[return-value]


def predict_gemm(m: int, n: int, k: int, cfg, mach: Machine, hw, prof=None, dtype: str = "bf16") -> Prediction:
    """One configuration (``prof`` is accepted for callers of the earlier signature; the machine holds
    every constant)."""
    return predict_gemm_space(m, n, k, [cfg], mach, hw, dtype)[0]


def _reasons(parts: dict, fp: Footprint, mach: Machine, cfg, t_res: float, t_tc: float) -> list[str]:
    out = [f"{parts['bound']}-bound"]
    out.append(f"{parts['ctas']} CTAs, {parts['ctas_per_sm']}/SM ({fp.limit}): busiest SM runs "
               f"{parts['busiest_sm_ctas']}")
    frac = parts["ctas"] / mach.sms
    if frac > 1 and frac % 1 and frac % 1 < 0.5:
        out.append(f"wave quantization: {parts['ctas']} CTAs = {frac:.2f} x {mach.sms} SMs")
    if parts["tile_util"] < 0.9:
        out.append(f"tile quantization: {parts['tile_util']:.0%} of the tiles is useful")
    if fp.mma != "wgmma" and mach.generation != "ampere":
        out.append("mma.sync path (BLOCK_M < 64 or warps not a warpgroup multiple)")
    if not parts["aligned"]:
        out.append("K not a multiple of 16: element-wise loads, no pipeline")
    if t_res > 1.05 * t_tc:
        out.append(f"K step {t_res / t_tc:.2f}x its tensor time")
    if fp.spill_regs:
        out.append(f"~{fp.regs} registers/thread: spills")
    if cfg.split_k > 1:
        out.append(f"split-K {cfg.split_k}: reduction {parts['reduce_s'] * 1e6:.1f} us")
    return out


def rank_key(p: Prediction) -> tuple:
    """Sort key: valid first, then by predicted time (spills are a cost in it: a few spilled registers of
    a large wgmma tile cost a few percent, hundreds cost several times the kernel), ties broken by the
    configuration for determinism."""
    return (not p.valid, p.time_s if p.time_s is not None else math.inf, p.config)
