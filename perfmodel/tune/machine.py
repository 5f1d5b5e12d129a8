"""The per-SM rates the tuning models work with, derived from a hardware spec and a calibration profile.

Each figure either comes from the spec (SM count, dense tensor rate, HBM bandwidth, L2 size), from the
profile (HBM streaming efficiency, fixed launch costs, fitted on the device by ``perfmodel fit``), or is a
constant here with its source or the reasoning behind the estimate.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..cost import _rate
from ..profile import Profile
from ..spec import BF16_FLOP_PER_CLK_PER_SM, HardwareSpec

SMEM_BYTES_PER_CLK = 128.0  # 32 banks x 4 bytes a clock per SM (CUDA C++ Programming Guide, shared memory)
# L2 -> SM read bandwidth of the whole chip in bytes a clock. The A100 whitepaper gives 5120 B/clk; no
# figure is published for Hopper or Blackwell, so the same is used there (estimate).
L2_BYTES_PER_CLK = 5120.0
# Latency of a global load that misses L1 (L2 hit or HBM), under load: pointer-chasing microbenchmarks put
# Hopper's L2 at ~260 ns and HBM at ~480 ns unloaded; streaming tiles mix both (estimate).
LOAD_LATENCY_S = 0.5e-6
# Fraction of the dense tensor peak an MMA family sustains when fed (estimate): Hopper's wgmma as cuBLAS
# uses it reaches ~790 of 989 TFLOP/s bf16 on an H200 (device library, KINDS.md), ~0.8; Ampere-style
# mma.sync on Hopper peaks near 2/3 of wgmma (FlashAttention-2, built on mma.sync, runs at ~55-65% of
# FlashAttention-3's wgmma throughput on an H100: Shah et al. 2024, FlashAttention-3, figure 4).
MMA_ETA = {"wgmma": 0.80, "mma.sync": 0.52}
MMA_ETA_AMPERE = 0.80  # on Ampere mma.sync is the full-rate path (same cuBLAS reasoning)
# Fixed cost of one K step of a software-pipelined loop, not overlapped within a CTA: the barrier, the
# async-copy and MMA waits and fences, the pointer increments (estimate: ~100 clocks; a bar.sync alone
# is ~20-30 when every warp has arrived). Other CTAs resident on the SM run through it.
STEP_OVERHEAD_CLK = 100.0
SFU_OPS_PER_CLK = 16.0  # exp2 results a clock per SM (CUDA C++ Programming Guide, arithmetic throughput, cc 8.0/9.0)
FP32_OPS_PER_CLK = 128.0  # fp32 add/mul/fma a clock per SM (same table)


@dataclass(frozen=True)
class Machine:
    sms: int
    clock_hz: float  # the sustained clock the dense tensor rate implies
    tensor_per_sm: float  # dense FLOP/s of one SM in the operand format
    smem_bw_sm: float  # bytes/s
    l2_bw_sm: float  # bytes/s, L2 -> one SM when all SMs stream
    hbm_bw: float  # bytes/s a streaming kernel reaches (spec bandwidth x profile efficiency)
    l2_bytes: float
    load_latency_s: float
    launch_s: float  # fixed cost of one kernel launch, ramp-up and tail (profile gemm_overhead_s)
    gap_s: float  # between two kernels queued back to back (profile launch_graph_s)
    generation: str

    def mma_rate(self, family: str) -> float:
        eta = MMA_ETA_AMPERE if self.generation == "ampere" else MMA_ETA[family]
        return self.tensor_per_sm * eta


def machine(hw: HardwareSpec, prof: Profile, dtype: str) -> Machine:
    per_clk = BF16_FLOP_PER_CLK_PER_SM.get(hw.generation, 4096)
    clock = hw.tensor_flops["bf16"] / (hw.sm_count * per_clk)
    peak, _ = _rate(hw, dtype, prof)
    return Machine(
        sms=hw.sm_count, clock_hz=clock, tensor_per_sm=peak / hw.sm_count,
        smem_bw_sm=SMEM_BYTES_PER_CLK * clock, l2_bw_sm=L2_BYTES_PER_CLK * clock / hw.sm_count,
        hbm_bw=hw.hbm_bandwidth * prof.gemm_mem_eta, l2_bytes=hw.l2_bytes, load_latency_s=LOAD_LATENCY_S,
        launch_s=prof.gemm_overhead_s, gap_s=prof.launch_graph_s, generation=hw.generation)
