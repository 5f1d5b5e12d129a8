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
- registers: a base, a share of the fp32 accumulator (BLOCK_M x BLOCK_N over the threads) and a share per
  16-byte vector of the operand blocks each thread moves a K step (pointers, masks, staging); three
  coefficients per family fitted by least squares (``REG_FIT``) to what the compiler reported for the
  kernel actually timed (``regs`` and ``spills`` of every row of calibration/h200-tune/run2: 381 distinct
  aligned configurations). The probe table's kernel is specialised differently (strides as constants,
  EVEN_K) and reports fewer registers for the large wgmma tiles (180-236 where the timed kernel spills),
  so it checks shared memory and the MMA family, not registers. The compiler spills wgmma kernels from
  ~240 estimated registers, before the 255 cap (``SPILL_AT``); the spill estimate is what is above that.
  Where the compiler's own report for the variant is known (:mod:`.compiled`, Hopper, Triton 3.6), it
  replaces the formula: the formula cannot tell 38 spilled words (a 256 x 128 tile on 8 warps, the
  fastest large-prefill kernel measured) from 134 (128 x 128 on 4 warps, 20% slower);
- a split-K kernel, whose output is fp32 partials, converts the accumulator's layout through shared memory
  for the store: BLOCK_M x BLOCK_N x 4 bytes when that is more than the pipeline's buffers (a 256 x 256
  tile: 256 KiB, over the SM's 227 KiB; the first H200 run's compiler refused exactly these; of the 381
  distinct aligned configurations the second run compiled, all but three 4-warp 256 x 256 ones match);
- K not a multiple of 16 elements: Triton specialises integer arguments on divisibility by 16, so it
  cannot prove the operands' rows 16-byte aligned. It then loads each element on its own into registers
  (no vector loads, no asynchronous copies, hence no software pipeline: one operand buffer whatever
  num_stages is), and every element a thread loads holds registers (``REG_FIT_UNALIGNED``: least squares
  over the non-spilling rows of K = 2500, 3000, 4104 that the second H200 run compiled, ``regs`` and
  ``spills`` of calibration/h200-tune/run2/tune_measurements.jsonl.gz).
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import generations
from ..dtypes import bytes_per_element
from ..errors import InputError
from .compiled import attention_resources, gemm_resources

REGS_PER_SM = 65536  # CUDA C++ Programming Guide, technical specifications (cc 5.0 .. 12.0)
MAX_REGS_PER_THREAD = 255  # same table
MAX_THREADS_PER_SM = 2048  # same table, cc 8.0 / 9.0 / 10.0
MAX_CTAS_PER_SM = 32  # same table
SMEM_RESERVED_PER_CTA = 1024  # bytes; same guide, shared memory of cc 8.x / 9.0
REG_ALLOC_UNIT = 256  # registers per warp allocation unit (occupancy calculator)
VECTOR_BYTES = 16  # one 128-bit load a thread: the widest global/async-copy access

# the generations the model describes: those with asynchronous MMA (wgmma, tcgen05; perfmodel.generations) and
# Ampere, whose mma.sync is its full-rate path
ASYNC_MMA_GENERATIONS = generations.async_mma_generations()
MMA_GENERATIONS = ("ampere",) + ASYNC_MMA_GENERATIONS

# registers a thread ~= base + per_acc * accumulator + per_vector * (16-byte operand vectors a thread loads
# a K step). Least squares over the second H200 run's non-spilling rows under 240 registers (the timed kernel
# as the device compiled it); tests/test_tune_resources.py refits them and checks the spill prediction.
REG_FIT = {"wgmma": (37.6, 1.59, 0.58), "mma.sync": (26.6, 1.47, 2.88)}
# estimated registers above which the compiler spills (wgmma: 181 of 189 configurations agree at 240;
# mma.sync: the hardware cap, 190 of 192)
SPILL_AT = {"wgmma": 240, "mma.sync": MAX_REGS_PER_THREAD}
# flash attention: accumulator (BLOCK_M x HEAD_DIM fp32 over the threads) + base + per_vector * (K and V
# vectors a thread loads a step) + per_score * (BLOCK_M x BLOCK_N scores over the threads); same table
ATTN_REG_FIT = {"wgmma": (27.3, 2.51, 1.91), "mma.sync": (60.8, 0.33, 2.46)}
# K rows not provably 16-byte aligned: accumulator + base + per_element * (operand elements a thread loads a
# K step; least squares over the 98 distinct non-spilling unaligned configurations the second H200 run
# compiled (residuals up to ~40 registers)
REG_FIT_UNALIGNED = {"wgmma": (-8.5, 3.77), "mma.sync": (35.9, 2.63)}
ALIGN_ELEMENTS = 16  # Triton's integer specialisation: divisible by 16 or not


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
    spill_regs: int = 0  # 32-bit words a thread spills to local memory
    source: str = "formula"  # where regs and spill_regs come from: formula | compiler (:mod:`.compiled`)


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


def k_aligned(k: int) -> bool:
    """Whether Triton can prove the operands' rows (K elements long) 16-byte aligned: K divisible by 16."""
    return k % ALIGN_ELEMENTS == 0


def gemm_buffers(fam: str, num_stages: int, aligned: bool = True) -> int:
    """Operand buffers in shared memory: the software pipeline's depth, or one without it."""
    if not aligned:
        return 1
    return num_stages if fam == "wgmma" else max(1, num_stages - 1)


def gemm_footprint(hw, cfg, dtype: str, aligned: bool = True, even_k: bool = True) -> Footprint:
    """``aligned``: K is a multiple of 16 elements (:func:`k_aligned`), otherwise no pipeline (module doc);
    ``even_k``: K a multiple of BLOCK_K x SPLIT_K (no K masks). Registers and spills: the compiler's report
    for the variant when :mod:`.compiled` has one, else the formula."""
    e = bytes_per_element(dtype)
    fam = mma_family(hw, cfg.block_m, cfg.num_warps)
    buffers = gemm_buffers(fam, cfg.num_stages, aligned)
    epilogue = cfg.block_m * cfg.block_n * 4 if cfg.split_k > 1 else 0  # fp32 partials, re-laid-out
    smem = int(max(buffers * (cfg.block_m + cfg.block_n) * cfg.block_k * e, epilogue))
    threads = 32 * cfg.num_warps
    acc = cfg.block_m * cfg.block_n / threads
    if aligned:
        vectors = (cfg.block_m + cfg.block_n) * cfg.block_k * e / VECTOR_BYTES / threads
        base, per_acc, per_vec = REG_FIT[fam]
        regs = int(round(base + per_acc * acc + per_vec * vectors))
        spill_at = SPILL_AT[fam]
    else:
        elements = (cfg.block_m + cfg.block_n) * cfg.block_k / threads
        base, per_el = REG_FIT_UNALIGNED[fam]
        regs = int(round(acc + base + per_el * elements))
        spill_at = MAX_REGS_PER_THREAD
    spill, source = max(0, regs - spill_at), "formula"
    reported = gemm_resources(hw, cfg, dtype, aligned, even_k)
    if reported is not None:
        (regs, spill), source = reported, "compiler"
    ctas, limit, invalid = _occupancy(hw, smem, regs, threads)
    return Footprint(fam, smem, regs, threads, ctas, limit, invalid, spill, source)


def attention_footprint(hw, cfg, head_dim: int, dtype: str, causal: bool = True) -> Footprint:
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
    spill, source = max(0, regs - MAX_REGS_PER_THREAD), "formula"
    reported = attention_resources(hw, cfg, head_dim, dtype, causal)
    if reported is not None:
        (regs, spill), source = reported, "compiler"
    ctas, limit, invalid = _occupancy(hw, int(smem), regs, threads)
    return Footprint(fam, int(smem), regs, threads, ctas, limit, invalid, spill, source)
