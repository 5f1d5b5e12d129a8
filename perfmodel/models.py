"""LLM descriptors: the shapes a transformer's operators are built from.

A :class:`Model` is pure data. ``load_model`` finds one by name or alias in ``workloads/models/``, or
reads a path (a descriptor YAML or a Hugging Face ``config.json``; local files only, nothing is
downloaded). ``list_models`` returns every shipped descriptor.

Descriptor YAML (one model per file, ``workloads/models/<key>.yaml``)::

    key: llama-3.1-70b            # required; canonical name, lower case
    name: Llama-3.1-70B           # required; display name
    family: llama                 # required; llama | mistral | mixtral | qwen2 | deepseek_v3 | gpt
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
    mlp: swiglu                   # swiglu (gate, up, down) | gelu (up, down)
    norm: rmsnorm                 # rmsnorm | layernorm
    position: rope                # rope | learned
    tied_embeddings: false
    qkv_bias: false
    moe:                          # optional
      {num_experts: 256, top_k: 8, expert_intermediate: 2048,
       num_shared_experts: 1, shared_intermediate: 2048, first_dense_layers: 3}
    mla:                          # optional (multi-head latent attention)
      {q_lora_rank: 1536, kv_lora_rank: 512, qk_nope_head_dim: 128, qk_rope_head_dim: 64, v_head_dim: 128}

Unknown keys, missing required fields, non-positive integers and bad enum values are
:class:`~perfmodel.errors.InputError` ("FILE: FIELD: expected ...").

Names resolve case-insensitively against keys and aliases, then ignoring ``-``, ``_``, ``.`` and
spaces, then with a Hugging Face org prefix (``meta-llama/``) dropped.
"""
from __future__ import annotations

import difflib

import re
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError


@dataclass(frozen=True)
class MoE:
    num_experts: int  # routed experts
    top_k: int  # routed experts per token
    expert_intermediate: int  # FFN width of one routed expert
    num_shared_experts: int = 0  # experts every token visits (DeepSeek)
    shared_intermediate: int = 0  # FFN width of one shared expert
    first_dense_layers: int = 0  # leading layers with a dense FFN of Model.intermediate (DeepSeek-V3: 3)


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2/V3)."""

    q_lora_rank: int  # 0 means queries are projected directly from hidden
    kv_lora_rank: int  # the latent cached per token (512 for V3)
    qk_nope_head_dim: int
    qk_rope_head_dim: int  # the decoupled rotary key, also cached per token
    v_head_dim: int


@dataclass(frozen=True)
class Model:
    key: str  # canonical name, e.g. "llama-3.1-70b"
    name: str  # display name, e.g. "Llama-3.1-70B"
    family: str  # llama | mistral | mixtral | qwen2 | deepseek_v3 | gpt
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # dense FFN width
    vocab: int
    mlp: str = "swiglu"  # swiglu (gate, up, down) | gelu (up, down)
    norm: str = "rmsnorm"  # rmsnorm | layernorm
    position: str = "rope"  # rope | learned
    tied_embeddings: bool = False
    qkv_bias: bool = False
    max_position: int = 0
    moe: MoE | None = None
    mla: MLA | None = None
    # how the model's published fp8 checkpoint scales its products: per tensor (NVIDIA's Llama FP8 checkpoints)
    # or in 128-wide blocks (DeepSeek-V3's own FP8 release); it picks the kernel family an fp8 GEMM runs
    fp8_scaling: str = "tensor"
    aliases: tuple[str, ...] = ()
    source: str = ""  # where the dimensions come from
    notes: tuple[str, ...] = ()  # e.g. config.json fields the importer did not use

    def param_count(self) -> int:
        """Total parameters (all experts), embeddings and LM head included."""
        return _param_count(self, active=False)

    def active_param_count(self) -> int:
        """Parameters one token touches (top-k routed experts, not all)."""
        return _param_count(self, active=True)


def _param_count(m: Model, *, active: bool) -> int:
    h = m.hidden
    total = 0
    for layer in range(m.layers):
        total += attention_params(m)
        total += ffn_params(m, layer, active=active)
        total += 2 * h * (2 if m.norm == "layernorm" else 1)  # two norms per block (weight, +bias for LayerNorm)
    total += m.vocab * h  # embedding
    if m.position == "learned":
        total += m.max_position * h
    if not m.tied_embeddings:
        total += m.vocab * h  # LM head
    total += h * (2 if m.norm == "layernorm" else 1)  # final norm
    return total


def attention_params(m: Model) -> int:
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
        o = m.heads * a.v_head_dim * h
        return q + kv_a + kv_b + o
    q = h * m.heads * m.head_dim
    kv = 2 * h * m.kv_heads * m.head_dim
    o = m.heads * m.head_dim * h
    bias = (m.heads + 2 * m.kv_heads) * m.head_dim if m.qkv_bias else 0
    if m.family == "gpt":
        bias = (m.heads + 2 * m.kv_heads) * m.head_dim + h  # GPT-3 has biases on QKV and O
    return q + kv + o + bias


def is_moe_layer(m: Model, layer: int) -> bool:
    return m.moe is not None and layer >= m.moe.first_dense_layers


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
    routed = (moe.top_k if active else moe.num_experts) * mats * h * moe.expert_intermediate
    shared = moe.num_shared_experts * mats * h * moe.shared_intermediate
    router = h * moe.num_experts
    return routed + shared + router


# --------------------------------------------------------------------------------------------------
# Loading: descriptor YAML, Hugging Face config.json, the name registry.

FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "deepseek_v3", "gpt")
MLPS = ("swiglu", "gelu")
NORMS = ("rmsnorm", "layernorm")
POSITIONS = ("rope", "learned")
FP8_SCALINGS = ("tensor", "block")

_REQUIRED = ("key", "name", "family", "hidden", "layers", "heads", "intermediate", "vocab")
_FIELDS = (
    "key", "name", "family", "aliases", "source", "notes", "hidden", "layers", "heads", "kv_heads",
    "head_dim", "intermediate", "vocab", "max_position", "mlp", "norm", "position", "tied_embeddings",
    "qkv_bias", "moe", "mla", "fp8_scaling",
)
_MOE_REQUIRED = ("num_experts", "top_k", "expert_intermediate")
_MOE_FIELDS = _MOE_REQUIRED + ("num_shared_experts", "shared_intermediate", "first_dense_layers")
_MLA_REQUIRED = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
_MLA_FIELDS = ("q_lora_rank",) + _MLA_REQUIRED
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
    for k in d:
        if not isinstance(k, str) or k not in allowed:
            raise InputError(
                f"unknown field{_suggest(str(k), allowed)} (expected one of: {', '.join(allowed)})",
                file=file, field=prefix + str(k),
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
    "vocab": 2**24, "max_position": 2**27,
    "moe.num_experts": 16384, "moe.top_k": 1024, "moe.expert_intermediate": 2**20,
    "moe.num_shared_experts": 1024, "moe.shared_intermediate": 2**20, "moe.first_dense_layers": 1024,
    "mla.q_lora_rank": 2**16, "mla.kv_lora_rank": 2**16, "mla.qk_nope_head_dim": 4096, "mla.qk_rope_head_dim": 4096,
    "mla.v_head_dim": 4096,
}
_HF_SIZE_NAMES = {
    "num_hidden_layers": "layers", "hidden_size": "hidden", "num_attention_heads": "heads",
    "num_key_value_heads": "kv_heads", "head_dim": "head_dim", "intermediate_size": "intermediate",
    "vocab_size": "vocab", "max_position_embeddings": "max_position", "num_local_experts": "moe.num_experts",
    "n_routed_experts": "moe.num_experts", "num_experts_per_tok": "moe.top_k",
    "moe_intermediate_size": "moe.expert_intermediate", "n_shared_experts": "moe.num_shared_experts",
    "first_k_dense_replace": "moe.first_dense_layers", "moe_layer_freq": "layers",
    "q_lora_rank": "mla.q_lora_rank", "kv_lora_rank": "mla.kv_lora_rank", "qk_nope_head_dim": "mla.qk_nope_head_dim",
    "qk_rope_head_dim": "mla.qk_rope_head_dim", "v_head_dim": "mla.v_head_dim",
}


def _check_size(v: int, name: str, file: str, field: str) -> None:
    limit = SIZE_LIMITS.get(name)
    if limit is not None and v > limit:
        raise InputError(f"expected at most {limit:,} (far above any published model), got {v:,}",
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


def _enum(d: dict, k: str, choices, file: str, *, default: str) -> str:
    v = d.get(k, default)
    if v is None:
        v = default
    if not isinstance(v, str) or v not in choices:
        raise InputError(f"expected one of {', '.join(choices)}, got {_short(v)}{_suggest(str(v)[:80], choices)}",
                         file=file, field=k)
    return v


def _bool(d: dict, k: str, file: str, *, default: bool = False) -> bool:
    v = d.get(k, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise InputError(f"expected true or false, got {_short(v)}", file=file, field=k)
    return v


def _str_list(d: dict, k: str, file: str) -> tuple[str, ...]:
    v = d.get(k)
    if v is None:
        return ()
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(x, str) and x.strip() for x in v):
        raise InputError("expected a list of strings", file=file, field=k)
    return tuple(x.strip() for x in v)


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
    )


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
    return MoE(num_experts=num_experts, top_k=top_k, expert_intermediate=_int(d, "expert_intermediate", file, p),
               num_shared_experts=num_shared, shared_intermediate=shared_intermediate,
               first_dense_layers=first_dense)


def _mla_from_dict(d, file: str) -> MLA:
    if not isinstance(d, dict):
        raise InputError("expected a mapping", file=file, field="mla")
    p = "mla."
    _check_keys(d, _MLA_FIELDS, _MLA_REQUIRED, file, p)
    return MLA(
        q_lora_rank=_int(d, "q_lora_rank", file, p, default=0, minimum=0),
        kv_lora_rank=_int(d, "kv_lora_rank", file, p),
        qk_nope_head_dim=_int(d, "qk_nope_head_dim", file, p),
        qk_rope_head_dim=_int(d, "qk_rope_head_dim", file, p),
        v_head_dim=_int(d, "v_head_dim", file, p),
    )


MODEL_WHAT = "model descriptor"


def _read_yaml(path: Path):
    # size, nesting, aliases and duplicate keys are limited by the safe loader (perfmodel.safeyaml)
    from . import safeyaml

    return safeyaml.load(safeyaml.read_limited(path, what=MODEL_WHAT), file=str(path), what=MODEL_WHAT)


# ---- Hugging Face config.json ---------------------------------------------------------------------

# model_type -> (family, architecture)
_HF_FAMILIES = {
    "llama": ("llama", "LlamaForCausalLM"),
    "mistral": ("mistral", "MistralForCausalLM"),
    "mixtral": ("mixtral", "MixtralForCausalLM"),
    "qwen2": ("qwen2", "Qwen2ForCausalLM"),
    "deepseek_v3": ("deepseek_v3", "DeepseekV3ForCausalLM"),
}
_HF_ARCHS = {arch: mt for mt, (_, arch) in _HF_FAMILIES.items()}

# Fields that are read below, or that cannot change the shapes or the work done per token.
_HF_HARMLESS = frozenset({
    "architectures", "model_type", "torch_dtype", "transformers_version", "_name_or_path", "auto_map",
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
})
# Harmless when null/false/absent; otherwise they change the compute and are reported.
_HF_HARMLESS_IF_OFF = frozenset({"rope_scaling", "sliding_window", "quantization_config", "use_sliding_window"})


def _hf_int(cfg: dict, k: str, file: str, *, default=None, minimum: int = 1) -> int:
    v = cfg.get(k)
    if v is None:
        if default is None:
            raise InputError("missing required field", file=file, field=k)
        return default
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise InputError(f"expected {what}, got {_short(v)}", file=file, field=k)
    if k in _HF_SIZE_NAMES:
        _check_size(v, _HF_SIZE_NAMES[k], file, k)
    return v


def _hf_family(cfg: dict, file: str) -> str:
    mt = cfg.get("model_type")
    archs = cfg.get("architectures") or []
    if isinstance(archs, str):
        archs = [archs]
    supported = ", ".join(sorted(_HF_FAMILIES))
    if mt is not None:
        if mt not in _HF_FAMILIES:
            raise InputError(f"unsupported model_type {mt!r} (supported: {supported})", file=file, field="model_type")
        return mt
    for a in archs:
        if a in _HF_ARCHS:
            return _HF_ARCHS[a]
    if archs:
        raise InputError(f"unsupported architecture {archs[0]!r} (supported: {', '.join(sorted(_HF_ARCHS))})",
                         file=file, field="architectures")
    raise InputError(f"missing required field (one of: {supported})", file=file, field="model_type")


def _hf_name(cfg: dict, path: Path) -> str:
    np = cfg.get("_name_or_path")
    if isinstance(np, str) and np.strip() and not np.strip().startswith((".", "/")):
        return np.strip().rstrip("/").split("/")[-1]
    if path.stem != "config":
        return path.stem
    return path.resolve().parent.name or "hf-model"


def _model_from_hf_dict(cfg, path: Path) -> Model:
    file = str(path)
    if not isinstance(cfg, dict):
        raise InputError("expected a JSON object", file=file)
    mt = _hf_family(cfg, file)
    family, arch = _HF_FAMILIES[mt]
    archs = cfg.get("architectures") or []
    if isinstance(archs, list) and archs and arch not in archs:
        raise InputError(f"unsupported architecture {archs[0]!r} for model_type {mt!r} (expected {arch})",
                         file=file, field="architectures")
    notes: list[str] = []

    hidden = _hf_int(cfg, "hidden_size", file)
    layers = _hf_int(cfg, "num_hidden_layers", file)
    heads = _hf_int(cfg, "num_attention_heads", file)
    kv_heads = _hf_int(cfg, "num_key_value_heads", file, default=heads)
    if kv_heads > heads or heads % kv_heads:
        raise InputError(f"expected a divisor of num_attention_heads ({heads}), got {kv_heads}",
                         file=file, field="num_key_value_heads")
    intermediate = _hf_int(cfg, "intermediate_size", file)
    vocab = _hf_int(cfg, "vocab_size", file)
    max_position = _hf_int(cfg, "max_position_embeddings", file, default=0, minimum=0)

    act = cfg.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        notes.append(f"hidden_act={act} (gated MLP modelled as swiglu; same shapes)")
    unused: list[str] = []
    qkv_bias = mt == "qwen2"  # Qwen2 always has q/k/v biases
    if cfg.get("attention_bias"):
        qkv_bias = True
        unused.append("attention_bias")  # Llama-style attention_bias also puts a bias on o_proj
    if cfg.get("mlp_bias"):
        unused.append("mlp_bias")

    moe = mla = None
    head_dim_default = hidden // heads if hidden % heads == 0 else None
    if mt == "mixtral":
        moe = MoE(num_experts=_hf_int(cfg, "num_local_experts", file),
                  top_k=_hf_int(cfg, "num_experts_per_tok", file),
                  expert_intermediate=intermediate)
    elif mt == "deepseek_v3":
        n_routed = _hf_int(cfg, "n_routed_experts", file, default=0, minimum=0)
        if n_routed:
            n_shared = _hf_int(cfg, "n_shared_experts", file, default=0, minimum=0)
            moe_inter = _hf_int(cfg, "moe_intermediate_size", file)
            first_dense = _hf_int(cfg, "first_k_dense_replace", file, default=0, minimum=0)
            freq = _hf_int(cfg, "moe_layer_freq", file, default=1)
            if freq != 1:
                raise InputError(f"only 1 is supported (MoE on every layer after first_k_dense_replace), got {freq}",
                                 file=file, field="moe_layer_freq")
            if first_dense >= layers:
                raise InputError(f"expected fewer than num_hidden_layers ({layers}), got {first_dense}",
                                 file=file, field="first_k_dense_replace")
            moe = MoE(num_experts=n_routed, top_k=_hf_int(cfg, "num_experts_per_tok", file),
                      expert_intermediate=moe_inter, num_shared_experts=n_shared,
                      shared_intermediate=moe_inter if n_shared else 0, first_dense_layers=first_dense)
        mla = MLA(q_lora_rank=_hf_int(cfg, "q_lora_rank", file, default=0, minimum=0),
                  kv_lora_rank=_hf_int(cfg, "kv_lora_rank", file),
                  qk_nope_head_dim=_hf_int(cfg, "qk_nope_head_dim", file),
                  qk_rope_head_dim=_hf_int(cfg, "qk_rope_head_dim", file),
                  v_head_dim=_hf_int(cfg, "v_head_dim", file))
        head_dim_default = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        mtp = cfg.get("num_nextn_predict_layers") or 0
        if mtp:
            notes.append(f"multi-token-prediction module (num_nextn_predict_layers={mtp}) not modelled")
    if mla is not None:
        head_dim = head_dim_default  # the q.k width; HF's head_dim for DeepSeek is the rope part only
    elif cfg.get("head_dim") is not None:
        head_dim = _hf_int(cfg, "head_dim", file)
    elif head_dim_default is None:
        raise InputError(f"missing; hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads})",
                         file=file, field="head_dim")
    else:
        head_dim = head_dim_default

    for k, v in cfg.items():
        if k in _HF_HARMLESS:
            continue
        if k in _HF_HARMLESS_IF_OFF and not v:
            continue
        if k in ("sliding_window", "max_window_layers") and mt == "qwen2" and not cfg.get("use_sliding_window"):
            continue  # Qwen2 applies the window only with use_sliding_window
        unused.append(k)
    if unused:
        notes.insert(0, "config.json fields not used: " + ", ".join(unused))

    name = _hf_name(cfg, path)
    key = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-") or "hf-model"
    return Model(
        key=key, name=name, family=family, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, intermediate=intermediate, vocab=vocab, mlp="swiglu", norm="rmsnorm",
        position="rope", tied_embeddings=bool(cfg.get("tie_word_embeddings", False)), qkv_bias=qkv_bias,
        max_position=max_position, moe=moe, mla=mla, aliases=(), source=f"{path} (Hugging Face config)",
        notes=tuple(notes), fp8_scaling=_hf_fp8_scaling(cfg),
    )


def _hf_fp8_scaling(cfg: dict) -> str:
    """block where the checkpoint's quantization_config gives fp8 weight blocks (DeepSeek's 128 x 128)."""
    q = cfg.get("quantization_config")
    return "block" if isinstance(q, dict) and q.get("weight_block_size") else "tensor"


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
    """Import a local Hugging Face ``config.json`` (Llama, Mistral, Mixtral, Qwen2, DeepSeek-V3)."""
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


def _registry() -> tuple[list[Model], dict[str, Model], dict[str, Model]]:
    d = _models_dir()
    files = sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml")) if d.is_dir() else []
    stamp = (str(d),) + tuple(_stamp(f) for f in files)
    hit = _REGISTRY_CACHE.get(stamp)
    if hit is not None:
        return hit
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
