"""GEMM time: tile quantization, wave quantization over the SMs, split-K, and a roofline join.

The model follows how cuBLAS/CUTLASS kernels run on NVIDIA parts: the output is cut into tm x tn tiles
(padding the edges: *tile quantization*); tiles go out to the SMs in waves, and a partial last wave costs
a whole one (*wave quantization*, which is why a 148-SM part and a 132-SM part differ on one shape);
when there are too few tiles to fill the SMs, K is split across CTAs (split-K / stream-K) at the price of
a fp32 partial-sum pass. Each tile's mainloop runs at a fraction ``eta`` of the per-SM dense peak,
smaller tiles lower (less reuse), and pays a fixed prologue/epilogue of ``k0`` K-elements. The compute
time and the HBM streaming time are joined by a p-norm (a soft max), plus a fixed launch overhead.
The library is taken to pick the fastest tile for the shape.

Written against a math backend (:mod:`.backend`): numbers, numpy arrays or Excel formula text.
"""
from __future__ import annotations

from .backend import NP

# Output tile shapes the kernel library chooses among (rows x cols of C).
TILES = ((128, 256), (256, 128), (128, 128), (64, 256), (64, 128), (128, 64), (64, 64))
_REF_TILE = (128, 256)


def tile_efficiency(tm: float, tn: float, c):
    """Mainloop efficiency of a tile relative to the 128 x 256 reference: operand reuse grows with tile size."""
    ref = 1.0 / (1.0 + c * (1.0 / _REF_TILE[0] + 1.0 / _REF_TILE[1]))
    return (1.0 / (1.0 + c * (1.0 / tm + 1.0 / tn))) / ref


def gemm_time(m, n, k, groups, nbytes, peak, sms, bw, prof, eta, xp=NP):
    """Returns (time, compute_part, memory_part) in seconds for ``groups`` products of m x n x k."""
    per_sm = peak / sms
    p = prof.gemm_softness
    best = best_c = best_m = None
    for tm, tn in TILES:
        tiles = xp.ceil(m / tm) * xp.ceil(n / tn) * groups
        max_split = xp.maximum(1.0, xp.floor(k / prof.gemm_splitk_min_k))
        split = xp.clip(xp.floor(sms / tiles), 1.0, max_split)
        waves = xp.ceil(tiles * split / sms)
        t_tile = 2.0 * tm * tn * (k / split + prof.gemm_k0) / (per_sm * eta * tile_efficiency(tm, tn, prof.gemm_tile_c))
        t_c = waves * t_tile
        partials = (split - 1.0) * m * n * groups * 8.0  # fp32 partial sums written and read back
        t_m = (nbytes + partials) / (bw * prof.gemm_mem_eta)
        t = (t_c**p + t_m**p) ** (1.0 / p)
        if best is None:
            best, best_c, best_m = t, t_c, t_m
        else:
            better = t < best
            best_c = xp.where(better, t_c, best_c)
            best_m = xp.where(better, t_m, best_m)
            best = xp.minimum(t, best)
    return best + prof.gemm_overhead_s, best_c, best_m
