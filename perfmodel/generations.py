"""Per-generation facts: one :class:`Generation` per accelerator architecture generation, each figure with its
source (or marked "estimate"), the way hardware specs name theirs.

A hardware spec names its generation (``generation: hopper``); everything that depends on the generation
rather than on the part reads it here:

- ``order``: where the generation stands for "nearest generation" choices (:mod:`perfmodel.evidence`);
- ``arch``, ``mma``: the instruction set and the tensor-core instruction family (which kernels run:
  :mod:`perfmodel.attention_kernels`; the tuning model's MMA paths: :mod:`perfmodel.tune`);
- ``flop_per_clk_per_sm``, ``rate_ratio_limits``: dense tensor FLOP per clock per SM per format and the
  largest plausible dense rate of a format over bf16 (spec checks, :mod:`perfmodel.spec`; clocks implied
  from the rate, :mod:`perfmodel.tune.machine`);
- ``l1_smem_bytes``: combined L1 + shared memory of one SM (:mod:`perfmodel.tune.machine`);
- ``sfu_exp_rate``: exponentials per clock per SM relative to Hopper's (:mod:`perfmodel.transfer`);
- ``process``: the compute die's and the memory path's process node (:mod:`perfmodel.energy.carry`).

A fact that is ``None`` is not known (or not needed) for that generation; each reader says what it does then
(the accessors below take the caller's default). ``sources`` names, per field, where its figure comes from.

This is a leaf module: it imports nothing from the rest of perfmodel but :mod:`perfmodel.errors`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from .errors import InputError

KiB = 1024
# the facts a Generation may carry a source for (every one that is not None must)
FACT_FIELDS = ("order", "arch", "mma", "process", "l1_smem_bytes", "sfu_exp_rate", "flop_per_clk_per_sm",
               "rate_ratio_limits")
ASYNC_MMA = ("wgmma", "tcgen05")  # asynchronous (warpgroup / tensor-memory) MMA instruction families


@dataclass(frozen=True)
class Generation:
    name: str  # the key hardware specs use (``generation:``)
    vendor: str  # nvidia | amd
    # Nearness scale for choosing the closest measured generation: a source older than the target is preferred
    # (evidence.py). NVIDIA's data-centre line counts 0 (Volta) .. 4 (Rubin); Ada and RTX Blackwell sit between
    # Ampere and Hopper (their SMs run mma.sync, like Ampere's); AMD's generations stand apart from 10.
    order: float
    arch: str | None = None  # instruction-set target: sm_XX (NVIDIA compute capability) or gfxNNN (AMD)
    mma: str | None = None  # tensor-core instruction family: mma.sync | wgmma | tcgen05 | mfma
    process: tuple[str, str] | None = None  # (compute-die process, memory-path process)
    l1_smem_bytes: int | None = None  # combined L1 + shared memory of one SM
    sfu_exp_rate: float | None = None  # exponentials per clock per SM on the SFUs, relative to Hopper's
    flop_per_clk_per_sm: Mapping[str, int] = field(default_factory=dict)  # dense tensor FLOP/clk/SM (CU) per format
    rate_ratio_limits: Mapping[str, float] = field(default_factory=dict)  # per format: largest dense rate / bf16,
    # where it exceeds the general limit of perfmodel.spec
    sources: Mapping[str, str] = field(default_factory=dict)  # fact field -> its source, or "estimate: ..."

    def __post_init__(self):
        for name in ("flop_per_clk_per_sm", "rate_ratio_limits", "sources"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    @property
    def async_mma(self) -> bool:
        """The tensor cores take asynchronous MMA (Hopper's wgmma, Blackwell's tcgen05)."""
        return self.mma in ASYNC_MMA

    @property
    def sm_version(self) -> int | None:
        """NVIDIA compute capability as an integer (90 for sm_90), or None."""
        if self.arch and self.arch.startswith("sm_"):
            return int(self.arch[3:].rstrip("af"))
        return None


_CUDA_CC = "CUDA C++ Programming Guide, compute capabilities table"
_PTX = "PTX ISA (CUDA 12.8+)"
_SFU_GUIDE = ("CUDA C++ Programming Guide, arithmetic instructions throughput: 16 exp2 results per clock per SM "
              "for compute capability 7.x .. 12.0, as on Hopper")

# In ``order`` order. Add a generation here before a hardware spec names it (tests/test_generations.py checks).
GENERATIONS: dict[str, Generation] = {g.name: g for g in (
    Generation(
        "volta", "nvidia", order=0, arch="sm_70", mma="mma.sync",
        l1_smem_bytes=128 * KiB, sfu_exp_rate=1.0,
        sources={"order": "release sequence", "arch": _CUDA_CC + " (V100: 7.0)",
                 "mma": _PTX + ": mma.sync m8n8k4 from sm_70",
                 "l1_smem_bytes": "NVIDIA Tesla V100 GPU Architecture whitepaper: 128 KB L1 data cache / shared "
                                  "memory per SM",
                 "sfu_exp_rate": _SFU_GUIDE}),
    # "ampere" is GA100 (A100, sm_80); GA10x parts (sm_86) differ per SM and would need their own key, as Ada has
    Generation(
        "ampere", "nvidia", order=1, arch="sm_80", mma="mma.sync",
        process=("N7", "N7"), l1_smem_bytes=192 * KiB, sfu_exp_rate=1.0, flop_per_clk_per_sm={"bf16": 2048},
        sources={"order": "release sequence", "arch": _CUDA_CC + " (A100: 8.0)",
                 "mma": _PTX + ": mma.sync (no wgmma or tcgen05 before sm_90a)",
                 "process": "NVIDIA A100 Tensor Core GPU Architecture whitepaper (TSMC 7 nm N7)",
                 "l1_smem_bytes": "NVIDIA A100 Tensor Core GPU Architecture whitepaper: 192 KB combined L1 / shared "
                                  "memory per SM",
                 "sfu_exp_rate": "estimate: as Hopper (16 MUFU ops per clock per SM since Volta)",
                 "flop_per_clk_per_sm": "NVIDIA A100 datasheet: 312 TF dense bf16 over 108 SMs x 1410 MHz = 2049"}),
    Generation(
        "ada", "nvidia", order=1.5, arch="sm_89", mma="mma.sync",
        process=("4N", "4N"), sfu_exp_rate=1.0, flop_per_clk_per_sm={"bf16": 1024},
        sources={"order": "estimate: between Ampere and Hopper (mma.sync SM, fp8 tensor cores)",
                 "arch": _CUDA_CC + " (L40S, L4: 8.9)", "mma": _PTX + ": mma.sync (no wgmma or tcgen05 on sm_89)",
                 "process": "NVIDIA Ada Lovelace architecture whitepaper (TSMC 4N)",
                 "sfu_exp_rate": _SFU_GUIDE,
                 "flop_per_clk_per_sm": "AD10x with FP32 accumulate at full rate (data-centre and RTX parts): NVIDIA "
                                        "L40S datasheet, 362.05 TF dense over 142 SMs x 2490 MHz; L4 datasheet, 121 TF "
                                        "(242 sparse) over 58 SMs x 2040 MHz"}),
    Generation(
        "blackwell-rtx", "nvidia", order=1.75, arch="sm_120", mma="mma.sync",
        process=("4N", "4N"), sfu_exp_rate=1.0, flop_per_clk_per_sm={"bf16": 1024},
        sources={"order": "estimate: between Ampere and Hopper (mma.sync SM, no wgmma or tcgen05)",
                 "arch": _CUDA_CC + " (RTX PRO 6000 Blackwell: 12.0)",
                 "mma": _PTX + ": mma.sync (tcgen05 needs sm_100a/sm_103a, wgmma sm_90a)",
                 "process": "NVIDIA RTX Blackwell GPU architecture whitepaper (TSMC 4N)",
                 "sfu_exp_rate": _SFU_GUIDE,
                 # Its own key: under "blackwell" the sparse guard would pass a 2:4 figure and clocks implied from
                 # the rate (perfmodel.tune.machine) would be 8x too low.
                 "flop_per_clk_per_sm": "GB20x (sm_120): an eighth of GB100's per SM and clock, not half. NVIDIA RTX "
                                        "Blackwell GPU architecture whitepaper, RTX 5090: 419 TF dense FP16 (FP16 "
                                        "accumulate; GeForce halves FP32 accumulate, RTX PRO parts do not) over 170 "
                                        "SMs x 2407 MHz = 1024"}),
    Generation(
        "hopper", "nvidia", order=2, arch="sm_90", mma="wgmma",
        process=("4N", "4N"), l1_smem_bytes=256 * KiB, sfu_exp_rate=1.0, flop_per_clk_per_sm={"bf16": 4096},
        sources={"order": "release sequence", "arch": _CUDA_CC + " (H100, H200, H20, GH200: 9.0)",
                 "mma": _PTX + ": wgmma.mma_async, sm_90a",
                 "process": "NVIDIA H100 Tensor Core GPU Architecture whitepaper (TSMC 4N, custom for NVIDIA)",
                 "l1_smem_bytes": "NVIDIA H100 Tensor Core GPU Architecture whitepaper: 256 KB combined L1 / shared "
                                  "memory per SM",
                 "sfu_exp_rate": "reference",
                 "flop_per_clk_per_sm": "NVIDIA H100 Tensor Core GPU Architecture whitepaper: twice the A100 SM's "
                                        "dense MMA rate clock for clock"}),
    Generation(
        "blackwell", "nvidia", order=3, arch="sm_100", mma="tcgen05",
        process=("4NP", "4NP"), l1_smem_bytes=256 * KiB, sfu_exp_rate=1.0, flop_per_clk_per_sm={"bf16": 8192},
        sources={"order": "release sequence", "arch": _CUDA_CC + " (B200, GB200: 10.0)",
                 "mma": _PTX + ": tcgen05.mma, sm_100a",
                 "process": "NVIDIA Blackwell architecture technical brief (custom TSMC 4NP)",
                 "l1_smem_bytes": "estimate: as Hopper (the b200 spec's note: reference gives 256 KB)",
                 "sfu_exp_rate": "estimate: NVIDIA states Blackwell Ultra doubles Blackwell's SFU exponential "
                                 "throughput, so Blackwell has Hopper's",
                 "flop_per_clk_per_sm": "hardware/b200.yaml: 2250 TF dense bf16 over 148 SMs x 1856 MHz = 8191"}),
    Generation(
        "blackwell-ultra", "nvidia", order=3.5, arch="sm_103", mma="tcgen05",
        process=("4NP", "4NP"), l1_smem_bytes=256 * KiB, sfu_exp_rate=2.0, flop_per_clk_per_sm={"bf16": 8192},
        rate_ratio_limits={"fp4": 6.75},
        sources={"order": "release sequence", "arch": _CUDA_CC + " (B300, GB300: 10.3)",
                 "mma": _PTX + ": tcgen05.mma, sm_103a",
                 "process": "NVIDIA Blackwell Ultra announcement (TSMC 4NP, as Blackwell)",
                 "l1_smem_bytes": "estimate: as Hopper",
                 "sfu_exp_rate": "NVIDIA technical blog 'Inside NVIDIA Blackwell Ultra' (2025): SFU throughput for "
                                 "exponentials doubled for 2x attention-layer acceleration",
                 "flop_per_clk_per_sm": "hardware/b300.yaml: 2250 TF dense bf16 over 160 SMs x 1717 MHz = 8190",
                 "rate_ratio_limits": "Blackwell Ultra's FP4 is 1.5x Blackwell's (B300: 13125 vs 2250 TFLOPS, 5.8x; "
                                      "GB300: 15000 vs 2500, 6x): 1.5 x the general 4.5"}),
    Generation(
        "rubin", "nvidia", order=4, mma="tcgen05",
        process=("N3", "N3"), l1_smem_bytes=256 * KiB, sfu_exp_rate=2.0, rate_ratio_limits={"fp4": 6.75},
        sources={"order": "release sequence (announced)",
                 "mma": "estimate: Blackwell's tcgen05 family carries forward",
                 "process": "estimate: reported, not in a datasheet",
                 "l1_smem_bytes": "estimate: as Hopper",
                 "sfu_exp_rate": "estimate: as Blackwell Ultra",
                 "rate_ratio_limits": "estimate: as Blackwell Ultra"}),
    Generation(
        "cdna3", "amd", order=10, arch="gfx942", mma="mfma",
        process=("N5", "N6"), flop_per_clk_per_sm={"bf16": 2048},
        sources={"order": "release sequence; AMD apart from NVIDIA", "arch": "LLVM AMDGPU processors: MI300X gfx942",
                 "mma": "AMD CDNA 3 instruction set architecture: MFMA",
                 "process": "AMD CDNA 3 architecture whitepaper (XCDs on TSMC N5, I/O dies with the HBM controllers "
                            "on N6)",
                 "flop_per_clk_per_sm": "AMD Instinct MI300X datasheet: 1307.4 TF dense bf16 over 304 CUs x 2100 MHz "
                                        "= 2048 per CU"}),
    Generation(
        "cdna4", "amd", order=11, arch="gfx950", mma="mfma",
        process=("N3P", "N6"), flop_per_clk_per_sm={"bf16": 4096},
        sources={"order": "release sequence", "arch": "LLVM AMDGPU processors: MI350X/MI355X gfx950",
                 "mma": "AMD CDNA 4 instruction set architecture: MFMA",
                 "process": "AMD CDNA 4 architecture whitepaper (XCDs on TSMC N3P, I/O dies on N6)",
                 "flop_per_clk_per_sm": "hardware/mi355x.yaml: 2517 TF dense bf16 over 256 CUs x 2400 MHz = 4097"}),
)}


def get(name: str) -> Generation | None:
    """The generation ``name``, or None for one this table does not know."""
    return GENERATIONS.get(name)


def require(name: str) -> Generation:
    """The generation ``name``; an InputError naming the known ones otherwise."""
    g = GENERATIONS.get(name)
    if g is None:
        raise InputError(f"unknown generation {name!r}; known: {', '.join(GENERATIONS)}", field="generation")
    return g


def order(name: str) -> float | None:
    g = GENERATIONS.get(name)
    return None if g is None else g.order


def process(name: str) -> tuple[str, str] | None:
    """(compute-die process, memory-path process), or None where not known."""
    g = GENERATIONS.get(name)
    return None if g is None else g.process


def has_async_mma(name: str) -> bool:
    g = GENERATIONS.get(name)
    return g is not None and g.async_mma


def async_mma_generations() -> tuple[str, ...]:
    """Generations whose tensor cores take asynchronous MMA (wgmma, tcgen05), in table order."""
    return tuple(g.name for g in GENERATIONS.values() if g.async_mma)


def with_mma(mma: str) -> tuple[str, ...]:
    """Generations of one tensor-core instruction family, in table order."""
    return tuple(g.name for g in GENERATIONS.values() if g.mma == mma)


def sm_version(name: str) -> int | None:
    g = GENERATIONS.get(name)
    return None if g is None else g.sm_version


def flop_per_clk_per_sm(name: str, fmt: str = "bf16") -> int | None:
    """Dense tensor FLOP per clock per SM (per CU on AMD) in ``fmt``, or None where not known."""
    g = GENERATIONS.get(name)
    return None if g is None else g.flop_per_clk_per_sm.get(fmt)


def flop_per_clk_table(fmt: str = "bf16") -> dict[str, int]:
    """generation -> dense FLOP per clock per SM in ``fmt``, for the generations that give one."""
    return {g.name: g.flop_per_clk_per_sm[fmt] for g in GENERATIONS.values() if fmt in g.flop_per_clk_per_sm}


def rate_ratio_limits(name: str) -> dict[str, float]:
    g = GENERATIONS.get(name)
    return {} if g is None else dict(g.rate_ratio_limits)


def l1_smem_bytes(name: str) -> int | None:
    g = GENERATIONS.get(name)
    return None if g is None else g.l1_smem_bytes


def sfu_exp_rate(name: str) -> float | None:
    g = GENERATIONS.get(name)
    return None if g is None else g.sfu_exp_rate


def source(name: str, fact: str) -> str:
    """Where generation ``name``'s ``fact`` comes from ("" where the table gives none)."""
    g = GENERATIONS.get(name)
    return "" if g is None else g.sources.get(fact, "")
