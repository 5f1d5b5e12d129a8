"""A multimodal checkpoint's vision encoder, as plain data read from its config.json ``vision_config``.

:class:`VisionEncoder` holds the shapes the encoder's operators are built from (perfmodel.vision builds them and
counts image tokens). ``vision_from_hf`` reads it for the families whose reference code (transformers 5.25,
``models/<family>/modeling_<family>.py``) this module follows:

- ``qwen2_5_vl``: Qwen2.5-VL's ViT: RMSNorm, gated SiLU MLP, biased q/k/v and output, window attention except the
  ``fullatt_block_indexes`` layers, a patch merger (RMSNorm, 4h -> 4h -> out_hidden_size over 2 x 2 patches);
- ``qwen3_vl``, ``qwen3_vl_moe``, ``qwen3_5``, ``qwen3_5_moe``: Qwen3-VL's ViT: LayerNorm, GELU MLP, learned
  position embeddings, full attention, the merger and one more merger per ``deepstack_visual_indexes`` entry;
- ``llama4``: Llama 4's ViT over 336 x 336 tiles (a class token), pixel shuffle and its MLP, a linear projector;
- ``gemma3``: SigLIP, an average pool to ``mm_tokens_per_image`` tokens, an RMSNorm and a linear projector;
- ``internvl``: InternViT (a class token, layer scale, optional q/k norm), pixel shuffle by ``downsample_ratio``, a
  LayerNorm and two linears.

A config whose vision fields are missing or contradict each other (transformers' default Gemma 3 config: 224-pixel
SigLIP tiles of 14 patches a side cannot pool to 16 x 16 tokens) gives no encoder and a note saying why: the text
model still imports, and ``--images`` on it is refused in one line. Nothing here is invented: every width is the
config's, and the processors' limits are their transformers classes' defaults unless the checkpoint's
``preprocessor_config.json`` beside config.json gives its own.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

# The image processors' defaults (transformers 5.25), used where no preprocessor_config.json gives the checkpoint's:
# Qwen2VLImageProcessor.size {"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 1280}: pixels after resizing
QWEN_MIN_PIXELS = 56 * 56
QWEN_MAX_PIXELS = 28 * 28 * 1280
# Llama4ImageProcessor.max_patches: tiles of vision_config.image_size an image is cut into at most
LLAMA4_MAX_TILES = 16
# GotOcr2ImageProcessor (InternVL's) min_patches, max_patches; InternVLProcessor sets crop_to_patches True
INTERNVL_MIN_TILES, INTERNVL_MAX_TILES = 1, 12

VISION_FAMILIES = ("qwen2_5_vl", "qwen3_vl", "llama4", "gemma3", "internvl")


@dataclass(frozen=True)
class Linear:
    """One product of the merger or projector: ``k`` inputs to ``n`` outputs per token."""

    k: int
    n: int
    bias: bool = False


@dataclass(frozen=True)
class VisionEncoder:
    kind: str  # one of VISION_FAMILIES (the code the operators follow; Qwen3.5 is qwen3_vl's tower)
    config_type: str  # the config's own model_type (shown in notes)
    layers: int
    hidden: int
    heads: int
    head_dim: int
    intermediate: int  # the MLP's width
    mlp: str  # swiglu (gated: gate, up, down; Qwen2.5-VL) | gelu (fc1, fc2)
    norm: str  # rmsnorm | layernorm
    patch: int  # pixels a side of one patch
    channels: int = 3
    temporal_patch: int = 1  # frames one patch spans (Qwen: 2; an image is repeated to fill them)
    patch_bias: bool = False  # the patch embedding's bias
    qkv_bias: bool = True
    o_bias: bool = True
    mlp_bias: bool = True
    qk_norm: bool = False  # InternViT-6B: RMSNorm over all of q and over all of k
    layer_scale: bool = False  # InternViT: a learned scale on each branch before the residual add
    class_token: bool = False  # a class token joins each tile's sequence (Llama 4, InternViT)
    rotary: bool = False  # 2D rotary embedding on q and k (Qwen, Llama 4)
    pos_embed: bool = False  # a learned position embedding added to the patches
    pre_norm: bool = False  # a norm before the first layer (Llama 4's layernorm_pre)
    post_norm: bool = False  # a norm after the last layer (SigLIP's post_layernorm, Llama 4's layernorm_post)
    post_norm_kind: str = ""  # its kind where it differs from the layers' (InternViT: LayerNorm under rms_norm)
    # native-resolution encoders (Qwen) take any size rounded to a multiple of patch x merge; fixed-resolution
    # ones (SigLIP, Llama 4, InternViT) take tiles of image_size x image_size pixels
    image_size: int = 0
    merge: int = 1  # patches per side that become one LLM token
    merge_kind: str = "concat"  # concat: merge x merge patches concatenated (merger, pixel shuffle); pool: averaged
    merge_norm: str = ""  # a norm of the merger: on the patches ("patch") or the merged tokens ("token")
    merge_norm_at: str = "patch"
    merger: tuple[Linear, ...] = ()  # the products from merged tokens to the LLM's hidden size, GELU between
    deepstack: tuple[int, ...] = ()  # Qwen3-VL: layers whose output also goes through a merger of its own
    window: int = 0  # Qwen2.5-VL: a window's side in merged tokens (window_size // merge // patch); 0: none
    full_layers: tuple[int, ...] = ()  # with a window: the layers that attend over the whole image
    tokens_per_image: int = 0  # a fixed count per image or tile (Gemma 3: mm_tokens_per_image); 0: derived
    extra_params: int = 0  # held, not multiplied: position and class embeddings, an unused pooling head
    min_pixels: int = QWEN_MIN_PIXELS  # Qwen: the processor's resize limits
    max_pixels: int = QWEN_MAX_PIXELS
    min_tiles: int = 1  # tiling processors (Llama 4, InternVL)
    max_tiles: int = 1
    processor: str = ""  # where the processor limits come from

    @property
    def out_hidden(self) -> int:
        return self.merger[-1].n if self.merger else self.hidden

    @property
    def merged_width(self) -> int:
        """Width of one merged token before the merger's products."""
        return self.hidden * self.merge * self.merge if self.merge_kind == "concat" else self.hidden

    def layer_linear_params(self) -> int:
        """Parameters of one layer's products (weights and biases), what tensor parallelism splits."""
        h, i = self.hidden, self.intermediate
        attn = 3 * h * self.heads * self.head_dim + self.heads * self.head_dim * h
        attn += (3 * self.heads * self.head_dim if self.qkv_bias else 0) + (h if self.o_bias else 0)
        mats = 3 if self.mlp == "swiglu" else 2
        mlp = mats * h * i + (((mats - 1) * i + h) if self.mlp_bias else 0)
        return attn + mlp

    def layer_other_params(self) -> int:
        """One layer's norms, q/k norms and layer scales: replicated over TP ranks."""
        norm = 2 * self.hidden if self.norm == "layernorm" else self.hidden
        out = 2 * norm
        if self.qk_norm:
            out += 2 * self.heads * self.head_dim  # RMSNorm weights over all of q and of k
        if self.layer_scale:
            out += 2 * self.hidden
        return out

    def merger_params(self) -> int:
        """One merger's products (weights and biases)."""
        return sum(p.k * p.n + (p.n if p.bias else 0) for p in self.merger)

    def merger_norm_params(self) -> int:
        if not self.merge_norm:
            return 0
        width = self.hidden if self.merge_norm_at == "patch" else self.merged_width
        return 2 * width if self.merge_norm == "layernorm" else width

    def deepstack_params(self) -> int:
        """Qwen3-VL's deepstack mergers: LayerNorm over the merged tokens, then the merger's products."""
        if not self.deepstack:
            return 0
        return len(self.deepstack) * (2 * self.merged_width + self.merger_params())

    def stem_params(self) -> int:
        """The patch embedding, the encoder's own norms and the held embeddings (not multiplied per token)."""
        k = self.channels * self.temporal_patch * self.patch * self.patch
        width = {"layernorm": 2 * self.hidden, "rmsnorm": self.hidden}
        return (k * self.hidden + (self.hidden if self.patch_bias else 0) + self.extra_params
                + width[self.norm] * int(self.pre_norm) + width[self.post_norm_kind or self.norm] * int(self.post_norm))

    def param_count(self) -> int:
        """Every parameter of the tower, merger and projector (transformers' module tree, counted)."""
        return (self.stem_params() + self.layers * (self.layer_linear_params() + self.layer_other_params())
                + self.merger_norm_params() + self.merger_params() + self.deepstack_params())


# ---- reading config.json ------------------------------------------------------------------------------------

class VisionConfigError(ValueError):
    """A vision_config this module cannot read: the text model imports without an encoder, with this as a note."""


def _get(d: dict, k: str, default=None):
    v = d.get(k)
    return default if v is None else v


def _pos_int(d: dict, k: str, default=None, where: str = "vision_config.") -> int:
    v = _get(d, k, default)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise VisionConfigError(f"{where}{k}: expected a positive integer, got {v!r}")
    return v


def _square(d: dict, k: str, default=None) -> int:
    """image_size / patch_size as one int, or a list of two equal ones (InternVL writes [448, 448])."""
    v = _get(d, k, default)
    if isinstance(v, (list, tuple)) and len(v) == 2 and v[0] == v[1]:
        v = v[0]
    return _pos_int({k: v}, k)


def _ratio(v, k: str) -> int:
    """A pixel-shuffle ratio (0.5) as patches merged per side (2)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise VisionConfigError(f"{k}: expected a ratio in (0, 1], got {v!r}")
    side = round(1.0 / v)
    if abs(side * v - 1.0) > 1e-9:
        raise VisionConfigError(f"{k}: {v} does not merge a whole number of patches a side")
    return side


def _indexes(d: dict, k: str, layers: int) -> tuple[int, ...]:
    v = _get(d, k, [])
    if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers
                                          for i in v):
        raise VisionConfigError(f"vision_config.{k}: expected layer indices below {layers}, got {v!r}")
    return tuple(v)


def _heads(d: dict, hidden: int, key: str) -> tuple[int, int]:
    heads = _pos_int(d, key)
    if hidden % heads:
        raise VisionConfigError(f"vision_config.{key}: {heads} heads do not divide hidden_size {hidden}")
    return heads, hidden // heads


def processor_limits(pre: dict | None) -> dict:
    """The checkpoint's own processor limits from its preprocessor_config.json (the fields transformers' image
    processors read), where it gives them."""
    if not isinstance(pre, dict):
        return {}
    out = {}
    size = pre.get("size") if isinstance(pre.get("size"), dict) else {}
    for ours, names in (("min_pixels", (("min_pixels",), ("size", "shortest_edge"))),
                        ("max_pixels", (("max_pixels",), ("size", "longest_edge"))),
                        ("min_tiles", (("min_patches",),)), ("max_tiles", (("max_patches",),))):
        for path in names:
            v = pre.get(path[0]) if len(path) == 1 else size.get(path[1])
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                out[ours] = v
                break
    return out


def vision_from_hf(cfg: dict, mt: str, text_hidden: int, pre: dict | None = None) -> VisionEncoder:
    """The encoder of a multimodal config (``mt``: its model_type) projecting into ``text_hidden``; ``pre``: the
    checkpoint's preprocessor_config.json, if any. Raises VisionConfigError (a note, not a refusal)."""
    v = cfg.get("vision_config")
    if not isinstance(v, dict):
        raise VisionConfigError("no vision_config object")
    if mt == "qwen2_5_vl":
        enc = _qwen2_5_vl(v, text_hidden)
    elif mt in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"):
        enc = _qwen3_vl(v, text_hidden)
    elif mt == "llama4":
        enc = _llama4(v, text_hidden)
    elif mt == "gemma3":
        enc = _gemma3(cfg, v, text_hidden)
    elif mt == "internvl":
        enc = _internvl(cfg, v, text_hidden)
    else:
        raise VisionConfigError(f"{mt}'s vision tower is not modelled")
    if enc.kind == "gemma3":
        return enc  # every image is resized to image_size: no processor limit matters
    wanted = ("min_pixels", "max_pixels") if enc.kind in ("qwen2_5_vl", "qwen3_vl") else ("min_tiles", "max_tiles")
    own = {k: x for k, x in processor_limits(pre).items() if k in wanted}
    return replace(enc, processor="preprocessor_config.json" if own else
                   "the processor class's defaults (transformers 5.25)", **own)


def _qwen_common(v: dict) -> dict:
    # transformers' Qwen2_5_VLVisionConfig / Qwen3VLVisionConfig defaults where a config leaves a field out
    hidden = _pos_int(v, "hidden_size")
    heads, head_dim = _heads(v, hidden, "num_heads")
    patch = _pos_int(v, "patch_size", 14)
    return dict(layers=_pos_int(v, "depth"), hidden=hidden, heads=heads, head_dim=head_dim,
                intermediate=_pos_int(v, "intermediate_size"), patch=patch,
                channels=_pos_int(v, "in_channels", 3), temporal_patch=_pos_int(v, "temporal_patch_size", 2),
                merge=_pos_int(v, "spatial_merge_size", 2), rotary=True, config_type=str(v.get("model_type") or ""))


def _qwen2_5_vl(v: dict, text_hidden: int) -> VisionEncoder:
    kw = _qwen_common(v)
    h4 = kw["hidden"] * kw["merge"] ** 2
    out = _pos_int(v, "out_hidden_size", text_hidden)
    window = _pos_int(v, "window_size", 112) // kw["merge"] // kw["patch"]
    if window < 1:
        raise VisionConfigError("vision_config.window_size is smaller than one merged token")
    return VisionEncoder(kind="qwen2_5_vl", mlp="swiglu", norm="rmsnorm", merge_norm="rmsnorm",
                         merger=(Linear(h4, h4, True), Linear(h4, out, True)), window=window,
                         full_layers=_indexes(v, "fullatt_block_indexes", kw["layers"]), **kw)


def _qwen3_vl(v: dict, text_hidden: int) -> VisionEncoder:
    kw = _qwen_common(v)
    h4 = kw["hidden"] * kw["merge"] ** 2
    out = _pos_int(v, "out_hidden_size", text_hidden)
    positions = _pos_int(v, "num_position_embeddings", 2304)
    return VisionEncoder(kind="qwen3_vl", mlp="gelu", norm="layernorm", patch_bias=True, pos_embed=True,
                         merge_norm="layernorm", merger=(Linear(h4, h4, True), Linear(h4, out, True)),
                         deepstack=_indexes(v, "deepstack_visual_indexes", kw["layers"]),
                         extra_params=positions * kw["hidden"], **kw)


def _llama4(v: dict, text_hidden: int) -> VisionEncoder:
    hidden = _pos_int(v, "hidden_size")
    heads, head_dim = _heads(v, hidden, "num_attention_heads")
    image, patch = _pos_int(v, "image_size"), _pos_int(v, "patch_size")
    if image % patch:
        raise VisionConfigError(f"vision_config.image_size {image} is not a multiple of patch_size {patch}")
    merge = _ratio(_get(v, "pixel_shuffle_ratio", 0.5), "vision_config.pixel_shuffle_ratio")
    side = image // patch
    if side % merge:
        raise VisionConfigError(f"{side} patches a side do not pixel-shuffle by {merge}")
    inter = _pos_int(v, "intermediate_size")
    # Llama4VisionMLP2 (the adapter after the pixel shuffle): fc1 intermediate_size -> projector_input_dim and
    # fc2 projector_output_dim -> projector_output_dim, no biases; then Llama4MultiModalProjector's linear_1
    # vision_output_dim -> the text hidden size, no bias
    merger = (Linear(inter, _pos_int(v, "projector_input_dim")),
              Linear(_pos_int(v, "projector_output_dim"), _pos_int(v, "projector_output_dim")),
              Linear(_pos_int(v, "vision_output_dim"), text_hidden))
    return VisionEncoder(kind="llama4", config_type=str(v.get("model_type") or ""),
                         layers=_pos_int(v, "num_hidden_layers"),
                         hidden=hidden, heads=heads, head_dim=head_dim, intermediate=inter, mlp="gelu",
                         norm="layernorm", patch=patch, channels=_pos_int(v, "num_channels", 3), class_token=True,
                         rotary=True, pos_embed=True, pre_norm=True, post_norm=True, image_size=image, merge=merge,
                         merger=merger, extra_params=hidden + (side * side + 1) * hidden,
                         max_tiles=LLAMA4_MAX_TILES)


def _gemma3(cfg: dict, v: dict, text_hidden: int) -> VisionEncoder:
    hidden = _pos_int(v, "hidden_size")
    heads, head_dim = _heads(v, hidden, "num_attention_heads")
    image, patch = _pos_int(v, "image_size", 224), _pos_int(v, "patch_size", 16)  # SiglipVisionConfig's defaults
    side = image // patch
    tokens = _pos_int(cfg, "mm_tokens_per_image", 256, where="")
    per_side = math.isqrt(tokens)
    if per_side * per_side != tokens or image % patch or side % per_side:
        raise VisionConfigError(f"{side} patches a side ({image}/{patch}) do not pool to mm_tokens_per_image "
                                f"{tokens} ({per_side} a side), as Gemma3MultiModalProjector's average pool needs")
    inter = _pos_int(v, "intermediate_size")
    extra = side * side * hidden  # SiglipVisionEmbeddings.position_embedding
    if v.get("vision_use_head", True):  # SiglipMultiheadAttentionPoolingHead: held (loaded), not run by Gemma 3
        extra += hidden + 4 * hidden * hidden + 4 * hidden + 2 * hidden + 2 * hidden * inter + inter + hidden
    return VisionEncoder(kind="gemma3", config_type=str(v.get("model_type") or ""),
                         layers=_pos_int(v, "num_hidden_layers"), hidden=hidden, heads=heads, head_dim=head_dim,
                         intermediate=inter, mlp="gelu", norm="layernorm", patch=patch,
                         channels=_pos_int(v, "num_channels", 3), patch_bias=True, pos_embed=True, post_norm=True,
                         image_size=image, merge=side // per_side, merge_kind="pool", merge_norm="rmsnorm",
                         merge_norm_at="token", merger=(Linear(hidden, text_hidden),), tokens_per_image=tokens,
                         extra_params=extra)


def _internvl(cfg: dict, v: dict, text_hidden: int) -> VisionEncoder:
    hidden = _pos_int(v, "hidden_size")
    heads, head_dim = _heads(v, hidden, "num_attention_heads")
    image, patch = _square(v, "image_size", 448), _square(v, "patch_size", 14)  # InternVLVisionConfig's defaults
    if image % patch:
        raise VisionConfigError(f"vision_config.image_size {image} is not a multiple of patch_size {patch}")
    merge = _ratio(_get(cfg, "downsample_ratio", 0.5), "downsample_ratio")
    side = image // patch
    if side % merge:
        raise VisionConfigError(f"{side} patches a side do not pixel-shuffle by {merge}")
    norm = {"layer_norm": "layernorm", "rms_norm": "rmsnorm"}.get(_get(v, "norm_type", "layer_norm"))
    if norm is None:
        raise VisionConfigError(f"vision_config.norm_type: expected layer_norm or rms_norm, got {v.get('norm_type')!r}")
    extra = hidden  # cls_token
    if v.get("use_mask_token"):
        extra += hidden
    if _get(v, "use_absolute_position_embeddings", True):
        extra += (side * side + 1) * hidden
    h4 = hidden * merge * merge
    return VisionEncoder(kind="internvl", config_type=str(v.get("model_type") or ""),
                         layers=_pos_int(v, "num_hidden_layers"), hidden=hidden, heads=heads, head_dim=head_dim,
                         intermediate=_pos_int(v, "intermediate_size"), mlp="gelu", norm=norm, patch=patch,
                         channels=_pos_int(v, "num_channels", 3), patch_bias=True,
                         qkv_bias=bool(v.get("attention_bias", False)), qk_norm=bool(v.get("use_qk_norm", False)),
                         layer_scale=True, class_token=True, pos_embed=True,
                         post_norm=not _get(v, "use_mean_pooling", True), post_norm_kind="layernorm",
                         image_size=image, merge=merge,
                         merge_norm="layernorm", merge_norm_at="token",
                         merger=(Linear(h4, text_hidden, True), Linear(text_hidden, text_hidden, True)),
                         extra_params=extra, min_tiles=INTERNVL_MIN_TILES, max_tiles=INTERNVL_MAX_TILES)
