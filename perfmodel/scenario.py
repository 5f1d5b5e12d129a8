"""An inference scenario: sequence lengths, batch, parallel layout, formats and modelling switches."""
from __future__ import annotations

from dataclasses import dataclass, replace

from .dtypes import check_dtype
from .errors import InputError


@dataclass(frozen=True)
class Scenario:
    isl: int = 1024  # input (prompt) tokens per request
    osl: int = 128  # output tokens per request
    batch: int | str = 1  # concurrent sequences per model replica, or "max"
    tp: int = 1  # tensor parallel
    pp: int = 1  # pipeline parallel
    ep: int = 1  # expert parallel: experts split over ep of the tp ranks (ep divides tp)
    dtype: str = "bf16"  # weights and GEMM operands
    kv_dtype: str | None = None  # KV cache; defaults to dtype for fp8, bf16 otherwise
    act_dtype: str = "bf16"  # activations between kernels
    mode: str = "latency"  # latency (calibrated model) | sol (pure roofline)
    # auto: decode replayed from a CUDA graph, prefill launched eagerly (as serving engines run them);
    # graph or eager: both phases so
    launch: str = "auto"
    # fused: a serving engine's kernels (rotary folded into the KV-cache write, residual add folded into
    # the next norm, one SwiGLU kernel, decode attention that computes only real query rows);
    # torch: the plain PyTorch layer the calibration suite measures (eager rotary, silu(g) * u, SDPA)
    kernels: str = "fused"
    batching: str = "continuous"  # continuous (prefill amortised into a running stream) | static
    overlap: float = 0.0  # fraction of collective time hidden under compute (0: none, the default assumption)
    prefill_chunk: int = 8192  # prefill token budget per step in continuous batching
    mem_reserve: float = 2.0 * 2**30  # bytes per GPU kept for the CUDA context, allocator slack and workspace
    mem_fraction: float = 0.95  # share of HBM the serving engine may use

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def kv(self) -> str:
        if self.kv_dtype:
            return self.kv_dtype
        return "fp8" if self.dtype in ("fp8", "fp4") else self.act_dtype

    def launch_for(self, phase: str) -> str:
        """graph or eager, for a step of ``phase``."""
        if self.launch != "auto":
            return self.launch
        return "graph" if phase == "decode" else "eager"

    def with_(self, **kw) -> "Scenario":
        return replace(self, **kw)

    def validated(self) -> "Scenario":
        for name in ("isl", "osl", "tp", "pp", "ep", "prefill_chunk"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(f"expected a positive integer, got {v!r}", field=f"--{name.replace('_', '-')}")
        if self.batch != "max" and (not isinstance(self.batch, int) or self.batch < 1):
            raise InputError(f"expected a positive integer or 'max', got {self.batch!r}", field="--batch")
        check_dtype(self.dtype, where="--dtype")
        check_dtype(self.kv, where="--kv-dtype")
        check_dtype(self.act_dtype, where="--act-dtype")
        if self.tp % self.ep:
            raise InputError(f"--ep {self.ep} must divide --tp {self.tp} (experts are split over the TP ranks)",
                             field="--ep")
        if self.mode not in ("latency", "sol"):
            raise InputError(f"expected latency or sol, got {self.mode!r}", field="--mode")
        if self.kernels not in ("fused", "torch"):
            raise InputError(f"expected fused or torch, got {self.kernels!r}", field="--kernels")
        if self.launch not in ("auto", "graph", "eager"):
            raise InputError(f"expected auto, graph or eager, got {self.launch!r}", field="--launch")
        if self.batching not in ("continuous", "static"):
            raise InputError(f"expected continuous or static, got {self.batching!r}", field="--batching")
        if not 0.0 <= self.overlap <= 1.0:
            raise InputError(f"expected a fraction in [0, 1], got {self.overlap!r}", field="--overlap")
        return self


def parse_batch(text: str) -> int | str:
    if text == "max":
        return "max"
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"expected a positive integer or 'max', got {text!r}", field="--batch") from None
    if value < 1:
        raise InputError(f"expected a positive integer or 'max', got {text!r}", field="--batch")
    return value
