"""The attention kernels software stacks run, and which measured backend stands for each.

The calibration suite measures PyTorch's SDPA backends on the part (``flash``: FlashAttention-2;
``cudnn``: cuDNN's fused attention; ``efficient``: the memory-efficient kernel) and records which one
plain PyTorch dispatches to (``Profile.attn_default``). Production engines run kernels PyTorch does not
ship (FlashAttention-3, TensorRT-LLM's FMHA and XQA, FlashInfer): each is carried from the measured
backend of its class, by a rule written here with its source, and every projection that uses a carried
kernel says so.

``auto`` means: what plain PyTorch picks on the part (the profile's measured default for the phase).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .errors import InputError
from .generations import async_mma_generations, with_mma

AUTO = "auto"


@dataclass(frozen=True)
class AttentionKernel:
    key: str
    name: str
    measured_as: str  # the SDPA backend whose fitted parameters time it
    source: str  # why that backend stands for it (empty when it is that backend)
    generations: tuple[str, ...] = ()  # NVIDIA generations it runs on; empty: every one
    fallback: str = ""  # kernel used on a generation it does not run on

    @property
    def carried(self) -> bool:
        return self.key != self.measured_as


_FA3_CLASS = ("Shah et al. 2024, FlashAttention-3 (arXiv 2407.08608), Fig. 5-6: on H100, bf16 forward at head dim "
              "128 and 4k-16k tokens, FA3 and cuDNN 9 reach comparable throughput (about 600-760 TFLOP/s), "
              "1.5-2x FlashAttention-2; so FA3-class kernels take cuDNN's fitted efficiencies")
_HOPPER_PLUS = async_mma_generations()  # FA3-class kernels need asynchronous MMA (wgmma, tcgen05)

KERNELS: dict[str, AttentionKernel] = {k.key: k for k in (
    AttentionKernel("flash", "FlashAttention-2 (PyTorch SDPA flash backend)", "flash", ""),
    AttentionKernel("cudnn", "cuDNN fused attention (PyTorch SDPA cuDNN backend)", "cudnn", ""),
    AttentionKernel("efficient", "memory-efficient attention (PyTorch SDPA efficient backend)", "efficient", ""),
    AttentionKernel("fa3", "FlashAttention-3 (wgmma + TMA, warp-specialised)", "cudnn", _FA3_CLASS,
                    generations=with_mma("wgmma"), fallback="cudnn"),  # FA3 is written for wgmma
    AttentionKernel("trtllm", "TensorRT-LLM context FMHA and XQA generation kernels", "cudnn",
                    "TensorRT-LLM docs (docs/source/advanced/gpt-attention.md): context FMHA on Hopper and "
                    "Blackwell is a warp-specialised FA3-class kernel, generation uses XQA for GQA/MQA; no public "
                    "kernel-level timing: carried from cuDNN's measurement as an FA3-class kernel. " + _FA3_CLASS,
                    generations=_HOPPER_PLUS, fallback="flash"),
    AttentionKernel("mla", "multi-head latent attention kernels (TensorRT-LLM's MLA, FlashMLA, FlashInfer MLA)",
                    "cudnn", "no measurement of an MLA kernel in this project's suite: carried from cuDNN's as an "
                    "FA3-class kernel until an engine's MLA tables are imported. " + _FA3_CLASS,
                    generations=_HOPPER_PLUS, fallback="flash"),
    AttentionKernel("flashinfer", "FlashInfer (FA3 template on Hopper, TRT-LLM-gen kernels on Blackwell)", "cudnn",
                    "FlashInfer 0.2+ uses the FA3 template on sm90 (FlashInfer release notes); " + _FA3_CLASS,
                    generations=_HOPPER_PLUS, fallback="flash"),
    AttentionKernel("triton", "Triton attention kernels (SGLang's triton backend: extend and split-KV decode)",
                    "flash", "SGLang's Triton kernels (layers/attention/triton_ops: extend_attention.py, "
                    "decode_attention.py, 0.5.9) tile queries per CTA with an online softmax and no warp "
                    "specialisation or TMA, the FlashAttention-2 scheme: carried from PyTorch's FlashAttention-2 "
                    "measurement (estimate) where no engine table times them"),
)}
ALIASES = {"fa2": "flash", "sdpa-flash": "flash", "tensorrt-llm": "trtllm", "xqa": "trtllm"}
CHOICES = (AUTO, *KERNELS, *ALIASES)

# fp8 attention (TensorRT-LLM's fp8 context FMHA): its FLOPs run at the fp8 rate with this share of the bf16
# kernel's fraction of peak. FA3 paper: fp8 forward reaches about 1.2 PFLOP/s of H100's 1979 (0.61) against
# about 740 TFLOP/s of 989 (0.75) in bf16: 0.61 / 0.75 = 0.81.
FP8_ETA_RATIO = 0.81
FP8_ETA_SOURCE = ("Shah et al. 2024 (FlashAttention-3): fp8 forward about 1.2 PFLOP/s of 1979 against bf16 about "
                  "740 TFLOP/s of 989 on H100: 0.81 of the bf16 fraction of peak")


def canonical(name: str) -> str:
    """The library key of a kernel name or alias; raises InputError for an unknown one."""
    key = ALIASES.get(name, name)
    if key != AUTO and key not in KERNELS:
        raise InputError(f"unknown attention kernel {name!r}; expected one of {', '.join(CHOICES)}",
                         field="--attention-kernel")
    return key


@dataclass(frozen=True)
class Resolved:
    """The kernel a projection uses for one phase, and the fitted backend that times it."""

    kernel: AttentionKernel
    backend: str  # key into the profile's per-backend attention parameters
    note: str  # what was substituted, if anything

    @property
    def carried(self) -> bool:
        """Timed with another kernel's parameters (the rule in KERNELS), not its own."""
        return self.backend != self.kernel.key


def resolve(name: str, phase: str, generation: str, attn_default: dict, own: Iterable[str] = ()) -> Resolved:
    """The kernel ``name`` (or ``auto``) becomes on a part of ``generation`` for ``phase``.

    ``auto`` is the profile's measured default dispatch for the phase (decode for one query a sequence,
    prefill otherwise), FlashAttention-2 when the profile records none. A kernel that does not run on the
    generation is replaced by its fallback, and the note says so. ``own``: kernels the profile has
    parameters of its own for (measured on the part, e.g. an engine's kernels imported from its tables):
    those are timed as themselves, not by the kernel they are carried from.
    """
    key = canonical(name)
    note = ""
    if key == AUTO:
        key = attn_default.get(phase) or attn_default.get("prefill") or "flash"
        if key not in KERNELS:
            key = "flash"
    kernel = KERNELS[key]
    if key in set(own):  # measured on this part: it runs here
        return Resolved(kernel, key, note)
    if kernel.generations and generation not in kernel.generations:
        note = f"{kernel.name} does not run on {generation}: {KERNELS[kernel.fallback].name} instead"
        kernel = KERNELS[kernel.fallback]
    return Resolved(kernel, kernel.measured_as, note)
