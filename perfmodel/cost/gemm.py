"""GEMM time: tiles, waves, split-K, alignment, power, and a roofline join.

The model follows how cuBLAS/CUTLASS kernels run on NVIDIA parts:

- the output is cut into tm x tn tiles, padding the edges (*tile quantization*); for a skinny product the
  library swaps operands so the small dimension sits on the MMA's narrow side, hence tiles 8 to 64 rows
  tall;
- tiles go to the SMs in waves and a partial last wave costs up to a whole one (*wave quantization*;
  ``gemm_wave_q`` is how much of the tail is paid, stream-K scheduling recovering the rest), which is why
  a 148-SM part and a 132-SM part differ on one shape;
- with too few tiles to fill the SMs, K is split across CTAs (split-K), paying an fp32 partial-sum pass;
- a product of at most ``GEMV_MAX_ROWS`` rows may instead run on the CUDA cores (GEMV-style), its real rows
  at the vector rate, streaming like the narrowest tile;
- a tile's mainloop runs at ``gemm_eta[dtype]`` of the per-SM dense peak, lower for small tiles (less
  operand reuse), plus a ``gemm_k0`` prologue/epilogue in K-elements;
- the compute part runs at a power-limited clock (:mod:`perfmodel.power_clock`, physics measured on an
  H200): timed alone, the clock's mean over the window its table timed it in, at its own power demand; inside
  a step, the clock the step's demand settles to under a repeated load (a few percent to ~20%);
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

import math

import numpy as np

from ..dtypes import bytes_per_element
from .backend import NP, STACKED

# Output tile shapes (rows x cols of C) the kernel library chooses among; the short ones serve
# skinny products (operands swapped, so the narrow side is the MMA's N).
_SHAPES = ((128, 256), (128, 128), (64, 256), (64, 128), (64, 64), (32, 128), (16, 128), (8, 128), (32, 256),
           (16, 256), (8, 256))
# either orientation: a skinny product in M or in N gets the narrow tile side on its small dimension
TILES = tuple(dict.fromkeys(_SHAPES + tuple((b, a) for a, b in _SHAPES)))
_REF_TILE = (128, 256)
ALIGN_BYTES = 16
NARROW = 8  # the narrowest tile side (Hopper's wgmma N, the operand-swapped row count of a decode GEMM)
# Products with at most this many rows (or columns) may run on the CUDA cores instead (cuBLAS's gemv kernels,
# TensorRT-LLM's CUDA-core GEMM for small batches): estimate, the libraries' heuristics are not published. Where
# the tensor cores per SM are slow (H20, L40S, L4), the 8-row tile's padded MMA work would bind; these do not.
GEMV_MAX_ROWS = 8
# 16-bit weights only: the fp8 rows of the L40S and RTX PRO 6000 TensorRT-LLM tables at 1-8 rows run 10-11% slower
# than such a path would (their kernels are tensor-core ones), the bf16 rows within 2% of it (issue 24)
GEMV_FORMATS = ("bf16", "fp16")
_NEVER = 1e30  # a candidate that does not apply


def tile_efficiency(tm: float, tn: float, c):
    """Mainloop efficiency of a tile relative to the 128 x 256 reference: operand reuse grows with tile size."""
    ref = 1.0 / (1.0 + c * (1.0 / _REF_TILE[0] + 1.0 / _REF_TILE[1]))
    return (1.0 / (1.0 + c * (1.0 / tm + 1.0 / tn))) / ref


def power_clocked(t_c0, flops, nbytes, t_m, fmt: str, peak, bw, prof, sustained, xp=NP, timing=None):
    """A kernel's compute part at the power-limited clock (:mod:`perfmodel.power_clock`); ``t_c0`` is its time
    at the boost clock. Alone (``sustained`` None): as its table timed it, the clock's mean over the
    measurement's window (``timing``, else ``gemm_timing``) at the kernel's own power demand. Inside a step of
    a repeated load (``sustained``: the step's demand, :func:`perfmodel.cost.step_demand`): the clock that
    demand settles to."""
    from ..power_clock import alone_stretch, clock_model, kernel_demand, steady_stretch

    model = clock_model(prof)
    if sustained is not None:
        return t_c0 * steady_stretch(sustained, model.alpha, xp)
    t_k = xp.maximum(t_c0, t_m)
    demand = kernel_demand(model, fmt, flops, nbytes, t_k, peak, bw, xp)
    return t_c0 * alone_stretch(model, demand, t_k, prof.gemm_timing if timing is None else timing, xp)


def max_split(prof, fmt: str):
    """Most K splits the format's kernels use: block-scaled fp8 and NVFP4 kernels may not split K at all
    (``gemm_max_split[fmt]`` near 1, fitted); unlimited otherwise."""
    return prof.gemm_max_split.get(fmt)


def gemm_format(dtype: str, scaling: str | None = None, weights: str | None = None) -> str:
    """The efficiency class of a matrix product: its dtype, or ``fp8_block`` for fp8 with 1x128 / 128x128 block
    scales (DeepGEMM-style kernels, not the per-tensor or row-wise scaled ones). NVFP4 is the fp4 format.
    Weight-only quantized products (``weights`` narrower than ``dtype``: gpt-oss's MXFP4 experts under bf16
    activations, Kimi K2's INT4 ones) are a class of their own, ``<dtype>_w<weights>`` (``bf16_wfp4``): their
    kernels dequantize in the mainloop and run at their own efficiency."""
    base = f"{dtype}_block" if scaling == "block" else dtype
    return f"{base}_w{weights}" if weights and weights != dtype else base


def mem_scale(prof, fmt: str):
    """A format's streaming efficiency relative to ``gemm_mem_eta`` (fp8 kernels at small M stream less
    well than bf16 ones); an unmeasured variant takes its dtype's, fp4 takes fp8's; 1 otherwise."""
    scales = prof.gemm_mem_eta_scale
    if fmt in scales:
        return scales[fmt]
    base = fmt.split("_")[0]
    return scales.get(base, scales.get("fp8", 1.0) if base == "fp4" else 1.0)


def quant_prologue(m, k, fmt: str, dtype: str, bw, prof):
    """Quantizing a linear layer's bf16 input to ``fmt`` before the product (per-tensor, block or NVFP4
    scales): the module's fixed cost ``gemm_prologue_s[fmt]`` (launches, scale computation), plus reading
    the bf16 input and writing it quantized at ``gemm_prologue_eta[fmt]`` of the bandwidth (below a copy's
    where a dynamic per-tensor scale reads the input twice, once for its maximum). Without fitted values,
    one elementwise kernel at the copy kernel's cost (an estimate)."""
    fixed = prof.gemm_prologue_s.get(fmt, prof.gemm_prologue_s.get(dtype, prof.mem_alpha_s["copy"]))
    eta = prof.gemm_prologue_eta.get(fmt, prof.gemm_prologue_eta.get(dtype, prof.mem_eta["copy"]))
    return fixed + m * k * (2.0 + bytes_per_element(dtype)) / (bw * eta)


def gemm_time(m, n, k, groups, nbytes, peak, sms, bw, prof, eta, xp=NP, elem_bytes=2.0, sustained=None,
              mem_scale=1.0, fmt: str | None = None, vector_peak=None):
    """Returns (time, compute_part, memory_part) in seconds for ``groups`` products of m x n x k.
    ``mem_scale``: the format's streaming efficiency relative to ``gemm_mem_eta`` (:func:`mem_scale`);
    ``fmt``: the format class (:func:`gemm_format`), for its own split-K limit and power demand;
    ``sustained``: the step's power demand (None: timed alone); ``vector_peak``: the part's plain fp32 rate,
    for the CUDA-core variant of skinny products (None: tensor-core tiles only).

    Numbers and small arrays price every tile at once (one array axis over :data:`TILES`, :func:`_candidates`), large
    arrays a tile at a time, and take the fastest as a scan over the tiles in order would (:class:`_Scan`); formulas,
    one flat MIN over the tiles' formulas."""
    gemv = vector_peak is not None and (fmt or "bf16") in GEMV_FORMATS
    args = (m, n, k, groups, nbytes, peak, sms, bw, prof, eta, elem_bytes, sustained, mem_scale, fmt, vector_peak)
    if not xp.numeric:  # a formula: one flat MIN over the tiles (a running IF chain nests exponentially)
        formulas = []
        for tm, tn in TILES:
            t, _, t_m = _candidates(tm, tn, *args, xp=xp)
            formulas += [t, _gemv(m, n, k, groups, vector_peak, prof, t_m, xp)[0]] if gemv and min(tm, tn) == NARROW \
                else [t]
        return xp.min_of(formulas) + prof.gemm_overhead_s, None, None
    dims = _shape((m, n, k, groups, nbytes, peak, sms, bw, eta, elem_bytes, sustained, mem_scale, vector_peak)
                  + tuple(getattr(prof, f) for f in _PROFILE_SCALARS))
    scan = _Scan()
    if dims == () or xp is STACKED or len(TILES) * math.prod(dims) <= BATCH_ELEMENTS:
        # every tile side by side: numbers (or scalar evaluations stacked by the caller) each priced exactly as alone
        # (STACKED), small arrays through numpy
        scan.batch(*_all_tiles(dims, args, gemv, STACKED if dims == () or xp is STACKED else xp))
        return scan.result(prof.gemm_overhead_s, dims)
    # large arrays: a tile at a time (a sweep's 10,000 points times every tile outgrows the cache: 2x slower), each
    # tile's join computed only where it could still win (:func:`_join_where_it_may_win`)
    for i, (tm, tn) in enumerate(TILES):
        t_c, t_m = _parts(tm, tn, *args, xp=xp, best=scan.t)
        t = _join(t_c, t_m, prof.gemm_softness, xp) if scan.t is None else \
            _join_where_it_may_win(t_c, t_m, prof.gemm_softness, scan.t)
        scan.add(t, t_c, t_m)
        if gemv and i in _NARROW_SET:
            scan.add(*_gemv(m, n, k, groups, vector_peak, prof, t_m, xp), t_m)
    return scan.result(prof.gemm_overhead_s, dims)


def _shape(values) -> tuple:
    """The broadcast shape of the numbers and arrays among ``values`` (() for numbers alone)."""
    shapes = [s for s in (np.shape(x) for x in values if not isinstance(x, (int, float, str, type(None)))) if s]
    return np.broadcast_shapes(*shapes) if shapes else ()


def _all_tiles(dims: tuple, args: tuple, gemv: bool, xp) -> tuple:
    """(time, compute part, memory part) of every tile's candidates, along a first axis in scan order: each tile, then
    its CUDA-core variant where it has one."""
    axis = (-1,) + (1,) * len(dims)
    t, t_c, t_m = _candidates(_TM.reshape(axis), _TN.reshape(axis), *args, xp=xp)
    full = (len(TILES),) + dims
    t, t_c, t_m = (x if np.shape(x) == full else np.broadcast_to(x, full) for x in (t, t_c, t_m))
    if gemv:  # the CUDA-core variants join right after their narrow tiles
        m, n, k, groups = args[:4]
        t_m_v = t_m[_NARROW]
        t_v, t_cv = (np.broadcast_to(x, t_m_v.shape) for x in _gemv(m, n, k, groups, args[-1], args[8], t_m_v, xp))
        t, t_c, t_m = (np.concatenate([a, b])[_GEMV_ORDER] for a, b in ((t, t_v), (t_c, t_cv), (t_m, t_m_v)))
    return t, t_c, t_m


class _Scan:
    """The candidate a scan in order keeps: the first of the least times; a NaN time stops it, and its time is NaN
    from there on. Candidates come one at a time (:meth:`add`) or as a batch along a first axis (:meth:`batch`)."""

    def __init__(self):
        self.t = self.t_c = self.t_m = None
        self.nan = None  # where a NaN stopped the scan (None: nowhere)

    def add(self, t, t_c, t_m, nan=None) -> None:
        """One candidate (``nan``: where the scan stops after it; default where its time is NaN)."""
        if nan is None:
            isnan = np.isnan(t)
            nan = isnan if np.any(isnan) else None
        if self.t is None:
            self.t, self.t_c, self.t_m = t, t_c, t_m
        else:
            better = t < self.t  # NaN: never
            if self.nan is not None:
                better = better & ~self.nan
            self.t_c, self.t_m = np.where(better, t_c, self.t_c), np.where(better, t_m, self.t_m)
            self.t = np.where(better, t, self.t)
        if nan is not None:
            self.nan = nan if self.nan is None else self.nan | nan

    def batch(self, t, t_c, t_m) -> None:
        best, nan = _first_fastest(t)
        self.add(*(_pick(a, best) for a in (t, t_c, t_m)), nan=nan)

    def result(self, overhead, dims: tuple) -> tuple:
        time = self.t if self.nan is None else np.where(self.nan, np.nan, self.t)
        if dims == ():  # numbers: numpy scalars, as a scan over numbers gives
            time, t_c, t_m = (np.float64(x) for x in (time, self.t_c, self.t_m))
            return time + overhead, t_c, t_m
        return time + overhead, self.t_c, self.t_m


def _pick(a: np.ndarray, idx: np.ndarray):
    """``a``'s element at ``idx`` along the first axis, per element."""
    if np.ndim(idx) == 0:
        return a[int(idx)]
    return np.take_along_axis(a, idx[None], axis=0)[0]


def _first_fastest(t: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Per element, the index along the first axis of the candidate a scan in order keeps (the first of the least
    times), and where any time is NaN (None: nowhere). A scan stops improving at a NaN and its time is NaN from there:
    the index is then the best before the first NaN."""
    nan = np.isnan(t)
    if not nan.any():
        return np.argmin(t, axis=0), None
    after = np.logical_or.accumulate(nan, axis=0)
    return np.argmin(np.where(after, np.inf, t), axis=0), after[-1]


def _candidates(tm, tn, *args, xp):
    """(time, compute part, memory part) of the tile(s) ``tm`` x ``tn`` (numbers, or arrays along the tiles)."""
    t_c, t_m = _parts(tm, tn, *args, xp=xp)
    return _join(t_c, t_m, args[8].gemm_softness, xp), t_c, t_m


def _parts(tm, tn, m, n, k, groups, nbytes, peak, sms, bw, prof, eta, elem_bytes, sustained, mem_scale, fmt,
           vector_peak, *, xp, best=None):
    """(compute part, memory part) of the tile(s) ``tm`` x ``tn``; with ``best`` (arrays: the scan's least time so
    far), the compute part only where the tile may still win, +inf elsewhere (:func:`_clocked_where_it_may_win`)."""
    cap = max_split(prof, fmt) if fmt else None
    per_sm = peak / sms
    misaligned = xp.logical_or(xp.mod(n * elem_bytes, ALIGN_BYTES) > 0, xp.mod(k * elem_bytes, ALIGN_BYTES) > 0)
    slow = xp.where(misaligned, prof.gemm_misaligned_eta, 1.0)
    q = prof.gemm_wave_q
    tile_c = prof.gemm_tile_c * prof.gemm_tile_c_fmt.get((fmt or "bf16").split("_")[0], 1.0)
    tiles = xp.ceil(m / tm) * xp.ceil(n / tn) * groups
    most = xp.maximum(1.0, xp.floor(k / prof.gemm_splitk_min_k))
    if cap is not None:
        most = xp.minimum(most, xp.maximum(1.0, xp.floor(cap)))
    split = xp.clip(xp.floor(sms / tiles), 1.0, most)
    units = tiles * split
    waves = (1.0 - q) * (units / sms) + q * xp.ceil(units / sms)
    t_tile = 2.0 * tm * tn * (k / split + prof.gemm_k0) / (per_sm * eta * tile_efficiency(tm, tn, tile_c))
    t_c0 = waves * t_tile / slow
    partials = (split - 1.0) * m * n * groups * 8.0  # fp32 partial sums written and read back
    # Distinct operand tiles in flight: CTAs of one tile column share their B tiles through L2 (and of
    # one row, their A tiles), so HBM concurrency is the row and column tile counts, weighted by each
    # operand's share of the bytes, times the K splits (a skinny product's padded row tiles add none)
    share_a = m / (m + n)
    distinct = (xp.ceil(m / tm) * share_a + xp.ceil(n / tn) * (1.0 - share_a)) * groups * split
    streams = xp.minimum(1.0, distinct / (sms * prof.gemm_mem_ctas))
    t_m = (nbytes + partials) / (bw * prof.gemm_mem_eta * mem_scale * streams * slow)
    clock_args = (t_c0, 2.0 * m * n * k * groups, nbytes, t_m, fmt or "bf16", peak, bw, prof, sustained)
    if best is None or sustained is not None:  # inside a step the clock is one cheap factor: nothing to save
        return power_clocked(*clock_args, xp), t_m
    return _clocked_where_it_may_win(clock_args, best), t_m


def _join(t_c, t_m, p, xp):
    """A tile's time from its parts: their p-norm (``gemm_softness``), a soft maximum."""
    return xp.power(xp.power(t_c, p) + xp.power(t_m, p), 1.0 / p)


# A p-norm is never below the larger part, so a tile whose larger part exceeds the best time so far cannot win. The
# margin covers the join's rounding (a few ulps) many times over: a tile within it is joined exactly.
_MAY_WIN = 1.0 + 1e-9


def _may_win(lower, best: np.ndarray) -> np.ndarray | None:
    """Where a candidate no faster than ``lower`` could still beat ``best`` (the scan's least time so far); None where
    it could everywhere. A NaN bound or best counts as could (the scan needs its NaN)."""
    may_win = ~(lower > best * _MAY_WIN)
    return None if may_win.all() else may_win


def _only_where(may_win: np.ndarray, fn, *args) -> np.ndarray:
    """``fn`` of ``args`` (numbers, None, or arrays broadcast to ``may_win``'s shape) at the elements ``may_win``
    marks, +inf elsewhere (a time that never wins)."""
    def pick(x):
        return x if x is None or np.ndim(x) == 0 else np.broadcast_to(x, may_win.shape)[may_win]

    out = np.full(may_win.shape, np.inf)
    out[may_win] = fn(*(pick(a) for a in args))
    return out


def _join_where_it_may_win(t_c, t_m, p, best: np.ndarray) -> np.ndarray:
    """:func:`_join` on arrays where it could beat ``best``, +inf elsewhere: the same scan result bit for bit, at a
    fraction of the ``pow`` calls (most tiles lose on most elements)."""
    may_win = _may_win(np.maximum(t_c, t_m), best)
    if may_win is None:
        return _join(t_c, t_m, p, NP)
    return _only_where(may_win, lambda c, m: _join(c, m, p, NP), t_c, t_m)


def _clocked_where_it_may_win(clock_args: tuple, best: np.ndarray) -> np.ndarray:
    """:func:`power_clocked` on arrays where the tile may beat ``best``, +inf elsewhere. The power-limited clock only
    slows a kernel (its stretch is at least 1), so a tile whose boost-clock compute part or memory part already
    exceeds the best time cannot win (:func:`_join_where_it_may_win`'s test, before the clock's exponentials)."""
    t_c0, flops, nbytes, t_m, fmt, peak, bw, prof, sustained = clock_args
    may_win = _may_win(np.maximum(t_c0, t_m), best)
    if may_win is None:
        return power_clocked(*clock_args, NP)
    return _only_where(may_win, lambda c0, f, b, m, pk, w, s: power_clocked(c0, f, b, m, fmt, pk, w, prof, s, NP),
                       t_c0, flops, nbytes, t_m, peak, bw, sustained)


def _gemv(m, n, k, groups, vector_peak, prof, t_m, xp):
    """(time, compute part) of the CUDA-core variant of the narrowest tile (GEMV-style), whose streaming time is
    ``t_m``: the few real rows on the vector units, no padding to the MMA's 8, the same operand streaming."""
    p = prof.gemm_softness
    t_cv = 2.0 * m * n * k * groups / (vector_peak * prof.gemm_eta.get("fp32", 0.85))
    t_v = xp.where(xp.minimum(m, n) <= GEMV_MAX_ROWS, _join(t_cv, t_m, p, xp), _NEVER)
    return t_v, t_cv


# the profile's GEMM parameters the candidates read as numbers (an array among them prices with numpy throughout)
_PROFILE_SCALARS = ("gemm_softness", "gemm_wave_q", "gemm_tile_c", "gemm_k0", "gemm_splitk_min_k", "gemm_mem_ctas",
                    "gemm_mem_eta", "gemm_misaligned_eta")
_TM = np.array([float(a) for a, _ in TILES])
_TN = np.array([float(b) for _, b in TILES])
# the tiles whose CUDA-core variant may run (right after its tile in scan order)
_NARROW = np.array([i for i, (a, b) in enumerate(TILES) if min(a, b) == NARROW])
_NARROW_SET = frozenset(_NARROW.tolist())
# candidates priced side by side at most (tiles x points): beyond, a tile at a time
BATCH_ELEMENTS = 32768
_GEMV_ORDER = np.argsort(np.concatenate([np.arange(len(TILES)) * 2.0, _NARROW * 2.0 + 1.0]), kind="stable")
