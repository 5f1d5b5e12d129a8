"""LLM descriptors: the shapes a transformer's operators are built from.

A :class:`Model` is pure data. ``load_model`` finds one by name or alias in ``workloads/models/``, or
reads a path (a descriptor YAML or a Hugging Face ``config.json``; local files only, nothing is
downloaded). ``list_models`` returns every shipped descriptor. docs/models.md lists the families and what
each maps to.

Descriptor YAML (one model per file, ``workloads/models/<key>.yaml``)::

    key: llama-3.1-70b            # required; canonical name, lower case
    name: Llama-3.1-70B           # required; display name
    family: llama                 # required; one of FAMILIES
    aliases: [llama70b, llama-70b, llama3.1-70b]   # optional; names people type
    source: "meta-llama/Llama-3.1-70B config.json" # optional; where the numbers come from
    notes: ["..."]                # optional; what the descriptor leaves out
    hidden: 8192                  # required, positive integers from here on
    layers: 80                    # required
    heads: 64                     # required
    kv_heads: 8                   # optional, default heads; must divide heads
    head_dim: 128                 # optional, default hidden / heads (MLA: qk_nope + qk_rope)
    intermediate: 28672           # required; dense FFN width
    vocab: 128256                 # required
    max_position: 131072          # optional (required for position: learned)
    mlp: swiglu                   # swiglu (gated: gate, up, down) | gelu (up, down)
    norm: rmsnorm                 # rmsnorm | layernorm
    position: rope                # rope | learned
    tied_embeddings: false
    qkv_bias: false               # biases on q, k, v (Qwen2, GLM-4.5)
    attention_bias: false         # biases on q, k, v and o (gpt-oss)
    qk_norm: false                # RMSNorm on queries and keys (Qwen3, Gemma 3, GLM-4.5)
    qk_norm_type: head            # head (weight of head_dim) | layer (over all heads) | l2 (no weight, Llama 4)
    sandwich_norm: false          # norms on the attention and FFN outputs too: 4 a layer (Gemma 2/3)
    attention_sinks: false        # a learned sink logit per head (gpt-oss)
    sliding_window: 0             # tokens a "sliding" layer attends to; 0: none
    attention_chunk: 0            # tokens per chunk of a "chunked" layer (Llama 4: 8192)
    layer_pattern: [sliding, full]   # per-layer attention types, repeated from layer 0 (or {sliding: 5, full: 1})
    layer_types: [sliding, full, ...]  # or one entry per layer; neither: all full (all sliding if sliding_window)
    logit_softcap: 0.0            # final logits -> c * tanh(logits / c) (Gemma 2: 30); 0: none
    attn_softcap: 0.0             # attention scores, likewise (Gemma 2: 50)
    expert_dtype: ""              # routed experts' format in the published checkpoint when it differs (fp4, int4)
    fp4_unquantized: [attention_qkv, attention_o]  # what the published NVFP4 checkpoint keeps in bf16 (FP4_UNQUANTIZED)
    moe:                          # optional
      {num_experts: 256, top_k: 8, expert_intermediate: 2048,
       num_shared_experts: 1, shared_intermediate: 2048, first_dense_layers: 3,
       layer_step: 1, expert_bias: false, router_bias: false, shared_expert_gate: false,
       expert_groups: 8, groups_per_token: 4, router: sigmoid_bias_grouped}  # router: one of ROUTERS
    mla:                          # optional (multi-head latent attention)
      {q_lora_rank: 1536, kv_lora_rank: 512, qk_nope_head_dim: 128, qk_rope_head_dim: 64, v_head_dim: 128}

Unknown keys, missing required fields, non-positive integers and bad enum values are
:class:`~perfmodel.errors.InputError` ("FILE: FIELD: expected ...").

Names resolve case-insensitively against keys and aliases, then ignoring ``-``, ``_``, ``.`` and
spaces, then with a Hugging Face org prefix (``meta-llama/``) dropped.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError
from .inputs import text as text_value
from .vision_config import VISION_FAMILIES, Linear, VisionConfigError, VisionEncoder, vision_from_hf

# The attention a layer runs: over every earlier token (full), over the last sliding_window tokens
# (sliding), or over the earlier tokens of its own attention_chunk-token chunk (chunked, Llama 4).
LAYER_TYPES = ("full", "sliding", "chunked", "linear")  # linear: Gated DeltaNet (LinearAttention), no KV cache
QK_NORM_TYPES = ("head", "layer", "l2")
EXPERT_DTYPES = ("", "fp8", "fp4", "int4")
# The module groups an NVFP4 checkpoint may leave unquantized (its exclude_modules / ignore list, in bf16): the
# attention's query and key-value projections (MLA's q_a, q_b, kv_a, kv_b, whose up-projections decode absorbs),
# its output projection, DeepSeek Sparse Attention's indexer, Gated DeltaNet's projections, the shared experts,
# the dense FFN of the first layers, and the multi-token-prediction layers
FP4_UNQUANTIZED = ("attention_qkv", "attention_o", "indexer", "linear_attention", "shared_experts", "dense_layers",
                   "mtp")


@dataclass(frozen=True)
class MoE:
    num_experts: int  # routed experts
    top_k: int  # routed experts per token
    expert_intermediate: int  # FFN width of one routed expert
    num_shared_experts: int = 0  # experts every token visits (DeepSeek, Llama 4, Qwen2-MoE)
    shared_intermediate: int = 0  # FFN width of one shared expert
    first_dense_layers: int = 0  # leading layers with a dense FFN of Model.intermediate (DeepSeek-V3: 3)
    # After the first_dense_layers, every layer_step-th layer is MoE and the others dense (Model.intermediate):
    # layer i is MoE when i >= first_dense_layers and (i - first_dense_layers + 1) % layer_step == 0
    # (Llama 4 Maverick's interleave_moe_layer_step 2: layers 1, 3, 5, ...; Qwen's decoder_sparse_step alike).
    layer_step: int = 1
    expert_bias: bool = False  # biases on each routed expert's products (gpt-oss: 2 x width on gate/up, hidden on down)
    router_bias: bool = False  # a bias on the router's logits, one per expert (gpt-oss)
    shared_expert_gate: bool = False  # a sigmoid gate (hidden -> 1) on the shared experts' output (Qwen2-MoE)
    # Group-limited routing (DeepSeek-V3's n_group 8, topk_group 4): the experts fall in expert_groups equal groups
    # and a token's top_k are picked among its best groups_per_token groups only; 1, 1: no limit. With the groups
    # laid out node by node it bounds the nodes a token reaches (perfmodel.routing.nodes_per_token).
    expert_groups: int = 1
    groups_per_token: int = 1
    # how the router scores and picks a token's experts, one of ROUTERS: softmax over the experts, top-k,
    # renormalized over the k (Qwen3-MoE, Mixtral, gpt-oss); softmax_unnormalized (top-k of the softmax as it is:
    # Qwen2-MoE, DeepSeek-V2); sigmoid (Llama 4's top-1); sigmoid_bias (sigmoid scores, a per-expert bias used only to
    # pick: MiniMax-M2); sigmoid_bias_grouped (the same through group-limited top-k: DeepSeek-V3, Kimi K2, GLM-4.5/5).
    # The engines' fused MoE kernels take some and not others (perfmodel.engines.moe_padding_for).
    router: str = "softmax"


ROUTERS = ("softmax", "softmax_unnormalized", "sigmoid", "sigmoid_bias", "sigmoid_bias_grouped")


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2/V3)."""

    q_lora_rank: int  # 0 means queries are projected directly from hidden
    kv_lora_rank: int  # the latent cached per token (512 for V3)
    qk_nope_head_dim: int
    qk_rope_head_dim: int  # the decoupled rotary key, also cached per token
    v_head_dim: int
    # DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): a lightning indexer (index_heads heads of index_head_dim,
    # fp8, one key per token cached beside the latent) scores every earlier token and the attention reads only
    # the index_topk best; 0: dense MLA
    index_topk: int = 0
    index_heads: int = 0
    index_head_dim: int = 0


@dataclass(frozen=True)
class LinearAttention:
    """Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5): a recurrent state of key_head_dim x value_head_dim
    per value head replaces the KV cache; queries and keys have key_heads heads (shared by groups of value
    heads), a short causal convolution runs over q, k and v first."""

    key_heads: int
    value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int = 4
    state_dtype: str = "fp32"  # the recurrent state's format (Qwen3.5's mamba_ssm_dtype: float32)


@dataclass(frozen=True)
class Model:
    key: str  # canonical name, e.g. "llama-3.1-70b"
    name: str  # display name, e.g. "Llama-3.1-70B"
    family: str  # one of FAMILIES: the architecture (Kimi K2 is deepseek_v3, Mistral Small 3.1 is mistral)
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # dense FFN width
    vocab: int
    mlp: str = "swiglu"  # swiglu: gated (gate, up, down; SiLU or GELU-tanh, same shapes) | gelu (up, down)
    norm: str = "rmsnorm"  # rmsnorm | layernorm
    position: str = "rope"  # rope | learned
    tied_embeddings: bool = False
    qkv_bias: bool = False  # biases on the q, k and v projections (Qwen2, GLM-4.5)
    max_position: int = 0
    moe: MoE | None = None
    mla: MLA | None = None
    # how the model's published fp8 checkpoint scales its products: per tensor (NVIDIA's Llama FP8 checkpoints)
    # or in 128-wide blocks (DeepSeek-V3's own FP8 release); it picks the kernel family an fp8 GEMM runs
    fp8_scaling: str = "tensor"
    aliases: tuple[str, ...] = ()
    source: str = ""  # where the dimensions come from
    notes: tuple[str, ...] = ()  # e.g. config.json fields the importer did not use
    # --- attention variants (2025-26 families) ---
    qk_norm: bool = False  # a norm on queries and keys before rotary (Qwen3, Gemma 3, GLM-4.5, Llama 4 Scout)
    # head: RMSNorm per head, one head_dim weight for q and one for k (Qwen3, Gemma 3, GLM-4.5);
    # layer: RMSNorm over all heads at once, heads*head_dim and kv_heads*head_dim weights (MiniMax-M2); under
    # TP its variance needs an all-reduce across ranks; l2: weightless L2 norm per head, applied on the
    # rotary (chunked) layers only (Llama 4 Scout)
    qk_norm_type: str = "head"
    attention_bias: bool = False  # biases on q, k, v AND o (gpt-oss, Llama's attention_bias); implies qkv_bias's
    sliding_window: int = 0  # tokens a "sliding" layer's query attends to at most (itself included); 0: none
    # per layer, one of LAYER_TYPES; always len(layers) once built (() expands to every layer "full", or every
    # layer "sliding" when sliding_window > 0: Mistral-7B v0.1, Phi-3-mini)
    layer_types: tuple[str, ...] = ()
    attention_chunk: int = 0  # tokens per chunk of the "chunked" layers (Llama 4: 8192); 0: none
    attention_sinks: bool = False  # one learned logit per query head joins every softmax (gpt-oss): heads params
    logit_softcap: float = 0.0  # final logits -> c * tanh(logits / c) (Gemma 2: 30.0); 0: none
    attn_softcap: float = 0.0  # attention scores -> c * tanh(s / c) before softmax (Gemma 2: 50.0); 0: none
    sandwich_norm: bool = False  # RMSNorms on the attention and FFN outputs as well: 4 norms a layer (Gemma 2/3)
    # the format the published checkpoint stores routed experts in when it differs from the rest: fp4 (gpt-oss's
    # MXFP4: 32-element blocks, e8m0 scales), int4 (Kimi K2.5's INT4, groups of 32); "": as the rest
    expert_dtype: str = ""
    # the module groups (FP4_UNQUANTIZED) the model's published NVFP4 checkpoint keeps in bf16: with --dtype fp4
    # their products run in bf16 and their weights are stored so (NVIDIA's ModelOpt checkpoints exclude attention
    # and often the shared experts); (): every product in fp4 but the LM head
    fp4_unquantized: tuple[str, ...] = ()
    linear_attention: LinearAttention | None = None  # the "linear" layers' Gated DeltaNet
    attn_output_gate: bool = False  # a sigmoid gate (hidden -> heads x head_dim, beside q) on attention's output
    # multi-token-prediction layers published with the checkpoint (num_nextn_predict_layers): what --mtp drafts
    # with; not counted in the parameters (the main model is)
    mtp_layers: int = 0
    # an EAGLE draft head (a config.json of EAGLE's architectures): the target's hidden states it fuses into its
    # one layer's input (EAGLE-3: three, low, middle and high layers, through a 3h -> h layer; EAGLE: the last one
    # with the token's embedding, 2h -> h); 0: an ordinary model
    draft_fuses: int = 0
    # the target vocabulary an EAGLE-3 head's smaller draft vocabulary maps onto (its d2t table); 0: its own
    target_vocab: int = 0
    # a multimodal checkpoint's vision encoder and projector (perfmodel.vision_config); None: a text model. Not in
    # param_count(), which stays the text model's; it runs, and its weights count, only with images
    vision: VisionEncoder | None = None

    def __post_init__(self) -> None:
        # the expanded per-layer tuple, whatever the constructor was given (descriptors are validated before
        # this, with one-line errors; a wrong tuple here is a programming error)
        types = tuple(self.layer_types) or (("sliding" if self.sliding_window else "full"),) * self.layers
        if len(types) != self.layers or any(t not in LAYER_TYPES for t in types):
            raise ValueError(f"{self.key}: layer_types must hold {self.layers} entries of {', '.join(LAYER_TYPES)}")
        if ("linear" in types) != (self.linear_attention is not None):
            raise ValueError(f"{self.key}: linear layers and linear_attention go together")
        object.__setattr__(self, "layer_types", types)

    def param_count(self) -> int:
        """Total parameters (all experts), embeddings and LM head included."""
        return _param_count(self, active=False)

    def active_param_count(self) -> int:
        """Parameters one token touches (top-k routed experts, not all), embedding and LM head included."""
        return _param_count(self, active=True)


# ---- what the graph and cost side read per layer ----------------------------------------------------

def layer_attention_types(m: Model) -> tuple[str, ...]:
    """The attention type of every layer ("full", "sliding" or "chunked"), len(m.layers)."""
    return m.layer_types


def attention_span(m: Model, layer: int) -> int:
    """The most tokens a query of ``layer`` attends to: sliding_window, attention_chunk, or 0 for no bound."""
    t = m.layer_types[layer]
    return m.sliding_window if t == "sliding" else m.attention_chunk if t == "chunked" else 0


def attention_type_counts(m: Model) -> dict[str, int]:
    """How many layers run each attention type, e.g. {"full": 12, "sliding": 0, "chunked": 36}."""
    return {t: m.layer_types.count(t) for t in LAYER_TYPES}


def moe_layers(m: Model) -> tuple[int, ...]:
    """The indices of the layers whose FFN is MoE."""
    return tuple(i for i in range(m.layers) if is_moe_layer(m, i))


def norms_per_layer(m: Model) -> int:
    """Block norms in one layer: 2 (before attention, before the FFN), 4 with sandwich_norm (Gemma 2/3)."""
    return 4 if m.sandwich_norm else 2


# ---- parameter counts ---------------------------------------------------------------------------------

def _param_count(m: Model, *, active: bool) -> int:
    h = m.hidden
    nw = 2 if m.norm == "layernorm" else 1  # weight, +bias for LayerNorm
    attn = attention_params(m)
    linear = linear_attention_params(m)
    total = 0
    for layer in range(m.layers):
        mixer = linear if m.layer_types[layer] == "linear" else attn
        total += mixer + ffn_params(m, layer, active=active) + norms_per_layer(m) * h * nw
    total += m.vocab * h  # embedding
    if m.position == "learned":
        total += m.max_position * h
    if not m.tied_embeddings:
        total += m.vocab * h  # LM head
    total += h * nw  # final norm
    total += eagle_fusion_params(m)
    return total


def eagle_fusion_params(m: Model) -> int:
    """What an EAGLE head adds to its decoder layer: the fusion of the target's hidden states (``draft_fuses`` of
    them, each h wide) into an h-wide state, and for EAGLE-3 the layer's q, k and v projections reading the token's
    embedding beside it (a 2h-wide input); 0 for an ordinary model."""
    if not m.draft_fuses:
        return 0
    fuse = m.draft_fuses * m.hidden * m.hidden
    return fuse + (m.hidden * (m.heads + 2 * m.kv_heads) * m.head_dim if m.draft_fuses == 3 else 0)


def linear_attention_params(m: Model, tp: int = 1) -> int:
    """One Gated DeltaNet layer: q, k, v and the output gate z from the hidden state, the per-head decay and
    update gates (a, b), the causal convolution over q, k, v, the decay's A and dt bias per head, the gated
    RMSNorm of the output, and the output projection (Qwen3NextGatedDeltaNet). ``tp``: what one of that many
    tensor-parallel ranks holds (the heads split over them)."""
    la = m.linear_attention
    if la is None:
        return 0
    kh, vh = -(-la.key_heads // tp), -(-la.value_heads // tp)
    qk = kh * la.key_head_dim
    v = vh * la.value_head_dim
    conv = (2 * qk + v) * la.conv_kernel
    return m.hidden * (2 * qk + 2 * v + 2 * vh) + conv + 2 * vh + la.value_head_dim + v * m.hidden


def indexer_params(m: Model) -> int:
    """One layer's lightning indexer (DeepSeek Sparse Attention): query heads from the query latent, one key
    from the hidden state with its LayerNorm (weight and bias), and a per-head weight from the hidden state."""
    a = m.mla
    if a is None or not a.index_topk:
        return 0
    q_in = a.q_lora_rank or m.hidden
    return q_in * a.index_heads * a.index_head_dim + m.hidden * a.index_head_dim + 2 * a.index_head_dim \
        + m.hidden * a.index_heads


def qk_norm_params(m: Model) -> int:
    """Weights of one layer's query and key norms."""
    if not m.qk_norm or m.qk_norm_type == "l2":
        return 0
    if m.qk_norm_type == "layer":
        return (m.heads + m.kv_heads) * m.head_dim
    return 2 * m.head_dim


def attention_params(m: Model) -> int:
    """One layer's attention: projections, their biases, query/key norms and sinks."""
    h = m.hidden
    if m.mla is not None:
        a = m.mla
        qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank:
            q = h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * m.heads * qk_head
        else:
            q = h * m.heads * qk_head
        kv_a = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank
        kv_b = a.kv_lora_rank * m.heads * (a.qk_nope_head_dim + a.v_head_dim)
        q += indexer_params(m)
        o = m.heads * a.v_head_dim * h
        return q + kv_a + kv_b + o
    q = h * m.heads * m.head_dim * (2 if m.attn_output_gate else 1)  # the gate comes out of the q projection
    kv = 2 * h * m.kv_heads * m.head_dim
    o = m.heads * m.head_dim * h
    bias = (m.heads + 2 * m.kv_heads) * m.head_dim if (m.qkv_bias or m.attention_bias) else 0
    if m.attention_bias:
        bias += h  # o
    if m.family == "gpt":
        bias = (m.heads + 2 * m.kv_heads) * m.head_dim + h  # GPT-3 has biases on QKV and O
    sinks = m.heads if m.attention_sinks else 0
    return q + kv + o + bias + qk_norm_params(m) + sinks


def is_moe_layer(m: Model, layer: int) -> bool:
    if m.moe is None or layer < m.moe.first_dense_layers:
        return False
    return (layer - m.moe.first_dense_layers + 1) % m.moe.layer_step == 0


def expert_params(m: Model) -> int:
    """One routed expert: its products and, with expert_bias, their biases."""
    moe = m.moe
    assert moe is not None
    h, w = m.hidden, moe.expert_intermediate
    gated = m.mlp == "swiglu"
    p = (3 if gated else 2) * h * w
    if moe.expert_bias:
        p += (2 * w if gated else w) + h
    return p


def ffn_params(m: Model, layer: int, *, active: bool = False) -> int:
    h = m.hidden
    mats = 3 if m.mlp == "swiglu" else 2
    if not is_moe_layer(m, layer):
        p = mats * h * m.intermediate
        if m.family == "gpt":
            p += m.intermediate + h
        return p
    moe = m.moe
    assert moe is not None
    routed = (moe.top_k if active else moe.num_experts) * expert_params(m)
    shared = moe.num_shared_experts * mats * h * moe.shared_intermediate
    if moe.shared_expert_gate and moe.num_shared_experts:
        shared += h
    router = h * moe.num_experts + (moe.num_experts if moe.router_bias else 0)
    return routed + shared + router


# --------------------------------------------------------------------------------------------------
# Loading: descriptor YAML, Hugging Face config.json, the name registry.

FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "deepseek_v3", "gpt",
            "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2", "glm4_moe", "gpt_oss", "llama4", "gemma2", "gemma3",
            "phi3", "minimax_m2", "deepseek_v32", "glm_moe_dsa", "qwen3_next", "qwen3_5", "qwen3_5_moe")
MLPS = ("swiglu", "gelu")
NORMS = ("rmsnorm", "layernorm")
POSITIONS = ("rope", "learned")
FP8_SCALINGS = ("tensor", "block")

_REQUIRED = ("key", "name", "family", "hidden", "layers", "heads", "intermediate", "vocab")
_FIELDS = (
    "key", "name", "family", "aliases", "source", "notes", "hidden", "layers", "heads", "kv_heads",
    "head_dim", "intermediate", "vocab", "max_position", "mlp", "norm", "position", "tied_embeddings",
    "qkv_bias", "moe", "mla", "fp8_scaling",
    "qk_norm", "qk_norm_type", "attention_bias", "sliding_window", "layer_types", "layer_pattern", "attention_chunk",
    "attention_sinks", "logit_softcap", "attn_softcap", "sandwich_norm", "expert_dtype",
    "fp4_unquantized", "linear_attention", "attn_output_gate", "mtp_layers", "vision",
)
_MOE_REQUIRED = ("num_experts", "top_k", "expert_intermediate")
_MOE_FIELDS = _MOE_REQUIRED + ("num_shared_experts", "shared_intermediate", "first_dense_layers", "layer_step",
                               "expert_bias", "router_bias", "shared_expert_gate", "expert_groups",
                               "groups_per_token", "router")
_LINEAR_REQUIRED = ("key_heads", "value_heads", "key_head_dim", "value_head_dim")
_LINEAR_FIELDS = _LINEAR_REQUIRED + ("conv_kernel", "state_dtype")
_MLA_REQUIRED = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_MLA_FIELDS = ("q_lora_rank",) + _MLA_REQUIRED + ("index_topk", "index_heads", "index_head_dim")
_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def _models_dir() -> Path:
    from .paths import workloads_dir

    return workloads_dir() / "models"


def _closest(word: str, choices, n: int = 3) -> list[str]:
    return difflib.get_close_matches(word, list(choices), n=n, cutoff=0.5)


def _suggest(word: str, choices) -> str:
    near = _closest(word, choices, n=1)
    return f"; did you mean '{near[0]}'?" if near else ""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# ---- descriptor YAML ------------------------------------------------------------------------------

def _check_keys(d: dict, allowed, required, file: str, prefix: str = "") -> None:
    from .safeyaml import key_text

    for k in d:
        if not isinstance(k, str) or k not in allowed:
            raise InputError(
                f"unknown field{_suggest(str(k), allowed)} (expected one of: {', '.join(allowed)})",
                file=file, field=prefix + key_text(k),
            )
    for k in required:
        if k not in d or d[k] is None:
            raise InputError("missing required field", file=file, field=prefix + k)


# Largest plausible size of each field: far above any published model (layers: 126 in Llama 3.1 405B;
# hidden: 18432 in PaLM 540B; vocab: 256K in Gemma; experts: 384 in Kimi K2; context: 10M tokens in
# Llama 4 Scout), low enough that a typo or a hostile file (1e9 layers) stops with one line instead of
# hanging the per-layer loops. Descriptor names, with the config.json names mapped onto them.
SIZE_LIMITS = {
    "layers": 1024, "hidden": 2**17, "heads": 4096, "kv_heads": 4096, "head_dim": 4096, "intermediate": 2**20,
    "vocab": 2**24, "max_position": 2**27, "sliding_window": 2**27, "attention_chunk": 2**27,
    "moe.num_experts": 16384, "moe.top_k": 1024, "moe.expert_intermediate": 2**20,
    "moe.num_shared_experts": 1024, "moe.shared_intermediate": 2**20, "moe.first_dense_layers": 1024,
    "moe.layer_step": 1024,
    "mla.q_lora_rank": 2**16, "mla.kv_lora_rank": 2**16, "mla.qk_nope_head_dim": 4096, "mla.qk_rope_head_dim": 4096,
    "mla.v_head_dim": 4096, "mtp_layers": 64,
    # Gated DeltaNet (Qwen3-Next: 16 key heads, 32 value heads of 128 channels, a convolution 4 wide)
    "linear_attention.key_heads": 4096, "linear_attention.value_heads": 4096, "linear_attention.key_head_dim": 4096,
    "linear_attention.value_head_dim": 4096, "linear_attention.conv_kernel": 1024,
}
_SOFTCAP_LIMIT = 1e6  # a cap is a few tens (Gemma 2: 30 and 50); far above that is a typo
_HF_SIZE_NAMES = {
    "num_hidden_layers": "layers", "hidden_size": "hidden", "num_attention_heads": "heads",
    "num_key_value_heads": "kv_heads", "head_dim": "head_dim", "intermediate_size": "intermediate",
    "num_nextn_predict_layers": "mtp_layers", "mtp_num_hidden_layers": "mtp_layers", "num_mtp_modules": "mtp_layers",
    "vocab_size": "vocab", "max_position_embeddings": "max_position", "num_local_experts": "moe.num_experts",
    "n_routed_experts": "moe.num_experts", "num_experts": "moe.num_experts", "num_experts_per_tok": "moe.top_k",
    "moe_intermediate_size": "moe.expert_intermediate", "n_shared_experts": "moe.num_shared_experts",
    "shared_expert_intermediate_size": "moe.shared_intermediate", "shared_intermediate_size": "moe.shared_intermediate",
    "first_k_dense_replace": "moe.first_dense_layers", "moe_layer_freq": "layers",
    "interleave_moe_layer_step": "moe.layer_step", "decoder_sparse_step": "moe.layer_step",
    "intermediate_size_mlp": "intermediate", "sliding_window": "sliding_window",
    "attention_chunk_size": "attention_chunk", "sliding_window_pattern": "layers", "no_rope_layer_interval": "layers",
    "q_lora_rank": "mla.q_lora_rank", "kv_lora_rank": "mla.kv_lora_rank", "qk_nope_head_dim": "mla.qk_nope_head_dim",
    "qk_rope_head_dim": "mla.qk_rope_head_dim", "v_head_dim": "mla.v_head_dim",
    "linear_num_key_heads": "linear_attention.key_heads", "linear_num_value_heads": "linear_attention.value_heads",
    "linear_key_head_dim": "linear_attention.key_head_dim", "linear_value_head_dim": "linear_attention.value_head_dim",
    "linear_conv_kernel_dim": "linear_attention.conv_kernel",
}


def _check_size(v: int, name: str, file: str, field: str) -> None:
    limit = SIZE_LIMITS.get(name)
    if limit is not None and v > limit:
        shown = f"{v:,}" if v < 10**15 else f"{float(v):.3g}"  # 1e308 read as an integer: 309 digits
        raise InputError(f"expected at most {limit:,} (far above any published model), got {shown}",
                         file=file, field=field)


def _int(d: dict, k: str, file: str, prefix: str = "", *, default=None, minimum: int = 1) -> int:
    v = d.get(k)
    if v is None:
        if default is None:
            raise InputError("missing required field", file=file, field=prefix + k)
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise InputError(f"expected an integer >= {minimum}, got {_short(v)}", file=file, field=prefix + k)
    if v < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise InputError(f"expected {what}, got {v}", file=file, field=prefix + k)
    _check_size(v, prefix + k, file, prefix + k)
    return v


def _short(v, limit: int = 60) -> str:
    """A value as an error message shows it: its repr, cut short (a file may hold a huge value)."""
    r = repr(v) if not isinstance(v, (dict, list)) or len(v) <= 8 else f"a {type(v).__name__} of {len(v)} items"
    return r if len(r) <= limit else r[: limit - 3] + "..."


def _str(d: dict, k: str, file: str, *, default: str | None = None) -> str:
    v = d.get(k)
    if v is None:
        if default is None:
            raise InputError("missing required field", file=file, field=k)
        return default
    if not isinstance(v, str) or not v.strip():
        raise InputError(f"expected a non-empty string, got {_short(v)}", file=file, field=k)
    return v.strip()


def _enum(d: dict, k: str, choices, file: str, *, default: str, prefix: str = "") -> str:
    v = d.get(k, default)
    if v is None:
        v = default
    if not isinstance(v, str) or v not in choices:
        shown = ", ".join(c if c else '""' for c in choices)
        raise InputError(f"expected one of {shown}, got {_short(v)}{_suggest(str(v)[:80], [c for c in choices if c])}",
                         file=file, field=prefix + k)
    return v


def _bool(d: dict, k: str, file: str, prefix: str = "", *, default: bool = False) -> bool:
    v = d.get(k, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise InputError(f"expected true or false, got {_short(v)}", file=file, field=prefix + k)
    return v


def _softcap(d: dict, k: str, file: str) -> float:
    v = d.get(k)
    if v is None:
        return 0.0
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or v > _SOFTCAP_LIMIT:
        raise InputError(f"expected a number >= 0 (0: no soft-capping), got {_short(v)}", file=file, field=k)
    return float(v)


def _str_list(d: dict, k: str, file: str) -> tuple[str, ...]:
    v = d.get(k)
    if v is None:
        return ()
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
        raise InputError("expected a list of strings", file=file, field=k)
    return tuple(x.strip() for x in v)


def _fp4_unquantized(d: dict, file: str) -> tuple[str, ...]:
    """A descriptor's ``fp4_unquantized``: a list of FP4_UNQUANTIZED groups, each once."""
    v = d.get("fp4_unquantized")
    if v is None:
        return ()
    if not isinstance(v, list) or not all(isinstance(x, str) and x in FP4_UNQUANTIZED for x in v) \
            or len(set(v)) != len(v):
        raise InputError(f"expected a list of distinct groups among {', '.join(FP4_UNQUANTIZED)}, got {_short(v)}",
                         file=file, field="fp4_unquantized")
    return tuple(g for g in FP4_UNQUANTIZED if g in v)


def _layer_type_list(v, file: str, field: str) -> list[str]:
    if not isinstance(v, list) or not v:
        raise InputError(f"expected a non-empty list of {', '.join(LAYER_TYPES)}, got {_short(v)}",
                         file=file, field=field)
    for i, t in enumerate(v):
        if not isinstance(t, str) or t not in LAYER_TYPES:
            raise InputError(f"entry {i}: expected one of {', '.join(LAYER_TYPES)}, got {_short(t)}"
                             f"{_suggest(str(t)[:80], LAYER_TYPES)}", file=file, field=field)
    return v


def _layer_types_from_dict(d: dict, file: str, layers: int, sliding_window: int, chunk: int) -> tuple[str, ...]:
    """layer_types (one entry a layer) or layer_pattern (a list, or {type: run length, ...} in order, repeated
    from layer 0: Gemma 3's {sliding: 5, full: 1}); neither: every layer full, or sliding with a window."""
    explicit, pattern = d.get("layer_types"), d.get("layer_pattern")
    if explicit is not None and pattern is not None:
        raise InputError("give layer_types (one entry a layer) or layer_pattern (repeated), not both",
                         file=file, field="layer_pattern")
    if explicit is not None:
        types = _layer_type_list(explicit, file, "layer_types")
        if len(types) != layers:
            raise InputError(f"expected {layers} entries (one per layer; layer_pattern repeats a shorter list), "
                             f"got {len(types)}", file=file, field="layer_types")
    elif pattern is not None:
        if isinstance(pattern, dict):
            runs = []
            for t, n in pattern.items():
                _layer_type_list([t], file, "layer_pattern")
                if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= layers:
                    raise InputError(f"{t}: expected a run length from 1 to layers ({layers}), got {_short(n)}",
                                     file=file, field="layer_pattern")
                runs += [t] * n
            pattern = runs
        unit = _layer_type_list(pattern, file, "layer_pattern")
        if len(unit) > layers:
            raise InputError(f"expected at most layers ({layers}) entries, got {len(unit)}",
                             file=file, field="layer_pattern")
        types = [unit[i % len(unit)] for i in range(layers)]
    else:
        types = ["sliding" if sliding_window else "full"] * layers
    if "sliding" in types and not sliding_window:
        raise InputError("missing: some layers are sliding; expected their window in tokens",
                         file=file, field="sliding_window")
    if sliding_window and "sliding" not in types:
        raise InputError(f"{sliding_window} given, but no layer is sliding (see layer_types)",
                         file=file, field="sliding_window")
    if "chunked" in types and not chunk:
        raise InputError("missing: some layers are chunked; expected the chunk in tokens",
                         file=file, field="attention_chunk")
    if chunk and "chunked" not in types:
        raise InputError(f"{chunk} given, but no layer is chunked (see layer_types)",
                         file=file, field="attention_chunk")
    return tuple(types)


def _model_from_dict(d, file: str) -> Model:
    if not isinstance(d, dict):
        raise InputError(f"expected a mapping of descriptor fields, got {type(d).__name__}", file=file)
    _check_keys(d, _FIELDS, _REQUIRED, file)
    key = _str(d, "key", file)
    if not _KEY_RE.match(key):
        raise InputError(f"expected lower-case letters, digits, '.', '-' or '_', got {key!r}",
                         file=file, field="key")
    name = _str(d, "name", file)
    family = _enum(d, "family", FAMILIES, file, default="")
    hidden = _int(d, "hidden", file)
    layers = _int(d, "layers", file)
    heads = _int(d, "heads", file)
    kv_heads = _int(d, "kv_heads", file, default=heads)
    if kv_heads > heads or heads % kv_heads:
        raise InputError(f"expected a divisor of heads ({heads}), got {kv_heads}", file=file, field="kv_heads")
    if "head_dim" in d and d["head_dim"] is not None:
        head_dim = _int(d, "head_dim", file)
    else:
        if hidden % heads:
            raise InputError(f"missing; hidden ({hidden}) is not a multiple of heads ({heads})",
                             file=file, field="head_dim")
        head_dim = hidden // heads
    intermediate = _int(d, "intermediate", file)
    vocab = _int(d, "vocab", file)
    position = _enum(d, "position", POSITIONS, file, default="rope")
    if position == "learned":
        max_position = _int(d, "max_position", file)
    else:
        max_position = _int(d, "max_position", file, default=0, minimum=0)
    moe = _moe_from_dict(d.get("moe"), file, layers) if d.get("moe") is not None else None
    mla = _mla_from_dict(d.get("mla"), file) if d.get("mla") is not None else None
    qk_norm = _bool(d, "qk_norm", file)
    if d.get("qk_norm_type") is not None and not qk_norm:
        raise InputError("given without qk_norm: true", file=file, field="qk_norm_type")
    if qk_norm and mla is not None:
        raise InputError("not with mla (latent attention normalises its latents instead)", file=file, field="qk_norm")
    sliding_window = _int(d, "sliding_window", file, default=0, minimum=0)
    chunk = _int(d, "attention_chunk", file, default=0, minimum=0)
    expert_dtype = _enum(d, "expert_dtype", EXPERT_DTYPES, file, default="")
    if expert_dtype and moe is None:
        raise InputError(f"{expert_dtype!r} given, but the model has no experts (moe)", file=file, field="expert_dtype")
    fp4_unquantized = _fp4_unquantized(d, file)
    linear = _linear_from_dict(d.get("linear_attention"), file) if d.get("linear_attention") is not None else None
    types = _layer_types_from_dict(d, file, layers, sliding_window, chunk)
    if ("linear" in types) != (linear is not None):
        raise InputError("linear layers (layer_types) and linear_attention go together", file=file,
                         field="linear_attention")
    return Model(
        key=key, name=name, family=family, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, intermediate=intermediate, vocab=vocab,
        mlp=_enum(d, "mlp", MLPS, file, default="swiglu"),
        norm=_enum(d, "norm", NORMS, file, default="rmsnorm"),
        position=position,
        tied_embeddings=_bool(d, "tied_embeddings", file),
        qkv_bias=_bool(d, "qkv_bias", file),
        max_position=max_position, moe=moe, mla=mla,
        fp8_scaling=_enum(d, "fp8_scaling", FP8_SCALINGS, file, default="tensor"),
        aliases=tuple(a.lower() for a in _str_list(d, "aliases", file)),
        source=_str(d, "source", file, default=""),
        notes=_str_list(d, "notes", file),
        mtp_layers=_int(d, "mtp_layers", file, default=0, minimum=0),
        qk_norm=qk_norm,
        qk_norm_type=_enum(d, "qk_norm_type", QK_NORM_TYPES, file, default="head"),
        attention_bias=_bool(d, "attention_bias", file),
        sliding_window=sliding_window,
        layer_types=types,
        attention_chunk=chunk,
        attention_sinks=_bool(d, "attention_sinks", file),
        logit_softcap=_softcap(d, "logit_softcap", file),
        attn_softcap=_softcap(d, "attn_softcap", file),
        sandwich_norm=_bool(d, "sandwich_norm", file),
        expert_dtype=expert_dtype,
        fp4_unquantized=fp4_unquantized,
        linear_attention=linear,
        attn_output_gate=_bool(d, "attn_output_gate", file),
        vision=_vision_from_dict(d.get("vision"), file) if d.get("vision") is not None else None,
    )


# a descriptor's vision: mapping, field by field (perfmodel.vision_config.VisionEncoder); the choices of its words
_VISION_WORDS = {"kind": VISION_FAMILIES, "mlp": ("swiglu", "gelu"), "norm": ("rmsnorm", "layernorm"),
                 "post_norm_kind": ("", "rmsnorm", "layernorm"),
                 "merge_kind": ("concat", "pool"), "merge_norm": ("", "rmsnorm", "layernorm"),
                 "merge_norm_at": ("patch", "token")}
_VISION_REQUIRED = ("kind", "layers", "hidden", "heads", "head_dim", "intermediate", "mlp", "norm", "patch")


def _vision_from_dict(d, file: str) -> VisionEncoder:
    """A descriptor's vision encoder (the same fields an imported config.json gives, docs/vision.md)."""
    if not isinstance(d, dict):
        raise InputError("expected a mapping", file=file, field="vision")
    p = "vision."
    fields = {f.name: f for f in dataclasses.fields(VisionEncoder)}
    _check_keys(d, tuple(fields), _VISION_REQUIRED, file, p)
    kw: dict = {}
    for name, value in d.items():
        default = fields[name].default
        if name in _VISION_WORDS:
            kw[name] = _enum(d, name, _VISION_WORDS[name], file, default=str(default), prefix=p)
        elif name in ("config_type", "processor"):
            if not isinstance(value, str):
                raise InputError(f"expected a string, got {_short(value)}", file=file, field=p + name)
            kw[name] = value
        elif isinstance(default, bool):
            kw[name] = _bool(d, name, file, p)
        elif name in ("deepstack", "full_layers"):
            if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                      for i in value):
                raise InputError(f"expected a list of layer indices, got {_short(value)}", file=file, field=p + name)
            kw[name] = tuple(value)
        elif name == "merger":
            ok = isinstance(value, list) and all(
                isinstance(x, list) and len(x) == 3 and all(isinstance(n, int) and not isinstance(n, bool) and n > 0
                                                            for n in x[:2]) and isinstance(x[2], bool) for x in value)
            if not ok:
                raise InputError(f"expected a list of [inputs, outputs, bias] products, got {_short(value)}",
                                 file=file, field=p + name)
            kw[name] = tuple(Linear(*x) for x in value)
        else:
            kw[name] = _int(d, name, file, p, minimum=0 if default == 0 else 1)
    kw.setdefault("config_type", "")
    v = VisionEncoder(**kw)
    if v.heads * v.head_dim != v.hidden:
        raise InputError(f"heads x head_dim ({v.heads} x {v.head_dim}) is not hidden ({v.hidden})", file=file,
                         field=p + "head_dim")
    return v


def _moe_from_dict(d, file: str, layers: int) -> MoE:
    if not isinstance(d, dict):
        raise InputError("expected a mapping", file=file, field="moe")
    p = "moe."
    _check_keys(d, _MOE_FIELDS, _MOE_REQUIRED, file, p)
    num_experts = _int(d, "num_experts", file, p)
    top_k = _int(d, "top_k", file, p)
    if top_k > num_experts:
        raise InputError(f"expected at most num_experts ({num_experts}), got {top_k}", file=file, field=p + "top_k")
    num_shared = _int(d, "num_shared_experts", file, p, default=0, minimum=0)
    if num_shared:
        shared_intermediate = _int(d, "shared_intermediate", file, p)
    else:
        shared_intermediate = _int(d, "shared_intermediate", file, p, default=0, minimum=0)
    first_dense = _int(d, "first_dense_layers", file, p, default=0, minimum=0)
    if first_dense >= layers:
        raise InputError(f"expected fewer than layers ({layers}), got {first_dense}",
                         file=file, field=p + "first_dense_layers")
    step = _int(d, "layer_step", file, p, default=1)
    if first_dense + step > layers:
        raise InputError(f"{step} leaves no MoE layer among the {layers - first_dense} after first_dense_layers",
                         file=file, field=p + "layer_step")
    gate = _bool(d, "shared_expert_gate", file, p)
    if gate and not num_shared:
        raise InputError("true, but num_shared_experts is 0", file=file, field=p + "shared_expert_gate")
    groups = _int(d, "expert_groups", file, p, default=1)
    if num_experts % groups:
        raise InputError(f"expected a divisor of num_experts ({num_experts}), got {groups}", file=file,
                         field=p + "expert_groups")
    per_token = _int(d, "groups_per_token", file, p, default=groups)
    if per_token > groups or top_k > per_token * (num_experts // groups):
        raise InputError(f"expected at most expert_groups ({groups}) groups holding at least top_k ({top_k}) "
                         f"experts, got {per_token}", file=file, field=p + "groups_per_token")
    return MoE(num_experts=num_experts, top_k=top_k, expert_intermediate=_int(d, "expert_intermediate", file, p),
               num_shared_experts=num_shared, shared_intermediate=shared_intermediate,
               first_dense_layers=first_dense, layer_step=step, expert_bias=_bool(d, "expert_bias", file, p),
               router_bias=_bool(d, "router_bias", file, p), shared_expert_gate=gate, expert_groups=groups,
               groups_per_token=per_token, router=_enum(d, "router", ROUTERS, file, default="softmax", prefix=p))


def _linear_from_dict(d, file: str) -> LinearAttention:
    if not isinstance(d, dict):
        raise InputError("expected a mapping", file=file, field="linear_attention")
    p = "linear_attention."
    _check_keys(d, _LINEAR_FIELDS, _LINEAR_REQUIRED, file, p)
    la = LinearAttention(key_heads=_int(d, "key_heads", file, p), value_heads=_int(d, "value_heads", file, p),
                         key_head_dim=_int(d, "key_head_dim", file, p), value_head_dim=_int(d, "value_head_dim", file, p),
                         conv_kernel=_int(d, "conv_kernel", file, p, default=4),
                         state_dtype=_enum(d, "state_dtype", ("fp32", "bf16", "fp16"), file, default="fp32",
                                           prefix=p))
    if la.value_heads % la.key_heads:
        raise InputError(f"expected a multiple of key_heads ({la.key_heads}), got {la.value_heads}", file=file,
                         field=p + "value_heads")
    return la


def _mla_from_dict(d, file: str) -> MLA:
    if not isinstance(d, dict):
        raise InputError("expected a mapping", file=file, field="mla")
    p = "mla."
    _check_keys(d, _MLA_FIELDS, _MLA_REQUIRED, file, p)
    sparse = {k: _int(d, k, file, p, default=0, minimum=0) for k in ("index_topk", "index_heads", "index_head_dim")}
    if any(sparse.values()) and not all(sparse.values()):
        missing = next(k for k, v in sparse.items() if not v)
        raise InputError("DeepSeek Sparse Attention needs index_topk, index_heads and index_head_dim together",
                         file=file, field=p + missing)
    return MLA(
        q_lora_rank=_int(d, "q_lora_rank", file, p, default=0, minimum=0),
        kv_lora_rank=_int(d, "kv_lora_rank", file, p),
        qk_nope_head_dim=_int(d, "qk_nope_head_dim", file, p),
        qk_rope_head_dim=_int(d, "qk_rope_head_dim", file, p),
        v_head_dim=_int(d, "v_head_dim", file, p),
        **sparse,
    )


MODEL_WHAT = "model descriptor"


def _read_yaml(path: Path):
    # size, nesting, aliases and duplicate keys are limited by the safe loader (perfmodel.safeyaml), which keeps
    # the parsed value on disk for the next process
    from . import safeyaml

    return safeyaml.load(safeyaml.read_limited(path, what=MODEL_WHAT), file=str(path), what=MODEL_WHAT,
                         cached=True)


# ---- Hugging Face config.json ---------------------------------------------------------------------

# model_type -> (family, the architectures it is published with). Kimi K2 is DeepSeek-V3's architecture.
_HF_FAMILIES = {
    "llama": ("llama", ("LlamaForCausalLM",)),
    "mistral": ("mistral", ("MistralForCausalLM",)),
    "ministral": ("mistral", ("MinistralForCausalLM",)),
    "mixtral": ("mixtral", ("MixtralForCausalLM",)),
    "qwen2": ("qwen2", ("Qwen2ForCausalLM",)),
    "qwen2_moe": ("qwen2_moe", ("Qwen2MoeForCausalLM",)),
    "qwen3": ("qwen3", ("Qwen3ForCausalLM",)),
    "qwen3_moe": ("qwen3_moe", ("Qwen3MoeForCausalLM",)),
    "qwen3_next": ("qwen3_next", ("Qwen3NextForCausalLM",)),
    "qwen3_5_text": ("qwen3_5", ("Qwen3_5ForCausalLM",)),
    "qwen3_5_moe_text": ("qwen3_5_moe", ("Qwen3_5MoeForCausalLM",)),
    "deepseek_v2": ("deepseek_v2", ("DeepseekV2ForCausalLM",)),
    "deepseek_v3": ("deepseek_v3", ("DeepseekV3ForCausalLM",)),
    "deepseek_v32": ("deepseek_v32", ("DeepseekV32ForCausalLM",)),
    "glm_moe_dsa": ("glm_moe_dsa", ("GlmMoeDsaForCausalLM",)),
    "kimi_k2": ("deepseek_v3", ("DeepseekV3ForCausalLM",)),
    "glm4_moe": ("glm4_moe", ("Glm4MoeForCausalLM",)),
    "gpt_oss": ("gpt_oss", ("GptOssForCausalLM",)),
    "llama4_text": ("llama4", ("Llama4ForCausalLM",)),
    "gemma2": ("gemma2", ("Gemma2ForCausalLM",)),
    "gemma3_text": ("gemma3", ("Gemma3ForCausalLM",)),
    "phi3": ("phi3", ("Phi3ForCausalLM",)),
    "minimax_m2": ("minimax_m2", ("MiniMaxM2ForCausalLM",)),
}
# Multimodal checkpoints: model_type -> (architectures, the text model's model_type where text_config omits
# it). Their text_config is imported; the vision tower and projector where perfmodel.vision_config reads the
# family's (_HF_VISION), else not modelled (said in notes).
_HF_WRAPPERS = {
    "llama4": (("Llama4ForConditionalGeneration",), "llama4_text"),
    "gemma3": (("Gemma3ForConditionalGeneration",), "gemma3_text"),
    "mistral3": (("Mistral3ForConditionalGeneration",), "mistral"),
    "kimi_k25": (("KimiK25ForConditionalGeneration",), "kimi_k2"),
    "qwen3_5": (("Qwen3_5ForConditionalGeneration",), "qwen3_5_text"),
    "qwen3_5_moe": (("Qwen3_5MoeForConditionalGeneration",), "qwen3_5_moe_text"),
    "qwen2_5_vl": (("Qwen2_5_VLForConditionalGeneration",), "qwen2_5_vl_text"),
    "qwen3_vl": (("Qwen3VLForConditionalGeneration",), "qwen3_vl_text"),
    "qwen3_vl_moe": (("Qwen3VLMoeForConditionalGeneration",), "qwen3_vl_moe_text"),
    "internvl": (("InternVLForConditionalGeneration",), "qwen2"),
}
# The text models of multimodal wrappers that exist only inside one (no checkpoint of their own): the text family
# whose code they run (Qwen2.5-VL's text model is Qwen2's decoder with multimodal rotary positions; Qwen3-VL's
# Qwen3's and Qwen3-MoE's)
_HF_TEXT_ONLY = {"qwen2_5_vl_text": "qwen2", "qwen3_vl_text": "qwen3", "qwen3_vl_moe_text": "qwen3_moe"}
# Wrappers whose vision tower is modelled (perfmodel.vision_config.vision_from_hf)
_HF_VISION = ("qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "llama4", "gemma3", "internvl")
# Wrappers published flat: the text model's fields at the top level beside vision_config (Qwen2.5-VL's config.json
# as transformers 4.x wrote it)
_HF_FLAT = ("qwen2_5_vl",)
_HF_ARCHS: dict[str, str] = {}
for _mt, (_, _archs) in _HF_FAMILIES.items():
    for _a in _archs:
        _HF_ARCHS.setdefault(_a, _mt)
for _mt, (_archs, _) in _HF_WRAPPERS.items():
    for _a in _archs:
        _HF_ARCHS.setdefault(_a, _mt)

# Families the descriptor cannot express: refused in one line naming what is missing.
_DELTANET = "linear attention layers (Gated DeltaNet) are not modelled yet"
_MAMBA = "state-space (Mamba) layers are not modelled yet"
_DSA = ("DeepSeek Sparse Attention (a lightning indexer picks the index_topk keys each query attends to) "
        "is not modelled yet")
_HF_REFUSED = {
    "kimi_linear": "linear attention layers (Kimi Delta Attention) are not modelled yet",
    "minimax": "linear attention layers (lightning attention) are not modelled yet",
    "nemotron_h": _MAMBA, "mamba": _MAMBA, "mamba2": _MAMBA, "jamba": _MAMBA, "falcon_h1": _MAMBA,
    "falcon_mamba": _MAMBA, "zamba": _MAMBA, "zamba2": _MAMBA, "bamba": _MAMBA, "granitemoehybrid": _MAMBA,
    "gemma4": "per-layer-type head widths (global_head_dim) and KV heads, and K = V attention are not modelled yet",
    "gemma4_text": "per-layer-type head widths (global_head_dim) and KV heads, and K = V attention are not modelled yet",
}
# config.json's names for the attention of a layer
_HF_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked",
                   "linear_attention": "linear"}
# Families whose linear_attention layers are Gated DeltaNet, which the descriptor expresses
_HF_DELTANET = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_5", "qwen3_5_moe")

# Class defaults of transformers' config classes for fields the published config.json leaves out
# (Gemma3TextConfig, Gemma2Config; the Gemmas tie their embeddings).
_HF_DEFAULTS: dict[str, dict] = {
    "gemma2": {"tie_word_embeddings": True, "head_dim": 256, "vocab_size": 256000, "max_position_embeddings": 8192},
    "gemma3_text": {"tie_word_embeddings": True, "head_dim": 256, "vocab_size": 262208,
                    "max_position_embeddings": 131072, "sliding_window_pattern": 6},
}

# Fields that are read below, or that cannot change the shapes or the work done per token.
_HF_HARMLESS = frozenset({
    "architectures", "model_type", "torch_dtype", "dtype", "transformers_version", "_name_or_path", "auto_map",
    "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "rms_norm_eps", "rope_theta",
    "use_cache", "attention_dropout", "pretraining_tp", "tie_word_embeddings", "vocab_size",
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
    "intermediate_size", "max_position_embeddings", "hidden_act", "attention_bias", "mlp_bias",
    "output_attentions", "output_hidden_states", "return_dict", "tokenizer_class",
    # MoE routing: training losses and routing policy, not shapes
    "num_local_experts", "num_experts_per_tok", "output_router_logits", "router_aux_loss_coef",
    "router_jitter_noise",
    # DeepSeek-V3
    "n_routed_experts", "n_shared_experts", "moe_intermediate_size", "first_k_dense_replace",
    "moe_layer_freq", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
    "v_head_dim", "aux_loss_alpha", "seq_aux", "n_group", "topk_group", "topk_method", "scoring_func",
    "routed_scaling_factor", "norm_topk_prob", "ep_size", "num_nextn_predict_layers",
    # scales, dropouts and the pre-extension context of rotary scaling: no shape, no work
    "query_pre_attn_scalar", "rope_local_base_freq", "embd_pdrop", "resid_pdrop", "original_max_position_embeddings",
    "attn_temperature_tuning", "floor_scale", "attn_scale", "initial_context_length", "cache_implementation",
    "experts_per_token", "sliding_window_size",
    # PretrainedConfig's generation and bookkeeping defaults, which older transformers write into every config
    "add_cross_attention", "bad_words_ids", "begin_suppress_tokens", "chunk_size_feed_forward",
    "cross_attention_hidden_size", "decoder_start_token_id", "diversity_penalty", "do_sample", "early_stopping",
    "encoder_no_repeat_ngram_size", "exponential_decay_length_penalty", "finetuning_task", "forced_bos_token_id",
    "forced_eos_token_id", "id2label", "label2id", "is_decoder", "is_encoder_decoder", "length_penalty",
    "max_length", "min_length", "no_repeat_ngram_size", "num_beam_groups", "num_beams", "num_return_sequences",
    "output_scores", "prefix", "problem_type", "pruned_heads", "remove_invalid_values", "repetition_penalty",
    "return_dict_in_generate", "sep_token_id", "suppress_tokens", "task_specific_params", "temperature",
    "tf_legacy_loss", "tie_encoder_decoder", "top_k", "top_p", "torchscript", "typical_p", "use_bfloat16",
    # a multimodal config's token ids and its vision_config (read by perfmodel.vision_config)
    "vision_config", "image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id",
    "vision_token_id",
})
# Harmless when null/false/absent; otherwise they change the compute and, unless modelled, are reported.
_HF_HARMLESS_IF_OFF = frozenset({"rope_scaling", "sliding_window", "quantization_config", "use_sliding_window"})
# Reported whenever set, even where partly read (quantization_config gives fp8_scaling and expert_dtype only).
_HF_REPORT_IF_ON = frozenset({"rope_scaling", "quantization_config"})


class _Cfg:
    """One config.json object (or its text_config), read field by field. What was read is remembered, so that
    the rest can be reported in notes; errors name the field with its path (text_config.hidden_size)."""

    def __init__(self, cfg: dict, file: str, prefix: str = "", defaults: dict | None = None):
        self.cfg, self.file, self.prefix = cfg, file, prefix
        self.defaults = defaults or {}
        self.used: set[str] = set()
        self.report_first: list[str] = []  # read, but set to what is not modelled (attention_bias on MLA)

    def has(self, k: str) -> bool:
        return self.cfg.get(k) is not None

    def get(self, k: str, default=None):
        self.used.add(k)
        v = self.cfg.get(k)
        if v is None:
            v = self.defaults.get(k)
        return default if v is None else v

    def error(self, k: str, message: str) -> InputError:
        return InputError(message, file=self.file, field=self.prefix + k)

    def text(self, k: str, default: str | None = None) -> str | None:
        """A text field (a name compared against known ones: a list or a mapping there had raised TypeError)."""
        v = self.get(k, default)
        return None if v is None else text_value(v, self.prefix + k, file=self.file)

    def int(self, k: str, *, default=None, minimum: int = 1) -> int:
        v = self.get(k)
        if v is None:
            if default is None:
                raise self.error(k, "missing required field")
            return default
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise self.error(k, f"expected {what}, got {_short(v)}")
        if k in _HF_SIZE_NAMES:
            _check_size(v, _HF_SIZE_NAMES[k], self.file, self.prefix + k)
        return v

    def bool(self, k: str, *, default: bool = False) -> bool:
        v = self.get(k)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.error(k, f"expected true or false, got {_short(v)}")
        return v

    def softcap(self, k: str) -> float:
        v = self.get(k)
        if v is None:
            return 0.0
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= _SOFTCAP_LIMIT:
            raise self.error(k, f"expected null or a number >= 0, got {_short(v)}")
        return float(v)

    def unused(self) -> list[str]:
        out = [self.prefix + k for k in self.report_first]
        for k, v in self.cfg.items():
            if k in self.report_first:
                continue
            if k in _HF_REPORT_IF_ON and v:
                out.append(self.prefix + k)
            elif k in self.used or k in _HF_HARMLESS or (k in _HF_HARMLESS_IF_OFF and not v):
                continue
            else:
                out.append(self.prefix + k)
        return out


def _hf_refuse(cfg: dict, file: str, prefix: str = "") -> None:
    """Stop, in one line, on what the descriptor cannot express: linear attention, state-space layers, sparse
    attention; by model_type, or by the layer types a config lists."""
    mt = cfg.get("model_type")
    if isinstance(mt, str) and mt in _HF_REFUSED:
        raise InputError(f"{mt!r} is not supported: {_HF_REFUSED[mt]}", file=file, field=prefix + "model_type")
    lt = cfg.get("layer_types")
    deltanet = mt in _HF_DELTANET
    if isinstance(lt, list) and not deltanet:
        kinds = {str(t) for t in lt}
        if "linear_attention" in kinds:
            n = sum(1 for t in lt if t == "linear_attention")
            raise InputError(f"{n} of {len(lt)} layers are linear_attention: linear attention layers are not "
                             "modelled yet", file=file, field=prefix + "layer_types")
        if kinds & {"mamba", "mamba2", "ssm"}:
            raise InputError(_MAMBA, file=file, field=prefix + "layer_types")
    if not deltanet and (cfg.get("linear_num_value_heads") is not None or cfg.get("linear_key_head_dim") is not None):
        raise InputError(_DELTANET, file=file, field=prefix + "linear_num_value_heads")
    att = cfg.get("attn_type_list")
    if isinstance(att, list) and any(t == 0 for t in att):
        raise InputError("linear attention layers (lightning attention, attn_type 0) are not modelled yet",
                         file=file, field=prefix + "attn_type_list")
    pat = cfg.get("hybrid_override_pattern")
    if isinstance(pat, str) and "M" in pat:
        raise InputError(_MAMBA, file=file, field=prefix + "hybrid_override_pattern")
    text = cfg.get("text_config")
    if isinstance(text, dict) and not prefix:
        _hf_refuse(text, file, "text_config.")


def _supported() -> str:
    return ", ".join(sorted(set(_HF_FAMILIES) | set(_HF_WRAPPERS)))


def _hf_family(cfg: dict, file: str) -> str:
    """The config's model_type (a text family or a multimodal wrapper), after the refusals."""
    _hf_refuse(cfg, file)
    mt = cfg.get("model_type")
    if mt is not None:
        text_value(mt, "model_type", file=file)
    archs = cfg.get("architectures") or []
    if isinstance(archs, str):
        archs = [archs]
    if mt is not None:
        if mt not in _HF_FAMILIES and mt not in _HF_WRAPPERS:
            raise InputError(f"unsupported model_type {_short(mt)} (supported: {_supported()})",
                             file=file, field="model_type")
        return mt
    for a in archs:
        if isinstance(a, str) and a in _HF_ARCHS:
            return _HF_ARCHS[a]
    if archs:
        raise InputError(f"unsupported architecture {_short(archs[0])} (supported: {', '.join(sorted(_HF_ARCHS))})",
                         file=file, field="architectures")
    raise InputError(f"missing required field (one of: {_supported()})", file=file, field="model_type")


def _hf_name(cfg: dict, path: Path) -> str:
    np = cfg.get("_name_or_path")
    if isinstance(np, str) and np.strip() and not np.strip().startswith((".", "/")):
        return np.strip().rstrip("/").split("/")[-1]
    if path.stem != "config":
        # a file saved as ORG--NAME_config.json (the Hugging Face cache's and aiconfigurator's naming)
        m = re.match(r"^(?:[^-]+(?:-[^-]+)*?--)?(.+?)(?:_config)?$", path.stem)
        return m.group(1) if m else path.stem
    return path.resolve().parent.name or "hf-model"


# EAGLE draft heads (the checkpoints' architectures as vLLM and SGLang register them): one Llama decoder layer over
# the fused hidden states of the target -> how many it fuses (EAGLE-3: three layers'; EAGLE: the last layer's
# beside the token's embedding)
_HF_EAGLE = {"LlamaForCausalLMEagle3": 3, "Eagle3LlamaForCausalLM": 3, "LlamaForCausalLMEagle": 2,
             "EagleLlamaForCausalLM": 2}


def _hf_eagle(cfg: dict) -> int:
    archs = cfg.get("architectures") or []
    return next((_HF_EAGLE[a] for a in archs if isinstance(a, str) and a in _HF_EAGLE), 0) \
        if isinstance(archs, list) else 0


def _model_from_hf_dict(cfg, path: Path) -> Model:
    file = str(path)
    if not isinstance(cfg, dict):
        raise InputError("expected a JSON object", file=file)
    mt = _hf_family(cfg, file)
    archs = cfg.get("architectures") or []
    eagle = _hf_eagle(cfg) if mt == "llama" else 0
    accepted = _HF_WRAPPERS[mt][0] if mt in _HF_WRAPPERS else _HF_FAMILIES[mt][1]
    if eagle:
        accepted = tuple(_HF_EAGLE)
    if isinstance(archs, list) and archs and not any(a in accepted for a in archs):
        raise InputError(f"unsupported architecture {_short(archs[0])} for model_type {mt!r} "
                         f"(expected {' or '.join(accepted)})", file=file, field="architectures")
    notes: list[str] = []
    outer = _Cfg(cfg, file)
    if mt in _HF_WRAPPERS:
        text = cfg.get("text_config")
        if text is None and mt in _HF_FLAT:
            text = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "vision_config")}
            flat = True
        else:
            flat = False
        if not isinstance(text, dict):
            raise InputError(f"expected the text model's config (an object) in a {mt} config, got {_short(text)}",
                             file=file, field="text_config")
        tmt = text.get("model_type") if not flat else None
        tmt = text_value(tmt or _HF_WRAPPERS[mt][1], "text_config.model_type", file=file)
        tmt = _HF_TEXT_ONLY.get(tmt, tmt)
        if tmt not in _HF_FAMILIES:
            raise InputError(f"unsupported text model_type {_short(tmt)} (supported: {', '.join(sorted(_HF_FAMILIES))})",
                             file=file, field="text_config.model_type")
        c = _Cfg(text, file, "" if flat else "text_config.", _HF_DEFAULTS.get(tmt))
    else:
        tmt, c = mt, _Cfg(cfg, file, "", _HF_DEFAULTS.get(mt))
    kw = _hf_text_model(c, tmt, notes)
    if mt in _HF_WRAPPERS:
        kw["vision"] = _hf_vision(cfg, mt, kw["hidden"], path, notes)
    # tying and quantization are the checkpoint's: a wrapper's own fields win over its text_config's
    tie = outer.get("tie_word_embeddings") if mt in _HF_WRAPPERS and outer.has("tie_word_embeddings") else \
        c.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise InputError(f"expected true or false, got {_short(tie)}", file=file, field="tie_word_embeddings")
    quant = c.get("quantization_config") or (outer.get("quantization_config") if mt in _HF_WRAPPERS else None)
    if quant is not None and not isinstance(quant, dict):  # "junk" had silently dropped gpt-oss's MXFP4 experts
        raise InputError(f"expected a mapping (quant_method and its fields), got {_short(quant)}", file=file,
                         field="quantization_config")
    if kw["moe"] is not None:
        kw["expert_dtype"] = _hf_expert_dtype(quant)
    # ModelOpt's checkpoints give their NVFP4 layout in hf_quant_config.json beside config.json
    fp4 = quant if quant is not None else _sibling_quant_config(path)
    kw["fp4_unquantized"] = _fp4_groups_present(_hf_fp4_unquantized(fp4, kw["layers"], kw["moe"]), kw)
    if eagle:
        kw["draft_fuses"] = eagle
        draft_vocab = c.int("draft_vocab_size") if c.has("draft_vocab_size") else 0
        if draft_vocab:  # EAGLE-3: its LM head scores a smaller vocabulary, mapped onto the target's
            if draft_vocab > kw["vocab"]:
                raise c.error("draft_vocab_size", f"expected at most vocab_size ({kw['vocab']}), got {draft_vocab}")
            kw["vocab"], kw["target_vocab"] = draft_vocab, kw["vocab"]
        notes.append(f"an EAGLE{'-3' if eagle == 3 else ''} draft head: {kw['layers']} decoder layer(s) over "
                     f"{eagle} fused hidden states; a draft for --draft, not a model to serve")
    unused = c.unused()
    if mt in _HF_WRAPPERS and isinstance(cfg.get("quantization_config"), dict):
        unused.append("quantization_config")
    if unused:
        notes.insert(0, "config.json fields not used: " + ", ".join(unused))
    name = _hf_name(cfg, path)
    key = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-") or "hf-model"
    return Model(key=key, name=name, tied_embeddings=tie, aliases=(), source=f"{path} (Hugging Face config)",
                 notes=tuple(notes), fp8_scaling=_hf_fp8_scaling(quant), **kw)


def _hf_vision(cfg: dict, mt: str, text_hidden: int, path: Path, notes: list[str]) -> VisionEncoder | None:
    """A wrapper's vision encoder where its family's is modelled, with a note saying what it is; else None and a
    note saying why (the text model imports either way)."""
    vision = cfg.get("vision_config")
    what = f"vision_config {vision.get('model_type')}" if isinstance(vision, dict) and vision.get("model_type") \
        else "vision_config"
    if mt not in _HF_VISION:
        notes.append(f"{mt}: the text model only; the vision tower and projector ({what}) are not modelled")
        return None
    pre = None
    beside = path.parent / "preprocessor_config.json"
    if path.name == "config.json" and beside.is_file():  # a snapshot folder: the processor's own limits
        pre = _read_json(beside)
    try:
        enc = vision_from_hf(cfg, mt, text_hidden, pre)
    except VisionConfigError as e:
        notes.append(f"{mt}: the text model only; the vision tower and projector ({what}) are not modelled: {e}")
        return None
    notes.append(f"{mt}: vision tower {enc.config_type or enc.kind} ({enc.layers} layers, hidden {enc.hidden}, "
                 f"{enc.param_count() / 1e6:,.0f}M parameters with its projector) modelled with --images "
                 "(perfmodel.vision, docs/vision.md); without images the text model alone is projected")
    if enc.kind == "gemma3":
        notes.append(f"gemma3: pan-and-scan crops (Gemma3ImageProcessor do_pan_and_scan, off by default) are not "
                     f"modelled: every image is one {enc.image_size}-pixel tile of mm_tokens_per_image tokens")
    return enc


# transformers' ACT2FN names a gated MLP may use (activations.py); anything else is not an activation
HF_ACTIVATIONS = frozenset({"silu", "swish", "gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_accurate",
                            "gelu_python", "quick_gelu", "relu", "relu2", "relu6", "leaky_relu", "mish", "tanh",
                            "sigmoid", "laplace", "linear", "gelu_10", "prelu", "xielu"})


def _hf_text_model(c: _Cfg, mt: str, notes: list[str]) -> dict:
    """The Model fields of a text model's config (c), by family; notes gets what is not modelled."""
    family = _HF_FAMILIES[mt][0]
    hidden = c.int("hidden_size")
    layers = c.int("num_hidden_layers")
    heads = c.int("num_attention_heads")
    kv_heads = c.int("num_key_value_heads", default=heads)
    if kv_heads > heads or heads % kv_heads:
        raise c.error("num_key_value_heads", f"expected a divisor of num_attention_heads ({heads}), got {kv_heads}")
    vocab = c.int("vocab_size")
    max_position = c.int("max_position_embeddings", default=0, minimum=1)  # given, it is a context of tokens
    gemma = family in ("gemma2", "gemma3")
    act_key = "hidden_activation" if gemma and c.has("hidden_activation") else "hidden_act"
    act = c.text(act_key, "silu")
    c.get("hidden_act")
    if act not in HF_ACTIVATIONS:
        raise c.error(act_key, f"expected one of transformers' activations ({', '.join(sorted(HF_ACTIVATIONS))}), "
                      f"got {_short(act)}")
    if act not in ("silu", "swish"):
        notes.append(f"{act_key}={act} (gated MLP modelled as swiglu; same shapes)")
    kw: dict = dict(family=family, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, vocab=vocab,
                    max_position=max_position, mlp="swiglu", norm="rmsnorm", position="rope", moe=None, mla=None)

    # --- attention: biases and query/key norms
    unused_first: list[str] = []
    if family in ("qwen2", "qwen2_moe"):
        kw["qkv_bias"] = True  # Qwen2 always has q/k/v biases
        if c.bool("attention_bias"):
            unused_first.append("attention_bias")
    elif family in ("glm4_moe",):
        kw["qkv_bias"] = c.bool("attention_bias")  # GLM-4.5: q, k, v biases; o has none
    elif family in ("deepseek_v2", "deepseek_v3", "deepseek_v32", "glm_moe_dsa"):
        if c.bool("attention_bias"):
            unused_first.append("attention_bias")  # biases on MLA's projections: not in any published model
    else:
        kw["attention_bias"] = c.bool("attention_bias")  # q, k, v and o (Llama, Qwen3, gpt-oss, Llama 4)
    if family in ("qwen3", "qwen3_moe"):
        kw["qkv_bias"] = c.bool("qkv_bias")  # Qwen3-Coder's config spells out qkv_bias: false
        kw["qk_norm"] = c.bool("use_qk_norm", default=True)  # Qwen3 always normalises q and k per head
    elif family in ("qwen3_next", "qwen3_5", "qwen3_5_moe"):
        kw["qk_norm"] = True  # Qwen3NextAttention's q_norm and k_norm, per head
        # its full-attention layers gate their output with a sigmoid of a second half of the q projection
        kw["attn_output_gate"] = c.bool("attn_output_gate", default=True)
        kw["linear_attention"] = _hf_linear_attention(c)
    elif family == "gemma3":
        kw["qk_norm"] = True
    elif family == "glm4_moe":
        kw["qk_norm"] = c.bool("use_qk_norm")
    elif family == "llama4":
        kw["qk_norm"] = c.bool("use_qk_norm")
        if kw["qk_norm"]:
            kw["qk_norm_type"] = "l2"  # Llama4TextL2Norm: no weight, on the rotary layers only
    elif family == "minimax_m2":
        kw["qk_norm"] = c.bool("use_qk_norm")
        t = c.text("qk_norm_type", "per_layer")
        if t not in ("per_layer", "per_head"):
            raise c.error("qk_norm_type", f"expected per_layer or per_head, got {_short(t)}")
        if kw["qk_norm"]:
            kw["qk_norm_type"] = "layer" if t == "per_layer" else "head"
    if c.bool("mlp_bias"):
        unused_first.append("mlp_bias")
    if family == "gpt_oss":
        kw["attention_sinks"] = True  # GptOssAttention.sinks: one logit per head
        limit = c.get("swiglu_limit")
        if limit:
            notes.append(f"swiglu_limit={limit}: clamped SwiGLU (same shapes)")
    if gemma:
        kw["sandwich_norm"] = True  # pre- and post-norms around attention and the FFN
        kw["attn_softcap"] = c.softcap("attn_logit_softcapping")
        kw["logit_softcap"] = c.softcap("final_logit_softcapping")
    for k in ("partial_rotary_factor", "rotary_dim"):
        if c.has(k):
            notes.append(f"{k}={c.get(k)}: rotary embedding on part of each head (rotary op narrower; same shapes)")

    # --- FFN widths and experts
    if family == "llama4":
        kw["intermediate"] = c.int("intermediate_size_mlp")  # the dense layers' FFN
    elif family == "qwen3_5_moe" and not c.has("intermediate_size"):
        kw["intermediate"] = c.int("moe_intermediate_size")  # every layer is MoE: no dense FFN width published
    else:
        kw["intermediate"] = c.int("intermediate_size")
    kw["moe"], kw["mla"] = _hf_moe(c, family, layers, kw["intermediate"], notes)
    kw["mtp_layers"] = _hf_mtp_layers(c, family)

    # --- head_dim
    if kw["mla"] is not None:
        kw["head_dim"] = kw["mla"].qk_nope_head_dim + kw["mla"].qk_rope_head_dim  # HF's head_dim is the rope part
    elif c.get("head_dim") is not None:
        kw["head_dim"] = c.int("head_dim")
    else:
        kw["head_dim"] = hidden // heads  # transformers' rule where head_dim is not given (floor division)
        if hidden % heads:
            notes.append(f"head_dim not given: hidden_size // num_attention_heads = {kw['head_dim']}, as transformers "
                         f"derives it ({hidden} is not a multiple of {heads}: the heads span less than hidden_size)")

    # --- which layers attend how far
    kw.update(_hf_layer_types(c, family, mt, layers, max_position, notes))
    c.report_first = unused_first
    return kw


def _hf_mtp_layers(c: _Cfg, family: str) -> int:
    """The multi-token-prediction layers a config publishes (what --mtp drafts with), by each family's field."""
    if family == "minimax_m2":
        return c.int("num_mtp_modules", default=0, minimum=0) if c.bool("use_mtp") else 0
    if family in ("qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe"):
        return c.int("mtp_num_hidden_layers", default=0, minimum=0)
    if family in ("deepseek_v2", "deepseek_v3", "deepseek_v32", "glm_moe_dsa", "glm4_moe"):
        return c.int("num_nextn_predict_layers", default=0, minimum=0)
    return 0


# transformers' defaults of norm_topk_prob where a config leaves it out (Qwen2MoeConfig, Qwen3MoeConfig: False;
# Qwen3NextConfig, DeepseekV3Config, Glm4MoeConfig: True; DeepseekV2Config: False)
_RENORMALIZED_BY_DEFAULT = frozenset({"qwen3_next", "qwen3_5_moe", "deepseek_v3", "deepseek_v32", "glm4_moe",
                                      "glm_moe_dsa"})


def _hf_router(c: _Cfg, family: str) -> str:
    """The config's router as :data:`ROUTERS` names it: its scoring function (scoring_func, the family's where the
    config leaves it out), a per-expert bias used only to pick (DeepSeek-V3's topk_method noaux_tc, GLM-4.5's and
    GLM-5's alike, MiniMax-M2's use_routing_bias), group-limited top-k (the DeepSeek and GLM families' router, n_group
    1 included), and whether the top-k weights are renormalized (norm_topk_prob)."""
    if family in ("mixtral", "gpt_oss"):  # softmax over the top-k logits: the renormalized top-k of the softmax
        return "softmax"
    if family == "llama4":
        return "sigmoid"
    if family == "minimax_m2":
        sigmoid = c.get("scoring_func", "sigmoid") == "sigmoid"
        return ("sigmoid_bias" if c.bool("use_routing_bias") else "sigmoid") if sigmoid else "softmax"
    if family in ("deepseek_v3", "deepseek_v32", "glm4_moe", "glm_moe_dsa"):
        if c.get("scoring_func", "sigmoid") == "sigmoid" and c.get("topk_method", "noaux_tc") == "noaux_tc":
            return "sigmoid_bias_grouped"
    renormalized = c.get("norm_topk_prob", family in _RENORMALIZED_BY_DEFAULT)
    return "softmax" if renormalized else "softmax_unnormalized"


def _hf_moe(c: _Cfg, family: str, layers: int, intermediate: int, notes: list[str]):
    """(MoE or None, MLA or None) of a text config."""
    moe = mla = None
    if family in ("mixtral", "gpt_oss", "minimax_m2"):
        moe = MoE(num_experts=c.int("num_local_experts"), top_k=c.int("num_experts_per_tok"),
                  expert_intermediate=intermediate,
                  expert_bias=family == "gpt_oss", router_bias=family == "gpt_oss",  # gpt-oss: biased experts, router
                  router=_hf_router(c, family))
        if family == "minimax_m2":
            c.get("attn_type_list")  # 1 (full softmax attention) on every layer; a 0 (lightning) is refused earlier
            if c.int("shared_intermediate_size", default=0, minimum=0):
                c.used.discard("shared_intermediate_size")  # a shared expert MiniMax-M2 does not publish: reported
            if c.bool("use_routing_bias"):
                notes.append("use_routing_bias: a per-expert bias used only to pick experts (num_experts values a "
                             "layer) is not counted")
            if c.bool("use_mtp"):
                c.get("num_mtp_modules"), c.get("mtp_transformer_layers")
                notes.append(f"multi-token-prediction modules (num_mtp_modules={c.cfg.get('num_mtp_modules')}) "
                             "not modelled")
    elif family in ("qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe"):
        # transformers 5 writes the routed experts as num_local_experts (the published configs: num_experts)
        n = c.int("num_local_experts") if c.has("num_local_experts") and not c.has("num_experts") else \
            c.int("num_experts")
        step = c.int("decoder_sparse_step", default=1)
        dense = c.get("mlp_only_layers", [])
        if not isinstance(dense, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in dense):
            raise c.error("mlp_only_layers", f"expected a list of layer indices, got {_short(dense)}")
        first = len(dense)
        if dense and (sorted(dense) != list(range(first)) or step != 1 or first >= layers):
            raise c.error("mlp_only_layers", "only leading dense layers (0, 1, ..., k-1) with decoder_sparse_step 1 "
                          f"are supported, got {_short(dense)}")
        if first + step > layers:
            raise c.error("decoder_sparse_step", f"expected at most num_hidden_layers ({layers}), got {step}")
        shared = c.int("shared_expert_intermediate_size", default=0, minimum=0)
        if family == "qwen3_moe" and shared:
            c.used.discard("shared_expert_intermediate_size")  # Qwen3-MoE has no shared expert: reported
            shared = 0
        moe = MoE(num_experts=n, top_k=c.int("num_experts_per_tok"), expert_intermediate=c.int("moe_intermediate_size"),
                  num_shared_experts=1 if shared else 0, shared_intermediate=shared, first_dense_layers=first,
                  layer_step=step, shared_expert_gate=bool(shared),  # Qwen2-MoE, Qwen3-Next gate their shared expert
                  router=_hf_router(c, family))
        mtp = c.get("mtp_num_hidden_layers") or 0
        c.get("mtp_use_dedicated_embeddings")
        if mtp:
            notes.append(f"multi-token-prediction layers (mtp_num_hidden_layers={mtp}) not modelled")
    elif family == "llama4":
        step = c.int("interleave_moe_layer_step", default=1)
        if step > layers:
            raise c.error("interleave_moe_layer_step", f"expected at most num_hidden_layers ({layers}), got {step}")
        listed = c.get("moe_layers")
        if listed is not None and listed != list(range(step - 1, layers, step)):
            raise c.error("moe_layers", f"only every interleave_moe_layer_step-th layer ({step}) is supported, "
                          f"got {_short(listed)}")
        width = c.int("intermediate_size")  # the routed experts' and the shared expert's FFN
        moe = MoE(num_experts=c.int("num_local_experts"), top_k=c.int("num_experts_per_tok"), expert_intermediate=width,
                  num_shared_experts=1, shared_intermediate=width, layer_step=step, router=_hf_router(c, family))
    elif family in ("deepseek_v2", "deepseek_v3", "deepseek_v32", "glm_moe_dsa", "glm4_moe"):
        n_routed = c.int("n_routed_experts", default=0, minimum=0)
        if n_routed == 0 and c.has("n_routed_experts") and (c.get("num_experts_per_tok") or 0):
            # Kimi K2 with 0 routed experts had become a 33B dense model: a contradiction, not a dense config
            # (a dense one leaves n_routed_experts null)
            raise c.error("n_routed_experts", f"expected a positive number of routed experts with "
                          f"num_experts_per_tok {_short(c.get('num_experts_per_tok'))}, got 0")
        if n_routed:
            n_shared = c.int("n_shared_experts", default=0, minimum=0)
            moe_inter = c.int("moe_intermediate_size")
            first_dense = c.int("first_k_dense_replace", default=0, minimum=0)
            kinds = c.get("mlp_layer_types")  # transformers 5: "dense" / "sparse" per layer, first_k_dense_replace's
            if kinds is not None:
                lead = next((i for i, k in enumerate(kinds) if k != "dense"), len(kinds)) if isinstance(kinds, list) \
                    else -1
                if (not isinstance(kinds, list) or len(kinds) != layers or kinds[lead:] != ["sparse"] * (layers - lead)
                        or (c.has("first_k_dense_replace") and lead != first_dense)):
                    raise c.error("mlp_layer_types", f"expected num_hidden_layers ({layers}) entries, leading "
                                  f"\"dense\" ones then \"sparse\" (first_k_dense_replace), got {_short(kinds)}")
                first_dense = lead
            freq = c.int("moe_layer_freq", default=1)
            if freq != 1:
                raise c.error("moe_layer_freq", f"only 1 is supported (MoE on every layer after first_k_dense_replace), "
                              f"got {freq}")
            if first_dense >= layers:
                raise c.error("first_k_dense_replace", f"expected fewer than num_hidden_layers ({layers}), got {first_dense}")
            # group-limited routing (topk_method noaux_tc / group_limited_greedy): n_group 1 is no limit
            groups = c.int("n_group", default=1)
            per_token = c.int("topk_group", default=groups)
            if n_routed % groups or per_token > groups:
                raise c.error("topk_group", f"expected n_group ({groups}) dividing n_routed_experts ({n_routed}) "
                              f"and topk_group at most n_group, got {_short(c.get('topk_group'))}")
            moe = MoE(num_experts=n_routed, top_k=c.int("num_experts_per_tok"), expert_intermediate=moe_inter,
                      num_shared_experts=n_shared, shared_intermediate=moe_inter if n_shared else 0,
                      first_dense_layers=first_dense, expert_groups=groups, groups_per_token=per_token,
                      router=_hf_router(c, family))
        if family != "glm4_moe":
            sparse = {}
            if family in ("deepseek_v32", "glm_moe_dsa"):  # DeepSeek Sparse Attention's lightning indexer
                sparse = dict(index_topk=c.int("index_topk"), index_heads=c.int("index_n_heads"),
                              index_head_dim=c.int("index_head_dim"))
                for k in ("indexer_rope_interleave", "rope_interleave", "qk_head_dim", "head_dim"):
                    c.get(k)  # the rotary layout, and qk_nope + qk_rope and the rope part restated: no shape
            mla = MLA(q_lora_rank=c.int("q_lora_rank", default=0, minimum=0), kv_lora_rank=c.int("kv_lora_rank"),
                      qk_nope_head_dim=c.int("qk_nope_head_dim"), qk_rope_head_dim=c.int("qk_rope_head_dim"),
                      v_head_dim=c.int("v_head_dim"), **sparse)
        mtp = c.get("num_nextn_predict_layers") or 0
        if mtp:
            notes.append(f"multi-token-prediction module (num_nextn_predict_layers={mtp}) not modelled")
    if moe is not None and moe.top_k > moe.num_experts:
        raise c.error("num_experts_per_tok", f"expected at most the {moe.num_experts} experts, got {moe.top_k}")
    return moe, mla


_STATE_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _hf_linear_attention(c: _Cfg) -> LinearAttention:
    """Gated DeltaNet's shapes (Qwen3-Next, Qwen3.5): linear_num_key_heads / linear_num_value_heads heads of
    linear_key_head_dim / linear_value_head_dim, the convolution's width, the recurrent state's format."""
    kh, vh = c.int("linear_num_key_heads"), c.int("linear_num_value_heads")
    if vh % kh:
        raise c.error("linear_num_value_heads", f"expected a multiple of linear_num_key_heads ({kh}), got {vh}")
    state = c.text("mamba_ssm_dtype", "bfloat16")
    if state not in _STATE_DTYPES:
        raise c.error("mamba_ssm_dtype", f"expected one of {', '.join(_STATE_DTYPES)}, got {_short(state)}")
    return LinearAttention(key_heads=kh, value_heads=vh, key_head_dim=c.int("linear_key_head_dim"),
                           value_head_dim=c.int("linear_value_head_dim"),
                           conv_kernel=c.int("linear_conv_kernel_dim", default=4), state_dtype=_STATE_DTYPES[state])


def _hf_layer_types(c: _Cfg, family: str, mt: str, layers: int, max_position: int, notes: list[str]) -> dict:
    """sliding_window, attention_chunk and layer_types, as each family's reference implementation applies them."""
    window = chunk = 0
    types: list[str] | None = None
    listed = c.get("layer_types") if c.has("layer_types") else None
    if listed is not None:
        if not isinstance(listed, list) or len(listed) != layers:
            raise c.error("layer_types", f"expected a list of num_hidden_layers ({layers}) entries, got {_short(listed)}")
        types = []
        for i, t in enumerate(listed):
            if t == "indexed_attention" and family in ("deepseek_v32", "glm_moe_dsa"):
                t = "full_attention"  # transformers 5's name for DeepSeek Sparse Attention's layers (the indexer:
                # index_topk and its heads, read with the MLA fields)
            if t not in _HF_LAYER_TYPES:
                raise c.error("layer_types", f"entry {i}: expected one of {', '.join(_HF_LAYER_TYPES)}, got {_short(t)}")
            types.append(_HF_LAYER_TYPES[t])
    qwen = family in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next")
    if family in ("qwen3_next", "qwen3_5", "qwen3_5_moe"):
        interval = c.int("full_attention_interval", default=4)
        derived = ["full" if (i + 1) % interval == 0 else "linear" for i in range(layers)]
        if types is None:
            types = derived  # every full_attention_interval-th layer softmax attention, the rest Gated DeltaNet
        elif types != derived and c.has("full_attention_interval"):
            raise c.error("layer_types", f"disagrees with full_attention_interval ({interval})")
    if qwen and not c.get("use_sliding_window"):
        c.get("sliding_window"), c.get("max_window_layers")  # Qwen applies the window only with use_sliding_window
    elif family == "llama4":
        chunk = c.int("attention_chunk_size", default=0, minimum=0)
        rope = c.get("no_rope_layers")
        if rope is None or rope == []:  # transformers takes an empty list as unset too
            # transformers' Llama4TextConfig: every no_rope_layer_interval-th layer (default 4) has no rotary
            # embedding (NoPE) and attends to everything; the others are rotary and chunked
            interval = c.int("no_rope_layer_interval", default=4)
            rope = [int((i + 1) % interval != 0) for i in range(layers)]
        if not isinstance(rope, list) or len(rope) != layers or any(r not in (0, 1) for r in rope):
            raise c.error("no_rope_layers", f"expected num_hidden_layers ({layers}) entries of 0 or 1, got {_short(rope)}")
        if types is None:
            types = ["chunked" if r and chunk else "full" for r in rope]
        nope = rope.count(0)
        if nope:
            notes.append(f"{nope} of {layers} layers have no rotary embedding (NoPE) and attend to every token")
    elif family in ("gemma2", "gemma3", "gpt_oss", "phi3", "mixtral") or mt == "ministral":
        window = c.int("sliding_window", default=0, minimum=0)
        if types is None and window:
            if family == "gemma2":  # even layers slide, odd ones are global
                types = ["sliding" if (i + 1) % 2 else "full" for i in range(layers)]
            elif family == "gemma3":  # (pattern - 1) sliding layers, then a global one
                p = c.int("sliding_window_pattern")
                types = ["sliding" if (i + 1) % p else "full" for i in range(layers)]
            else:  # every layer slides (Phi-3-mini, Mixtral with a window)
                types = ["sliding"] * layers
        if window and max_position and window >= max_position and family not in ("gemma2", "gemma3", "gpt_oss"):
            types, window = ["full"] * layers, 0  # a window as long as the context changes nothing
    types = types or ["full"] * layers
    if "sliding" in types and not window:
        raise c.error("sliding_window", "missing: layer_types has sliding layers; expected their window in tokens")
    if "chunked" in types and not chunk:
        raise c.error("attention_chunk_size", "missing: layer_types has chunked layers; expected the chunk in tokens")
    if window and "sliding" not in types:
        window = 0
    if chunk and "chunked" not in types:
        chunk = 0
    return {"sliding_window": window, "attention_chunk": chunk, "layer_types": tuple(types)}


def _hf_fp8_scaling(q) -> str:
    """block where the checkpoint's quantization_config gives fp8 weight blocks (DeepSeek's 128 x 128)."""
    return "block" if isinstance(q, dict) and q.get("weight_block_size") else "tensor"


def _hf_expert_dtype(q) -> str:
    """The routed experts' format where the checkpoint quantizes them apart from the rest: gpt-oss's MXFP4, or a
    compressed-tensors INT4 scheme that leaves attention alone (Kimi K2.5: the routed experts only)."""
    if not isinstance(q, dict):
        return ""
    if q.get("quant_method") == "mxfp4":
        return "fp4"
    if q.get("quant_method") == "compressed-tensors":
        ignore = " ".join(str(x) for x in (q.get("ignore") or []))
        groups = q.get("config_groups")
        for g in (groups.values() if isinstance(groups, dict) else ()):
            w = g.get("weights") if isinstance(g, dict) else None
            if isinstance(w, dict) and w.get("num_bits") == 4 and w.get("type") == "int" and "self_attn" in ignore:
                return "int4"
    return ""


# an excluded module's name -> the FP4_UNQUANTIZED group it falls in (ModelOpt's and compressed-tensors' module
# paths: DeepSeek's q_a_proj ... kv_b_proj, Llama's q/k/v_proj, Qwen3.5's linear_attn, Qwen's shared_expert)
_FP4_MARKERS = (("indexer", "indexer"), ("linear_attn", "linear_attention"), ("shared_expert", "shared_experts"),
                ("o_proj", "attention_o"), ("q_a_proj", "attention_qkv"), ("q_b_proj", "attention_qkv"),
                ("kv_a_proj", "attention_qkv"), ("kv_b_proj", "attention_qkv"), ("q_proj", "attention_qkv"),
                ("k_proj", "attention_qkv"), ("v_proj", "attention_qkv"), ("qkv_proj", "attention_qkv"))
_WHOLE_LAYER = re.compile(r"layers\.(\d+)(\*|\.\*)$")
_ATTENTION_BLOCK = re.compile(r"(^|[.*])(self_)?attn(\*|\.|$)")


def _hf_fp4_unquantized(q, layers: int, moe) -> tuple[str, ...]:
    """The module groups (FP4_UNQUANTIZED) an NVFP4 checkpoint's quantization_config leaves unquantized: ModelOpt's
    ``exclude_modules`` or compressed-tensors' ``ignore`` (NVIDIA's DeepSeek, GLM-5, Kimi K2.5, MiniMax-M2.5 and
    Qwen3.5 NVFP4 releases keep attention in bf16, some the shared experts). A whole layer beyond the model's
    layers is a multi-token-prediction layer; one among the first dense layers, those layers' FFN."""
    if not isinstance(q, dict) or not _hf_is_nvfp4(q):
        return ()
    names = q.get("exclude_modules") or q.get("ignore") or q.get("modules_to_not_convert") or []
    found: set[str] = set()
    dense = moe.first_dense_layers if moe is not None else 0
    for name in (str(x) for x in names if isinstance(x, str)):
        if "mtp" in name:
            found.add("mtp")
            continue
        whole = _WHOLE_LAYER.search(name)
        if whole:  # a layer past the model's is an MTP layer; one among the first dense ones, their FFN
            n = int(whole.group(1))
            if n >= layers or n < dense:
                found.add("mtp" if n >= layers else "dense_layers")
            continue
        marker = next((g for m, g in _FP4_MARKERS if m in name), None)
        if marker:
            found.add(marker)
        elif _ATTENTION_BLOCK.search(name):  # the whole attention block
            found.update(("attention_qkv", "attention_o", "indexer"))
    return tuple(g for g in FP4_UNQUANTIZED if g in found)


def _sibling_quant_config(path: Path):
    """The ``quantization`` object of the hf_quant_config.json beside a config.json (ModelOpt's checkpoints), or
    None where there is none; one that cannot be read is an error naming it."""
    side = Path(path).with_name("hf_quant_config.json")
    if not side.is_file():
        return None
    data = _read_json(side)
    q = data.get("quantization") if isinstance(data, dict) else None
    if not isinstance(q, dict):
        raise InputError(f"expected an object 'quantization' (quant_algo, exclude_modules), got {_short(q)}",
                         file=str(side), field="quantization")
    return q


def _fp4_groups_present(groups: tuple[str, ...], kw: dict) -> tuple[str, ...]:
    """The groups among ``groups`` the model has (an excluded attention block names no indexer where there is
    none)."""
    moe, mla = kw.get("moe"), kw.get("mla")
    has = {"indexer": mla is not None and bool(mla.index_topk),
           "linear_attention": kw.get("linear_attention") is not None,
           "shared_experts": moe is not None and bool(moe.num_shared_experts),
           "dense_layers": moe is not None and bool(moe.first_dense_layers),
           "mtp": bool(kw.get("mtp_layers"))}
    return tuple(g for g in groups if has.get(g, True))


def _hf_is_nvfp4(q: dict) -> bool:
    """Whether a quantization_config describes NVFP4 weights (ModelOpt's quant_algo, or compressed-tensors' 4-bit
    float weights in groups of 16)."""
    if str(q.get("quant_algo", "")).upper() == "NVFP4":
        return True
    groups = q.get("config_groups")
    for g in (groups.values() if isinstance(groups, dict) else ()):
        w = g.get("weights") if isinstance(g, dict) else None
        if isinstance(w, dict) and w.get("num_bits") == 4 and w.get("type") == "float":
            return True
    return False


# ---- files, with a cache by path + mtime ----------------------------------------------------------

_FILE_CACHE: dict[tuple, Model] = {}


def _stamp(path: Path) -> tuple:
    try:
        st = path.stat()
    except OSError:
        raise InputError("no such file", file=str(path)) from None
    if not path.is_file():
        raise InputError("expected a file", file=str(path))
    return (str(path.resolve()), st.st_mtime_ns, st.st_size)


def _read_json(path: Path):
    """A JSON model file (descriptor or config.json) under the same limits as YAML: size, depth, no
    NaN/Infinity, one-line errors."""
    from .safeyaml import load_json, read_limited

    return load_json(read_limited(path, what="config.json"), file=str(path), what="config.json")


def _load_file(path: Path) -> Model:
    stamp = _stamp(path)
    hit = _FILE_CACHE.get(stamp)
    if hit is not None:
        return hit
    if path.suffix.lower() == ".json":
        data = _read_json(path)
        if isinstance(data, dict) and "hidden" in data and "hidden_size" not in data:
            m = _model_from_dict(data, str(path))  # a descriptor written as JSON
        else:
            m = _model_from_hf_dict(data, path)
    else:
        m = _model_from_dict(_read_yaml(path), str(path))
    _FILE_CACHE[stamp] = m
    return m


def model_from_hf_config(path: str | Path) -> Model:
    """Import a local Hugging Face ``config.json`` (the families in _HF_FAMILIES and _HF_WRAPPERS; docs/models.md)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    stamp = _stamp(path)
    hit = _FILE_CACHE.get(stamp)
    if hit is not None and hit.source.endswith("(Hugging Face config)"):
        return hit
    m = _model_from_hf_dict(_read_json(path), path)
    _FILE_CACHE[stamp] = m
    return m


# ---- the registry of shipped descriptors ----------------------------------------------------------

_REGISTRY_CACHE: dict[tuple, tuple[list[Model], dict[str, Model], dict[str, Model]]] = {}


def _loose(name: str) -> str:
    return re.sub(r"[-_.\s]+", "", name.lower())


def _listing(d: Path) -> tuple:
    """The descriptors in ``d`` as (name, file identity, modification time, size), from one directory listing: what
    the registry is cached by (every model lookup asks)."""
    out = []
    try:
        entries = list(os.scandir(d))
    except OSError:
        return ()
    for e in entries:
        if e.name.endswith((".yaml", ".yml")):
            try:
                st = e.stat()  # of the file a link points to
            except OSError:
                continue
            out.append((e.name, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(sorted(out))


def _registry() -> tuple[list[Model], dict[str, Model], dict[str, Model]]:
    d = _models_dir()
    stamp = (str(d), _listing(d))
    hit = _REGISTRY_CACHE.get(stamp)
    if hit is not None:
        return hit
    files = sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml")) if d.is_dir() else []
    models: list[Model] = []
    exact: dict[str, Model] = {}
    loose: dict[str, Model] = {}
    for f in files:
        m = _load_file(f)
        for i, n in enumerate((m.key,) + m.aliases):
            fld = "key" if i == 0 else "aliases"
            other = exact.get(n.lower())
            if other is not None and other.key != m.key:
                raise InputError(f"name {n!r} is already used by {other.key}", file=str(f), field=fld)
            if other is not None and i == 0:
                raise InputError(f"key {n!r} is defined twice", file=str(f), field=fld)
            exact[n.lower()] = m
        models.append(m)
    for m in models:
        for n in (m.key,) + m.aliases:
            other = loose.get(_loose(n))
            if other is not None and other.key != m.key:
                raise InputError(f"name {n!r} is ambiguous with {other.key} when '-', '_', '.' are ignored",
                                 file=str(d / f"{m.key}.yaml"), field="aliases")
            loose[_loose(n)] = m
    models.sort(key=lambda m: m.key)
    out = (models, exact, loose)
    _REGISTRY_CACHE.clear()
    _REGISTRY_CACHE[stamp] = out
    return out


def list_models() -> list[Model]:
    """Every descriptor in ``workloads/models/``, sorted by key."""
    return list(_registry()[0])


def load_model(name_or_path: str | Path) -> Model:
    """A model by name or alias (case-insensitive), or from a descriptor YAML / HF ``config.json`` path."""
    if isinstance(name_or_path, Path):
        return _load_file(name_or_path / "config.json" if name_or_path.is_dir() else name_or_path)
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise InputError(f"expected a model name or a path, got {name_or_path!r}", field="model")
    s = name_or_path.strip()
    p = Path(s)
    if p.is_dir() and (p / "config.json").is_file():
        return _load_file(p / "config.json")
    if p.is_file() or s.lower().endswith((".yaml", ".yml", ".json")):
        return _load_file(p)
    models, exact, loose = _registry()
    for cand in (s, s.rstrip("/").split("/")[-1]):
        m = exact.get(cand.lower()) or loose.get(_loose(cand))
        if m is not None:
            return m
    names = sorted(exact)
    near = difflib.get_close_matches(s.lower(), names, n=8, cutoff=0.5)
    lmap: dict[str, str] = {}
    for n in names:
        lmap.setdefault(_loose(n), n)
    near += [lmap[x] for x in difflib.get_close_matches(_loose(s), list(lmap), n=8, cutoff=0.5)]
    shown: dict[str, str] = {}  # one entry per model, best match first
    for n in near:
        k = exact[n].key
        shown.setdefault(k, k if n == k else f"{n} ({k})")
    picks = list(shown.values())[:4]
    hint = f"; closest: {', '.join(picks)}" if picks else f"; known: {', '.join(m.key for m in models)}"
    raise InputError(f"unknown model {s!r}{hint} (or give a descriptor .yaml or a config.json path)",
                     field="model")
