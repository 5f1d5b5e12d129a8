"""The per-SM rates the tuning models work with, from a hardware spec and the tuning constants.

The spec gives the SM count, the dense tensor rate (hence the clock), the HBM bandwidth and the L2 size;
:mod:`.constants` gives every estimated or fitted constant (MMA efficiencies, load latency, L2 bandwidth,
fixed costs), from a tune profile fitted on the device or from the documented estimates.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import generations
from ..cost import matmul_rate
from ..profile import Profile
from ..spec import HardwareSpec
from .constants import TuneConstants, default_constants

SMEM_BYTES_PER_CLK = 128.0  # 32 banks x 4 bytes a clock per SM (CUDA C++ Programming Guide, shared memory)
# Combined L1 + shared memory per SM: perfmodel.generations (192 KB on the A100, 256 KB on Hopper, with sources);
# a generation without the figure is taken as Hopper's (estimate)
L1_SMEM_DEFAULT = 256 * 1024
SFU_OPS_PER_CLK = 16.0  # exp2 results a clock per SM (CUDA C++ Programming Guide, arithmetic throughput, cc 8.0/9.0)
FP32_OPS_PER_CLK = 128.0  # fp32 add/mul/fma a clock per SM (same table)


@dataclass(frozen=True)
class Machine:
    sms: int
    clock_hz: float  # the sustained clock the dense tensor rate implies
    tensor_per_sm: float  # dense FLOP/s of one SM in the operand format
    smem_bw_sm: float  # bytes/s
    l2_bw_sm: float  # bytes/s, L2 -> one SM when all SMs stream
    hbm_bw: float  # bytes/s the streaming operands reach (spec bandwidth x hbm_eta)
    hbm_peak: float  # bytes/s, the spec's
    l2_bytes: float
    generation: str
    c: TuneConstants
    l1_smem_bytes: float = L1_SMEM_DEFAULT  # combined L1 + shared memory of one SM

    def spill_time(self, spill_words, threads, ctas_per_sm, smem_bytes):
        """Seconds of one K step's spill traffic for one CTA: through L1 while the spilled registers of the
        CTAs resident on the SM fit in what shared memory leaves of the combined L1, through L2 beyond."""
        import numpy as np

        nbytes = spill_words * 4.0 * threads * self.c.spill_accesses
        footprint = np.maximum(spill_words * 4.0 * threads * ctas_per_sm, 1.0)
        l1_left = np.maximum(self.l1_smem_bytes - ctas_per_sm * smem_bytes, 0.0)
        over = np.clip((footprint - l1_left) / footprint, 0.0, 1.0)
        return nbytes * ((1.0 - over) / self.smem_bw_sm + over / self.l2_bw_sm)

    def mma_rate(self, wgmma):
        """Sustained FLOP/s of one SM for the MMA family (``wgmma`` a bool or an array of them)."""
        import numpy as np

        if self.generation == "ampere":  # mma.sync is Ampere's full-rate path
            return self.tensor_per_sm * self.c.mma_eta_wgmma + 0.0 * np.asarray(wgmma, dtype=float)
        return self.tensor_per_sm * np.where(wgmma, self.c.mma_eta_wgmma, self.c.mma_eta_mma_sync)


def machine(hw: HardwareSpec, prof: Profile, dtype: str, consts: TuneConstants | None = None) -> Machine:
    c = consts if consts is not None else default_constants(prof)
    per_clk = generations.flop_per_clk_per_sm(hw.generation, "bf16") or 4096  # unknown: Hopper's (estimate)
    clock = hw.tensor_flops["bf16"] / (hw.sm_count * per_clk)
    peak, _ = matmul_rate(hw, dtype, prof)
    return Machine(
        sms=hw.sm_count, clock_hz=clock, tensor_per_sm=peak / hw.sm_count,
        smem_bw_sm=SMEM_BYTES_PER_CLK * clock, l2_bw_sm=c.l2_bytes_per_clk * clock / hw.sm_count,
        hbm_bw=hw.hbm_bandwidth * c.hbm_eta, hbm_peak=hw.hbm_bandwidth, l2_bytes=hw.l2_bytes,
        generation=hw.generation, c=c, l1_smem_bytes=generations.l1_smem_bytes(hw.generation) or L1_SMEM_DEFAULT)
