"""What a kernel configuration asks of one SM: shared memory, registers, threads; hence how many of its
programs (CTAs) fit on an SM at once, or whether it fits at all.

Limits per SM (NVIDIA data-center parts, compute capability 8.0, 9.0 and 10.0): 64K 32-bit registers,
at most 255 registers a thread, 2048 resident threads and 32 resident CTAs; 1 KiB of shared memory is
reserved per CTA (source: CUDA C++ Programming Guide, "Technical Specifications per Compute Capability"
and the shared-memory sections of compute capabilities 8.x and 9.0). Registers are allocated per warp in
units of 256 (8 a thread; the guide's occupancy calculator). The shared memory per SM is the spec's
``memory.smem_per_sm`` (228 KiB on Hopper, 164 KiB on the A100).

How Triton spends them (Triton 3.6, checked against the compiler's own figures in
``perfmodel/tune/data/compile_sm90.jsonl``, made by :mod:`.compile_probe` without a GPU):

- the instruction family: Hopper's asynchronous warpgroup MMA (``wgmma``) when BLOCK_M is a multiple of
  64 and num_warps of 4, otherwise Ampere's ``mma.sync``; Blackwell's asynchronous MMA is taken to follow
  the Hopper rule (estimate: not checked against that compiler);
- shared memory: the software pipeline keeps ``num_stages`` buffers of an A and a B block for the
  asynchronous MMA and ``num_stages - 1`` for ``mma.sync`` (matches every row of the table);
- registers: the fp32 accumulator (BLOCK_M x BLOCK_N over the threads) plus a base and a share per
  16-byte vector of the operand blocks each thread moves a K step (pointers, masks, staging), with two
  coefficients per family fitted by least squares to the table (``REG_FIT``); more than 255 spills.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import bytes_per_element
from ..errors import InputError

REGS_PER_SM = 65536  # CUDA C++ Programming Guide, technical specifications (cc 5.0 .. 12.0)
MAX_REGS_PER_THREAD = 255  # same table
MAX_THREADS_PER_SM = 2048  # same table, cc 8.0 / 9.0 / 10.0
MAX_CTAS_PER_SM = 32  # same table
SMEM_RESERVED_PER_CTA = 1024  # bytes; same guide, shared memory of cc 8.x / 9.0
REG_ALLOC_UNIT = 256  # registers per warp allocation unit (occupancy calculator)
VECTOR_BYTES = 16  # one 128-bit load a thread: the widest global/async-copy access

ASYNC_MMA_GENERATIONS = ("hopper", "blackwell", "blackwell-ultra", "rubin")
MMA_GENERATIONS = ("ampere",) + ASYNC_MMA_GENERATIONS

# registers a thread ~= accumulator + base + per_vector * (16-byte operand vectors a thread loads a K step).
# Least squares over the non-spilling GEMM rows of data/compile_sm90.jsonl (see tests/test_tune_resources.py,
# which refits them and checks the spill prediction against the compiler).
REG_FIT = {"wgmma": (21.3, 2.49), "mma.sync": (28.9, 3.45)}
# flash attention: accumulator (BLOCK_M x HEAD_DIM fp32 over the threads) + base + per_vector * (K and V
# vectors a thread loads a step) + per_score * (BLOCK_M x BLOCK_N scores over the threads); same table
ATTN_REG_FIT = {"wgmma": (27.3, 2.51, 1.91), "mma.sync": (60.8, 0.33, 2.46)}


@dataclass(frozen=True)
class Footprint:
    """One configuration on one SM."""

    mma: str  # wgmma | mma.sync
    smem_bytes: int
    regs: int  # estimated registers a thread (may exceed MAX_REGS_PER_THREAD: it then spills)
    threads: int
    ctas_per_sm: int  # 0: does not fit
    limit: str  # what caps ctas_per_sm: smem | registers | threads | ctas
    invalid: str = ""  # why it cannot run at all, or ""

    @property
    def spill_regs(self) -> int:
        return max(0, self.regs - MAX_REGS_PER_THREAD)


def check_generation(hw) -> None:
    if hw.vendor != "nvidia" or hw.generation not in MMA_GENERATIONS:
        raise InputError(f"the tuning model describes NVIDIA SMs with tensor cores (ampere, hopper, blackwell); "
                         f"{hw.key} is {hw.vendor} {hw.generation}", field="--arch")


def mma_family(hw, block_m: int, num_warps: int) -> str:
    if hw.generation in ASYNC_MMA_GENERATIONS and block_m % 64 == 0 and num_warps % 4 == 0:
        return "wgmma"
    return "mma.sync"


def _occupancy(hw, smem: int, regs: int, threads: int) -> tuple[int, str, str]:
    """(CTAs per SM, the binding limit, why invalid or '')."""
    smem_cap = int(hw.smem_per_sm_bytes)
    if smem + SMEM_RESERVED_PER_CTA > smem_cap:
        return 0, "smem", (f"shared memory {smem / 1024:.0f} KiB + 1 KiB reserved > {smem_cap / 1024:.0f} KiB "
                           f"per SM")
    warps = threads // 32
    per_warp = -(-min(regs, MAX_REGS_PER_THREAD) * 32 // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
    limits = {
        "smem": smem_cap // (smem + SMEM_RESERVED_PER_CTA),
        "registers": REGS_PER_SM // (per_warp * warps),
        "threads": MAX_THREADS_PER_SM // threads,
        "ctas": MAX_CTAS_PER_SM,
    }
    which = min(limits, key=lambda k: limits[k])
    return int(limits[which]), which, ""


def gemm_footprint(hw, cfg, dtype: str) -> Footprint:
    e = bytes_per_element(dtype)
    fam = mma_family(hw, cfg.block_m, cfg.num_warps)
    buffers = cfg.num_stages if fam == "wgmma" else max(1, cfg.num_stages - 1)
    smem = int(buffers * (cfg.block_m + cfg.block_n) * cfg.block_k * e)
    threads = 32 * cfg.num_warps
    acc = cfg.block_m * cfg.block_n / threads
    vectors = (cfg.block_m + cfg.block_n) * cfg.block_k * e / VECTOR_BYTES / threads
    base, per_vec = REG_FIT[fam]
    regs = int(round(acc + base + per_vec * vectors))
    ctas, limit, invalid = _occupancy(hw, smem, regs, threads)
    return Footprint(fam, smem, regs, threads, ctas, limit, invalid)


def attention_footprint(hw, cfg, head_dim: int, dtype: str) -> Footprint:
    """Shared memory: K and V blocks, ``num_stages`` deep for wgmma (``num_stages - 1`` for mma.sync), the
    query block, and for mma.sync the probabilities' block too (the compiler's layout conversion); every
    attention row of the table matches."""
    e = bytes_per_element(dtype)
    fam = mma_family(hw, cfg.block_m, cfg.num_warps)
    kv_block = 2 * cfg.block_n * head_dim * e
    if fam == "wgmma":
        smem = max(1, cfg.num_stages) * kv_block + cfg.block_m * head_dim * e
    else:
        smem = max(1, cfg.num_stages - 1) * kv_block + cfg.block_m * head_dim * e + cfg.block_m * cfg.block_n * e
    threads = 32 * cfg.num_warps
    acc = cfg.block_m * head_dim / threads
    vectors = kv_block / VECTOR_BYTES / threads
    scores = cfg.block_m * cfg.block_n / threads
    base, per_vec, per_score = ATTN_REG_FIT[fam]
    regs = int(round(acc + base + per_vec * vectors + per_score * scores))
    ctas, limit, invalid = _occupancy(hw, int(smem), regs, threads)
    return Footprint(fam, int(smem), regs, threads, ctas, limit, invalid)
