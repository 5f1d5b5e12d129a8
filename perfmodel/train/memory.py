"""Memory per GPU in training: weights, gradients, optimizer states (per ZeRO stage) and activations.

**Weights, gradients, optimizer states** (mixed precision, Rajbhandari et al. 2020, "ZeRO", section 3.1):
bf16/fp16 weights (2 bytes a parameter; fp8 training also keeps a 1-byte fp8 copy of each weight, as
TransformerEngine caches it), main gradients in ``grad_dtype`` (fp32 by default: Megatron accumulates and
reduces gradients in fp32 for bf16), and the optimizer's fp32 master weights and states: AdamW 12 bytes
(master, momentum, variance), SGD with momentum 8. ZeRO-1 shards the optimizer states over the ``dp x cp``
ranks that hold the same parameters (Megatron's distributed optimizer), ZeRO-2 the gradients too, ZeRO-3
the weights too (each rank then also holds the gathered weights of the two layers in flight). Expert
weights (MoE) are sharded over ``dp x cp / ep`` ranks.

**Activations** (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
section 4, Table 2): the bytes one layer keeps for its backward, for ``b`` sequences of ``s`` tokens.
For a GPT layer (4h GELU MLP, multi-head attention, dropout, unfused attention) the accounting below gives
exactly their ``sbh (34 + 5 a s / h)`` without parallelism, ``sbh (10 + 24 / t + 5 a s / (h t))`` with tensor
parallelism, ``sbh / t (34 + 5 a s / h)`` with sequence parallelism as well, the same without the ``5 a s / h``
term under selective recompute, and ``2 sbh`` (``/ t`` with SP) under full recompute. It generalises the
terms to other layers: SwiGLU keeps gate, up and their product (``6 s b f`` bytes for width ``f``),
grouped-query attention keeps fewer K and V heads, FlashAttention keeps no score matrix, only the fp32
log-sum-exp (``4 a s b``), and no dropout means no masks.

**Pipeline**: stage ``k`` of ``p`` holds activations of the micro-batches in flight: ``min(m, p - k)`` under
1F1B and zero-bubble H1 (Qi et al. 2023: same peak as 1F1B), ``2 (p - k - 1) + (v - 1) p + 1`` model chunks
under the interleaved schedule (Megatron's warm-up; stage 0 gets Korthikanti's ``L (1 + (p - 1) / (p v))``
layers), and ``p + 1`` stages' worth under DualPipe, which also holds two stages' parameters (DeepSeek-V3
technical report, Table 2). The first stage adds the embedding's dropout mask, the last the final norm's and
LM head's inputs and the fp32 logits the cross-entropy keeps.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import bytes_per_element
from ..geometry import heads_per_gpu
from ..models import Model, is_moe_layer
from ..spec import HardwareSpec
from .graph import mtp_modules, vocab_shard
from .scenario import TrainScenario


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ---------------------------------------------------------------------------------------------------------
# parameters on one GPU
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Params:
    """Parameters one GPU holds, split by the data-parallel group that shares them."""

    dense: float  # replicated over dp x cp ranks
    expert: float  # replicated over dp x cp / ep ranks

    @property
    def total(self) -> float:
        return self.dense + self.expert

    def __add__(self, other: "Params") -> "Params":
        return Params(self.dense + other.dense, self.expert + other.expert)

    def scaled(self, f: float) -> "Params":
        return Params(self.dense * f, self.expert * f)


def layer_params(model: Model, layer: int, ts: TrainScenario) -> Params:
    """Parameters of one decoder layer on one GPU (TP shard; experts spread over ep ranks)."""
    h = model.hidden
    tp = ts.tp
    hq, hkv = heads_per_gpu(model, tp)
    if model.mla is not None:
        a = model.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        q = (h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * hq * qk) if a.q_lora_rank else h * hq * qk
        attn = (q + h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank
                + a.kv_lora_rank * hq * (a.qk_nope_head_dim + a.v_head_dim) + hq * a.v_head_dim * h)
    else:
        d = model.head_dim
        attn = h * (hq + 2 * hkv) * d + hq * d * h
        if model.qkv_bias or model.family == "gpt":
            attn += (hq + 2 * hkv) * d
        if model.family == "gpt":
            attn += h  # output-projection bias (replicated)
    norms = 2 * h * (2 if model.norm == "layernorm" else 1)
    mats = 3 if model.mlp == "swiglu" else 2
    expert = 0.0
    if is_moe_layer(model, layer):
        moe = model.moe
        expert = (moe.num_experts // ts.ep) * mats * h * _ceil_div(moe.expert_intermediate, tp)
        ffn = mats * h * _ceil_div(moe.num_shared_experts * moe.shared_intermediate, tp) + h * moe.num_experts
    else:
        inter = _ceil_div(model.intermediate, tp)
        ffn = mats * h * inter
        if model.family == "gpt":
            ffn += inter + h  # biases
    return Params(float(attn + ffn + norms), float(expert))


def stage_layers(model: Model, ts: TrainScenario) -> list[int]:
    """Decoder layers on each pipeline rank. Uneven counts give fewer layers to the first and last ranks,
    which also hold the embedding and the LM head (as Llama 3 405B's 126 layers over 16 stages)."""
    p = ts.pp
    # a multi-token-prediction module sits on the last rank and takes a layer's slot there (it runs one decoder
    # layer, and the LM head again): the layers and the modules are spread as one count
    mtp = mtp_modules(model, ts) if p > 1 else 0
    slots = model.layers + mtp
    base, extra = divmod(slots, p)
    counts = [base + 1] * p if extra else [base] * p
    short = p - extra if extra else 0  # ranks with one slot fewer: last, first, then the second-to-last, ...
    order = []
    lo, hi = 0, p - 1
    while lo <= hi:
        order.append(hi)
        if lo != hi:
            order.append(lo)
        hi -= 1
        lo += 1
    for k in order[:short]:
        counts[k] -= 1
    take = min(mtp, counts[-1])  # the modules' slots, from the last rank back
    counts[-1] -= take
    for k in range(p - 2, -1, -1):
        if take == mtp:
            break
        more = min(mtp - take, counts[k] - 1)
        counts[k] -= more
        take += more
    return counts


def stage_params(model: Model, ts: TrainScenario, stage: int, layers: list[int]) -> Params:
    """Parameters on one GPU of pipeline rank ``stage`` (its layers, plus embedding or LM head)."""
    start = sum(layers[:stage])
    total = Params(0.0, 0.0)
    for i in range(start, start + layers[stage]):
        total = total + layer_params(model, i, ts)
    h = model.hidden
    vocab = vocab_shard(model, ts.tp)
    if stage == 0:
        emb = vocab * h + (model.max_position * h if model.position == "learned" else 0)
        total = total + Params(float(emb), 0.0)
    if stage == ts.pp - 1:
        head = 0 if (model.tied_embeddings and ts.pp == 1) else vocab * h
        total = total + Params(float(head + h * (2 if model.norm == "layernorm" else 1)), 0.0)
        mtp = mtp_modules(model, ts)
        if mtp:
            # each module: a decoder layer (the model's last layer type), two norms and the [2h, h] projection
            # (its TP shard); with pp > 1 the last rank also keeps a copy of the shared embedding (Megatron-Core,
            # synchronised with the first rank's like a tied embedding)
            one = layer_params(model, model.layers - 1, ts) + Params(float(2 * h + 2 * h * _ceil_div(h, ts.tp)), 0.0)
            total = total + one.scaled(mtp) + Params(float(vocab * h if ts.pp > 1 else 0), 0.0)
    return total


# ---------------------------------------------------------------------------------------------------------
# activations
# ---------------------------------------------------------------------------------------------------------


def layer_activation_bytes(model: Model, ts: TrainScenario, layer: int = -1, recompute: str | None = None) -> float:
    """Bytes one layer keeps for its backward, one micro-batch, one GPU (module doc: Korthikanti et al.)."""
    rec = ts.recompute if recompute is None else recompute
    e = 2.0  # bf16/fp16 activations
    b = ts.micro_batch
    s = ts.seq // ts.cp
    t = ts.tp
    tokens = b * s
    h = model.hidden
    rep = 1.0 / t if ts.sequence_parallel else 1.0  # parts outside the tensor-parallel region
    if rec == "full":
        return e * tokens * h * rep  # the layer's input only
    hq, hkv = heads_per_gpu(model, t)
    drop = 1.0 if ts.dropout else 0.0
    # attention block
    if model.mla is not None:
        a = model.mla
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        dq, dk, dv = qk, qk, a.v_head_dim
        latent_in = e * tokens * ((a.q_lora_rank or 0) + a.kv_lora_rank)  # inputs of the up-projections
        hk = hq  # MLA expands the latent to a K and V per query head
    else:
        dq = dk = dv = model.head_dim
        latent_in = 0.0
        hk = hkv
    attn = e * tokens * h * rep * 2  # norm input, QKV input
    attn += latent_in
    attn += e * tokens * (hq * dq + hk * dk)  # Q and K for the scores (after rotary)
    attn += e * tokens * hk * dv  # V
    s_kv = ts.seq  # keys a query sees (the whole sequence, with CP too)
    if rec == "none":
        if ts.attention == "unfused":
            attn += b * hq * s * s_kv * (2.0 + 3.0 * drop)  # softmax output, dropout mask and output
        else:
            attn += 4.0 * b * hq * s  # flash: the fp32 log-sum-exp per row
    attn += e * tokens * hq * dv  # output-projection input
    attn += drop * tokens * h * rep  # dropout mask
    # MLP block
    mlp = e * tokens * h * rep * 2  # norm input, first GEMM input
    if is_moe_layer(model, layer if layer >= 0 else model.layers - 1):
        moe = model.moe
        f = _ceil_div(moe.expert_intermediate, t)
        pairs = tokens * moe.top_k * (ts.moe_imbalance if ts.ep > 1 else 1.0)  # the busiest expert rank's
        mlp += e * pairs * h  # permuted expert inputs
        mlp += e * pairs * f * (3.0 if model.mlp == "swiglu" else 2.0)
        mlp += 4.0 * tokens * moe.num_experts  # router probabilities (fp32)
        if moe.num_shared_experts:
            fs = _ceil_div(moe.num_shared_experts * moe.shared_intermediate, t)
            mlp += e * tokens * fs * (3.0 if model.mlp == "swiglu" else 2.0)
    else:
        f = _ceil_div(model.intermediate, t)
        mlp += e * tokens * f * (3.0 if model.mlp == "swiglu" else 2.0)  # activation input(s) and output
    mlp += drop * tokens * h * rep
    return attn + mlp


def mean_layer_activation_bytes(model: Model, ts: TrainScenario, recompute: str | None = None) -> float:
    """Per-layer activations averaged over the model's layer types (MoE models with dense first layers)."""
    if model.moe is None or model.moe.first_dense_layers == 0:
        return layer_activation_bytes(model, ts, -1, recompute)
    dense = model.moe.first_dense_layers
    a = layer_activation_bytes(model, ts, 0, recompute)
    m = layer_activation_bytes(model, ts, model.layers - 1, recompute)
    return (a * dense + m * (model.layers - dense)) / model.layers


def in_flight(ts: TrainScenario, stage: int) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak, in units of its own layers."""
    p, m, v = ts.pp, ts.micro_batches, ts.chunks
    if p == 1:
        return 1.0
    if ts.schedule == "interleaved":
        chunks = min(m * v, 2 * (p - stage - 1) + (v - 1) * p + 1)
        return chunks / v
    if ts.schedule == "dualpipe":
        return float(min(m, p + 1))
    return float(min(m, p - stage))


@dataclass(frozen=True)
class TrainMemory:
    weights: float
    gradients: float
    optimizer_states: float
    activations: float  # kept for the backward, at the stage's peak
    activation_working: float  # transient: a layer recomputed in full, the logits' gradient
    reserve: float  # CUDA context, NCCL buffers, allocator slack (estimate)
    capacity: float  # usable bytes per GPU
    hbm: float
    stage: int  # the pipeline rank these figures are for (the fullest)

    @property
    def total(self) -> float:
        return (self.weights + self.gradients + self.optimizer_states + self.activations + self.activation_working
                + self.reserve)

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    def as_dict(self) -> dict:
        return {"weights": self.weights, "gradients": self.gradients, "optimizer_states": self.optimizer_states,
                "activations": self.activations, "activation_working": self.activation_working,
                "reserve": self.reserve, "total": self.total, "capacity": self.capacity, "hbm": self.hbm,
                "fits": self.fits, "stage": self.stage}


OPTIMIZER_BYTES = {"adamw": 12.0, "sgd": 8.0}  # fp32 master weights + states, per parameter


def state_bytes(params: Params, ts: TrainScenario) -> tuple[float, float, float]:
    """(weights, gradients, optimizer states) bytes for ``params`` under the scenario's ZeRO stage."""
    dp_dense = ts.data_parallel * ts.cp
    dp_expert = max(1, dp_dense // ts.ep)
    # bf16 weights, plus their quantized copy for low-precision GEMMs (fp8: 1 byte; NVFP4: half a byte and scales)
    w_b = 2.0 + {"fp8": 1.0, "fp4": bytes_per_element("fp4")}.get(ts.dtype, 0.0)
    g_b = bytes_per_element(ts.grad_dtype)
    o_b = OPTIMIZER_BYTES[ts.optimizer]

    def sharded(per_param: float, stage: int) -> float:
        if ts.zero >= stage:
            return params.dense * per_param / dp_dense + params.expert * per_param / dp_expert
        return params.total * per_param

    return sharded(w_b, 3), sharded(g_b, 2), sharded(o_b, 1)


def stage_memory(model: Model, ts: TrainScenario, stage: int, layers: list[int], hbm: float) -> TrainMemory:
    params = stage_params(model, ts, stage, layers)
    copies = 2.0 if ts.schedule == "dualpipe" else 1.0  # DualPipe: each rank holds two stages' parameters
    w, g, o = (x * copies for x in state_bytes(params, ts))
    if ts.zero == 3:  # the gathered weights of the layer being computed and the one prefetched
        w += 2.0 * max(layer_params(model, i, ts).total for i in (0, model.layers - 1)) * 2.0
    per_layer = mean_layer_activation_bytes(model, ts)
    act = per_layer * layers[stage] * in_flight(ts, stage)
    e = 2.0
    tokens = ts.micro_batch * (ts.seq // ts.cp)
    rep = 1.0 / ts.tp if ts.sequence_parallel else 1.0
    if stage == 0 and ts.dropout:
        act += tokens * model.hidden * rep * in_flight(ts, 0)  # embedding dropout mask
    working = 0.0
    if stage == ts.pp - 1:
        vocab = vocab_shard(model, ts.tp)
        act += e * tokens * model.hidden * (rep + 1.0) + 4.0 * tokens * vocab  # norm and head inputs, fp32 logits
        mtp = mtp_modules(model, ts)
        if mtp:  # each module: its decoder layer, its norms' and projection's inputs, the head's again
            one = layer_activation_bytes(model, ts, model.layers - 1) + e * tokens * model.hidden * 4.0
            act += mtp * (one * in_flight(ts, stage) + e * tokens * model.hidden * (rep + 1.0) + 4.0 * tokens * vocab)
        working = max(working, e * tokens * vocab)  # the logits' gradient
    if ts.recompute == "full":
        working = max(working, mean_layer_activation_bytes(model, ts, "none"))
    return TrainMemory(weights=w, gradients=g, optimizer_states=o, activations=act, activation_working=working,
                       reserve=ts.mem_reserve, capacity=hbm * ts.mem_fraction, hbm=hbm, stage=stage)


def memory(model: Model, ts: TrainScenario, hbm: float, layers: list[int] | None = None) -> TrainMemory:
    """The fullest pipeline rank's memory (``layers``: decoder layers per rank, default :func:`stage_layers`)."""
    layers = layers or stage_layers(model, ts)
    candidates = sorted({0, ts.pp - 1, max(range(ts.pp), key=lambda k: layers[k])})
    return max((stage_memory(model, ts, k, layers, hbm) for k in candidates), key=lambda mm: mm.total)


def korthikanti_layer_bytes(s: int, b: int, h: int, a: int, t: int = 1, *, sp: bool = False,
                            recompute: str = "none") -> float:
    """Korthikanti et al. 2022, Table 2: activation bytes per GPT layer (16-bit, dropout, unfused attention)."""
    if recompute == "full":
        return 2.0 * s * b * h / (t if sp else 1)
    score = 0.0 if recompute == "selective" else 5.0 * a * s / h
    if sp:
        return s * b * h / t * (34.0 + score)
    return s * b * h * (10.0 + 24.0 / t + score / t)


__all__ = ["Params", "TrainMemory", "layer_params", "stage_layers", "stage_params", "layer_activation_bytes",
           "in_flight", "state_bytes", "stage_memory", "memory", "korthikanti_layer_bytes"]


def least_recompute(model: Model, ts: TrainScenario, hw: HardwareSpec) -> TrainScenario | None:
    """The layout with the least recompute whose memory fits the part (none, then selective, then full), or None
    where even full recompute does not fit (``--recompute auto``, resolved by
    :func:`perfmodel.train.project.project_training`, and the layout search)."""
    for rec in ("none", "selective", "full"):
        trial = ts.with_(recompute=rec)
        if memory(model, trial, hw.hbm_visible_bytes).fits:
            return trial
    return None
