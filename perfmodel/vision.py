"""A vision-language model's images: how many tokens they become, and the encoder's operators in the prefill step.

Token counts follow each family's image processor in transformers 5.25 (the rule vLLM also asks them for through
``_get_num_multimodal_tokens``):

- Qwen2.5-VL, Qwen3-VL, Qwen3.5 (``Qwen2VLImageProcessor.get_number_of_image_patches`` and ``smart_resize`` in
  models/qwen2_vl/image_processing_qwen2_vl.py): each side rounded to the nearest multiple of patch x merge, the
  area then scaled into [min_pixels, max_pixels] keeping the aspect (floor when shrinking, ceil when growing);
  patches = (H / patch) x (W / patch), LLM tokens = patches / merge^2. Videos: Qwen2VLVideoProcessor (the same per
  frame, its own limits) and Qwen3VLVideoProcessor (the limits over all frames), frames rounded up to the temporal
  patch (2): ceil(F / 2) x patches-per-frame;
- Llama 4 (``Llama4ImageProcessor``: ``find_supported_resolutions``, ``get_best_fit``): the canvas of up to
  max_patches image_size tiles that scales the image least, plus one global tile when there is more than one;
  each tile (image_size / patch)^2 patches and a class token through the encoder, (image_size / patch)^2 /
  round(1 / pixel_shuffle_ratio^2) LLM tokens (``Llama4Processor._get_num_multimodal_tokens``);
- Gemma 3 (``Gemma3Processor``): every image resized to image_size, mm_tokens_per_image tokens (pan-and-scan off);
- InternVL (``GotOcr2ImageProcessor.get_optimal_tiled_canvas``, ``InternVLProcessor``): the tile grid of min to
  max tiles closest in aspect, plus a thumbnail when more than one; (image_size / patch)^2 x downsample_ratio^2
  tokens a tile.

Counted: the image placeholder tokens; not counted: the few delimiter tokens around each image or tile (vision
start/end, tile separators), which belong to the request's text (--isl).

The encoder runs in the prefill step of the requests prefilling together, over every image they carry, in the
activations' format (bf16): its products split over the TP ranks as vLLM (``--mm-encoder-tp-mode weights``, the
default of 0.11.0) and SGLang (0.5.14, without ``--mm-enable-dp-encoder``) run it by default; the patch embedding
and the merger or projector run whole on each rank (estimate).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import ops as O
from .dtypes import bytes_per_element
from .errors import InputError
from .scenario import Scenario
from .vision_config import VisionEncoder

# Qwen2VLVideoProcessor.size and Qwen3VLVideoProcessor.size (transformers 5.25): a frame's pixels (Qwen2.5-VL) or
# all frames' (Qwen3-VL) after resizing
QWEN2_VIDEO_PIXELS = (128 * 28 * 28, 28 * 28 * 768)
QWEN3_VIDEO_PIXELS = (128 * 32 * 32, 32 * 32 * 768)
QWEN_MAX_ASPECT = 200  # smart_resize refuses a longer side over 200 times the shorter


@dataclass(frozen=True)
class Media:
    """What one request's images (and video) become."""

    tokens: int  # LLM tokens (placeholders) per request
    patches: int  # encoder tokens per request (class tokens included)
    patch_tokens: int  # of which patches (what the patch embedding makes)
    seqs: tuple[tuple[int, int], ...]  # (sequences, length): what the full-attention layers attend over
    windows: tuple[tuple[int, int], ...] = ()  # (windows, length): Qwen2.5-VL's windowed layers
    detail: str = ""  # how the size was rounded, for the assumptions


def qwen_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """transformers' Qwen2-VL ``smart_resize`` (models/qwen2_vl/image_processing_qwen2_vl.py)."""
    if max(height, width) / min(height, width) > QWEN_MAX_ASPECT:
        raise InputError(f"an aspect ratio over {QWEN_MAX_ASPECT} is refused by the Qwen-VL processor "
                         f"({width}x{height})", field="--image-size")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def qwen3_video_resize(frames: int, height: int, width: int, temporal: int, factor: int, min_pixels: int,
                       max_pixels: int) -> tuple[int, int]:
    """transformers' Qwen3-VL video ``smart_resize`` (models/qwen3_vl/video_processing_qwen3_vl.py): the pixel
    limits hold for all frames together."""
    if frames < temporal:
        raise InputError(f"the Qwen3-VL video processor needs at least {temporal} frames, got {frames}",
                         field="--video-frames")
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    if max(height, width) / min(height, width) > QWEN_MAX_ASPECT:
        raise InputError(f"an aspect ratio over {QWEN_MAX_ASPECT} is refused by the Qwen-VL processor "
                         f"({width}x{height})", field="--image-size")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(frames / temporal) * temporal
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def qwen_windows(v: VisionEncoder, grid_h: int, grid_w: int) -> list[tuple[int, int]]:
    """(windows, patches each) of one frame for Qwen2.5-VL's windowed layers: the merged grid cut into windows of
    v.window x v.window merged tokens from the top left, the last row and column of windows cut short
    (transformers' ``get_vision_window_index``)."""
    m2 = v.merge * v.merge
    lh, lw = grid_h // v.merge, grid_w // v.merge

    def runs(n: int) -> list[tuple[int, int]]:
        out = [(n // v.window, v.window)] if n // v.window else []
        return out + ([(1, n % v.window)] if n % v.window else [])

    return [(a * b, x * y * m2) for a, x in runs(lh) for b, y in runs(lw)]


def supported_tiles(max_tiles: int) -> list[tuple[int, int]]:
    """Llama 4's canvases in tiles (rows, columns): every factor pair of 1 .. max_tiles
    (``find_supported_resolutions``)."""
    out = []
    for n in range(max_tiles, 0, -1):
        for r in sorted(d for d in range(1, n + 1) if n % d == 0):
            out.append((r, n // r))
    return out


def llama4_tiles(v: VisionEncoder, width: int, height: int) -> int:
    """Tiles Llama 4's processor cuts an image into (``get_best_fit``: the canvas needing the least upscaling, else
    the least downscaling, the smallest area among equals), plus the global tile when more than one."""
    tile = v.image_size
    best = None
    cands = []
    for r, c in supported_tiles(v.max_tiles):
        scale = min(c * tile / width, r * tile / height)
        cands.append((scale, r, c))
    up = [s for s, _, _ in cands if s >= 1]
    chosen = min(up) if up else max(s for s, _, _ in cands if s < 1)
    for s, r, c in cands:
        if s == chosen and (best is None or r * c < best[0] * best[1]):
            best = (r, c)
    n = best[0] * best[1]
    return n + 1 if n > 1 else 1


def internvl_tiles(v: VisionEncoder, width: int, height: int) -> int:
    """Tiles InternVL's processor cuts an image into (``get_optimal_tiled_canvas``: the grid of min to max tiles
    closest in aspect, the larger among equals while the image covers more than half of it), plus a thumbnail."""
    grids = sorted(((w, h) for w in range(1, v.max_tiles + 1) for h in range(1, v.max_tiles + 1)
                    if v.min_tiles <= w * h <= v.max_tiles), key=lambda g: g[0] * g[1])
    aspect, area, tile = width / height, width * height, v.image_size
    best_diff, best = float("inf"), (1, 1)
    for g in grids:
        diff = abs(aspect - g[0] / g[1])
        if diff < best_diff:
            best_diff, best = diff, g
        elif diff == best_diff and area > 0.5 * tile * tile * g[0] * g[1]:
            best = g
    n = best[0] * best[1]
    return n + 1 if n > 1 else 1


def media(v: VisionEncoder, sc: Scenario) -> Media:
    """One request's images and video through ``v``'s processor rule (module doc)."""
    n, frames = sc.images, sc.video_frames
    width, height = sc.image_size
    m2 = v.merge * v.merge
    if frames and v.kind not in ("qwen2_5_vl", "qwen3_vl"):
        raise InputError("video is modelled for the Qwen-VL families only (Qwen2.5-VL, Qwen3-VL, Qwen3.5)",
                         field="--video-frames")
    if v.kind in ("qwen2_5_vl", "qwen3_vl"):
        factor = v.patch * v.merge
        seqs, wins, tokens, patches, detail = [], [], 0, 0, []
        if n:
            h, w = qwen_resize(height, width, factor, v.min_pixels, v.max_pixels)
            gh, gw = h // v.patch, w // v.patch
            seqs.append((n, gh * gw))
            tokens += n * gh * gw // m2
            patches += n * gh * gw
            if v.window:
                wins += [(k * n, length) for k, length in qwen_windows(v, gh, gw)]
            detail.append(f"{n} image{'s' if n > 1 else ''} {width}x{height} resized to {w}x{h}: {gw}x{gh} patches, "
                          f"{gh * gw // m2} tokens each")
        if frames:
            if v.kind == "qwen2_5_vl":
                h, w = qwen_resize(height, width, factor, *QWEN2_VIDEO_PIXELS)
            else:
                h, w = qwen3_video_resize(frames, height, width, v.temporal_patch, factor, *QWEN3_VIDEO_PIXELS)
            gh, gw = h // v.patch, w // v.patch
            gt = -(-frames // v.temporal_patch)
            seqs.append((gt, gh * gw))  # each temporal slice attends within itself (cu_seqlens per frame group)
            tokens += gt * gh * gw // m2
            patches += gt * gh * gw
            if v.window:
                wins += [(k * gt, length) for k, length in qwen_windows(v, gh, gw)]
            detail.append(f"a video of {frames} frames {width}x{height} resized to {w}x{h}: {gt} groups of "
                          f"{v.temporal_patch} frames, {gw}x{gh} patches, {gt * gh * gw // m2} tokens")
        return Media(tokens, patches, patches, tuple(seqs), tuple(wins), "; ".join(detail))
    side = v.image_size // v.patch
    if v.kind == "gemma3":
        return Media(n * v.tokens_per_image, n * side * side, n * side * side, ((n, side * side),),
                     detail=f"{n} image{'s' if n > 1 else ''} resized to {v.image_size}x{v.image_size}: "
                            f"{side}x{side} patches, {v.tokens_per_image} tokens each")
    tiles = llama4_tiles(v, width, height) if v.kind == "llama4" else internvl_tiles(v, width, height)
    per_tile = side * side // m2
    seq = side * side + int(v.class_token)
    return Media(n * tiles * per_tile, n * tiles * seq, n * tiles * side * side, ((n * tiles, seq),),
                 detail=f"{n} image{'s' if n > 1 else ''} {width}x{height}: {tiles} tile{'s' if tiles > 1 else ''} of "
                        f"{v.image_size}x{v.image_size} ({side}x{side} patches), {tiles * per_tile} tokens each")


def with_images(model, sc: Scenario) -> Scenario:
    """``sc`` with its images' LLM tokens per request (``image_tokens``) for ``model``; unchanged without images."""
    if not sc.has_images:
        return sc
    v = getattr(model, "vision", None)
    if v is None:
        why = next((n for n in model.notes if "vision" in n), "a text model")
        raise InputError(f"{model.name} has no vision encoder modelled ({why}); images need a multimodal "
                         "config.json of Qwen2.5-VL, Qwen3-VL, Qwen3.5, Llama 4, Gemma 3 or InternVL", field="--images")
    m = media(v, sc)
    return sc.with_(image_tokens=m.tokens)


# ---- the encoder's operators ---------------------------------------------------------------------------------

def _fused(op: O.Op, sc: Scenario) -> O.Op:
    """A norm or activation as a serving engine's one vectorised kernel (as perfmodel.graph times the LLM's)."""
    if sc.kernels != "fused":
        return op
    return O.Op(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, "fused": True}, op.count, op.scope,
                op.kernels)


def _norm(kind: str, name: str, tokens, width: int, act: str, ph: str, sc: Scenario, count: float = 1.0) -> O.Op:
    f = O.rmsnorm if kind == "rmsnorm" else O.layernorm
    return _fused(f(name, tokens, width, act, phase=ph, scope="model", count=count), sc)


def _attention(name: str, seqs, requests, heads: int, d: int, act: str, ph: str, sc: Scenario, count: int) -> O.Op:
    """Bidirectional attention over sequences of one or several lengths as one varlen launch, timed as equal
    sequences with the same tokens and (query, key) pairs: length sum(L^2)/sum(L), count sum(L)^2/sum(L^2)."""
    tokens = sum(k * length for k, length in seqs)
    pairs = sum(k * length * length for k, length in seqs)
    length = pairs / tokens
    batch = requests * tokens / length
    op = O.attention(name, batch, heads, heads, length, length, d, causal=False, dtype=act, kv_dtype=act, phase=ph,
                     count=count)
    return O.Op(op.name, op.kind, op.phase, op.flops, op.bytes,
                {**op.params, "kernel": sc.attention_kernel, "packed": sc.kernels == "fused"}, count, "model")


def _merger(v: VisionEncoder, prefix: str, tokens, act: str, ph: str, sc: Scenario, count: int = 1) -> list[O.Op]:
    """The merger's (or projector's) products over the merged tokens, GELU between (whole on each rank)."""
    ops = []
    for i, lin in enumerate(v.merger):
        ops.append(O.gemm(f"{prefix}.fc{i + 1}", tokens, lin.n, lin.k, act, phase=ph, count=count, scope="model"))
        if i < len(v.merger) - 1:  # Llama 4: GELU after both adapter products, none after the projector
            ops.append(_fused(O.gelu(f"{prefix}.gelu{i + 1}", tokens, lin.n, act, phase=ph, count=count,
                                     scope="model"), sc))
    return ops


def encoder_ops(model, sc: Scenario, requests, ph: str = "prefill") -> list[O.Op]:
    """The vision encoder's operators on one GPU for ``requests`` requests' images (module doc)."""
    v: VisionEncoder = model.vision
    m = media(v, sc)
    act = sc.act_dtype
    b = bytes_per_element(act)
    tp = sc.tp
    h, d, layers = v.hidden, v.head_dim, v.layers
    hq = -(-v.heads // tp)
    inter = -(-v.intermediate // tp)
    t = requests * m.patches  # encoder tokens
    p = requests * m.patch_tokens
    merged = requests * m.tokens
    k = v.channels * v.temporal_patch * v.patch * v.patch
    ops = [O.gemm("vision.patch_embed", p, h, k, act, phase=ph, scope="model")]
    if v.pos_embed:
        ops.append(O.residual("vision.pos_embed", t, h, act, phase=ph, scope="model"))
    if v.pre_norm:
        ops.append(_norm(v.norm, "vision.pre_norm", t, h, act, ph, sc))
    if v.window:  # tokens reordered window by window before the layers and back after them
        ops.append(O.copy("vision.window_order", t * h * b, phase=ph, count=2, scope="model"))
    ops.append(_norm(v.norm, "vision.attn.norm", t, h, act, ph, sc, layers))
    ops.append(O.gemm("vision.attn.qkv", t, 3 * hq * d, h, act, phase=ph, count=layers, scope="model"))
    if v.qk_norm:  # RMSNorm over all of q and all of k (InternViT-6B)
        ops.append(_norm("rmsnorm", "vision.attn.qk_norm", 2 * t, hq * d, act, ph, sc, layers))
    if v.rotary:
        op = O.rotary("vision.attn.rotary", t, 2 * hq, d, act, phase=ph, count=layers, scope="model")
        ops.append(_fused(op, sc))
    full = layers - (layers - len(v.full_layers) if v.window else 0)
    if full:
        ops.append(_attention("vision.attn.core", m.seqs, requests, hq, d, act, ph, sc, full))
    if v.window and layers - full:
        ops.append(_attention("vision.attn.core.window", m.windows, requests, hq, d, act, ph, sc, layers - full))
    ops.append(O.gemm("vision.attn.o", t, h, hq * d, act, phase=ph, count=layers, scope="model"))
    if tp > 1:
        ops.append(O.collective("vision.attn.allreduce", "all_reduce", t * h * b, tp, phase=ph, count=layers,
                                scope="model"))
    # the residual add (InternViT: with its layer scale, the same pass)
    ops.append(O.residual("vision.attn.residual", t, h, act, phase=ph, count=layers, scope="model"))
    ops.append(_norm(v.norm, "vision.ffn.norm", t, h, act, ph, sc, layers))
    if v.mlp == "swiglu":
        ops.append(O.gemm("vision.ffn.gate_up", t, 2 * inter, h, act, phase=ph, count=layers, scope="model"))
        ops.append(_fused(O.swiglu("vision.ffn.swiglu", t, inter, act, phase=ph, count=layers, scope="model"), sc))
    else:
        ops.append(O.gemm("vision.ffn.up", t, inter, h, act, phase=ph, count=layers, scope="model"))
        ops.append(_fused(O.gelu("vision.ffn.gelu", t, inter, act, phase=ph, count=layers, scope="model"), sc))
    ops.append(O.gemm("vision.ffn.down", t, h, inter, act, phase=ph, count=layers, scope="model"))
    if tp > 1:
        ops.append(O.collective("vision.ffn.allreduce", "all_reduce", t * h * b, tp, phase=ph, count=layers,
                                scope="model"))
    ops.append(O.residual("vision.ffn.residual", t, h, act, phase=ph, count=layers, scope="model"))
    if v.post_norm:
        ops.append(_norm(v.post_norm_kind or v.norm, "vision.post_norm", t, h, act, ph, sc))
    # patches to LLM tokens: the merger's norm, the merge (a pool, or a pixel shuffle's permute), the products
    if v.merge_norm and v.merge_norm_at == "patch":
        ops.append(_norm(v.merge_norm, "vision.merger.norm", p, h, act, ph, sc))
    if v.merge_kind == "pool":
        ops.append(O.elementwise("vision.pool", "copy", reads=0, writes=0, flops_per_elem=1.0, elems=p * h, dtype=act,
                                 phase=ph, scope="model", extra_bytes=(p + merged) * h * b, params={"elems": p * h}))
    elif v.kind in ("llama4", "internvl"):  # pixel shuffle: two permutes of the patch grid
        ops.append(O.copy("vision.pixel_shuffle", p * h * b, phase=ph, count=2, scope="model"))
    if v.merge_norm and v.merge_norm_at == "token":
        ops.append(_norm(v.merge_norm, "vision.merger.norm", merged, v.merged_width if v.merge_kind == "concat" else h,
                         act, ph, sc))
    ops += _merger(v, "vision.merger", merged, act, ph, sc)
    if v.deepstack:  # Qwen3-VL: mergers of intermediate layers' outputs, added to the LLM's first layers
        n = len(v.deepstack)
        ops.append(_norm("layernorm", "vision.deepstack.norm", merged, v.merged_width, act, ph, sc, n))
        ops += _merger(v, "vision.deepstack", merged, act, ph, sc, count=n)
        ops.append(O.residual("vision.deepstack.add", merged, v.out_hidden, act, phase=ph, count=n, scope="model"))
    # the image embeddings written into the prompt's embedding rows
    ops.append(O.copy("vision.embed_merge", merged * v.out_hidden * b, phase=ph, scope="model"))
    return ops


# ---- memory ----------------------------------------------------------------------------------------------------

def weight_bytes(v: VisionEncoder, sc: Scenario) -> float:
    """The encoder's weights on one GPU, in the activations' format: the layers' products split over TP, the rest
    (patch embedding, norms, held embeddings, merger and projector) whole on each rank (module doc)."""
    split = v.layers * v.layer_linear_params()
    whole = v.param_count() - split
    return (math.ceil(split / sc.tp) + whole) * bytes_per_element(sc.act_dtype)


def activation_bytes(v: VisionEncoder, sc: Scenario, requests) -> float:
    """The encoder's working set for ``requests`` requests' images: the widest live set of a layer (q, k, v, the MLP
    input and output, two residual streams) over every encoder token, and the image embeddings handed to the LLM."""
    m = media(v, sc)
    hq = -(-v.heads // sc.tp)
    widest = (3 * hq * v.head_dim + 2 * -(-v.intermediate // sc.tp) + 2 * v.hidden)
    return requests * (m.patches * widest + m.tokens * v.out_hidden) * bytes_per_element(sc.act_dtype)


def describe(model, sc: Scenario) -> str:
    """The assumptions line of a projection with images."""
    v: VisionEncoder = model.vision
    m = media(v, sc)
    split = (f"its layers split over TP {sc.tp} as vLLM's default --mm-encoder-tp-mode weights and SGLang's default "
             "(without --mm-enable-dp-encoder) run it, patch embedding and merger whole on each rank (estimate)"
             if sc.tp > 1 else "on the one GPU")
    limits = (f"; resize limits {v.min_pixels:,} to {v.max_pixels:,} pixels from {v.processor}"
              if v.kind in ("qwen2_5_vl", "qwen3_vl") and sc.images else
              f"; at most {v.max_tiles} tiles from {v.processor}" if v.max_tiles > 1 else "")
    return (f"images: {m.detail}{limits}; {m.tokens:,} image tokens a request join the {sc.isl:,} text tokens "
            f"(prompt {sc.prompt:,}: prefilled and cached); the {v.kind} vision encoder ({v.layers} layers, "
            f"{m.patches:,} encoder tokens a request) runs in the prefill step over every prefilling request's "
            f"images, in {sc.act_dtype} (estimate: quantized checkpoints leave the tower unquantized), {split}; "
            "delimiter tokens around images not counted (part of --isl); its weights count only with images; "
            "encoder/LLM disaggregation not modelled")
