"""GEMM time: tiles, waves, split-K, alignment, power, and a roofline join.

The model follows how cuBLAS/CUTLASS kernels run on NVIDIA parts:

- the output is cut into tm x tn tiles, padding the edges (*tile quantization*); for a skinny product the
  library swaps operands so the small dimension sits on the MMA's narrow side, hence tiles 8 to 64 rows
  tall;
- tiles go to the SMs in waves and a partial last wave costs up to a whole one (*wave quantization*;
  ``gemm_wave_q`` is how much of the tail is paid, stream-K scheduling recovering the rest), which is why
  a 148-SM part and a 132-SM part differ on one shape;
- with too few tiles to fill the SMs, K is split across CTAs (split-K), paying an fp32 partial-sum pass;
- a tile's mainloop runs at ``gemm_eta[dtype]`` of the per-SM dense peak, lower for small tiles (less
  operand reuse), plus a ``gemm_k0`` prologue/epilogue in K-elements;
- a long compute-bound stretch runs at a power-limited clock: the rate falls by up to ``gemm_power_drop``
  as its duration passes ``gemm_power_tau`` (a kernel alone, or the compute time of the whole step: a
  prefill of many GEMMs back to back heats the part like one long kernel);
- operands whose rows are not 16-byte aligned (N or K not a multiple of 8 bf16 elements) force a slower
  kernel family: both rates scale by ``gemm_misaligned_eta``;
- streaming the operands reaches ``gemm_mem_eta`` of HBM bandwidth only with ``gemm_mem_ctas`` distinct
  operand tiles per SM in flight: CTAs of one tile column share their B tiles through L2, CTAs of one
  row their A tiles, so the count is the row and column tile counts weighted by each operand's share of
  the bytes, times the K splits; fewer stream proportionally slower;
- compute and streaming time are joined by a p-norm (a soft max), plus a fixed overhead.

The library is taken to pick the fastest tile. Written against a math backend (:mod:`.backend`):
numbers, numpy arrays or Excel formula text.
"""
from __future__ import annotations

from .backend import NP

# Output tile shapes (rows x cols of C) the kernel library chooses among; the short ones serve
# skinny products (operands swapped, so the narrow side is the MMA's N).
TILES = ((128, 256), (256, 128), (128, 128), (64, 256), (64, 128), (128, 64), (64, 64),
         (32, 128), (16, 128), (8, 128), (32, 256), (16, 256), (8, 256))
_REF_TILE = (128, 256)
ALIGN_BYTES = 16


def tile_efficiency(tm: float, tn: float, c):
    """Mainloop efficiency of a tile relative to the 128 x 256 reference: operand reuse grows with tile size."""
    ref = 1.0 / (1.0 + c * (1.0 / _REF_TILE[0] + 1.0 / _REF_TILE[1]))
    return (1.0 / (1.0 + c * (1.0 / tm + 1.0 / tn))) / ref


def power_limited(t_c0, prof, sustained=None, xp=NP):
    """Compute time at the power-limited clock: the rate falls by up to ``gemm_power_drop`` as the
    compute-bound stretch it belongs to (the kernel itself, or ``sustained``: the compute time of the
    whole step it runs in) passes ``gemm_power_tau``."""
    s = t_c0 if sustained is None else xp.maximum(t_c0, sustained)
    return t_c0 / (1.0 - prof.gemm_power_drop * s / (s + prof.gemm_power_tau))


def mem_scale(prof, dtype: str):
    """A format's streaming efficiency relative to ``gemm_mem_eta`` (fp8 kernels at small M stream less
    well than bf16 ones); 1 for a format the fit had no rows of."""
    return prof.gemm_mem_eta_scale.get(dtype, prof.gemm_mem_eta_scale.get("fp8", 1.0) if dtype == "fp4" else 1.0)


def gemm_time(m, n, k, groups, nbytes, peak, sms, bw, prof, eta, xp=NP, elem_bytes=2.0, sustained=None,
              mem_scale=1.0):
    """Returns (time, compute_part, memory_part) in seconds for ``groups`` products of m x n x k.
    ``mem_scale``: the format's streaming efficiency relative to ``gemm_mem_eta`` (:func:`mem_scale`)."""
    per_sm = peak / sms
    p = prof.gemm_softness
    misaligned = xp.logical_or(xp.mod(n * elem_bytes, ALIGN_BYTES) > 0, xp.mod(k * elem_bytes, ALIGN_BYTES) > 0)
    slow = xp.where(misaligned, prof.gemm_misaligned_eta, 1.0)
    q = prof.gemm_wave_q
    best = best_c = best_m = None
    formulas = []
    for tm, tn in TILES:
        tiles = xp.ceil(m / tm) * xp.ceil(n / tn) * groups
        max_split = xp.maximum(1.0, xp.floor(k / prof.gemm_splitk_min_k))
        split = xp.clip(xp.floor(sms / tiles), 1.0, max_split)
        units = tiles * split
        waves = (1.0 - q) * (units / sms) + q * xp.ceil(units / sms)
        t_tile = 2.0 * tm * tn * (k / split + prof.gemm_k0) / (per_sm * eta * tile_efficiency(tm, tn, prof.gemm_tile_c))
        t_c0 = waves * t_tile / slow
        t_c = power_limited(t_c0, prof, sustained, xp)
        partials = (split - 1.0) * m * n * groups * 8.0  # fp32 partial sums written and read back
        # Distinct operand tiles in flight: CTAs of one tile column share their B tiles through L2 (and of
        # one row, their A tiles), so HBM concurrency is the row and column tile counts, weighted by each
        # operand's share of the bytes, times the K splits (a skinny product's padded row tiles add none)
        share_a = m / (m + n)
        distinct = (xp.ceil(m / tm) * share_a + xp.ceil(n / tn) * (1.0 - share_a)) * groups * split
        streams = xp.minimum(1.0, distinct / (sms * prof.gemm_mem_ctas))
        t_m = (nbytes + partials) / (bw * prof.gemm_mem_eta * mem_scale * streams * slow)
        t = (t_c**p + t_m**p) ** (1.0 / p)
        if not xp.numeric:  # a formula: one flat MIN over the tiles (a running IF chain nests exponentially)
            formulas.append(t)
            continue
        if best is None:
            best, best_c, best_m = t, t_c, t_m
        else:
            better = t < best
            best_c = xp.where(better, t_c, best_c)
            best_m = xp.where(better, t_m, best_m)
            best = xp.minimum(t, best)
    if not xp.numeric:
        return xp.min_of(formulas) + prof.gemm_overhead_s, None, None
    return best + prof.gemm_overhead_s, best_c, best_m
