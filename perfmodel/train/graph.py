"""Training operators for one GPU: the forward of :func:`perfmodel.graph.build_ops`, its backward, recompute.

The forward of one micro-batch is the inference graph's prefill of ``micro_batch`` sequences of ``seq / cp``
tokens (one TP shard, one CP shard), changed where training differs from serving:

- no KV-cache write (a fused rotary kernel takes its place under ``kernels="fused"``);
- the LM head, final norm and a vocabulary-parallel cross-entropy run over every token, not the last one;
- sequence parallelism (Korthikanti et al. 2022) turns each TP all-reduce into an all-gather before the
  block and a reduce-scatter after it, and runs norms, residuals and dropout on ``tokens / tp``;
- context parallelism runs load-balanced ring attention: a causal diagonal block and ``cp - 1`` half-size
  off-diagonal blocks a layer, K and V passed around the ring under the attention compute (Liu et al. 2023,
  TransformerEngine's implementation);
- ``attention="unfused"`` is the pre-FlashAttention Megatron layer: batched QK^T, a fused scale-mask-softmax,
  attention dropout, batched PV, every score materialised in HBM;
- ``dropout`` adds Megatron's fused bias-dropout-add after the attention and MLP blocks;
- MoE experts are spread over ``ep`` data-parallel ranks (Megatron-Core's expert parallelism) with an
  all-to-all dispatch and combine, each expert split ``tp`` ways.

Every forward operator has its backward: a weight GEMM ``X[m,k] W[k,n]`` a data-gradient GEMM ``dY W^T``
(m x k x n) and a weight-gradient GEMM ``X^T dY`` (k x n x m) accumulating into fp32 main gradients; fused
attention a backward of 2.5x its FLOPs (five block matmuls against two: FlashAttention-2, Dao 2023) over
twice its bytes; Gated DeltaNet's chunked recurrence (:mod:`perfmodel.cost.scan`) two scans of its shape (the
states recomputed forward, their gradients walked back; estimate); a memory-bound kernel a backward moving the
streams its gradient needs (:data:`BWD_STREAMS`);
a collective its conjugate (all-reduce <-> all-reduce, all-gather <-> reduce-scatter; with sequence
parallelism one more all-gather of the block input for the weight gradient, overlapped with the
data-gradient GEMM, Korthikanti et al. 2022 section 4.2.2).

``TrainOp.op.count`` is how many times an op runs per layer (a fraction for MoE models whose first layers
are dense) in :func:`layer_ops`, and per micro-batch once a stage is assembled.

Model FLOPs follow the Megatron definition (Narayanan et al. 2021, appendix): every matrix product of the
forward (attention scores and attention over values counted for the whole sequence, no causal saving), twice
that for the backward; norms, activations and the softmax count nothing. Recompute adds its forward again.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

from .. import ops as O
from ..geometry import heads_per_gpu
from ..graph import Step, build_ops
from ..models import Model
from ..resolve import resolve_scenario
from ..routing import copies_per_token
from ..scenario import Scenario
from .scenario import TrainScenario

PASSES = ("forward", "backward", "recompute")

# Backward HBM streams over forward streams for memory-bound kernels, from the tensors each gradient reads
# and writes: a norm reads x and dy and writes dx (3 against 2); SwiGLU reads gate, up and dy and writes
# dgate and dup (5 against 3); GELU reads x and dy and writes dx (3 against 2); rotary rotates the gradient
# back (2 against 2); a residual add sums the two gradient branches (3 against 3); a softmax reads y and dy
# and writes dx (3 against 2); dropout applies the stored mask to dy (same streams); MoE permutes reverse.
BWD_STREAMS = {"rmsnorm": 1.5, "layernorm": 1.5, "swiglu": 5.0 / 3.0, "gelu": 1.5, "rotary": 1.0, "residual": 1.0,
               "reduce": 1.5, "copy": 1.0, "moe_permute": 1.0, "topk": 1.0}
FLASH_BWD_FLOPS = 2.5  # backward / forward matmul work of a flash kernel (S recomputed, dV, dP, dQ, dK)
ACTIVATION_GEMMS = ("attn.scores", "attn.context")  # batched products of two activations (no weight)
# The routed experts' products (a grouped kernel over the local experts; shared experts are dense GEMMs)
EXPERT_GEMMS = ("moe.gate_up", "moe.up", "moe.down")
# the routed pairs' memory-bound ops (their work grows with the rank's pairs, as the products' does)
ROUTED_ELEMENTWISE = ("moe.permute", "moe.unpermute", "moe.swiglu", "moe.gelu")


@dataclass(frozen=True)
class TrainOp:
    """One operator of a training step as one GPU runs it."""

    op: O.Op  # shapes, FLOPs, bytes; count: runs per layer (layer_ops) or per micro-batch (a stage)
    pass_: str  # forward | backward | recompute | step (once per optimizer step)
    role: str  # fwd | dgrad | wgrad | attn_bwd | scan_bwd | mem_bwd | loss | loss_bwd | comm | optimizer
    model_flops: float = 0.0  # per run, Megatron definition (0 for recompute: see hardware FLOPs)
    tp_comm: bool = False  # a tensor-parallel collective (TrainScenario.tp_overlap may hide it)
    hide_under: tuple[str, ...] = ()  # a collective that overlaps these ops of its pass (exposed: the excess)
    stride: int = 1  # rank distance between neighbours of the collective's group in the global order
    fwd: O.Op | None = None  # attention backward: the forward op whose time it scales

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def is_comm(self) -> bool:
        return self.op.kind in O.COMM_KINDS

    def counted(self, n: float) -> "TrainOp":
        return replace(self, op=self.op.with_count(self.op.count * n))


def expert_pass(t: TrainOp) -> str | None:
    """``fwd``, ``dgrad`` or ``wgrad`` for a routed expert's product (forward or recomputed forward, and the two
    products of its backward: :func:`_gemm_backward` names them ``<name>.dgrad`` and ``<name>.wgrad``), else None."""
    if t.op.kind != "gemm":
        return None
    name = t.op.name
    for suffix in (".dgrad", ".wgrad"):
        if name.endswith(suffix):
            return suffix[1:] if name[: -len(suffix)] in EXPERT_GEMMS and t.role == suffix[1:] else None
    return "fwd" if name in EXPERT_GEMMS and t.role == "fwd" else None


def act_dtype(ts: TrainScenario) -> str:
    return "fp16" if ts.dtype == "fp16" else "bf16"


def inference_scenario(ts: TrainScenario) -> Scenario:
    """The serving scenario whose prefill graph is one training micro-batch's forward (no EP: see module doc)."""
    act = act_dtype(ts)
    kw = dict(tp=ts.tp, pp=1, ep=1, dtype=ts.dtype, kv_dtype=act, act_dtype=act, kernels=ts.kernels, mode=ts.mode,
              launch="eager")
    have = {f.name for f in fields(Scenario)}
    if "rotary" in have:  # one fused RoPE kernel (TransformerEngine) or PyTorch's eager calls
        kw["rotary"] = "kernel" if ts.kernels == "fused" else "eager"
    if "attention_kernel" in have:
        kw["attention_kernel"] = ts.attention_kernel
    if "fused_latent_proj" in have:  # Megatron-Core's MLA: linear_q_down_proj and linear_kv_down_proj (estimate)
        kw["fused_latent_proj"] = False
    # resolved for no particular part, as before the part is known (the kernels and launch are set above)
    return resolve_scenario(Scenario(**kw).validated(), None, None)


def _b(dtype: str) -> float:
    return O.bytes_per_element(dtype)


def _scaled(op: O.Op, f: float, **params) -> O.Op:
    """``op`` over ``f`` times as many elements (sequence parallelism shrinks token-wise kernels)."""
    p = dict(op.params)
    for key in ("tokens", "elems"):
        if key in p:
            p[key] = p[key] * f
    p.update(params)
    return replace(op, flops=op.flops * f, bytes=op.bytes * f, params=p)


def _fused(op: O.Op) -> O.Op:
    """A kernel fused into one launch, timed like a simple elementwise kernel (as graph._act_op)."""
    return replace(op, params={**op.params, "fused": True})


# Passes over a quantized GEMM's input per recipe, forward and backward (the backward quantizes the incoming
# gradient), each pass reading the bf16 tensor and writing it quantized. Estimates from what each recipe does
# (TransformerEngine's recipes): a cast with its transpose for the weight-gradient GEMM (1.5); current scaling
# adds a pass for the tensor's amax (2); block and MX scales write rowwise and columnwise copies (1.5); NVFP4
# adds a random Hadamard transform on the weight-gradient inputs and stochastic rounding of the gradients.
RECIPE_PASSES = {"delayed": (1.5, 1.5), "tensorwise": (2.0, 2.0), "block": (1.5, 1.5), "mxfp8": (1.5, 1.5),
                 "nvfp4": (2.5, 2.5)}


# Whether a per-tensor fp8 recipe accumulates each pass's product fast (in the tensor core's accumulator) or split
# (partial sums promoted to fp32 every few K steps, slower): TransformerEngine 2.8's delayed and current scaling
# run the forward fast and both gradients split (transformer_engine/pytorch/module/base.py: _2X_ACC_FPROP = False,
# _2X_ACC_DGRAD = _2X_ACC_WGRAD = True; common/recipe: Float8CurrentScaling's fp8_gemm_* the same). Block scaling
# splits all three.
FP8_FAST_ACCUMULATION = {"fwd": True, "dgrad": False, "wgrad": False}


def recipe(ts: TrainScenario) -> str:
    return "nvfp4" if ts.dtype == "fp4" else ts.fp8_recipe


def _with_recipe(op: O.Op, ts: TrainScenario) -> O.Op:
    """A low-precision GEMM in the recipe's kernel family: per-tensor fp8, block-scaled fp8 (block, MXFP8) or
    NVFP4."""
    if op.params.get("dtype") not in ("fp8", "fp4"):
        return op
    scaling = {"delayed": "tensor", "tensorwise": "tensor", "block": "block", "mxfp8": "block",
               "nvfp4": "nvfp4"}[recipe(ts)]
    return replace(op, params={**op.params, "scaling": scaling})


def _quantize_passes(op: O.Op, ts: TrainScenario, pass_: str) -> O.Op:
    f = RECIPE_PASSES[recipe(ts)][0 if pass_ == "forward" else 1]
    return replace(op, bytes=op.bytes * f, flops=op.flops * f, params={**op.params, "recipe": recipe(ts)})


def _fwd(op: O.Op, model_flops: float = 0.0, **kw) -> TrainOp:
    return TrainOp(op, "forward", "comm" if op.kind in O.COMM_KINDS else "fwd", model_flops, **kw)


def _gemm_model_flops(op: O.Op) -> float:
    return float(op.flops)


# ---------------------------------------------------------------------------------------------------------
# forward of one layer
# ---------------------------------------------------------------------------------------------------------


def layer_ops(model: Model, ts: TrainScenario) -> list[TrainOp]:
    """Forward operators of one decoder layer on one GPU for one micro-batch (counts: per layer)."""
    sc = inference_scenario(ts)
    act = sc.act_dtype
    s_local = ts.seq // ts.cp
    tokens = ts.micro_batch * s_local
    step = Step("prefill", ts.micro_batch, s_local, 0)
    sp = ts.sequence_parallel
    shrink = 1.0 / ts.tp if sp else 1.0
    fused = ts.kernels == "fused"
    out: list[TrainOp] = []
    # training updates every weight in its training format: a checkpoint's narrower inference experts (gpt-oss's
    # MXFP4) and the modules its NVFP4 release keeps in bf16 are not what a training step reads (its memory,
    # perfmodel.train.memory, counts them so too)
    own = model.expert_dtype or model.fp4_unquantized
    raw = build_ops(replace(model, expert_dtype="", fp4_unquantized=()) if own else model, step, sc)
    has_rotary = any(op.name.startswith("attn.rotary") for op in raw)
    for op in raw:
        if op.scope != "layer":
            continue
        op = _training_kernel(op).with_count(op.count / model.layers)
        per = op.count
        name = op.name
        if name == "attn.kv_write":
            if fused and model.position == "rope" and not has_rotary:
                out.append(_fwd(_fused(_rotary(model, ts, tokens, act)).with_count(per)))
            continue
        if is_attention_core(name):  # full, or a sliding-window / chunked layer type's own core
            op = replace(op, count=1.0, params={**op.params, "kernel": op.params.get("kernel", ts.attention_kernel)})
            out += [t.counted(per) for t in _core_attention(model, ts, op)]  # one run, then this type's share
            continue
        if op.kind == "all_reduce":  # the TP 'g' collective at the end of a block
            out += [t.counted(per) for t in _tp_block_end(op, ts, tokens, act)]
            continue
        if op.kind in ("rmsnorm", "layernorm"):
            if ts.dropout and op.params.get("fused_residual"):  # the residual goes to bias-dropout-add instead
                base = O.rmsnorm if op.kind == "rmsnorm" else O.layernorm
                op = base(name, tokens, model.hidden, act, phase=op.phase).with_count(per)
            if sp:
                op = _scaled(op, shrink)
            if sp and name in ("attn.norm", "ffn.norm"):
                out.append(_fwd(op))
                out.append(_sp_gather(f"{name.split('.')[0]}.allgather", tokens, model.hidden, act, ts, per))
                continue
            out.append(_fwd(op))
            continue
        if op.kind == "residual" and sp:
            op = _scaled(op, shrink)
        if op.kind == "gemm":
            out.append(_fwd(_with_recipe(op, ts), _gemm_model_flops(op)))
            continue
        if op.kind == "quantize":
            out.append(_fwd(_quantize_passes(op, ts, "forward")))
            continue
        if op.kind == "scan":  # Gated DeltaNet's chunked recurrence: its products are model FLOPs, in bf16 always
            out.append(_fwd(op, float(op.flops)))
            continue
        out.append(_fwd(op))
    if model.moe is not None:
        out = _moe_expert_parallel(out, model, ts, tokens, act)
    return out


# What the serving graph tags its MoE ops with for an engine's fused MoE module: the grouped kernel's fitted
# efficiency and per-pair routing cost (Profile.gemm_grouped_eta, moe_pair_s) and the module's table class
# (moe_*), all fitted on a serving engine's MoE kernels (vLLM's Triton fused_moe, TensorRT-LLM's).
SERVING_MOE_PARAMS = ("grouped", "pairs", "moe_tokens", "moe_hidden", "moe_width", "moe_top_k", "moe_experts",
                      "moe_ep", "moe_format")


def _training_kernel(op: O.Op) -> O.Op:
    """A training step's expert GEMMs run TransformerEngine's grouped linear (Megatron-Core --moe-grouped-gemm):
    per expert a regular GEMM (cuBLAS on Hopper, CUTLASS grouped on Blackwell), forward, data gradient and weight
    gradient alike, not the serving engine's fused MoE module whose efficiency the profile fitted. So every
    expert product is timed by the dense GEMM model over its groups (each expert's own M, N, K: small per-expert
    GEMMs and the weight gradient's short K pay their tile and wave quantization), the same for the three; the
    routing's permutes are their own memory-bound ops. Before, the forward took the serving engine's grouped
    efficiency and the backward the dense one, so a part's HGX/NVL72 ratio depended on which engine's tables had
    been imported for it (B200: vLLM's, 3.3x slower than dense for DeepSeek-V3's expert GEMMs; GB200:
    TensorRT-LLM's, about dense)."""
    if not any(k in op.params for k in SERVING_MOE_PARAMS):
        return op
    return replace(op, params={k: v for k, v in op.params.items() if k not in SERVING_MOE_PARAMS})


def _rotary(model: Model, ts: TrainScenario, tokens, act: str) -> O.Op:
    """One fused RoPE kernel over the query and key heads (TransformerEngine / Apex fused rope)."""
    hq, hkv = heads_per_gpu(model, ts.tp)
    if model.mla is not None:
        return O.rotary("attn.rotary", tokens, hq + 1, model.mla.qk_rope_head_dim, act, phase="prefill")
    return O.rotary("attn.rotary", tokens, hq + hkv, model.head_dim, act, phase="prefill")


def _dropout_add(prefix: str, tokens, hidden: int, act: str, ts: TrainScenario, fused: bool) -> O.Op:
    """Megatron's fused bias-dropout-add: reads the block output and the residual, writes the sum and a
    one-byte mask (kernels="torch": a dropout and a separate add are the same streams)."""
    t = tokens / ts.tp if ts.sequence_parallel else tokens
    return O.elementwise(f"{prefix}.dropout_add", "residual", reads=2, writes=1, flops_per_elem=3.0, elems=t * hidden,
                         dtype=act, phase="prefill", params={"tokens": t, "hidden": hidden, "fused": fused},
                         extra_bytes=t * hidden)


def _sp_gather(name: str, tokens, hidden: int, act: str, ts: TrainScenario, per: float) -> TrainOp:
    # an all-gather's bytes are its output (NCCL's convention: (p-1)/p of the output crosses each link)
    op = O.collective(name, "all_gather", tokens * hidden * _b(act), ts.tp, phase="prefill", count=per)
    return TrainOp(op, "forward", "comm", tp_comm=True)


def _tp_block_end(op: O.Op, ts: TrainScenario, tokens, act: str) -> list[TrainOp]:
    """The all-reduce that ends a TP block, or (sequence parallel) its reduce-scatter; dropout-add after it."""
    prefix = op.name.split(".")[0]
    out: list[TrainOp] = []
    if ts.sequence_parallel:
        rs = O.collective(f"{prefix}.reducescatter", "reduce_scatter", op.bytes, ts.tp, phase="prefill")
        out.append(TrainOp(rs, "forward", "comm", tp_comm=True))
    else:
        out.append(TrainOp(replace(op, count=1.0), "forward", "comm", tp_comm=True))
    return out


def _place_dropout(ops: list[TrainOp], model: Model, ts: TrainScenario, tokens, act: str) -> list[TrainOp]:
    """Megatron's bias-dropout-add at the end of the attention block and of the MLP block (after the TP
    all-reduce or reduce-scatter); it also does the residual add, so a separate residual op goes."""
    if not ts.dropout:
        return ops
    fused = ts.kernels == "fused"

    def block(t: TrainOp) -> str:
        return "attn" if t.name.startswith("attn.") else "mlp"

    out: list[TrainOp] = []
    for i, t in enumerate(ops):
        if t.op.kind == "residual" and t.name.endswith(".residual"):
            continue
        out.append(t)
        nxt = ops[i + 1] if i + 1 < len(ops) else None
        if nxt is None or block(nxt) != block(t):
            prefix = "attn" if block(t) == "attn" else "ffn"
            out.append(_fwd(_dropout_add(prefix, tokens, model.hidden, act, ts, fused)))
    return out


def _core_attention(model: Model, ts: TrainScenario, core: O.Op) -> list[TrainOp]:
    """The attention core: flash (one causal kernel; with CP the ring's blocks) or unfused (Megatron 2021)."""
    p = core.params
    b, hq, hkv, s, d, dv = p["batch"], p["heads_q"], p["heads_kv"], p["seq_q"], p["head_dim"], p["head_dim_v"]
    window = p.get("window") or s
    # one block's FLOPs without the causal saving (Megatron's count); a window bounds the keys per query
    dense = 2.0 * b * hq * s * min(window, s) * (d + dv)
    act = p["dtype"]
    if ts.attention == "unfused":
        groups = b * hq
        scores = O.gemm("attn.scores", s, s, d, act, phase="prefill", groups=groups)
        softmax = O.elementwise("attn.softmax", "reduce", reads=1, writes=1, flops_per_elem=5.0, elems=groups * s * s,
                                dtype=act, phase="prefill", params={"rows": groups * s, "row_len": s})
        out = [_fwd(scores, float(scores.flops)), _fwd(softmax)]
        if ts.dropout:
            drop = O.elementwise("attn.dropout", "copy", reads=1, writes=1, flops_per_elem=2.0, elems=groups * s * s,
                                 dtype=act, phase="prefill", extra_bytes=groups * s * s,
                                 params={"elems": groups * s * s})
            out.append(_fwd(drop))
        context = O.gemm("attn.context", s, dv, s, act, phase="prefill", groups=groups)
        out.append(_fwd(context, float(context.flops)))
        return out
    out = [_fwd(core, dense)]
    if ts.cp > 1 and window >= s:  # a window within the local chunk needs no other rank's keys (estimate: the
        # one neighbour chunk a window straddling the boundary reads is left out)
        ring = O.attention("attn.core_ring", b, hq, hkv, s, s / 2.0, d, head_dim_v=dv, causal=False, dtype=act,
                           phase="prefill", count=ts.cp - 1)
        ring = replace(ring, params={**ring.params, "kernel": p.get("kernel", "auto")})
        out.append(_fwd(ring, dense))
        kv = O.collective("attn.cp_kv", "p2p", b * hkv * s * (d + dv) * _b(act), 2, phase="prefill",
                          count=ts.cp - 1)
        out.append(TrainOp(kv, "forward", "comm", hide_under=("attn.core", "attn.core_ring"), stride=ts.tp))
    return out


def _moe_expert_parallel(ops: list[TrainOp], model: Model, ts: TrainScenario, tokens, act: str) -> list[TrainOp]:
    """Spread the routed experts over ``ep`` data-parallel ranks: each rank computes its own tokens' top-k
    pairs on num_experts / ep experts, after an all-to-all dispatch and before a combine. The step waits for the
    busiest rank, which gets ``moe_imbalance`` times the mean rank's pairs: its routed products and permutes run
    that many times the mean's kernels (the kernels keep the mean's shape: a fractional row count would price an
    unaligned product the padded kernels do not run) and its all-to-all moves that much more; the model FLOPs stay
    the useful work, the uniform routing's."""
    moe = model.moe
    assert moe is not None
    if ts.ep == 1:
        return ops
    h = model.hidden
    imbalance = ts.moe_imbalance
    pairs = tokens * moe.top_k
    local = moe.num_experts // ts.ep
    per_expert = pairs / local
    out: list[TrainOp] = []
    flex = ts.moe_dispatcher in ("deepep", "hybridep")
    # alltoall: a copy per routed pair; flex: a token once per rank holding any of its experts (once per remote
    # node across nodes: the kernels' per_node sending, perfmodel.routing)
    copies = copies_per_token(moe, ts.ep) if flex else moe.top_k
    a2a = tokens * copies * h * _b(act) * imbalance

    def exchange(name: str, direction: str, count: float) -> O.Op:
        if not flex:
            return O.collective(name, "all_to_all", a2a, ts.ep, phase="prefill", count=count)
        kernel = f"normal.{direction}"
        if ts.moe_dispatcher == "hybridep":  # inside a domain the link's rate (no kernel measured), across DeepEP's
            per_node = O.per_node_copies(tokens * imbalance, h * _b(act), moe, kernel=kernel)
            return O.collective(name, "all_to_all", a2a, ts.ep, phase="prefill", count=count, per_node=per_node)
        per_node = O.per_node_copies(tokens * imbalance, h * _b(act), moe)
        return O.collective(name, "all_to_all", a2a, ts.ep, phase="prefill", count=count,
                            kernel=kernel, experts=moe.num_experts, per_node=per_node)
    for t in ops:
        op = t.op
        if op.name in EXPERT_GEMMS:
            p = op.params
            new = O.gemm(op.name, per_expert, p["n"], p["k"], p["dtype"], phase="prefill", groups=local,
                         out_dtype=p["out_dtype"], weight_dtype=p.get("weights")).with_count(op.count * imbalance)
            # the kernel of EP 1 (_training_kernel): spreading the experts over ranks changes the groups only
            kept = {k: p[k] for k in ("scaling",) if k in p}
            new = O.Op(new.name, new.kind, new.phase, new.flops, new.bytes, {**new.params, **kept}, new.count,
                       new.scope)
            t = replace(t, op=new, model_flops=float(new.flops) / imbalance)
        elif op.name in ROUTED_ELEMENTWISE:
            t = replace(t, op=op.with_count(op.count * imbalance))
        # overlapped (ts.a2a_hidden): exposed only where it exceeds its pass's compute, which another
        # micro-batch's chunk runs meanwhile (hide_under "*")
        hide = ("*",) if ts.a2a_hidden else ()
        if op.name == "moe.unpermute":
            comb = exchange("moe.combine", "combine", op.count)
            out.append(TrainOp(comb, "forward", "comm", stride=ts.tp, hide_under=hide))
        out.append(t)
        if op.name == "moe.permute":
            disp = exchange("moe.dispatch", "dispatch", op.count)
            out.append(TrainOp(disp, "forward", "comm", stride=ts.tp, hide_under=hide))
    return out


def layer_forward(model: Model, ts: TrainScenario) -> list[TrainOp]:
    """:func:`layer_ops` with Megatron's bias-dropout-add placed when ``dropout`` (counts: per layer)."""
    sc_act = act_dtype(ts)
    tokens = ts.micro_batch * (ts.seq // ts.cp)
    return _place_dropout(layer_ops(model, ts), model, ts, tokens, sc_act)


# ---------------------------------------------------------------------------------------------------------
# embedding, LM head and loss (model-level, first and last pipeline stage)
# ---------------------------------------------------------------------------------------------------------


VOCAB_MULTIPLE = 128  # Megatron pads the vocabulary to a multiple of 128 x tp (--make-vocab-size-divisible-by)


def vocab_shard(model: Model, tp: int) -> int:
    """Rows of the (padded) vocabulary one TP rank holds."""
    unit = VOCAB_MULTIPLE * tp
    return -(-model.vocab // unit) * unit // tp


def embedding_forward(model: Model, ts: TrainScenario) -> list[TrainOp]:
    act = act_dtype(ts)
    tokens = ts.micro_batch * (ts.seq // ts.cp)
    h = model.hidden
    out = [_fwd(O.elementwise("embed", "embedding", reads=1, writes=1, flops_per_elem=0.0, elems=tokens * h,
                              dtype=act, phase="prefill", scope="model", params={"tokens": tokens, "hidden": h}))]
    if ts.tp > 1:  # vocabulary-parallel embedding: partial rows summed over the TP ranks
        kind = "reduce_scatter" if ts.sequence_parallel else "all_reduce"
        op = O.collective("embed.allreduce", kind, tokens * h * _b(act), ts.tp, phase="prefill", scope="model")
        out.append(TrainOp(op, "forward", "comm", tp_comm=True))
    if ts.dropout:
        t = tokens / ts.tp if ts.sequence_parallel else tokens
        out.append(_fwd(O.elementwise("embed.dropout", "copy", reads=1, writes=1, flops_per_elem=2.0, elems=t * h,
                                      dtype=act, phase="prefill", scope="model", extra_bytes=t * h,
                                      params={"elems": t * h})))
    return out


def head_forward(model: Model, ts: TrainScenario) -> list[TrainOp]:
    """Final norm, LM head over every token, vocabulary-parallel cross-entropy (Megatron's)."""
    act = act_dtype(ts)
    tokens = ts.micro_batch * (ts.seq // ts.cp)
    h = model.hidden
    v = vocab_shard(model, ts.tp)
    norm = O.rmsnorm if model.norm == "rmsnorm" else O.layernorm
    nt = tokens / ts.tp if ts.sequence_parallel else tokens
    out = [_fwd(norm("final.norm", nt, h, act, phase="prefill", scope="model"))]
    if ts.sequence_parallel:
        op = O.collective("final.allgather", "all_gather", tokens * h * _b(act), ts.tp, phase="prefill", scope="model")
        out.append(TrainOp(op, "forward", "comm", tp_comm=True))
    head = O.gemm("lm_head", tokens, v, h, act, phase="prefill", scope="model")
    out.append(_fwd(head, float(head.flops)))
    # softmax statistics in fp32: read the logits, keep fp32 probabilities for the backward
    xent = O.elementwise("loss.xent", "reduce", reads=0, writes=0, flops_per_elem=5.0, elems=tokens * v, dtype=act,
                         phase="prefill", scope="model", extra_bytes=tokens * v * (_b(act) + 4.0),
                         params={"tokens": tokens, "vocab": v})
    out.append(TrainOp(xent, "forward", "loss"))
    if ts.tp > 1:  # max, sum of exponentials and the target logit, each summed over the vocabulary shards
        op = O.collective("loss.allreduce", "all_reduce", tokens * 4.0, ts.tp, phase="prefill", scope="model",
                          count=3)
        out.append(TrainOp(op, "forward", "comm", tp_comm=True))
    return out


def mtp_modules(model: Model, ts: TrainScenario) -> int:
    """Multi-token-prediction modules trained: the scenario's count, else the model's own."""
    return model.mtp_layers if ts.mtp_layers is None else ts.mtp_layers


def mtp_forward(model: Model, ts: TrainScenario) -> list[TrainOp]:
    """What one MTP module adds around its decoder layer and its pass through the shared LM head and loss
    (DeepSeek-V3 report sec. 2.2, Megatron-Core's MultiTokenPredictionLayer): the embedding of the next
    tokens, RMSNorm of the hidden state and of that embedding, and the projection of their concatenation
    ``[tokens, 2h] x [2h, h]`` (replicated over TP ranks in DeepSeek's design; a column-parallel shard here,
    Megatron's)."""
    act = act_dtype(ts)
    tokens = ts.micro_batch * (ts.seq // ts.cp)
    h = model.hidden
    out = [_fwd(O.elementwise("mtp.embed", "embedding", reads=1, writes=1, flops_per_elem=0.0, elems=tokens * h,
                              dtype=act, phase="prefill", scope="model", params={"tokens": tokens, "hidden": h}))]
    norm = O.rmsnorm if model.norm == "rmsnorm" else O.layernorm
    out.append(_fwd(norm("mtp.hnorm", tokens, h, act, phase="prefill", scope="model")))
    out.append(_fwd(norm("mtp.enorm", tokens, h, act, phase="prefill", scope="model")))
    proj = O.gemm("mtp.eh_proj", tokens, -(-h // ts.tp), 2 * h, act, phase="prefill", scope="model")
    out.append(_fwd(proj, float(proj.flops)))
    return out


# ---------------------------------------------------------------------------------------------------------
# backward and recompute
# ---------------------------------------------------------------------------------------------------------


def backward(fwd: list[TrainOp], ts: TrainScenario) -> list[TrainOp]:
    """The backward of a list of forward ops, in backward order."""
    out: list[TrainOp] = []
    gathers = _gather_consumers(fwd)
    for t in reversed(fwd):
        op = t.op
        bw = replace(op, name=f"{op.name}.bwd")
        if t.role == "loss":
            # read the fp32 probabilities, write the logits' gradient
            nb = op.params["tokens"] * op.params["vocab"] * (4.0 + _b(act_dtype(ts)))
            out.append(TrainOp(replace(bw, bytes=nb, flops=op.flops / 5.0), "backward", "loss_bwd"))
        elif op.kind == "gemm":
            out += _gemm_backward(t, ts)
        elif op.kind == "attention":
            flops = op.flops * FLASH_BWD_FLOPS
            out.append(TrainOp(replace(bw, flops=flops, bytes=2.0 * op.bytes, params={**op.params, "bwd": True}),
                               "backward", "attn_bwd", 2.0 * t.model_flops, fwd=op))
        elif t.is_comm:
            out += _comm_backward(t, ts, gathers)
        elif op.kind == "embedding":
            # scatter-add of dY into the fp32 gradient rows: read dY, read and write the rows
            elems = op.params["tokens"] * op.params["hidden"]
            nb = elems * (_b(act_dtype(ts)) + 8.0)
            out.append(TrainOp(replace(bw, bytes=nb), "backward", "mem_bwd"))
        elif op.kind == "scan":
            # flash-linear-attention's backward recomputes the chunk states forward and walks the chunks back for
            # their gradients: two scans of the forward's shape (estimate), twice its products
            out.append(TrainOp(replace(bw, count=2.0 * op.count), "backward", "scan_bwd", t.model_flops, fwd=op))
        elif op.kind == "quantize":  # the incoming gradient quantized for the backward GEMMs
            base = replace(bw, bytes=op.bytes / RECIPE_PASSES[recipe(ts)][0], flops=op.flops / RECIPE_PASSES[recipe(ts)][0])
            out.append(TrainOp(_quantize_passes(base, ts, "backward"), "backward", "mem_bwd"))
        else:
            f = BWD_STREAMS.get(op.kind, 1.0)
            out.append(TrainOp(replace(bw, bytes=op.bytes * f, flops=op.flops * f), "backward", "mem_bwd"))
    return out


def _gemm_backward(t: TrainOp, ts: TrainScenario) -> list[TrainOp]:
    op = t.op
    p = op.params
    m, n, k, g, dt = p["m"], p["n"], p["k"], p["groups"], p["dtype"]
    act = act_dtype(ts)
    if op.name in ACTIVATION_GEMMS:  # C = A B with both operands activations: dA = dC B^T, dB = A^T dC
        da = O.gemm(f"{op.name}.dgrad_a", m, k, n, dt, phase="prefill", groups=g, out_dtype=act, scope=op.scope)
        db = O.gemm(f"{op.name}.dgrad_b", k, n, m, dt, phase="prefill", groups=g, out_dtype=act, scope=op.scope)
        return [TrainOp(da.with_count(op.count), "backward", "dgrad", float(da.flops)),
                TrainOp(db.with_count(op.count), "backward", "dgrad", float(db.flops))]
    dgrad = _with_recipe(O.gemm(f"{op.name}.dgrad", m, k, n, dt, phase="prefill", groups=g, out_dtype=act,
                                scope=op.scope), ts)
    wgrad = _with_recipe(O.gemm(f"{op.name}.wgrad", k, n, m, dt, phase="prefill", groups=g, out_dtype=ts.grad_dtype,
                                scope=op.scope), ts)
    # gradient-accumulation fusion: the weight gradient is added to the main gradient buffer (read it too)
    wgrad = replace(wgrad, bytes=wgrad.bytes + g * k * n * _b(ts.grad_dtype))
    return [TrainOp(dgrad.with_count(op.count), "backward", "dgrad", float(dgrad.flops)),
            TrainOp(wgrad.with_count(op.count), "backward", "wgrad", float(wgrad.flops))]


def _gather_consumers(fwd: list[TrainOp]) -> dict[str, str]:
    """Sequence parallel: the weight GEMM that consumes each all-gathered block input."""
    out: dict[str, str] = {}
    pending = None
    for t in fwd:
        if t.is_comm and t.op.kind == "all_gather" and t.tp_comm:
            pending = t.name
        elif pending and t.op.kind == "gemm" and t.name not in ACTIVATION_GEMMS:
            out[pending] = t.name
            pending = None
    return out


def _comm_backward(t: TrainOp, ts: TrainScenario, gathers: dict[str, str]) -> list[TrainOp]:
    op = t.op
    kind = op.kind
    name = op.name
    if name in ("loss.allreduce",):
        return []
    if name == "embed.allreduce":  # the gradient of a sum over ranks is the same on every rank: nothing to move
        return []
    if kind == "p2p":  # ring attention: K, V and their gradients travel back around the ring
        bw = replace(op, name=f"{name}.bwd", bytes=2.0 * op.bytes, params={**op.params, "bytes": 2.0 * op.bytes})
        hide = tuple(f"{h}.bwd" for h in t.hide_under)
        return [TrainOp(bw, "backward", "comm", hide_under=hide, stride=t.stride)]
    conj = {"all_reduce": "all_reduce", "all_gather": "reduce_scatter", "reduce_scatter": "all_gather",
            "all_to_all": "all_to_all"}[kind]
    params = op.params
    swap = {"normal.dispatch": "normal.combine", "normal.combine": "normal.dispatch"}
    if params.get("kernel") in swap:  # the gradient of a dispatch is a combine, and back
        params = {**params, "kernel": swap[params["kernel"]]}
    if (params.get("per_node") or {}).get("kernel") in swap:
        params = {**params, "per_node": {**params["per_node"], "kernel": swap[params["per_node"]["kernel"]]}}
    bw = replace(op, name=f"{name}.bwd", kind=conj, params=params)
    hidden = ("*",) if t.hide_under == ("*",) else ()  # an overlapped all-to-all's gradient overlaps too
    out = [TrainOp(bw, "backward", "comm", tp_comm=t.tp_comm, stride=t.stride, hide_under=hidden)]
    if kind == "all_gather" and t.tp_comm and name in gathers:
        again = replace(op, name=f"{name}.wgrad_input")
        out.append(TrainOp(again, "backward", "comm", tp_comm=False, hide_under=(f"{gathers[name]}.dgrad",),
                           stride=t.stride))
    return out


def head_backward(head: list[TrainOp], ts: TrainScenario) -> list[TrainOp]:
    out = backward(head, ts)
    if ts.tp > 1 and not ts.sequence_parallel:
        # the LM head's input is copied to every TP rank: its gradient is summed over them
        act = act_dtype(ts)
        tokens = ts.micro_batch * (ts.seq // ts.cp)
        h = head[0].op.params.get("hidden", 0)
        op = O.collective("lm_head.allreduce.bwd", "all_reduce", tokens * h * _b(act), ts.tp, phase="prefill",
                          scope="model")
        idx = next((i for i, t in enumerate(out) if t.name == "lm_head.dgrad"), len(out) - 1)
        out.insert(idx + 1, TrainOp(op, "backward", "comm", tp_comm=True))
    return out


SELECTIVE = ("attn.core", "attn.core_ring", "attn.cp_kv", "attn.scores", "attn.softmax", "attn.dropout",
             "attn.context")


def is_attention_core(name: str) -> bool:
    """The attention core of any layer type: ``attn.core`` (full) or ``attn.core.<kind>`` (sliding, chunked)."""
    return name == "attn.core" or name.startswith("attn.core.")


def is_selective(name: str) -> bool:
    """Recomputed under selective recomputation: the attention core and its pieces, of every layer type."""
    return name in SELECTIVE or is_attention_core(name)


def recompute(fwd: list[TrainOp], ts: TrainScenario) -> list[TrainOp]:
    """The forward ops run again before the backward: the whole layer (full) or its attention core
    (selective, Korthikanti et al. 2022). Their FLOPs count in hardware FLOPs only."""
    if ts.recompute == "none":
        return []
    keep = fwd if ts.recompute == "full" else [t for t in fwd if is_selective(t.name)]
    return [replace(t, pass_="recompute", op=replace(t.op, name=f"{t.op.name}.recompute"),
                    hide_under=t.hide_under if t.hide_under == ("*",) else
                    tuple(f"{h}.recompute" for h in t.hide_under)) for t in keep]
