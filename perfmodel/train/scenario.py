"""A training scenario: the parallel layout, batch, sequence, pipeline schedule, recompute, ZeRO and formats.

Layout (Megatron-LM's rank order, TP fastest): ``gpus = tp x cp x dp x pp``. TP ranks are neighbours (one
scale-up domain when tp <= its size), CP groups stride tp, DP groups stride tp x cp, PP stages stride
tp x cp x dp. Expert parallelism (MoE models) is carved out of the data-parallel ranks, as Megatron-Core
does: ``ep`` divides ``dp x cp`` and each expert is split ``tp`` ways.

A step consumes ``global_batch`` sequences of ``seq`` tokens: each of the ``dp`` replicas runs
``micro_batches = global_batch / (dp x micro_batch)`` micro-batches of ``micro_batch`` sequences through the
pipeline, then gradients are reduced over ``dp x cp`` ranks and the optimizer steps.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..dtypes import check_dtype
from ..errors import InputError
from ..scenario import check_moe_imbalance

SCHEDULES = ("1f1b", "interleaved", "zero-bubble", "dualpipe")
RECOMPUTE = ("none", "selective", "full", "auto")  # auto: the least that fits (train.memory.least_recompute)
OPTIMIZERS = ("adamw", "sgd")
TRAIN_DTYPES = ("bf16", "fp16", "fp8", "fp4")
# fp8 training recipes (TransformerEngine's): delayed scaling (amax history), current per-tensor scaling,
# 1x128 / 128x128 block scales (DeepSeek-V3's), MXFP8 (32-element blocks, e8m0 scales; Blackwell). fp4 is NVFP4
# training (16-element blocks, random Hadamard transforms and stochastic rounding on the gradients; Blackwell).
FP8_RECIPES = ("delayed", "tensorwise", "block", "mxfp8")
ATTENTION_IMPLS = ("flash", "unfused")
KERNELS = ("fused", "torch")
# Megatron-Core's MoE token dispatchers over expert parallelism: alltoall (--moe-token-dispatcher-type alltoall: NCCL
# all-to-all of a copy per routed token-expert pair) | deepep (flex with --moe-enable-deepep: DeepEP's normal
# kernels, a token once to each rank holding any of its experts, once per remote node across nodes) | hybridep (flex
# with HybridEP: the same sending, inside an NVLink domain at the link's rate, across nodes as DeepEP's) | auto (what
# Megatron-Bridge's recipe for the model runs on the part: recipe_dispatcher)
MOE_DISPATCHERS = ("auto", "alltoall", "deepep", "hybridep")
# Megatron-Bridge 0.3.1's pretraining recipes (megatron/bridge/recipes/): the flex dispatcher only where a recipe calls
# apply_flex_dispatcher_backend (training/flex_dispatcher_backend.py): DeepSeek-V3's with HybridEP (deepseek_v3.py),
# the Qwen3 MoE and Qwen3-Next ones with DeepEP (qwen3_moe.py, qwen3_next.py). Every other MoE recipe (gpt-oss,
# Kimi K2, GLM-4.5, DeepSeek-V2, Moonlight, OLMoE) names a flex backend but keeps the alltoall dispatcher.
RECIPE_FLEX_BY_KEY = {"deepseek-v3": "hybridep"}
RECIPE_FLEX_BY_FAMILY = {"qwen3_moe": "deepep", "qwen3_next": "deepep"}
# where apply_flex_dispatcher_backend keeps each backend: DeepEP on compute capability 8 and 9 and on the B200 and B300
# (by name: not a GB200 or GB300), HybridEP on 8, 9 and 10
_CC8_9 = ("ampere", "ada", "hopper")
_CC10 = ("blackwell", "blackwell-ultra")


def recipe_dispatcher(model, hw) -> str:
    """The dispatcher Megatron-Bridge 0.3.1's recipe for ``model`` runs on ``hw`` (module constants above). An HGX
    Blackwell board (B200, B300) is told from a Grace-Blackwell one by its NVLink domain of at most 8 GPUs."""
    backend = RECIPE_FLEX_BY_KEY.get(model.key) or RECIPE_FLEX_BY_FAMILY.get(model.family)
    gen = hw.generation
    if backend == "hybridep" and gen in _CC8_9 + _CC10:
        return "hybridep"
    if backend == "deepep" and (gen in _CC8_9 or (gen in _CC10 and hw.scaleup_domain <= 8)):
        return "deepep"
    return "alltoall"


def resolve_dispatcher(ts: "TrainScenario", model, hw) -> "TrainScenario":
    """``ts`` with ``moe_dispatcher`` "auto" replaced by :func:`recipe_dispatcher`'s choice."""
    if ts.moe_dispatcher != "auto":
        return ts
    return ts.with_(moe_dispatcher=recipe_dispatcher(model, hw) if model.moe is not None else "alltoall")


@dataclass(frozen=True)
class TrainScenario:
    gpus: int = 8
    tp: int = 1
    pp: int = 1
    cp: int = 1  # context parallel: the sequence split over cp ranks (ring attention, load balanced)
    ep: int = 1  # expert parallel (MoE): experts split over ep of the dp x cp ranks
    dp: int | None = None  # data parallel; None: gpus / (tp x pp x cp)
    global_batch: int = 512  # sequences per optimizer step
    micro_batch: int = 1  # sequences per micro-batch
    seq: int = 2048  # tokens per sequence
    schedule: str = "1f1b"
    interleave: int = 1  # model chunks per pipeline rank (interleaved schedule)
    recompute: str = "none"  # none | selective (core attention) | full (whole layers) | auto (the least that fits)
    sequence_parallel: bool = False  # Korthikanti et al. 2022: norms and dropout split over the TP ranks
    zero: int = 1  # 0: replicated; 1: optimizer states sharded over dp x cp; 2: + gradients; 3: + weights
    dtype: str = "bf16"  # GEMM operand format (fp8 or fp4: low-precision GEMMs, bf16 activations and weights)
    fp8_recipe: str = "delayed"  # how fp8 operands are scaled (FP8_RECIPES); fp4 is always NVFP4
    optimizer: str = "adamw"
    # fp32 main gradients: Megatron accumulates and reduces gradients in fp32 for bf16 training
    grad_dtype: str = "fp32"
    attention: str = "flash"  # flash (fused, FlashAttention-style) | unfused (QK^T, softmax, dropout, AV)
    # which fused kernel (perfmodel.attention_kernels): auto is what PyTorch dispatches to on the part (the
    # profile's measured default); TransformerEngine on Hopper runs cuDNN's (cudnn)
    attention_kernel: str = "auto"
    dropout: bool = False  # hidden and attention dropout (GPT-era training); Llama-style training has none
    kernels: str = "fused"  # fused: Megatron/TransformerEngine kernels; torch: plain PyTorch (the suite)
    dp_overlap: bool = True  # gradient reduce overlaps the last micro-batch's backward, param gather the forward
    tp_overlap: float = 0.0  # share of TP collective time hidden under GEMMs (TE userbuffers); 0: none
    # expert-parallel all-to-all hidden under another micro-batch's compute: DualPipe's paired forward and
    # backward chunks (DeepSeek-V3 report, sec. 3.2.1), Megatron-Core's --overlap-moe-expert-parallel-comm (1F1B
    # with A2A overlap); None: on with --schedule dualpipe, off otherwise (Megatron's default)
    moe_a2a_overlap: bool | None = None
    # expert load imbalance: the busiest expert-parallel rank's routed token-expert pairs over the mean (1: uniform
    # routing, the default; inference's --moe-imbalance, the same meaning). The step waits for that rank: its
    # routed products and permutes run that many times the mean rank's work, its all-to-all moves that much more,
    # and it keeps that many more permuted activations
    moe_imbalance: float = 1.0
    moe_dispatcher: str = "auto"  # MOE_DISPATCHERS
    # multi-token-prediction modules trained with the model (DeepSeek-V3 report sec. 2.2; Megatron-Core's
    # --mtp-num-layers): each one decoder layer, a projection of [norm(h); norm(emb)] and the shared LM head and
    # loss again, on the last pipeline stage; None: the model's own (config num_nextn_predict_layers)
    mtp_layers: int | None = None
    mode: str = "latency"  # latency (calibrated) | sol (roofline)
    mem_reserve: float = 2.0 * 2**30  # CUDA context, NCCL buffers, allocator slack (estimate, as for inference)
    mem_fraction: float = 0.95  # share of HBM the framework may use (estimate)

    @property
    def data_parallel(self) -> int:
        return self.dp if self.dp is not None else self.gpus // max(1, self.tp * self.pp * self.cp)

    @property
    def micro_batches(self) -> int:
        """Micro-batches each pipeline runs per step."""
        return self.global_batch // (self.data_parallel * self.micro_batch)

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq

    @property
    def a2a_hidden(self) -> bool:
        """Whether the MoE all-to-all overlaps compute (``moe_a2a_overlap``, else the schedule's default)."""
        return self.schedule == "dualpipe" if self.moe_a2a_overlap is None else bool(self.moe_a2a_overlap)

    @property
    def chunks(self) -> int:
        """Model chunks per pipeline rank (virtual stages)."""
        return self.interleave if self.schedule == "interleaved" else 1

    def with_(self, **kw) -> "TrainScenario":
        return replace(self, **kw)

    def validated(self, model=None) -> "TrainScenario":
        """Check every field (and, given a model, the fields that depend on it); one-line InputErrors."""
        for name in ("gpus", "tp", "pp", "cp", "ep", "global_batch", "micro_batch", "seq", "interleave"):
            _positive(getattr(self, name), name)
        if self.dp is not None:
            _positive(self.dp, "dp")
        if self.mtp_layers is not None and (not isinstance(self.mtp_layers, int) or isinstance(self.mtp_layers, bool)
                                            or not 0 <= self.mtp_layers <= 8):
            raise InputError(f"expected 0 to 8 multi-token-prediction layers, got {self.mtp_layers!r}",
                             field="--mtp-layers")
        if self.schedule not in SCHEDULES:
            raise InputError(f"expected one of {', '.join(SCHEDULES)}, got {self.schedule!r}", field="--schedule")
        if self.recompute not in RECOMPUTE:
            raise InputError(f"expected one of {', '.join(RECOMPUTE)}, got {self.recompute!r}", field="--recompute")
        if self.optimizer not in OPTIMIZERS:
            raise InputError(f"expected one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}", field="--optimizer")
        if self.dtype not in TRAIN_DTYPES:
            raise InputError(f"expected one of {', '.join(TRAIN_DTYPES)}, got {self.dtype!r}", field="--dtype")
        if self.fp8_recipe not in FP8_RECIPES:
            raise InputError(f"expected one of {', '.join(FP8_RECIPES)}, got {self.fp8_recipe!r}", field="--fp8-recipe")
        check_dtype(self.grad_dtype, where="--grad-dtype")
        if self.grad_dtype not in ("fp32", "bf16", "fp16"):
            raise InputError(f"expected fp32, bf16 or fp16, got {self.grad_dtype!r}", field="--grad-dtype")
        if self.attention not in ATTENTION_IMPLS:
            raise InputError(f"expected one of {', '.join(ATTENTION_IMPLS)}, got {self.attention!r}",
                             field="--attention")
        _check_attention_kernel(self.attention_kernel)
        if self.kernels not in KERNELS:
            raise InputError(f"expected one of {', '.join(KERNELS)}, got {self.kernels!r}", field="--kernels")
        if self.mode not in ("latency", "sol"):
            raise InputError(f"expected latency or sol, got {self.mode!r}", field="--mode")
        if isinstance(self.zero, bool) or self.zero not in (0, 1, 2, 3):
            raise InputError(f"expected 0, 1, 2 or 3, got {self.zero!r}", field="--zero")
        check_moe_imbalance(self.moe_imbalance)
        if self.moe_dispatcher not in MOE_DISPATCHERS:
            raise InputError(f"expected one of {', '.join(MOE_DISPATCHERS)}, got {self.moe_dispatcher!r}",
                             field="--moe-dispatcher")
        if not 0.0 <= self.tp_overlap <= 1.0:
            raise InputError(f"expected a fraction in [0, 1], got {self.tp_overlap!r}", field="--tp-overlap")
        if self.sequence_parallel and self.tp == 1:
            raise InputError("sequence parallelism splits activations over the TP ranks; it needs --tp > 1",
                             field="--sequence-parallel")
        inner = self.tp * self.pp * self.cp
        if self.dp is None and self.gpus % inner:
            raise InputError(f"--gpus {self.gpus} is not a multiple of tp x pp x cp = {inner}", field="--gpus")
        dp = self.data_parallel
        if inner * dp != self.gpus:
            raise InputError(f"tp x pp x cp x dp = {inner} x {dp} = {inner * dp}, expected --gpus {self.gpus}",
                             field="--dp")
        if self.global_batch % (dp * self.micro_batch):
            raise InputError(f"--global-batch {self.global_batch} is not a multiple of dp x micro-batch = "
                             f"{dp} x {self.micro_batch}", field="--global-batch")
        m = self.micro_batches
        if self.interleave > 1 and self.schedule != "interleaved":
            raise InputError("--interleave needs --schedule interleaved", field="--interleave")
        if self.schedule == "interleaved":
            if self.pp == 1:
                raise InputError("the interleaved schedule needs --pp > 1", field="--schedule")
            if self.interleave < 2:
                raise InputError("the interleaved schedule needs --interleave 2 or more (model chunks per rank)",
                                 field="--interleave")
            if m % self.pp:
                raise InputError(f"the interleaved schedule needs micro-batches ({m}) to be a multiple of --pp "
                                 f"{self.pp}", field="--global-batch")
        if self.schedule == "zero-bubble" and self.pp == 1:
            raise InputError("the zero-bubble schedule needs --pp > 1", field="--schedule")
        if self.schedule == "dualpipe":
            if self.pp < 2 or self.pp % 2:
                raise InputError(f"DualPipe needs an even --pp of 2 or more, got {self.pp}", field="--pp")
            if m < self.pp or m % 2:
                raise InputError(f"DualPipe needs an even number of micro-batches of at least --pp {self.pp}, "
                                 f"got {m}", field="--global-batch")
        if self.cp > 1 and self.seq % (2 * self.cp):
            raise InputError(f"--seq {self.seq} must be a multiple of 2 x cp = {2 * self.cp} (load-balanced "
                             f"context parallelism cuts each sequence into 2 x cp chunks)", field="--seq")
        if (dp * self.cp) % self.ep:
            raise InputError(f"--ep {self.ep} must divide dp x cp = {dp * self.cp} (experts are spread over the "
                             f"data-parallel ranks)", field="--ep")
        if not 0.0 < self.mem_fraction <= 1.0:
            raise InputError(f"expected a fraction in (0, 1], got {self.mem_fraction!r}", field="mem_fraction")
        if model is not None:
            self._check_model(model)
        return self

    def _check_model(self, model) -> None:
        if model.max_position and self.seq > model.max_position:
            raise InputError(f"--seq {self.seq} exceeds the {model.max_position}-token context of {model.name} (train "
                             "a longer context with a config whose max_position_embeddings says so)", field="--seq")
        if model.heads % self.tp:
            raise InputError(f"--tp {self.tp} must divide the {model.heads} attention heads of {model.name}",
                             field="--tp")
        if self.pp > model.layers:
            raise InputError(f"--pp {self.pp} exceeds the {model.layers} layers of {model.name}", field="--pp")
        if self.chunks > -(-model.layers // self.pp):
            raise InputError(f"--interleave {self.chunks} exceeds the {-(-model.layers // self.pp)} layers a pipeline "
                             f"rank holds ({model.name}, pp {self.pp})", field="--interleave")
        if self.ep > 1:
            if model.moe is None:
                raise InputError(f"{model.name} has no experts; --ep needs a mixture-of-experts model", field="--ep")
            if model.moe.num_experts % self.ep:
                raise InputError(f"--ep {self.ep} must divide the {model.moe.num_experts} experts of {model.name}",
                                 field="--ep")
        if model.mla is not None and self.attention == "unfused":
            raise InputError("unfused attention is modelled for multi-head and grouped-query attention only",
                             field="--attention")


def _check_attention_kernel(name: str) -> None:
    try:
        from ..attention_kernels import canonical
    except ImportError:  # a tree without per-backend attention kernels: only the flash model exists
        if name not in ("auto", "flash"):
            raise InputError(f"expected auto or flash, got {name!r}", field="--attention-kernel") from None
        return
    canonical(name)


def _positive(v, name: str) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise InputError(f"expected a positive integer, got {v!r}", field=f"--{name.replace('_', '-')}")
