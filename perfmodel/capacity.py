"""Memory per GPU: weights, KV cache, activations, workspace; and the largest batch that fits.

Weights follow the parallel layout: TP splits every linear layer (KV projections are replicated when
there are fewer KV heads than TP ranks), EP splits the routed experts, PP splits the layers (the stage
holding the embedding or the LM head is the fullest, and sizes the GPU). The KV cache holds
isl + osl tokens per sequence (and a request's image tokens: ``Scenario.prompt``). Activations are one prefill
chunk's working set plus the decode logits; with images, the vision encoder's weights (first stage) and its
working set too (perfmodel.vision).

What the engine may use is set by its memory policy (perfmodel.engines) over the device-visible memory
(nvidia-smi memory.total, ``HardwareSpec.hbm_visible_bytes``), with ``Scenario.mem_reserve`` kept for the
CUDA context, library workspaces and CUDA graphs.

The formulas over batch, sequence lengths and the engine's memory settings are written against a math
backend (``xp``, :mod:`perfmodel.cost.backend`): numbers and arrays, or the workbook's Excel formulas, which
pass a scenario, spec and :class:`Footprint` whose figures are cells.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import vision
from .cost.backend import NP
from .dtypes import bytes_per_element
from .errors import InputError
from .geometry import (INDEXER_FORMAT, attention_layer_kinds, expert_format, heads_per_gpu, linear_layers,
                       module_format)
from .models import Model, eagle_fusion_params, indexer_params, is_moe_layer, linear_attention_params
from .scenario import Scenario, require_resolved


@dataclass(frozen=True)
class Memory:
    weights: float
    kv_cache: float
    activations: float
    workspace: float  # the engine's reserve outside its pool: CUDA context, workspaces, graphs
    capacity: float  # bytes the scenario may use per GPU under the engine's memory policy
    hbm: float  # the datasheet's nominal capacity per GPU
    kv_per_sequence: float
    visible: float = 0.0  # device-visible memory per GPU (nvidia-smi memory.total)
    kv_budget: float = 0.0  # bytes the engine gives the KV cache

    @property
    def total(self):
        return self.weights + self.kv_cache + self.activations + self.workspace

    @property
    def fits(self):
        return self.kv_cache <= self.kv_budget

    def as_dict(self) -> dict:
        return {"weights": _f(self.weights), "kv_cache": _f(self.kv_cache), "activations": _f(self.activations),
                "workspace": _f(self.workspace), "total": _f(self.total), "capacity": _f(self.capacity),
                "kv_budget": _f(self.kv_budget), "visible": _f(self.visible), "hbm": _f(self.hbm),
                "kv_per_sequence": _f(self.kv_per_sequence)}


def _f(x):
    a = np.asarray(x)
    return float(a) if a.ndim == 0 else a.tolist()


@dataclass(frozen=True)
class Footprint:
    """Bytes per GPU that the model's structure, parallel layout and formats fix, before any batch or sequence
    length: what the memory formulas scale."""

    weights: Any  # weights on the fullest GPU
    kv_per_token: Any  # KV cache one token adds, every layer of the GPU keeping it (windows: per sequence)
    act_per_token: Any  # widest live activations per prefill token
    logits_per_sequence: Any  # fp32 logits of one sequence's last position


def footprint(model: Model, sc: Scenario) -> Footprint:
    return Footprint(weight_bytes(model, sc), kv_bytes_per_token(model, sc), _widest_bytes(model, sc),
                     _logit_bytes(model, sc))


def device_bytes(device) -> tuple:
    """(visible, nominal) bytes per GPU of a spec, or of a number taken as both."""
    if hasattr(device, "hbm_visible_bytes"):
        return device.hbm_visible_bytes, device.hbm_bytes
    v = np.asarray(device, dtype=float)
    return v, v


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def layer_weight_params(model: Model, layer: int, sc: Scenario) -> float:
    """Parameters of one decoder layer held by one GPU."""
    return sum(_layer_params(model, layer, sc))


def _layer_params(model: Model, layer: int, sc: Scenario) -> tuple[float, float, float]:
    """(parameters in the scenario's format, routed-expert parameters, parameters the model's NVFP4 checkpoint
    keeps in bf16: ``Model.fp4_unquantized``, under an fp4 scenario only) of one decoder layer on one GPU."""
    h = model.hidden
    tp = sc.tp
    hq, hkv = heads_per_gpu(model, tp)
    groups: dict[str, float] = {}  # the layer's parameters by FP4_UNQUANTIZED group, where one applies
    if model.layer_types[layer] == "linear":  # a Gated DeltaNet layer: its heads split over the TP ranks
        groups["linear_attention"] = linear_attention_params(model, tp)
    elif model.mla is not None:
        a = model.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        q = (h * a.q_lora_rank + a.q_lora_rank * hq * qk) if a.q_lora_rank else h * hq * qk
        groups["attention_qkv"] = q + h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank * hq * (
            a.qk_nope_head_dim + a.v_head_dim)
        groups["attention_o"] = hq * a.v_head_dim * h
        groups["indexer"] = indexer_params(model)  # DeepSeek Sparse Attention's indexer, whole on each rank (estimate)
    else:
        d = model.head_dim
        gate = 2 if model.attn_output_gate else 1  # a gated attention's gate comes out of the q projection
        groups["attention_qkv"], groups["attention_o"] = h * (gate * hq + 2 * hkv) * d, hq * d * h
    mats = 3 if model.mlp == "swiglu" else 2
    experts = 0.0
    other = 2.0 * h  # the layer's two norms
    if is_moe_layer(model, layer):
        moe = model.moe
        shard = sc.moe_group // sc.ep
        experts = (moe.num_experts // sc.ep) * mats * h * _ceil_div(moe.expert_intermediate, shard)
        groups["shared_experts"] = mats * h * _ceil_div(moe.num_shared_experts * moe.shared_intermediate, tp)
        other += h * moe.num_experts  # the router (counted in the scenario's format)
    elif model.moe is not None:  # a dense layer of a MoE model (DeepSeek-V3's first three)
        groups["dense_layers"] = mats * h * _ceil_div(model.intermediate, tp)
    else:
        other += mats * h * _ceil_div(model.intermediate, tp)
    plain = sum(v for g, v in groups.items() if module_format(model, sc, g) != sc.dtype)
    return other + sum(groups.values()) - plain, experts, plain


def weight_bytes(model: Model, sc: Scenario) -> float:
    """Bytes of weights on the fullest GPU."""
    w = bytes_per_element(sc.dtype)
    act = bytes_per_element(sc.act_dtype)
    per_stage = math.ceil(model.layers / sc.pp)
    stages = [range(s * per_stage, min(model.layers, (s + 1) * per_stage)) for s in range(sc.pp)]
    vocab = _ceil_div(model.vocab, sc.tp)
    embed = vocab * model.hidden * act
    if model.position == "learned":
        embed += model.max_position * model.hidden * act
    head = 0.0 if model.tied_embeddings and sc.pp == 1 else vocab * model.hidden * bytes_per_element(
        sc.dtype if sc.dtype != "fp4" else "fp8")
    best = 0.0
    w_e = bytes_per_element(expert_format(model, sc))  # a checkpoint's narrower experts (gpt-oss: MXFP4)
    for s, layers in enumerate(stages):
        b = sum(d * w + e * w_e + p * act for d, e, p in (_layer_params(model, i, sc) for i in layers))
        if s == 0:
            b += embed
            if sc.image_tokens and model.vision is not None:  # the vision encoder, on the first stage, with images
                b += vision.weight_bytes(model.vision, sc)
        if s == sc.pp - 1:
            b += head + model.hidden * act
            b += mtp_weight_bytes(model, sc) + draft_weight_bytes(sc)
            b += eagle_fusion_params(model) / sc.tp * w  # an EAGLE head's own fusion (a draft's weights)
        best = max(best, b)
    return best


def mtp_weight_bytes(model: Model, sc: Scenario) -> float:
    """Bytes of the multi-token-prediction modules a speculative decode loads (``sc.mtp`` > 0), on the last
    pipeline rank: per module one decoder layer like the model's last, the projection of the joined embedding
    and hidden state (2h x h) and its two norms; the embedding and head are the model's, shared
    (DeepSeek-V3 report, sec. 2.2: 14B of MTP weights beside the 671B main model, 11.5B of them unique)."""
    if not sc.mtp or sc.draft is not None or not model.mtp_layers:
        return 0.0
    h = model.hidden
    dense, experts, plain = _layer_params(model, model.layers - 1, sc)
    act = bytes_per_element(sc.act_dtype)
    if module_format(model, sc, "mtp") != sc.dtype:  # the NVFP4 checkpoint keeps these layers in bf16
        return model.mtp_layers * (dense + experts + plain + 2 * h * h + 2 * h) * act
    per_module = ((dense + 2 * h * h + 2 * h) * bytes_per_element(sc.dtype) + plain * act
                  + experts * bytes_per_element(expert_format(model, sc)))
    return model.mtp_layers * per_module


def draft_weight_bytes(sc: Scenario) -> float:
    """Bytes of a separate draft model's weights (``sc.draft``), on the same GPUs in the same layout."""
    from .speculative import draft_model, draft_scenario

    drafter = draft_model(sc)
    return 0.0 if drafter is None else weight_bytes(drafter, draft_scenario(sc))


def kv_bytes_per_token(model: Model, sc: Scenario) -> float:
    """KV-cache bytes one token adds on one GPU (that GPU's layers that keep keys: Gated DeltaNet layers keep a
    state instead, :func:`linear_state_bytes`)."""
    # a speculative decode's MTP modules keep keys of their own: one layer's more per module
    mtp = model.mtp_layers if sc.mtp and sc.draft is None else 0
    layers = math.ceil((model.layers - linear_layers(model) + mtp) / sc.pp)
    kv = bytes_per_element(sc.kv)
    if model.mla is not None:
        # the latent and the rotary key; TP ranks each keep the whole latent
        per_layer = (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * kv
        if model.mla.index_topk:  # DeepSeek Sparse Attention's indexer key, fp8, and its fp32 scale
            per_layer += model.mla.index_head_dim * bytes_per_element(INDEXER_FORMAT) + 4.0
        return layers * per_layer + _draft_kv_per_token(sc)
    _, hkv = heads_per_gpu(model, sc.tp)
    return layers * 2 * hkv * model.head_dim * kv + _draft_kv_per_token(sc)


def _draft_kv_per_token(sc: Scenario) -> float:
    """A separate draft model keeps every token's keys too, in a cache of its own."""
    from .speculative import draft_model, draft_scenario

    drafter = draft_model(sc)
    return 0.0 if drafter is None else kv_bytes_per_token(drafter, draft_scenario(sc))


def kv_bytes_per_sequence(model: Model, sc: Scenario, length, *, xp=NP, per_token=None):
    """KV-cache bytes one sequence of ``length`` tokens holds on one GPU: sliding-window and chunked layers keep
    only their window's keys (the engines' windowed KV managers free or overwrite the rest). ``per_token``:
    :func:`kv_bytes_per_token` (default), or a cell holding it."""
    per_token = kv_bytes_per_token(model, sc) if per_token is None else per_token
    kinds = attention_layer_kinds(model)
    state = linear_state_bytes(model, sc)
    if set(kinds) == {"full"}:
        return per_token * length + state if state else per_token * length
    total = 0.0
    keeping = model.layers - linear_layers(model)
    for kind, (n, window) in kinds.items():
        keep = length if not window else xp.minimum(length, 2 * window if kind == "chunked" else window)
        total = total + per_token * keep * n / keeping
    return total + state


def linear_state_bytes(model: Model, sc: Scenario) -> float:
    """Bytes one sequence holds on one GPU in its Gated DeltaNet layers, whatever its length: each value head's
    key_head_dim x value_head_dim state and the convolution's last conv_kernel - 1 inputs."""
    la = getattr(model, "linear_attention", None)
    if la is None:
        return 0.0
    layers = math.ceil(linear_layers(model) / sc.pp)
    kh, vh = _ceil_div(la.key_heads, sc.tp), _ceil_div(la.value_heads, sc.tp)
    conv = (2 * kh * la.key_head_dim + vh * la.value_head_dim) * (la.conv_kernel - 1) * bytes_per_element(sc.act_dtype)
    return layers * (vh * la.key_head_dim * la.value_head_dim * bytes_per_element(la.state_dtype) + conv)


def _widest_bytes(model: Model, sc: Scenario) -> float:
    """Bytes per token of the widest set of live activations inside a block (QKV, FFN gate/up, residuals)."""
    act = bytes_per_element(sc.act_dtype)
    hq, hkv = heads_per_gpu(model, sc.tp)
    width = model.intermediate if model.moe is None else max(model.intermediate,
                                                             model.moe.expert_intermediate * model.moe.top_k)
    return (2 * _ceil_div(width, sc.tp) + (hq + 2 * hkv) * model.head_dim + 2 * model.hidden) * act


def _logit_bytes(model: Model, sc: Scenario) -> float:
    return _ceil_div(model.vocab, sc.tp) * 4.0  # fp32 logits of one sequence's last position


def _array(x, xp):
    return np.asarray(x) if xp.numeric else x


def activation_bytes(model: Model, sc: Scenario, batch, *, xp=NP, fp: Footprint | None = None):
    """Peak activations: one prefill chunk's widest intermediate plus decode logits for the batch."""
    fp = footprint(model, sc) if fp is None else fp
    tokens = xp.minimum(_array(batch, xp) * sc.prompt, sc.prefill_chunk)
    out = tokens * fp.act_per_token + _array(batch, xp) * fp.logits_per_sequence
    if sc.image_tokens and model.vision is not None:  # the encoder's working set for the prefilling requests
        out = out + vision_activation_bytes(model, sc, batch, xp=xp)
    return out


def encoder_requests(sc: Scenario, batch, xp=NP):
    """Requests whose images one prefill step encodes: the whole batch under static batching, else the prefill
    group (perfmodel.projection.prefill_requests), at most the chunk's worth of prompts."""
    if sc.batching == "static":
        return batch
    return xp.maximum(1, xp.minimum(batch, xp.floor(sc.prefill_chunk / sc.prompt)))


def vision_activation_bytes(model: Model, sc: Scenario, batch, *, xp=NP):
    """The vision encoder's activations at ``batch`` sequences (0 without images)."""
    if not sc.image_tokens or model.vision is None:
        return 0.0
    return vision.activation_bytes(model.vision, sc, encoder_requests(sc, _array(batch, xp), xp))


def _pool(sc: Scenario, visible, fixed, xp):
    """(bytes the scenario may use, bytes the KV cache gets) under the engine's policy, given the
    ``fixed`` bytes outside the KV cache (weights, activations, reserve).

    total (vLLM): everything together takes ``mem_fraction`` of the device.
    static (SGLang): weights, reserve and KV cache take it; activations and CUDA graphs live in the rest (the caller
    leaves the activations out of ``fixed``).
    free (TensorRT-LLM): the KV cache takes ``mem_fraction`` of what is free after the rest.
    """
    if sc.mem_policy == "free":
        kv = sc.mem_fraction * xp.maximum(visible - fixed, 0.0)
        return fixed + kv, kv
    usable = visible * sc.mem_fraction
    return usable, xp.maximum(usable - fixed, 0.0)


def memory(model: Model, sc: Scenario, batch, device, *, xp=NP, fp: Footprint | None = None) -> Memory:
    """Memory per GPU at ``batch`` on ``device`` (a spec, or device-visible bytes). ``fp``: the model's
    :func:`footprint` (default), or cells holding it."""
    require_resolved(sc, "capacity.memory")
    fp = footprint(model, sc) if fp is None else fp
    visible, nominal = device_bytes(device)
    kv_seq = kv_bytes_per_sequence(model, sc, sc.prompt + sc.osl, xp=xp, per_token=fp.kv_per_token)
    weights = fp.weights
    local = _array(batch, xp)
    if sc.attention_dp > 1:
        local = local / sc.attention_dp  # an attention group holds its own sequences' KV cache
    act = activation_bytes(model, sc, local, xp=xp, fp=fp)
    if sc.mem_policy == "static":  # the activations outside the engine's share
        capacity, kv_budget = _pool(sc, visible, weights + sc.mem_reserve, xp)
        capacity = capacity + act
    else:
        capacity, kv_budget = _pool(sc, visible, weights + act + sc.mem_reserve, xp)
    return Memory(weights=weights, kv_cache=local * kv_seq, activations=act, workspace=sc.mem_reserve,
                  capacity=capacity, hbm=nominal, kv_per_sequence=kv_seq, visible=visible, kv_budget=kv_budget)


def max_batch(model: Model, sc: Scenario, device, *, xp=NP, fp: Footprint | None = None):
    """Largest batch whose memory fits on ``device`` (a spec, or device-visible bytes, possibly an array);
    0 when not even one sequence does. ``fp``: as for :func:`memory`.

    Activations are a prefill chunk's working set (``min(batch x isl, prefill_chunk)`` tokens) plus a
    logit row per sequence: the batch is solved for both regimes (chunk not yet full, chunk full) and the
    larger consistent answer kept.
    """
    require_resolved(sc, "capacity.max_batch")
    fp = footprint(model, sc) if fp is None else fp
    visible, _ = device_bytes(device)
    if xp.numeric:
        visible = np.asarray(visible, dtype=float)
    base = fp.weights + sc.mem_reserve
    kv_seq = kv_bytes_per_sequence(model, sc, sc.prompt + sc.osl, xp=xp, per_token=fp.kv_per_token)
    logits, widest = fp.logits_per_sequence, fp.act_per_token
    if sc.image_tokens and model.vision is not None:
        # the encoder's working set: a request's share under static batching (the whole batch prefills), else
        # the largest prefill group's, held whatever the batch (an upper bound where the batch is smaller)
        per_request = vision.activation_bytes(model.vision, sc, 1)
        if sc.batching == "static":
            logits = logits + per_request
        else:
            base = base + per_request * max(1, sc.prefill_chunk // sc.prompt)
    chunk_full = sc.prefill_chunk * widest

    def solve(fixed, per_seq_act):
        if sc.mem_policy == "static":  # activations outside the share: the KV cache alone against it
            return xp.floor(xp.maximum(visible * sc.mem_fraction - fp.weights - sc.mem_reserve, 0.0) / kv_seq)
        if sc.mem_policy == "free":  # kv_seq b <= f (V - fixed - b act)
            f = sc.mem_fraction
            return xp.floor(xp.maximum(f * (visible - fixed), 0.0) / (kv_seq + f * per_seq_act))
        return xp.floor(xp.maximum(visible * sc.mem_fraction - fixed, 0.0) / (kv_seq + per_seq_act))

    filling = solve(base, logits + sc.prompt * widest)  # batch x prompt below the chunk
    filling = xp.where(filling * sc.prompt <= sc.prefill_chunk, filling, 0.0)
    full = solve(base + chunk_full, logits)
    full = xp.where(full * sc.prompt >= sc.prefill_chunk, full, 0.0)
    best = xp.maximum(filling, full)
    if sc.attention_dp > 1:
        best = best * sc.attention_dp  # every attention group holds as many sequences
    if not xp.numeric:
        return best
    return best.astype(int) if best.ndim else int(best)


def check_fits(model: Model, sc: Scenario, hw, best: int, batch: int | None = None) -> None:
    """Raise a one-line InputError when the scenario does not fit, stating every term of what it needs
    against what the engine may use, and a tensor-parallel degree or format that would fit."""
    want = 1 if batch is None else batch
    if best >= want:
        return
    need = memory(model, sc, want, hw)
    hint = suggest_fit(model, sc, hw, want)
    policy = {"free": f"{sc.engine} gives the KV cache {sc.mem_fraction:.0%} of what is free after the rest",
              "static": f"{sc.engine} keeps weights and KV cache within {sc.mem_fraction:.0%} of the device, "
                        "activations outside"}.get(sc.mem_policy,
                                                   f"{sc.engine} uses {sc.mem_fraction:.0%} of the device")
    share = 1.0 if sc.mem_policy == "free" else sc.mem_fraction
    static = sc.mem_policy == "static"  # the activations outside the engine's share
    fixed = need.weights + need.workspace + (0.0 if static else need.activations)
    terms = (f"weights {_gib(need.weights)}, activations {_gib(need.activations)}, reserve {_gib(need.workspace)}, "
             f"KV cache {_gib(need.kv_cache)}")
    if need.kv_budget <= 0:
        short = f"weights{'' if static else ', activations'} and reserve alone take {_gib(fixed)}"
    else:
        short = f"the KV cache gets {_gib(need.kv_budget)}"
    raise InputError(
        f"{model.name} at batch {want} needs {_gib(fixed + need.kv_cache)} per GPU ({terms}) but {hw.name} has "
        f"{_gib(need.capacity if need.kv_budget > 0 else need.visible * share)} "
        f"usable of {_gib(need.visible)} visible ({policy}): {short}"
        + (f"; {hint} would fit" if hint else ""), field=_blame(model, sc, hw, want, batch))


def _blame(model: Model, sc: Scenario, hw, want: int, batch: int | None) -> str:
    """The flag a scenario that does not fit is blamed on: a memory share below the engine's that alone keeps it
    from fitting, else the batch (more than one sequence) or the layout."""
    from .engines import engine_for

    preset = engine_for(sc.engine, getattr(hw, "vendor", "nvidia")).fraction_for(sc.tp)
    if sc.mem_fraction < preset and max_batch(model, sc.with_(mem_fraction=preset), hw) >= want:
        return "--mem-fraction"
    return "--batch" if batch and batch > 1 else "--tp"


def _gib(x) -> str:
    return f"{float(x) / 2**30:.1f} GiB"


def suggest_fit(model: Model, sc: Scenario, hw, batch: int) -> str:
    for tp in (2, 4, 8, 16, 32, 64):
        if tp <= sc.tp:
            continue
        trial = sc.with_(tp=tp, ep=min(sc.ep, tp * sc.attention_dp))
        if max_batch(model, trial, hw) >= batch:
            return f"--tp {tp}"
    for dtype in ("fp8", "fp4"):
        if dtype == sc.dtype or (dtype == "fp4" and "fp4" not in hw.tensor_flops):
            continue
        trial = sc.with_(dtype=dtype)
        if max_batch(model, trial, hw) >= batch:
            return f"--dtype {dtype}"
    return ""
