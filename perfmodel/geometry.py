"""A model's geometry under a layout: the heads one tensor-parallel rank holds, which layers attend how, the
layers without a KV cache, the formats its experts are stored and multiplied in.

What the model is (:mod:`perfmodel.models`) read against a scenario's TP and formats, with no operator and no
hardware: the operator graph (:mod:`perfmodel.graph`), the memory (:mod:`perfmodel.capacity`) and training's
graph and memory (:mod:`perfmodel.train`) all read it here, so none of them asks another for a model's shape.
"""
from __future__ import annotations

from .dtypes import DTYPES, WEIGHT_ONLY_BYTES, bytes_per_element
from .models import Model
from .scenario import Scenario


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def heads_per_gpu(model: Model, tp: int) -> tuple[int, int]:
    """(query heads, KV heads) one TP rank holds; KV heads are replicated when kv_heads < tp."""
    hq = _ceil_div(model.heads, tp)
    hkv = max(1, _ceil_div(model.kv_heads, tp))
    return hq, hkv


def attention_layer_kinds(model: Model) -> dict[str, tuple[int, int]]:
    """{attention type: (layers, window in keys)}: full attention (no window), sliding-window layers (the model's
    window), chunked layers (Llama 4: a query sees its chunk's earlier keys, on average half a chunk; taken as a
    window of half the chunk). Models without per-layer types: every layer full, or every layer sliding when the
    model gives a window and no pattern."""
    types = tuple(getattr(model, "layer_types", ()) or ())
    window = int(getattr(model, "sliding_window", 0) or 0)
    if not types:
        types = ("sliding" if window else "full",) * model.layers
    out: dict[str, tuple[int, int]] = {}
    for kind in ("full", "sliding", "chunked"):
        n = sum(1 for t in types if t == kind)
        if n:
            w = {"full": 0, "sliding": window, "chunked": int(getattr(model, "attention_chunk", 0) or 0) // 2}[kind]
            out[kind] = (n, w)
    return out


def linear_layers(model: Model) -> int:
    """Layers whose token mixer is Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5): no KV cache."""
    return sum(1 for t in (getattr(model, "layer_types", ()) or ()) if t == "linear")


INDEXER_FORMAT = "fp8"  # DeepSeek-V3.2's indexer keys and logits kernels run in fp8 (its inference code, FP8 MQA
# logits); GLM-5 publishes the same indexer


def expert_format(model: Model, sc: Scenario) -> str:
    """The routed experts' storage format: the checkpoint's own where it publishes experts narrower than the
    scenario's format (gpt-oss: MXFP4 experts), else the scenario's. The products still run in the scenario's
    format (weight-only quantization: the engines dequantize in the kernel's mainloop), so the narrower experts
    save memory and bandwidth, not tensor-core time."""
    own = getattr(model, "expert_dtype", "") or ""
    if (own in DTYPES or own in WEIGHT_ONLY_BYTES) and bytes_per_element(own) < bytes_per_element(sc.dtype):
        return own
    return sc.dtype


def module_format(model: Model, sc: Scenario, group: str) -> str:
    """The format a module group's products run and are stored in (``group`` one of
    :data:`perfmodel.models.FP4_UNQUANTIZED`): the activations' (bf16) where the scenario runs the model's NVFP4
    checkpoint and that checkpoint keeps the group unquantized (``Model.fp4_unquantized``), else the scenario's."""
    if sc.dtype == "fp4" and group in (getattr(model, "fp4_unquantized", ()) or ()):
        return sc.act_dtype
    return sc.dtype


def expert_product_format(model: Model, sc: Scenario) -> str:
    """The format the routed experts' products run in: the scenario's, or fp8 where the engine quantizes the
    activations to MXFP8 for MXFP4 experts on this part (W4A8: TensorRT-LLM on Blackwell,
    ``Scenario.weight_only_moe_act``)."""
    if expert_format(model, sc) == "fp4" and sc.dtype in ("bf16", "fp16") and sc.weight_only_moe_act == "fp8":
        return "fp8"
    return sc.dtype
