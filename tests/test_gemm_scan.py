"""The GEMM's tile scan over large arrays (a tile at a time, each tile's clock and join computed only where it may still
win) picks what pricing every tile in full picks, bit for bit: time, compute part and memory part."""
from __future__ import annotations

import numpy as np
import pytest

from perfmodel.cost import gemm
from perfmodel.cost.backend import NP
from perfmodel.resolve import resolve_hardware, resolve_profile


@pytest.fixture(scope="module")
def part():
    hw = resolve_hardware("h200-sxm")
    return hw, resolve_profile(None, hw, "vllm")


def _in_full(args: tuple, dims: tuple, gemv: bool, overhead: float) -> tuple:
    """Every tile priced over the whole array, then the scan's pick (the small-array path, forced)."""
    scan = gemm._Scan()
    scan.batch(*gemm._all_tiles(dims, args, gemv, NP))
    return scan.result(overhead, dims)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the NaN and infinite rows
@pytest.mark.parametrize("sustained", [None, 1.4])
@pytest.mark.parametrize("fmt", ["bf16", "fp8"])
def test_pruned_scan_is_the_full_scan(part, sustained, fmt):
    hw, prof = part
    rng = np.random.default_rng(7)
    m = np.concatenate([np.arange(1.0, 3001.0), rng.integers(1, 40000, 2000).astype(float)])
    n = rng.choice([128.0, 768.0, 1000.0, 4096.0, 12288.0, 151936.0], m.size)  # 1000: misaligned rows
    k = rng.choice([64.0, 512.0, 4096.0, 7168.0, 24576.0], m.size)
    m[5], k[9] = np.nan, np.inf  # a NaN stops the scan; an infinite product is infinite everywhere
    nbytes = m * k + n * k + 2.0 * m * n
    peak = hw.tensor_rate(fmt)
    args = (m, n, k, 1, nbytes, peak, hw.sm_count, 4.8e12, prof, 0.8, 1.0, sustained, 1.0, fmt, hw.vector_fp32_flops)
    assert len(gemm.TILES) * m.size > gemm.BATCH_ELEMENTS  # the tile-at-a-time path
    got = gemm.gemm_time(m, n, k, 1, nbytes, peak, hw.sm_count, 4.8e12, prof, 0.8, sustained=sustained, fmt=fmt,
                         vector_peak=hw.vector_fp32_flops, elem_bytes=1.0)
    want = _in_full(args, m.shape, fmt in gemm.GEMV_FORMATS, prof.gemm_overhead_s)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert np.isnan(got[0][5]) and not np.isnan(got[0]).all()
