"""Predicted time of the Triton matmul of :mod:`.kernels` for one configuration and one shape.

The kernel's work is a grid of programs (CTAs), one per BLOCK_M x BLOCK_N output tile and K slice. The
model follows one CTA through its K loop and the CTAs through the SMs:

- *a K step* of one CTA (BLOCK_M x BLOCK_N x BLOCK_K) needs the tensor cores for 2*BM*BN*BK FLOPs at its
  MMA family's rate, the shared memory for the operand blocks written by the asynchronous copies and read
  by the MMAs (wgmma reads A once per warpgroup column and B once per 64-row instruction; mma.sync reads
  them once per warp row/column), and the L2 -> SM path for the operand blocks; the step takes the
  longest of the three (*resource time*). A configuration that spills registers adds its spill traffic
  to the shared-memory/L1 path, which is the same SRAM;
- *latency*: a CTA keeps ``buffers - 1`` K steps of loads in flight (``buffers``: see
  :mod:`.resources`), so a step alone takes at least load latency / in-flight steps;
- *occupancy and waves*: ``c`` CTAs fit on an SM (:mod:`.resources`); with ``q = ceil(CTAs / SMs)`` CTAs
  on the busiest SM, its time is the larger of q x resource time (the CTAs share the SM) and
  ceil(q / c) x the latency-bound CTA time (CTAs resident together hide each other's latency). A grid
  just over a multiple of the SM count pays a whole extra CTA on some SMs: wave quantization;
- *tile quantization*: edge tiles compute their padding in full;
- *HBM*: the operands move once if they fit in half the L2; otherwise each wave of concurrent CTAs reads
  the A rows and B columns its tiles cover, which GROUP_M shapes (a wave covers GROUP_M tile rows and
  W / GROUP_M columns instead of one row and W columns). SM time and HBM time join by the profile's
  p-norm (``gemm_softness``), as in :mod:`perfmodel.cost.gemm`;
- *split-K*: SPLIT_K CTAs per tile each take 1/SPLIT_K of K, writing fp32 partials that a second kernel
  adds (its time: a copy-class streaming kernel of the profile, plus the gap between two launches).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..cost.memory import memory_time
from ..dtypes import bytes_per_element
from .machine import STEP_OVERHEAD_CLK, Machine
from .resources import Footprint, gemm_footprint


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


def _ceil_div(a: float, b: float) -> int:
    return int(-(-a // b))


def pnorm(a: float, b: float, p: float) -> float:
    hi = max(a, b)
    if hi <= 0:
        return 0.0
    return hi * ((a / hi) ** p + (b / hi) ** p) ** (1.0 / p)


def wave_footprint(grid_m: int, grid_n: int, group_m: int, concurrent: int) -> tuple[int, int]:
    """(tile rows, tile columns) that ``concurrent`` consecutive programs of the grouped launch order cover."""
    g = max(1, min(group_m, grid_m))
    if concurrent >= g * grid_n:
        return min(grid_m, _ceil_div(concurrent, grid_n)), grid_n
    return g, min(grid_n, _ceil_div(concurrent, g))


def hbm_bytes(m: int, n: int, k: int, cfg, e: float, eo: float, concurrent: int, l2_bytes: float) -> float:
    """HBM bytes of the main kernel: operand traffic with L2 reuse inside a wave, plus the output."""
    s = cfg.split_k
    grid_m, grid_n = _ceil_div(m, cfg.block_m), _ceil_div(n, cfg.block_n)
    tiles = grid_m * grid_n
    a_total, b_total = m * k * e, n * k * e
    w = min(tiles, concurrent)
    rows, cols = wave_footprint(grid_m, grid_n, cfg.group_m, w)
    waves = tiles * s / w
    k_slice = k / s
    a_part = max(a_total, waves * min(rows * cfg.block_m, m) * k_slice * e)
    b_part = max(b_total, waves * min(cols * cfg.block_n, n) * k_slice * e)
    if a_total <= 0.5 * l2_bytes:
        a_part = a_total
    if b_total <= 0.5 * l2_bytes:
        b_part = b_total
    return a_part + b_part + m * n * eo * s


def _smem_traffic(cfg, fp: Footprint, e: float) -> float:
    """Shared-memory (and L1) bytes of one K step of one CTA."""
    bm, bn, bk, w = cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_warps
    if fp.mma == "wgmma":
        groups = max(1, w // 4)
        wg_m = max(1, min(groups, bm // 64))
        wg_n = max(1, groups // wg_m)
        reads = bm * bk * e * wg_n + (bm / 64) * bn * bk * e
    else:
        warp_m = max(1, min(w, bm // 16))
        warp_n = max(1, w // warp_m)
        reads = bm * bk * e * warp_n + bn * bk * e * warp_m
    writes = (bm + bn) * bk * e
    spills = fp.spill_regs * 4.0 * fp.threads * 2.0  # stored and reloaded once a step
    return reads + writes + spills


def predict_gemm(m: int, n: int, k: int, cfg, mach: Machine, hw, prof, dtype: str = "bf16") -> Prediction:
    fp = gemm_footprint(hw, cfg, dtype)
    if fp.invalid:
        return Prediction(cfg, False, None, fp, {"bound": "invalid"}, [fp.invalid])
    e = bytes_per_element(dtype)
    out_e = e if e >= 2 else 2.0  # fp8 products write bf16
    s = cfg.split_k
    eo = 4.0 if s > 1 else out_e
    grid_m, grid_n = _ceil_div(m, cfg.block_m), _ceil_div(n, cfg.block_n)
    ctas = grid_m * grid_n * s
    iters = _ceil_div(k, cfg.block_k * s)

    t_tc = 2.0 * cfg.block_m * cfg.block_n * cfg.block_k / mach.mma_rate(fp.mma)
    t_smem = _smem_traffic(cfg, fp, e) / mach.smem_bw_sm
    t_l2 = (cfg.block_m + cfg.block_n) * cfg.block_k * e / mach.l2_bw_sm
    t_res = max(t_tc, t_smem, t_l2)
    buffers = cfg.num_stages if fp.mma == "wgmma" else max(1, cfg.num_stages - 1)
    lat = mach.load_latency_s
    step_fixed = STEP_OVERHEAD_CLK / mach.clock_hz
    spill_serial = fp.spill_regs * 4.0 * fp.threads * 2.0 / mach.smem_bw_sm
    t_serial = t_res + step_fixed + spill_serial
    t_step_alone = t_serial + lat if buffers <= 1 else max(t_serial, lat / (buffers - 1))
    epilogue = cfg.block_m * cfg.block_n * eo / mach.l2_bw_sm
    cta_res = iters * t_res + epilogue
    cta_alone = lat + iters * t_step_alone + epilogue
    c = fp.ctas_per_sm
    q = _ceil_div(ctas, mach.sms)
    t_sm_res, t_sm_lat = q * cta_res, _ceil_div(q, c) * cta_alone
    t_sm = max(t_sm_res, t_sm_lat)
    concurrent = min(ctas, mach.sms * c)
    nbytes = hbm_bytes(m, n, k, cfg, e, eo, concurrent, mach.l2_bytes)
    t_hbm = nbytes / mach.hbm_bw
    t_main = pnorm(t_sm, t_hbm, prof.gemm_softness) + mach.launch_s
    t_reduce = 0.0
    if s > 1:
        reduce_bytes = s * m * n * 4.0 + m * n * out_e
        t_reduce = mach.gap_s + float(memory_time("copy", reduce_bytes, hw.hbm_bandwidth, prof)[0])
    total = t_main + t_reduce

    resource = {t_tc: "tensor", t_smem: "shared memory", t_l2: "L2->SM"}[t_res]
    if t_hbm >= t_sm:
        bound = "HBM"
    elif t_sm_lat > t_sm_res and t_step_alone > t_serial:
        bound = "latency"  # loads not hidden by the stages in flight
    elif t_sm_lat > t_sm_res:
        bound = "issue"  # one CTA an SM: the step's fixed costs and the pipeline fill are not overlapped
    else:
        bound = resource
    parts = {"bound": bound, "ctas": ctas, "ctas_per_sm": c, "occupancy_limit": fp.limit, "busiest_sm_ctas": q,
             "waves": ctas / (mach.sms * c), "k_steps": iters, "sm_s": t_sm, "hbm_s": t_hbm, "hbm_bytes": nbytes,
             "reduce_s": t_reduce, "mma": fp.mma, "smem_bytes": fp.smem_bytes, "regs": fp.regs,
             "tile_util": m * n / (grid_m * cfg.block_m * grid_n * cfg.block_n)}
    return Prediction(cfg, True, total, fp, parts, _reasons(parts, fp, mach, cfg, t_res, t_tc))


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
    if t_res > 1.05 * t_tc:
        out.append(f"K step {t_res / t_tc:.2f}x its tensor time ({'smem' if t_res != t_tc else ''} feed)")
    if fp.spill_regs:
        out.append(f"~{fp.regs} registers/thread: spills")
    if cfg.split_k > 1:
        out.append(f"split-K {cfg.split_k}: reduction {parts['reduce_s'] * 1e6:.1f} us")
    return out


def rank_key(p: Prediction) -> tuple:
    """Sort key: valid first; configurations predicted to spill registers after every one that does not
    (what a spill costs depends on where the compiler puts the spill code, which the model cannot see);
    then by predicted time, ties broken by the configuration for determinism."""
    spills = bool(p.footprint.spill_regs) if p.valid else True
    return (not p.valid, spills, p.time_s if p.time_s is not None else math.inf, p.config)
