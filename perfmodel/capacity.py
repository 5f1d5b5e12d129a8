"""Memory per GPU: weights, KV cache, activations, workspace; and the largest batch that fits.

Weights follow the parallel layout: TP splits every linear layer (KV projections are replicated when
there are fewer KV heads than TP ranks), EP splits the routed experts, PP splits the layers (the stage
holding the embedding or the LM head is the fullest, and sizes the GPU). The KV cache holds
isl + osl tokens per sequence. Activations are one prefill chunk's working set plus the decode logits.
The engine may use ``Scenario.mem_fraction`` of HBM, less ``Scenario.mem_reserve`` for the CUDA
context, allocator slack and library workspaces.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .dtypes import bytes_per_element
from .graph import heads_per_gpu
from .models import Model, is_moe_layer
from .scenario import Scenario


@dataclass(frozen=True)
class Memory:
    weights: float
    kv_cache: float
    activations: float
    workspace: float
    capacity: float  # usable bytes per GPU (HBM x mem_fraction)
    hbm: float  # physical HBM per GPU
    kv_per_sequence: float

    @property
    def total(self):
        return self.weights + self.kv_cache + self.activations + self.workspace

    @property
    def fits(self):
        return self.total <= self.capacity

    def as_dict(self) -> dict:
        return {"weights": _f(self.weights), "kv_cache": _f(self.kv_cache), "activations": _f(self.activations),
                "workspace": _f(self.workspace), "total": _f(self.total), "capacity": _f(self.capacity),
                "hbm": _f(self.hbm), "kv_per_sequence": _f(self.kv_per_sequence)}


def _f(x):
    a = np.asarray(x)
    return float(a) if a.ndim == 0 else a.tolist()


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def layer_weight_params(model: Model, layer: int, sc: Scenario) -> float:
    """Parameters of one decoder layer held by one GPU."""
    h = model.hidden
    tp = sc.tp
    hq, hkv = heads_per_gpu(model, tp)
    if model.mla is not None:
        a = model.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        q = (h * a.q_lora_rank + a.q_lora_rank * hq * qk) if a.q_lora_rank else h * hq * qk
        attn = q + h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank * hq * (
            a.qk_nope_head_dim + a.v_head_dim) + hq * a.v_head_dim * h
    else:
        d = model.head_dim
        attn = h * (hq + 2 * hkv) * d + hq * d * h
    mats = 3 if model.mlp == "swiglu" else 2
    if is_moe_layer(model, layer):
        moe = model.moe
        shard = tp // sc.ep
        ffn = (moe.num_experts // sc.ep) * mats * h * _ceil_div(moe.expert_intermediate, shard)
        ffn += mats * h * _ceil_div(moe.num_shared_experts * moe.shared_intermediate, tp) + h * moe.num_experts
    else:
        ffn = mats * h * _ceil_div(model.intermediate, tp)
    return attn + ffn + 2 * h


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
    for s, layers in enumerate(stages):
        b = sum(layer_weight_params(model, i, sc) for i in layers) * w
        if s == 0:
            b += embed
        if s == sc.pp - 1:
            b += head + model.hidden * act
        best = max(best, b)
    return best


def kv_bytes_per_token(model: Model, sc: Scenario) -> float:
    """KV-cache bytes one token adds on one GPU (all of that GPU's layers)."""
    layers = math.ceil(model.layers / sc.pp)
    kv = bytes_per_element(sc.kv)
    if model.mla is not None:
        # the latent and the rotary key; TP ranks each keep the whole latent
        return layers * (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * kv
    _, hkv = heads_per_gpu(model, sc.tp)
    return layers * 2 * hkv * model.head_dim * kv


def _widest_bytes(model: Model, sc: Scenario) -> float:
    """Bytes per token of the widest set of live activations inside a block (QKV, FFN gate/up, residuals)."""
    act = bytes_per_element(sc.act_dtype)
    hq, hkv = heads_per_gpu(model, sc.tp)
    width = model.intermediate if model.moe is None else max(model.intermediate,
                                                             model.moe.expert_intermediate * model.moe.top_k)
    return (2 * _ceil_div(width, sc.tp) + (hq + 2 * hkv) * model.head_dim + 2 * model.hidden) * act


def _logit_bytes(model: Model, sc: Scenario) -> float:
    return _ceil_div(model.vocab, sc.tp) * 4.0  # fp32 logits of one sequence's last position


def activation_bytes(model: Model, sc: Scenario, batch):
    """Peak activations: one prefill chunk's widest intermediate plus decode logits for the batch."""
    tokens = np.minimum(np.asarray(batch) * sc.isl, sc.prefill_chunk)
    return tokens * _widest_bytes(model, sc) + np.asarray(batch) * _logit_bytes(model, sc)


def memory(model: Model, sc: Scenario, batch, hbm_bytes) -> Memory:
    kv_seq = kv_bytes_per_token(model, sc) * (sc.isl + sc.osl)
    return Memory(weights=weight_bytes(model, sc), kv_cache=np.asarray(batch) * kv_seq,
                  activations=activation_bytes(model, sc, batch), workspace=sc.mem_reserve,
                  capacity=hbm_bytes * sc.mem_fraction, hbm=hbm_bytes, kv_per_sequence=kv_seq)


def max_batch(model: Model, sc: Scenario, hbm_bytes):
    """Largest batch whose memory fits; 0 when not even one sequence does. ``hbm_bytes`` may be an array.

    Counts a full prefill chunk of activations (what a large batch needs), so it is exact for batches
    with batch * isl >= prefill_chunk and slightly conservative below.
    """
    fixed = weight_bytes(model, sc) + sc.mem_reserve + sc.prefill_chunk * _widest_bytes(model, sc)
    per_seq = kv_bytes_per_token(model, sc) * (sc.isl + sc.osl) + _logit_bytes(model, sc)
    free = np.asarray(hbm_bytes, dtype=float) * sc.mem_fraction - fixed
    best = np.maximum(0.0, np.floor(free / per_seq))
    return best.astype(int) if best.ndim else int(best)


def check_fits(model: Model, sc: Scenario, hw, best: int, batch: int | None = None) -> None:
    """Raise a one-line InputError when the scenario does not fit, naming what it needs against what the
    part has, and a tensor-parallel degree or format that would fit."""
    from .errors import InputError
    from .units import format_si

    want = 1 if batch is None else batch
    if best >= want:
        return
    need = memory(model, sc, want, hw.hbm_bytes)
    hint = suggest_fit(model, sc, hw, want)
    raise InputError(
        f"{model.name} at batch {want} needs {format_si(need.total, 'B')} per GPU "
        f"({format_si(need.weights, 'B')} weights, {format_si(need.kv_cache, 'B')} KV cache) but {hw.name} "
        f"offers {format_si(need.capacity, 'B')} usable of {format_si(hw.hbm_bytes, 'B')}"
        + (f"; {hint} would fit" if hint else ""), field="--batch" if batch and batch > 1 else "--tp")


def suggest_fit(model: Model, sc: Scenario, hw, batch: int) -> str:
    for tp in (2, 4, 8, 16, 32, 64):
        if tp <= sc.tp:
            continue
        trial = sc.with_(tp=tp, ep=min(sc.ep, tp))
        if max_batch(model, trial, hw.hbm_bytes) >= batch:
            return f"--tp {tp}"
    for dtype in ("fp8", "fp4"):
        if dtype == sc.dtype or (dtype == "fp4" and "fp4" not in hw.tensor_flops):
            continue
        trial = sc.with_(dtype=dtype)
        if max_batch(model, trial, hw.hbm_bytes) >= batch:
            return f"--dtype {dtype}"
    return ""
