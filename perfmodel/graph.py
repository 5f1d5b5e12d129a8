"""Model + step -> operators, for one GPU of the parallel layout.

A *step* is one forward pass: ``batch`` sequences each adding ``seq`` new tokens on top of ``context``
tokens already in the KV cache (prefill: seq = prompt length, context = 0; decode: seq = 1).

Ops are those one GPU runs: tensor parallelism splits heads and FFN widths (KV heads are replicated
when there are fewer than TP ranks), expert parallelism splits the experts, pipeline parallelism
splits the layers. Each op's ``count`` is how many layers run it, over the whole pipeline; a stage
runs 1/pp of them. Shapes may be numpy arrays (``batch``, ``seq``, ``context``), for sweeps.

Nothing here knows about hardware.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from . import ops as O
from .errors import InputError
from .geometry import (INDEXER_FORMAT, attention_layer_kinds, expert_format, expert_product_format, heads_per_gpu,
                       module_format,
                       linear_layers)
from .models import Model, is_moe_layer
from .routing import copies_per_token, default_routing, ranks_per_token  # noqa: F401 (ranks_per_token: re-exported)
from .scenario import Scenario, require_resolved
from .vision import encoder_ops


@dataclass(frozen=True)
class Step:
    phase: str  # prefill | decode
    batch: object  # sequences (int or array)
    seq: object  # new tokens per sequence
    context: object  # tokens already cached per sequence
    # with attention data parallelism: None, the step is the whole instance's (its sequences dealt whole over the
    # attention-DP ranks, the busiest rank's share timed: rank_step); else the step is one rank's own and this is
    # the MoE group's tokens that step (every rank's together), as a serving simulation's ranks carry unequal work
    group_tokens: object = None


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def check_layout(model: Model, sc: Scenario) -> list[str]:
    """Refuse a parallel layout or sequence length no engine runs (one-line InputError); return notes on
    what engines do where they pad or replicate, for the projection's assumptions."""
    notes: list[str] = []
    tp, name = sc.tp, model.name
    if model.heads % tp:
        raise InputError(f"--tp {tp} does not divide the {model.heads} attention heads of {name} "
                         "(engines shard heads evenly)", field="--tp")
    if model.mla is None:
        if model.kv_heads >= tp and model.kv_heads % tp:
            raise InputError(f"--tp {tp} does not divide the {model.kv_heads} KV heads of {name}", field="--tp")
        if model.kv_heads < tp and tp % model.kv_heads:
            raise InputError(f"--tp {tp} is not a multiple of the {model.kv_heads} KV heads of {name}: they "
                             "cannot be replicated evenly", field="--tp")
    if sc.pp > model.layers:
        raise InputError(f"--pp {sc.pp} is more stages than the {model.layers} layers of {name}", field="--pp")
    if sc.pp > 1 and model.layers % sc.pp:
        notes.append(f"{model.layers} layers over {sc.pp} stages: the fullest stage has "
                     f"{_ceil_div(model.layers, sc.pp)} and sets the pace")
    if sc.mtp and sc.draft is None and not model.mtp_layers:
        raise InputError(f"{name} publishes no multi-token-prediction layer to draft {sc.mtp} tokens with (its "
                         "config's num_nextn_predict_layers or the like is 0): name a draft model with --draft",
                         field="--mtp")
    if model.max_position and sc.prompt + sc.osl > model.max_position:
        images = f" + {sc.image_tokens} image tokens" if sc.image_tokens else ""
        raise InputError(f"--isl {sc.isl}{images} + --osl {sc.osl} exceeds the {model.max_position}-token context of "
                         f"{name}", field="--isl")
    if model.moe is None:
        if sc.ep > 1:
            raise InputError(f"--ep {sc.ep} on {name}, which has no experts", field="--ep")
    else:
        moe = model.moe
        if moe.top_k > moe.num_experts:
            raise InputError(f"top_k {moe.top_k} is more than the {moe.num_experts} experts of {name}",
                             field="moe.top_k")
        if moe.num_experts % sc.ep:
            raise InputError(f"--ep {sc.ep} does not divide the {moe.num_experts} experts of {name}", field="--ep")
    if model.intermediate % tp:
        notes.append(f"FFN width {model.intermediate} is not a multiple of TP {tp}: shards padded to "
                     f"{_ceil_div(model.intermediate, tp)}")
    return notes


def _windowed(core: O.Op, window: int) -> O.Op:
    """The attention core op of a sliding-window layer: the same shapes, at most ``window`` keys per query."""
    p = core.params
    op = O.attention(core.name, p["batch"], p["heads_q"], p["heads_kv"], p["seq_q"], p["seq_kv"], p["head_dim"],
                     causal=p["causal"], dtype=p["dtype"], head_dim_v=p["head_dim_v"], kv_dtype=p["kv_dtype"],
                     phase=core.phase, window=window)
    extra = {k: v for k, v in p.items() if k not in op.params}
    return O.Op(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, **extra}, core.count, core.scope,
                core.kernels)


def layer_counts(model: Model) -> dict[str, int]:
    """How many layers of each block type the model has (dense FFN or MoE FFN)."""
    moe = sum(1 for i in range(model.layers) if is_moe_layer(model, i))
    return {"dense": model.layers - moe, "moe": moe}


def allreduce_norm_layout(model: Model, sc: Scenario) -> bool:
    """Whether the engine folds the model's RMSNorms into its TP all-reduces in this layout, whatever the step's
    tokens (:func:`allreduce_folds_norm`): a listed family, TP, no attention data parallelism or all-to-all."""
    if model.family not in (sc.allreduce_norm or ()) or sc.tp < 2 or sc.attention_dp > 1 or sc.kernels != "fused":
        return False
    return not (sc.moe_exchange == "all_to_all" and sc.ep > 1)


def allreduce_folds_norm(model: Model, sc: Scenario, ph: str, tokens) -> bool:
    """Whether the engine runs each TP all-reduce with the residual add and RMSNorm after it as one kernel
    (:attr:`Scenario.allreduce_norm`: SGLang's FlashInfer all-reduce fusion for some families): with TP, without
    attention data parallelism or an all-to-all, in steps of at most ALLREDUCE_NORM_TOKENS tokens. A step whose
    tokens are an array or a spreadsheet cell is taken as folded when it decodes (its batch at most the limit)."""
    from .engines import ALLREDUCE_NORM_TOKENS

    if not allreduce_norm_layout(model, sc):
        return False
    if isinstance(tokens, (int, float)):
        return tokens <= ALLREDUCE_NORM_TOKENS
    return ph == "decode"


def rank_step(step: Step, dp: int, pad: bool = False) -> tuple[Step, object]:
    """(the step one attention-DP rank runs, the MoE group's tokens) of ``step`` over ``dp`` ranks: an instance's
    step deals its sequences whole over the ranks, the busiest taking ceil(batch / dp) of them, and the MoE layers
    meet every rank's actual tokens (batch x seq), or with ``pad`` (:meth:`Scenario.pads_ranks`) dp x the busiest
    rank's; a rank's own step (``group_tokens`` given) as it is."""
    if step.group_tokens is not None:
        return step, step.group_tokens
    tokens = step.batch * step.seq
    if dp == 1:
        return step, tokens
    xp = O.backend_of(step.batch)
    busiest = Step(step.phase, xp.ceil(step.batch / dp), step.seq, step.context)
    return busiest, (dp * busiest.batch * step.seq if pad else tokens)


def build_ops(model: Model, step: Step, sc: Scenario) -> list[O.Op]:
    """Every operator of one forward step on one GPU (all pipeline stages counted; see module doc). With attention
    data parallelism the GPU is the busiest attention-DP rank's, or the rank a step names (:func:`rank_step`).

    ``sc`` is resolved for the part (:func:`perfmodel.resolve.resolve_scenario`)."""
    require_resolved(sc, "graph.build_ops")
    ph = step.phase
    step, group_tokens = rank_step(step, sc.attention_dp, sc.pads_ranks(ph))
    tokens = step.batch * step.seq
    act = sc.act_dtype
    w = sc.dtype
    counts = layer_counts(model)
    out: list[O.Op] = []

    fused = sc.kernels == "fused"
    attn = _mla_attention if model.mla is not None else _attention
    n_linear = linear_layers(model)
    n_attn = model.layers - n_linear  # softmax-attention layers; the others run Gated DeltaNet
    attn_ops = attn(model, step, sc, tokens) if n_attn else []
    # the block's end, the same whichever mixer the layer runs
    block_end = []
    if sc.tp > 1:
        block_end.append(O.collective("attn.allreduce", "all_reduce", tokens * model.hidden * _b(act), sc.tp, phase=ph))
    if not fused:  # fused kernels add the residual inside the next norm
        block_end.append(O.residual("attn.residual", tokens, model.hidden, act, phase=ph))
    norm = _norm(model, fused)
    # folded: each norm runs inside the all-reduce before it (the first layer's input norm neglected)
    folded = allreduce_folds_norm(model, sc, ph, tokens)
    if not folded:
        out.append(norm("attn.norm", tokens, model.hidden, act, phase=ph).with_count(model.layers))
    if n_linear:
        out += [op.with_count(n_linear) for op in _linear_attention(model, step, sc, tokens)]
    for op in attn_ops:
        if op.name != "attn.core":
            out.append(op.with_count(n_attn))
            continue
        # layers of each attention type (full, sliding window, chunked) run their own core
        for kind, (n, window) in attention_layer_kinds(model).items():
            core = op if not window else _windowed(op, window)
            out.append(core.with_count(n) if kind == "full" else
                       O.Op(f"attn.core.{kind}", core.kind, core.phase, core.flops, core.bytes, core.params, n,
                            core.scope, core.kernels))

    out += [op.with_count(model.layers) for op in block_end]  # after the mixer, whichever the layer runs

    if not folded:
        out.append(norm("ffn.norm", tokens, model.hidden, act, phase=ph).with_count(model.layers))
    if getattr(model, "sandwich_norm", False):  # Gemma 2/3 also normalise each block's output: two more a layer
        post = O.rmsnorm("post.norm", tokens, model.hidden, act, phase=ph)
        out.append(_act_op(post, sc).with_count(2 * model.layers))
    if counts["dense"]:
        w_dense = module_format(model, sc, "dense_layers") if model.moe is not None else w  # a MoE's first layers
        out += [op.with_count(counts["dense"]) for op in _dense_ffn(model, ph, sc, tokens, w_dense, act, prefix="ffn")]
    if counts["moe"]:
        out += [op.with_count(counts["moe"]) for op in _moe_ffn(model, ph, sc, tokens, w, act, group_tokens)]

    if model.draft_fuses:  # an EAGLE head: the target's hidden states fused into its layer's input
        out += _eagle_fusion(model, sc, tokens, w, ph)
    # Model-level ops. Prefill needs logits at each sequence's last position only; a decode step at every new
    # position (one, or a speculative verify step's 1 + K: each draft token is checked against the target's
    # own distribution at its position, so the engines run the LM head over all of them)
    rows = step.batch * step.seq if ph == "decode" else step.batch
    out.append(O.elementwise("embed", "embedding", reads=1, writes=1, flops_per_elem=0.0,
                             elems=tokens * model.hidden, dtype=act, phase=ph, scope="model",
                             params={"tokens": tokens, "hidden": model.hidden}))
    out.append(norm("final.norm", rows, model.hidden, act, phase=ph, scope="model"))
    vocab = _ceil_div(model.vocab, sc.tp)
    out.append(O.gemm("lm_head", rows, vocab, model.hidden, w if w != "fp4" else "fp8", phase=ph,
                      out_dtype="fp32", scope="model"))
    if sc.tp > 1:
        out.append(O.collective("lm_head.allgather", "all_gather", rows * vocab * sc.tp * 4.0, sc.tp, phase=ph,
                                scope="model"))
    # the next tokens picked from the gathered logits (every rank samples alike)
    out.append(O.sample("sample", rows, model.vocab, sc.sampling, phase=ph, scope="model"))
    if sc.pp > 1:
        out.append(O.collective("pp.send", "p2p", tokens * model.hidden * _b(act), 2, phase=ph, scope="model",
                                count=sc.pp - 1, span="auto"))
    if ph == "prefill" and sc.image_tokens and getattr(model, "vision", None) is not None:
        # the vision encoder over the prefilling requests' images, before the LLM reads their tokens
        out = encoder_ops(model, sc, step.batch, ph) + out
    if sc.kernels == "hf":
        out = hf_eager(out, model, step, sc)
    return [q for op in out for q in _quantized(op, model, sc)]


# Hugging Face transformers' eager decoder layer (LlamaDecoderLayer and its relatives), as measured on the H200
# (calibration/h200/hf/kernels.csv): LlamaRMSNorm is eight kernels over fp32 copies (to fp32, pow, mean, add,
# rsqrt, mul, to bf16, weight mul: about 36 bytes an element against a fused norm's 4); rotary five kernels a
# tensor; SiLU and the product two; q, k, v and gate, up separate products.
HF_NORM_KERNELS = 8
HF_NORM_BYTES = 36.0  # bytes moved per element by the eight kernels (bf16 in and out, fp32 between)
HF_ROTARY_KERNELS = 5
_HF_SPLIT = {"attn.qkv": ("attn.q", "attn.k", "attn.v"), "ffn.gate_up": ("ffn.gate", "ffn.up")}


def hf_eager(ops: list[O.Op], model: Model, step: Step, sc: Scenario) -> list[O.Op]:
    """A step's operators as transformers' eager modules run them: products split as the modules hold them,
    norms, rotary and activations as the eager kernels they launch, and the KV cache as its cache class keeps it
    (dynamic: a concatenation of the whole cache each step; static: max_cache_len = isl + osl keys, expanded to
    every query head and attended in full).

    A decode step replayed from a CUDA graph is transformers' compiled path (static cache, ``torch.compile``
    mode reduce-overhead; ``--launch auto|graph``): Inductor fuses each norm, rotary and activation into one
    kernel, while the products stay cuBLAS's (split as the modules hold them) and the static cache keeps its
    eager structure: ``repeat_kv`` still materialises K and V for every query head (as a fused Triton copy) and
    cuDNN attends over all max_cache_len slots (calibration/h200/hf/compile/kernels.csv). Prefill runs eager
    either way (transformers compiles the decode step only)."""
    hq, hkv = heads_per_gpu(model, sc.tp)
    d = model.head_dim
    compiled = step.phase == "decode" and sc.launch_for("decode") == "graph"
    out: list[O.Op] = []
    for op in ops:
        if op.name in _HF_SPLIT and op.kind == "gemm":
            m, k = op.params["m"], op.params["k"]
            widths = ((hq * d, hkv * d, hkv * d) if op.name == "attn.qkv" else (op.params["n"] // 2,) * 2)
            out += [_hf_gemm(O.gemm(name, m, n, k, op.params["dtype"], phase=op.phase, count=op.count, scope=op.scope))
                    for name, n in zip(_HF_SPLIT[op.name], widths)]
        elif op.kind == "gemm":
            out.append(_hf_gemm(op))
        elif compiled and op.kind in ("rmsnorm", "layernorm", "rotary", "swiglu", "gelu"):
            out.append(dataclasses.replace(op, params={**op.params, "fused": True}))  # one Inductor kernel each
        elif op.kind in ("rmsnorm", "layernorm"):
            elems = op.params["tokens"] * op.params["hidden"]
            modules = 2 if op.name == "attn.qk_norm" else 1  # q_norm and k_norm: two modules, one op here
            out.append(O.elementwise(op.name, "copy", reads=0, writes=0, flops_per_elem=6.0, elems=elems,
                                     dtype=op.params["dtype"], phase=op.phase, count=op.count, scope=op.scope,
                                     extra_bytes=HF_NORM_BYTES * elems, kernels=HF_NORM_KERNELS * modules,
                                     params={"elems": elems}))
        elif op.kind == "rotary":
            out.append(dataclasses.replace(op, kernels=HF_ROTARY_KERNELS))
        elif op.kind == "swiglu":
            out.append(dataclasses.replace(op, kernels=2.0))
        elif op.name == "attn.kv_write":
            out += _hf_cache(op, model, step, sc, hq, hkv, d)
        elif op.name.startswith("attn.core") and sc.kv_cache == "static":
            p = op.params
            keys = sc.prompt + sc.osl  # max_cache_len: every position, masked
            out.append(O.Op(op.name, op.kind, op.phase, 2.0 * p["batch"] * hq * p["seq_q"] * keys * (d + p["head_dim_v"]),
                            p["batch"] * keys * hq * (d + p["head_dim_v"]) * _b(p["kv_dtype"]),
                            {**p, "heads_kv": hq, "seq_kv": keys, "causal": False}, op.count, op.scope, op.kernels))
        else:
            out.append(op)
    return out


HF_SPLIT_K_KERNELS = 12.0 / 7.0  # launches a product at one to 16 tokens: cuBLAS split 5 of the layer's 7 products
# in two kernels (the product and its reduction) at batch 1 on the H200 (calibration/h200/hf/kernels.csv)


def _hf_gemm(op: O.Op) -> O.Op:
    """An eager product's launches: at a few tokens cuBLAS splits most products over K (one more kernel). Over
    an array of shapes (the serving step tables) the count is an array too, row by row; on a workbook's cells,
    a formula of them."""
    rows = op.params["m"] * op.params.get("groups", 1)
    xp = O.backend_of(rows)
    if not xp.numeric:
        return dataclasses.replace(op, kernels=xp.where(rows <= 16, HF_SPLIT_K_KERNELS, float(op.kernels)))
    if isinstance(rows, np.ndarray):
        return dataclasses.replace(op, kernels=np.where(rows <= 16, HF_SPLIT_K_KERNELS, float(op.kernels)))
    if rows <= 16:
        return dataclasses.replace(op, kernels=HF_SPLIT_K_KERNELS)
    return op


def _hf_cache(op: O.Op, model: Model, step: Step, sc: Scenario, hq: int, hkv: int, d: int) -> list[O.Op]:
    """The new keys and values into transformers' cache: DynamicCache concatenates them onto the whole layer
    cache (reads and writes all of it: two kernels); StaticCache index_copy_s them into max_cache_len slots and,
    run eager with its mask, repeat_kv expands K and V to every query head over all of its slots (SDPA's own GQA
    is not used): two more kernels that move the whole expanded cache."""
    kv_b = _b(sc.kv)
    if sc.kv_cache == "dynamic":
        held = step.batch * (step.context + step.seq) * 2 * hkv * d * kv_b
        return [O.copy("attn.cache_cat", held, phase=op.phase, count=op.count, kernels=2.0)]
    keys = sc.prompt + sc.osl
    ops = [dataclasses.replace(op, kernels=4.0)]  # arange, add_, two index_copy_
    if hq > hkv:
        moved = step.batch * keys * 2 * d * (hkv + hq) * kv_b
        ops.append(O.elementwise("attn.repeat_kv", "copy", reads=0, writes=0, flops_per_elem=0.0, elems=moved / kv_b,
                                 dtype=sc.kv, phase=op.phase, count=op.count, extra_bytes=moved, kernels=2.0,
                                 params={"elems": moved / kv_b}))
    return ops


def _quantized(op: O.Op, model: Model, sc: Scenario) -> list[O.Op]:
    """A quantized GEMM names its scaling (the model's fp8 checkpoint: per tensor or 128-wide blocks; fp4 is
    NVFP4) and is preceded by the kernel that quantizes its bf16 input with a static scale (TensorRT-LLM's
    static_quantize_e4m3_per_tensor, fp4_quantize, its 1x128 group quantization; vLLM's scaled_fp8_quant;
    plain PyTorch likewise). Grouped MoE products quantize inside the fused MoE module: no separate kernel."""
    if op.kind != "gemm" or op.params["dtype"] not in ("fp8", "fp4"):
        return [op]
    scaling = "nvfp4" if op.params["dtype"] == "fp4" else model.fp8_scaling
    gemm = O.Op(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, "scaling": scaling}, op.count, op.scope,
                op.kernels)
    if op.params.get("grouped") or op.params.get("prequantized"):
        return [gemm]
    rows = op.params["m"] * op.params["groups"]
    q = O.quantize(f"{op.name}.quant", rows, op.params["k"], op.params["dtype"], phase=op.phase, count=op.count,
                   scope=op.scope)
    if O.STREAM in op.params:  # the quantization runs on the product's stream
        q = O.on_stream(q, op.params[O.STREAM], op.params[O.STREAM_ON])
    return [q, gemm]


def _b(dtype: str) -> float:
    return O.bytes_per_element(dtype)


def _norm(model: Model, fused: bool):
    """The block's norm; fused, it also adds the residual (reads x and the residual, writes both)."""
    base = O.rmsnorm if model.norm == "rmsnorm" else O.layernorm
    if not fused:
        return base

    def fused_norm(name, tokens, hidden, dtype, **kw):
        # a serving engine's add + RMSNorm kernel: vectorised over the row, timed as one simple kernel
        # ("fused" class), not as PyTorch's F.rms_norm, whose one CTA a row walks it serially
        op = base(name, tokens, hidden, dtype, **kw)
        return O.Op(op.name, op.kind, op.phase, op.flops + tokens * hidden, op.bytes + 2 * tokens * hidden * _b(dtype),
                    {**op.params, "fused_residual": True, "fused": True}, op.count, op.scope, op.kernels)

    return fused_norm


def _attention(model: Model, step: Step, sc: Scenario, tokens) -> list[O.Op]:
    ph, act, w = step.phase, sc.act_dtype, module_format(model, sc, "attention_qkv")
    hq, hkv = heads_per_gpu(model, sc.tp)
    d = model.head_dim
    gate = getattr(model, "attn_output_gate", False)  # Qwen3-Next: a second q-sized output, the gate
    ops = [O.gemm("attn.qkv", tokens, ((2 if gate else 1) * hq + 2 * hkv) * d, model.hidden, w, phase=ph)]
    if getattr(model, "qk_norm", False):  # RMSNorm over the query and key heads (Qwen3, Gemma 3, MiniMax-M2)
        ops.append(_act_op(O.rmsnorm("attn.qk_norm", tokens * (hq + hkv), d, act, phase=ph), sc))
        if getattr(model, "qk_norm_type", "head") == "layer" and sc.tp > 1:  # one norm over all heads: its
            # variance is summed over the TP ranks
            ops.append(O.collective("attn.qk_norm.allreduce", "all_reduce", tokens * 2 * 4.0, sc.tp, phase=ph))
    rope = model.position == "rope"
    ops += _rotary_ops(sc, tokens, hq, hkv, d, act, ph) if rope else []
    # new K and V into the cache; with rotary folded in, the same kernel applies it to Q and K
    ops.append(O.kv_write("attn.kv_write", tokens, hq, hkv, d, act_dtype=act, kv_dtype=sc.kv,
                          rope_q=rope and sc.rotary == "kv_write", phase=ph))
    core = O.attention("attn.core", step.batch, hq, hkv, step.seq, step.context + step.seq, d,
                       causal=step.phase == "prefill", dtype=_attention_dtype(sc), kv_dtype=sc.kv, phase=ph)
    ops.append(_with_kernel(core, sc))
    if gate:  # output * sigmoid(gate), before the output projection
        ops.append(_act_op(O.swiglu("attn.gate", tokens, hq * d, act, phase=ph), sc))  # sigmoid and a product
    ops.append(O.gemm("attn.o", tokens, model.hidden, hq * d, module_format(model, sc, "attention_o"), phase=ph))
    return ops




def _linear_attention(model: Model, step: Step, sc: Scenario, tokens) -> list[O.Op]:
    """One Gated DeltaNet layer on one GPU (heads sharded over TP): the input projections (q, k, v, the output
    gate z, the per-head gates a and b), the causal convolution over q, k and v (its last conv_kernel - 1 inputs
    kept per sequence), the gated delta rule, the gated RMSNorm and the output projection.

    The delta rule keeps a key_head_dim x value_head_dim state per value head. A decode step reads and writes
    it (memory-bound: the state replaces the KV cache and does not grow with the context). Prefill runs the
    chunked form (chunks of ops.SCAN_CHUNK tokens), a scan whose state pass walks a sequence's chunks in turn
    (:mod:`perfmodel.cost.scan`, its constants fitted to measured kernels)."""
    la = model.linear_attention
    ph, act, w = step.phase, sc.act_dtype, module_format(model, sc, "linear_attention")
    kh, vh = _ceil_div(la.key_heads, sc.tp), _ceil_div(la.value_heads, sc.tp)
    dk, dv = la.key_head_dim, la.value_head_dim
    qk, v = kh * dk, vh * dv
    conv = 2 * qk + v
    state = step.batch * vh * dk * dv * _b(la.state_dtype)  # every sequence's recurrent state on this GPU
    # two input products, as the engines merge the checkpoint's projections (q, k, v and the output gate z; the
    # per-head gates b and a: Qwen3-Next's in_proj_qkvz and in_proj_ba, Qwen3.5's four folded the same way), the
    # causal convolution, and the gates' one fused kernel (decay g = -exp(A) softplus(a + dt), beta = sigmoid(b))
    ops = [O.gemm("linear.in_proj", tokens, 2 * qk + 2 * v, model.hidden, w, phase=ph),
           O.gemm("linear.in_proj_ba", tokens, 2 * vh, model.hidden, w, phase=ph),
           O.elementwise("linear.conv", "copy", reads=1, writes=1, flops_per_elem=2.0 * la.conv_kernel,
                         elems=tokens * conv, dtype=act, phase=ph,
                         extra_bytes=2.0 * step.batch * conv * (la.conv_kernel - 1) * _b(act)),
           _act_op(O.elementwise("linear.gating", "copy", reads=1, writes=1, flops_per_elem=8.0,
                                 elems=tokens * 2 * vh, dtype=act, phase=ph), sc)]
    io = tokens * (conv + 2 * vh + v) * _b(act)  # q, k, v and the gates in, the output out
    if step.phase == "decode":
        ops.append(O.elementwise("linear.core", "copy", reads=1, writes=1, flops_per_elem=6.0 * step.seq,
                                 elems=step.batch * vh * dk * dv, dtype=la.state_dtype, phase=ph, extra_bytes=io))
    else:
        ops.append(O.scan("linear.core", step.batch, tokens, vh, kh, dk, dv, act, chunk=O.SCAN_CHUNK,
                          state_bytes=state, phase=ph))
    ops.append(_act_op(O.elementwise("linear.norm", "rmsnorm", reads=2, writes=1, flops_per_elem=6.0,
                                     elems=tokens * v, dtype=act, phase=ph,
                                     params={"tokens": tokens * vh, "hidden": dv}), sc))
    ops.append(O.gemm("linear.out", tokens, model.hidden, v, w, phase=ph))
    return ops


def _rotary_ops(sc: Scenario, tokens, hq: int, hkv: int, d: int, act: str, ph: str) -> list[O.Op]:
    """Rotary on queries and keys: eager PyTorch (one five-call op each), one kernel over both, or nothing
    here (folded into the KV-cache write)."""
    if sc.rotary == "eager":
        return [O.rotary("attn.rotary_q", tokens, hq, d, act, phase=ph),
                O.rotary("attn.rotary_k", tokens, hkv, d, act, phase=ph)]
    if sc.rotary == "kernel":
        op = O.rotary("attn.rotary", tokens, hq + hkv, d, act, phase=ph)
        return [O.Op(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, "fused": True})]
    return []


def _attention_dtype(sc: Scenario) -> str:
    """fp8 when the engine runs attention's products in fp8 over an fp8 KV cache; else the activations'."""
    return "fp8" if sc.fp8_attention and sc.kv == "fp8" else sc.act_dtype


def _with_mla_kernel(core: O.Op, sc: Scenario) -> O.Op:
    """MLA's attention on a serving engine runs the engine's MLA kernels (their own fitted family where an
    engine's MLA tables were imported); plain PyTorch runs its SDPA dispatch."""
    op = _with_kernel(core, sc)
    if sc.kernels != "fused" or sc.attention_kernel in ("flash", "efficient", "cudnn", "auto"):
        return op
    return O.Op(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, "kernel": "mla"}, op.count, op.scope,
                op.kernels)


def _with_kernel(core: O.Op, sc: Scenario) -> O.Op:
    """The attention op with the scenario's kernel, and packed decode rows under fused kernels."""
    params = {**core.params, "kernel": sc.attention_kernel, "packed": sc.kernels == "fused"}
    return O.Op(core.name, core.kind, core.phase, core.flops, core.bytes, params)


def _mla_attention(model: Model, step: Step, sc: Scenario, tokens) -> list[O.Op]:
    """DeepSeek multi-head latent attention. Prefill expands the latent into per-head K and V; decode
    absorbs the up-projections into the query and output, attending over the cached latent directly
    (one shared latent 'KV head' of width kv_lora + rope)."""
    a = model.mla
    assert a is not None
    ph, act, w = step.phase, sc.act_dtype, module_format(model, sc, "attention_qkv")
    hq = _ceil_div(model.heads, sc.tp)
    qk = a.qk_nope_head_dim + a.qk_rope_head_dim
    ops: list[O.Op] = []
    latent = a.kv_lora_rank + a.qk_rope_head_dim
    # the serving engines project the query latent and the KV latent with one product (TensorRT-LLM's fused_a,
    # SGLang's fused_qkv_a_proj_with_mqa, vLLM's fused_qkv_a_proj: Scenario.fused_latent_proj); transformers'
    # layer and a training step run the two apart
    fused_a = bool(a.q_lora_rank) and bool(sc.fused_latent_proj)
    if fused_a:
        ops.append(O.gemm("attn.qkv_a", tokens, a.q_lora_rank + latent, model.hidden, w, phase=ph))
    if a.q_lora_rank:
        if not fused_a:
            ops.append(O.gemm("attn.q_a", tokens, a.q_lora_rank, model.hidden, w, phase=ph))
        ops.append(_act_op(O.rmsnorm("attn.q_a_norm", tokens, a.q_lora_rank, act, phase=ph), sc))
        ops.append(O.gemm("attn.q_b", tokens, hq * qk, a.q_lora_rank, w, phase=ph))
    else:
        ops.append(O.gemm("attn.q", tokens, hq * qk, model.hidden, w, phase=ph))
    if not fused_a:
        ops.append(O.gemm("attn.kv_a", tokens, latent, model.hidden, w, phase=ph))
    ops.append(_act_op(O.rmsnorm("attn.kv_a_norm", tokens, a.kv_lora_rank, act, phase=ph), sc))
    ops += _rotary_ops(sc, tokens, hq, 1, a.qk_rope_head_dim, act, ph)
    ops.append(O.Op("attn.kv_write", "kv_write", ph, 0.0, tokens * latent * (_b(act) + _b(sc.kv)),
                    {"tokens": tokens, "elems": tokens * latent, "dtype": sc.kv}))
    topk = a.index_topk  # DeepSeek Sparse Attention: the core reads the indexer's topk keys per query
    if topk:
        ops += _indexer_ops(model, step, sc, tokens)
    if step.phase == "prefill":
        ops.append(O.gemm("attn.kv_b", step.batch * (step.context + step.seq),
                          hq * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank, w, phase=ph))
        ops.append(_with_mla_kernel(O.attention("attn.core", step.batch, hq, hq, step.seq, step.context + step.seq, qk,
                                                head_dim_v=a.v_head_dim, causal=True, dtype=act, phase=ph,
                                                window=topk), sc))
    else:
        # absorbed: q_nope (per head) @ W_UK -> latent query; latent output @ W_UV -> per-head value
        ops.append(O.gemm("attn.absorb_q", tokens, a.kv_lora_rank, a.qk_nope_head_dim, w, groups=hq, phase=ph))
        core = O.attention("attn.core", step.batch, hq, 1, step.seq, step.context + step.seq, latent,
                           head_dim_v=a.kv_lora_rank, causal=False, dtype=act, kv_dtype=sc.kv, phase=ph, window=topk)
        # K and V are the same cached latent: read it once (with sparse attention, the topk rows it gathers)
        keys = step.context + step.seq
        if topk:
            keys = O.backend_of(keys).minimum(keys, topk + step.seq - 1)
        shared = step.batch * keys * latent * _b(sc.kv)
        q_o = step.batch * hq * step.seq * (latent + a.kv_lora_rank) * _b(act)
        core = _with_mla_kernel(core, sc)
        ops.append(O.Op(core.name, core.kind, core.phase, core.flops, shared + q_o, core.params))
        ops.append(O.gemm("attn.absorb_o", tokens, a.v_head_dim, a.kv_lora_rank, w, groups=hq, phase=ph))
    ops.append(O.gemm("attn.o", tokens, model.hidden, hq * a.v_head_dim, module_format(model, sc, "attention_o"),
                      phase=ph))
    return ops


def _indexer_ops(model: Model, step: Step, sc: Scenario, tokens) -> list[O.Op]:
    """The lightning indexer of DeepSeek Sparse Attention: its query heads (from the query latent), one key and
    per-head weights (from the hidden state), the key into its fp8 cache, the logits of every query against
    every earlier key, and the top-k over each query's logits. Its heads are not sharded over TP (estimate: the
    engines replicate the small indexer)."""
    a = model.mla
    ph, act, w = step.phase, sc.act_dtype, module_format(model, sc, "indexer")
    hi, di = a.index_heads, a.index_head_dim
    keys = step.context + step.seq
    causal = step.phase == "prefill"
    # the key's LayerNorm, the decoupled rotary on the index queries and key (its rope part, as the MLA's own), and
    # the queries cast to the logits kernel's fp8 (the key's cast is its cache write): three small kernels the
    # engines run beside the products (DeepSeek-V3.2's reference indexer and SGLang's and vLLM's ports)
    rope = min(a.qk_rope_head_dim, di)
    ops = [O.gemm("attn.indexer.q", tokens, hi * di, a.q_lora_rank or model.hidden, w, phase=ph),
           O.gemm("attn.indexer.k", tokens, di + hi, model.hidden, w, phase=ph),
           _act_op(O.layernorm("attn.indexer.k_norm", tokens, di, act, phase=ph), sc),
           _act_op(O.rotary("attn.indexer.rotary", tokens, hi + 1, rope, act, phase=ph), sc),
           O.quantize("attn.indexer.q_cast", tokens, hi * di, INDEXER_FORMAT, phase=ph),
           O.Op("attn.indexer.k_write", "kv_write", ph, 0.0, tokens * di * (_b(act) + _b(INDEXER_FORMAT)),
                {"tokens": tokens, "elems": tokens * di, "dtype": INDEXER_FORMAT})]
    # every query head against every earlier key: DeepGEMM's fp8 MQA-logits kernel is an attention kernel with
    # one KV head and no values (ReLU and the weighted sum over heads where softmax would be), timed with the
    # attention model (estimate: its softmax term overstates the ReLU)
    ops.append(O.attention("attn.indexer.logits", step.batch, hi, 1, step.seq, keys, di, head_dim_v=0,
                           causal=causal, dtype=INDEXER_FORMAT, kv_dtype=INDEXER_FORMAT, phase=ph))
    scores = step.batch * O.causal_pairs(step.seq, keys, causal)  # fp32 logits, one per (query, key)
    ops.append(O.elementwise("attn.indexer.topk", "reduce", reads=1, writes=0, flops_per_elem=1.0, elems=scores,
                             dtype="fp32", phase=ph, params={"rows": tokens, "row_len": keys}))
    return ops


def _dense_ffn(model: Model, ph: str, sc: Scenario, tokens, w: str, act: str, *, prefix: str,
               width: int | None = None, allreduce: bool = True, residual: bool = True) -> list[O.Op]:
    inter = _ceil_div(width or model.intermediate, sc.tp)
    ops: list[O.Op] = []
    if model.mlp == "swiglu":
        ops.append(O.gemm(f"{prefix}.gate_up", tokens, 2 * inter, model.hidden, w, phase=ph))
        ops.append(_act_op(O.swiglu(f"{prefix}.swiglu", tokens, inter, act, phase=ph), sc))
    else:
        ops.append(O.gemm(f"{prefix}.up", tokens, inter, model.hidden, w, phase=ph))
        ops.append(O.gelu(f"{prefix}.gelu", tokens, inter, act, phase=ph))
    ops.append(O.gemm(f"{prefix}.down", tokens, model.hidden, inter, w, phase=ph))
    if allreduce and sc.tp > 1:
        ops.append(O.collective(f"{prefix}.allreduce", "all_reduce", tokens * model.hidden * _b(act), sc.tp, phase=ph))
    if residual and sc.kernels != "fused":  # fused: added by the next layer's norm
        ops.append(O.residual(f"{prefix}.residual", tokens, model.hidden, act, phase=ph))
    return ops


def _act_op(op: O.Op, sc: Scenario) -> O.Op:
    """Fused, the op (a gated activation as silu_and_mul, a norm, the MoE routing) is one engine kernel, timed
    like a simple elementwise kernel (the "fused" class), not as PyTorch's eager implementation."""
    if sc.kernels != "fused":
        return op
    return O.Op(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, "fused": True}, op.count, op.scope)


def active_experts(num_experts: int, top_k: int, routed_tokens):
    """Expected number of distinct experts at least one of ``routed_tokens`` tokens picks, under uniform
    routing (each token picks top_k distinct experts): E * (1 - (1 - k/E)^T).

    T is capped where (1 - k/E)^T reaches e^-700 (about 1e-304): beyond it the power underflows, which numpy
    takes as 0 but a spreadsheet (LibreOffice) reports as #NUM!; the cap changes no result by more than that."""
    keep = 1.0 - top_k / num_experts
    if isinstance(keep, float):
        if not 0.0 < keep < 1.0:  # every expert (keep 0) or none (keep 1): no underflow to cap
            return num_experts * (1.0 - keep ** routed_tokens)
        cap = 700.0 / -math.log(keep)
    else:  # arrays of routings (the MoE fit)
        k = np.asarray(keep, dtype=float)
        with np.errstate(divide="ignore"):
            cap = np.where((k > 0.0) & (k < 1.0), 700.0 / -np.log(np.clip(k, 1e-300, 1.0)), np.inf)
    return num_experts * (1.0 - keep ** O.backend_of(routed_tokens).minimum(routed_tokens, cap))


def deepep_normal_copy_bytes(hidden: int, value_bytes: float) -> float:
    """Bytes of one token copy in DeepEP's normal dispatch or combine of ``value_bytes`` a value: fp8 (1) with its
    scales, or bf16 (2) alone (:func:`payload_bytes`)."""
    return payload_bytes(hidden, "fp8" if value_bytes < 2 else "bf16")


def deepep_ll_dispatch_bytes(hidden: int, fmt: str = "fp8") -> float:
    """Bytes of one token-expert message of DeepEP's low-latency dispatch: the values in ``fmt``
    (:func:`payload_bytes`) and a 16-byte header; 7,408 at hidden 7,168 in fp8, as aiconfigurator-core's measured
    tables count them on every part (docs/collectives.md). SGLang's combine sends bf16 values alone."""
    return payload_bytes(hidden, fmt) + 16.0


PAYLOAD_FORMATS = ("bf16", "fp8", "nvfp4")


def deepep_payload(model: Model, sc: Scenario, call: str) -> str:
    """The payload format (:data:`PAYLOAD_FORMATS`) of the engine's all-to-all ``call`` (``ll.dispatch``,
    ``normal.combine``, ``mnnvl.dispatch``...) by its preset's rule (:attr:`perfmodel.engines.Engine.a2a_payload`;
    SGLang's for an engine without one): bf16, fp8, or from the format the routed experts' products run in."""
    from .engines import ENGINES, SGLANG_A2A_PAYLOAD

    eng = ENGINES.get(sc.engine)
    rule = (eng.a2a_payload if eng is not None else SGLANG_A2A_PAYLOAD).get(call, "bf16")
    product = expert_product_format(model, sc)
    experts = "nvfp4" if product == "fp4" else "fp8" if product == "fp8" else "bf16"
    block = "fp8" if experts == "fp8" and model.fp8_scaling == "block" else "bf16"
    return {"bf16": "bf16", "fp8": "fp8", "experts": experts, "fp8_experts": "fp8" if experts != "bf16" else "bf16",
            "block_fp8_experts": block, "fp4_experts": "nvfp4" if experts == "nvfp4" else "bf16"}[rule]


def payload_bytes(hidden: int, fmt: str) -> float:
    """Bytes of one token's values in an all-to-all payload: bf16 alone; fp8 with a fp32 scale per 128 values
    (DeepEP's and the engines' block scales); nvfp4 (TensorRT-LLM's fp4 dispatch and combine) with an fp8 scale
    per 16 values, NVFP4's blocks."""
    if fmt == "bf16":
        return 2.0 * hidden
    if fmt == "fp8":
        return hidden + 4.0 * hidden / 128
    if fmt == "nvfp4":
        return hidden / 2 + hidden / 16
    raise ValueError(f"unknown payload format {fmt!r}; expected one of {', '.join(PAYLOAD_FORMATS)}")


def moe_expert_ops(tokens, hidden: int, width: int, top_k: int, num_experts: int, ep: int, w: str, act: str,
                   ph: str, *, gated: bool = True, fused: bool = True, imbalance: float = 1.0,
                   weight_dtype: str | None = None, delivered: bool = False) -> list[O.Op]:
    """The routed experts of one MoE layer on one rank, as a fused MoE module runs them: permute the tokens to
    their experts, the grouped up (gate and up) products, the activation, the grouped down products, and the
    weighted un-permute. ``tokens`` before routing (each picks ``top_k`` of ``num_experts``, uniformly); this
    rank holds ``num_experts / ep`` experts, each ``width`` wide (its TP shard); ``imbalance``: the busiest
    rank's share of the routed tokens over the mean (it sets the pace). Also what an imported MoE table's module
    time is fitted against (perfmodel.fit.latency). ``weight_dtype``: experts stored narrower than the products
    run (weight-only quantized: read at their size, computed in ``w``). ``delivered``: an all-to-all brought this
    rank only its own pairs (the module routes those, not the group's)."""
    routed = tokens * top_k / ep * imbalance  # token-expert pairs this rank computes
    experts_here = num_experts // ep
    active = active_experts(num_experts, top_k, tokens) * experts_here / num_experts
    per_expert = routed / active
    ops = [O.elementwise("moe.permute", "moe_permute", reads=1, writes=1, flops_per_elem=0.0, elems=routed * hidden,
                         dtype=act, phase=ph, params={"tokens": routed, "hidden": hidden})]
    # the token-expert pairs the module routes (the group's, local or not, unless an all-to-all delivered this
    # rank its own): the first grouped product carries their routing cost (Profile.moe_pair_s)
    pairs = routed if delivered else tokens * top_k
    if gated:
        ops.append(_grouped(O.gemm("moe.gate_up", per_expert, 2 * width, hidden, w, groups=active,
                                   weight_dtype=weight_dtype, phase=ph), pairs))
        act_op = O.swiglu("moe.swiglu", routed, width, act, phase=ph)
    else:
        ops.append(_grouped(O.gemm("moe.up", per_expert, width, hidden, w, groups=active,
                                   weight_dtype=weight_dtype, phase=ph), pairs))
        act_op = O.gelu("moe.gelu", routed, width, act, phase=ph)
    if fused:
        act_op = O.Op(act_op.name, act_op.kind, act_op.phase, act_op.flops, act_op.bytes,
                      {**act_op.params, "fused": True}, act_op.count, act_op.scope)
    ops.append(act_op)
    ops.append(_grouped(O.gemm("moe.down", per_expert, hidden, width, w, groups=active,
                               weight_dtype=weight_dtype, phase=ph)))
    ops.append(O.elementwise("moe.unpermute", "moe_permute", reads=1, writes=1, flops_per_elem=1.0 * top_k,
                             elems=routed * hidden, dtype=act, phase=ph, params={"tokens": routed, "hidden": hidden}))
    return ops


DEEPGEMM_BLOCK_M = 128  # DeepGEMM's contiguous layout aligns each expert's rows to its 128-row M blocks


def worst_case_layout(model: Model, sc: Scenario) -> str | None:
    """The worst-case contiguous layout the scenario's MoE layers run over (:func:`padded_expert_ops`): the engine's
    rule (``sc.moe_padding``: "computed" or "skipped" padded blocks) on a model of gated block-fp8 experts run in fp8
    by the fused module; None: the module's own layout of the routed rows."""
    if sc.moe_padding in (None, "none") or model.moe is None or model.mlp != "swiglu" or sc.kernels != "fused":
        return None
    if expert_product_format(model, sc) != "fp8" or model.fp8_scaling != "block":
        return None
    return sc.moe_padding


def padded_expert_ops(tokens, hidden: int, width: int, top_k: int, num_experts: int, ep: int, act: str,
                      ph: str, computed: bool = True) -> list[O.Op]:
    """What a block-fp8 MoE layer spends beyond its routed experts where its grouped products run over DeepGEMM's
    worst-case contiguous layout (:attr:`perfmodel.engines.Engine.moe_padding`). The layout holds ``tokens x top_k +
    local experts x 127`` rows rounded up to 128 (every pair, local or not, and each local expert's alignment); the
    blocks of the experts the tokens reach are the module's own (its measured table prices them). The activation and
    re-quantization run over every row beyond the routed pairs whether or not the rest are computed; with
    ``computed`` (vLLM 0.12) the rest are computed as expert 0's too: a dense block-fp8 product of their rows for each
    projection (expert 0's weights, read once; measured to add its own time beside the real blocks,
    perfmodel/measure/padded_layout.py); without it (vLLM 0.13 on: their expert ids -1) DeepGEMM skips them."""
    xp = O.backend_of(tokens)  # numbers, arrays (step tables) or cell formulas (the workbook)
    experts_here = num_experts // ep
    block = DEEPGEMM_BLOCK_M
    rows = xp.ceil((tokens * top_k + experts_here * (block - 1)) / block) * block
    routed = tokens * top_k / ep
    active = xp.maximum(active_experts(num_experts, top_k, tokens) * experts_here / num_experts, 1e-12)
    # the real experts' blocks: each reached expert's rows rounded up to whole blocks, one where it has fewer rows
    # than a block, else half a block more than its rows fill on average (the remainder spread evenly)
    empty = xp.maximum(rows - active * xp.maximum(1.0, routed / active / block + 0.5) * block, 0.0)
    beyond = rows - routed
    rest = [O.swiglu("moe.padding.swiglu", beyond, width, act, phase=ph),
            O.quantize("moe.padding.quant", beyond, width, "fp8", phase=ph)]
    if not computed:
        return rest
    return [_prequantized(O.gemm("moe.padding.gate_up", empty, 2 * width, hidden, "fp8", phase=ph)), *rest,
            _prequantized(O.gemm("moe.padding.down", empty, hidden, width, "fp8", phase=ph))]


def _prequantized(op: O.Op) -> O.Op:
    """A block-fp8 product whose input the module quantized already (no quantize kernel of its own)."""
    return O.Op(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, "scaling": "block", "prequantized": True},
                op.count, op.scope)


def _gemm_format(w: str, model: Model, weights: str | None = None) -> str:
    """The format class of the model's products in ``w`` (:func:`perfmodel.cost.gemm.gemm_format`), with the
    scaling :func:`_quantized` gives them; with weight-only experts (``weights``), the weight-only class (the
    engines' tables time those with micro-scaled activations, no per-tensor or block scaling of their own)."""
    from .cost.gemm import gemm_format

    if weights and weights != w:
        return gemm_format(w, None, weights)
    return gemm_format(w, "nvfp4" if w == "fp4" else model.fp8_scaling if w == "fp8" else None)


def _in_module(op: O.Op, tokens, hidden: int, width: int, top_k: int, experts: int, ep: int, fmt: str,
               routing: str, kernel: str = "") -> O.Op:
    """An op of a fused MoE module, naming the module it belongs to (tokens before routing, hidden size, expert
    width on this rank, top_k, experts, EP ways, the products' format, the router's skew, and where the engine
    runs one of several kernel classes for the format, which: ``kernel``): a table of the engine's MoE modules
    prices the module whole, each of its ops by the module's ratio."""
    module = {"moe_tokens": tokens, "moe_hidden": hidden, "moe_width": width, "moe_top_k": top_k,
              "moe_experts": experts, "moe_ep": ep, "moe_format": fmt, "moe_routing": routing}
    if kernel:
        module["moe_kernel"] = kernel
    return O.Op(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, **module}, op.count, op.scope,
                op.kernels)


def _grouped(op: O.Op, pairs=None) -> O.Op:
    """A grouped (MoE) product: one launch over the experts, timed with the grouped kernels' own efficiency;
    ``pairs``: the routing's token-expert pairs it carries the cost of (the module's first product)."""
    extra = {"grouped": True} if pairs is None else {"grouped": True, "pairs": pairs}
    return O.Op(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, **extra}, op.count, op.scope)


def moe_exchange(sc: Scenario) -> str:
    """How an MoE layer meets the tokens of its group's other ranks (:func:`_moe_ffn`): ``all_to_all``,
    ``gather`` (over attention-DP ranks), ``all_reduce`` (tensor-parallel attention: every rank holds every
    token) or ``none`` (one GPU)."""
    if sc.moe_exchange == "all_to_all" and sc.ep > 1:
        return "all_to_all"
    if sc.attention_dp > 1:
        return "gather"
    return "all_reduce" if sc.moe_group > 1 else "none"


def exchange_quantized(sc: Scenario) -> bool:
    """Whether the exchanged tokens travel in the experts' GEMM format (the engine quantizes before it)."""
    return bool(sc.moe_quantized_exchange) and sc.dtype in ("fp8", "fp4")


def _eagle_fusion(model: Model, sc: Scenario, tokens, w: str, ph: str) -> list[O.Op]:
    """An EAGLE head's own products (:func:`perfmodel.models.eagle_fusion_params`): the fusion of ``draft_fuses``
    target hidden states into one, and for EAGLE-3 the q, k and v projections' half that reads the token's
    embedding; each TP rank computes its share of the outputs."""
    h = model.hidden
    ops = [O.gemm("eagle.fuse", tokens, _ceil_div(h, sc.tp), model.draft_fuses * h, w, phase=ph, scope="model")]
    if model.draft_fuses == 3:
        qkv = _ceil_div((model.heads + 2 * model.kv_heads) * model.head_dim, sc.tp)
        ops.append(O.gemm("eagle.qkv_embed", tokens, qkv, h, w, phase=ph, scope="model"))
    return ops


def fuses_shared_expert(model: Model, sc: Scenario) -> bool:
    """Whether the engine folds the model's shared expert into the routed experts' module (:attr:`Scenario.
    fused_shared_expert`: SGLang, for DeepSeek-V3's layout of 256 routed experts and one shared, with the
    experts not split by expert parallelism and no all-to-all)."""
    moe = model.moe
    return bool(sc.fused_shared_expert and moe is not None and model.family == "deepseek_v3"
                and moe.num_experts == 256 and moe.num_shared_experts == 1 and sc.ep == 1)


def shared_stream_on(sc: Scenario, ph: str, tokens):
    """Whether a step's shared experts run on a second stream beside the routed ones (:attr:`Scenario.shared_stream`):
    None where they never do; otherwise 1.0 or 0.0, or where the rule reads the step's tokens (vLLM's "small"
    steps) and they are an array or a spreadsheet cell, the same as an array or a formula."""
    rule = sc.shared_stream or "never"
    if rule == "graph":
        return 1.0 if sc.launch_for(ph) == "graph" and ph == "decode" else None
    if rule == "small":
        from .engines import SHARED_STREAM_TOKENS

        if isinstance(tokens, (int, float)):
            return 1.0 if tokens <= SHARED_STREAM_TOKENS else None
        return O.backend_of(tokens).where(tokens <= SHARED_STREAM_TOKENS, 1.0, 0.0)
    return None


def _moe_ffn(model: Model, ph: str, sc: Scenario, tokens, w: str, act: str, group_tokens) -> list[O.Op]:
    """Routed experts (uniform routing assumed), shared experts, and the collectives EP or TP adds; ``tokens``: the
    rank's, ``group_tokens``: the MoE group's (every attention-DP rank's together: :func:`rank_step`).

    With ep > 1 each rank holds num_experts/ep whole experts (split moe_group/ep ways when ep < moe_group);
    with ep = 1 every expert is sharded over the MoE group. How the MoE group meets the tokens is the engine's
    (``sc.moe_exchange``, :mod:`perfmodel.engines`):

    - one attention group (attention TP): every rank already holds every token; each computes its experts'
      share and the FFN ends in an all-reduce (TensorRT-LLM, vLLM and SGLang without attention DP);
    - ``gather`` over attention-data-parallel ranks: every rank's tokens are all-gathered before the experts
      (in the experts' GEMM format where the engine quantizes first, ``sc.moe_quantized_exchange``) and the
      outputs reduce-scattered back after (TensorRT-LLM's attention DP, vLLM's allgather_reducescatter,
      SGLang's DP attention);
    - ``all_to_all`` (ep > 1): each token dispatched once to every rank holding any of its experts and one
      partial sum a rank combined back (DeepEP, TensorRT-LLM's MNNVL all-to-all; :func:`copies_per_token`, within
      the model's group-limited routing).
    """
    moe = model.moe
    assert moe is not None
    h = model.hidden
    # an engine's routing (top-k with its normalisation) is one fused kernel, timed as a simple elementwise one
    ops = [O.gemm("moe.router", tokens, moe.num_experts, h, act, phase=ph, out_dtype="fp32"),
           _act_op(O.elementwise("moe.topk", "topk", reads=1, writes=0, flops_per_elem=1.0,
                                 elems=tokens * moe.num_experts, dtype="fp32", phase=ph,
                                 params={"tokens": tokens, "experts": moe.num_experts}), sc)]
    ep = sc.ep
    shard = sc.moe_group // ep  # TP ways each expert is split
    width = _ceil_div(moe.expert_intermediate, shard)
    routed = group_tokens * moe.top_k / ep  # token-expert pairs this rank computes (uniform routing)
    # the tokens travel in the experts' GEMM format where the engine quantizes before the exchange
    sent = _b(w) if exchange_quantized(sc) else _b(act)
    exchange = moe_exchange(sc)
    # an all-to-all on an engine's own kernels (DeepEP's, TensorRT-LLM's MNNVL one), priced from their measured
    # tables where a profile fitted them, each call's payload in the format the engine sends (deepep_payload)
    own_kernels = sc.moe_all_to_all if exchange == "all_to_all" and sc.moe_all_to_all != "per_rank" else None
    kind = "ll" if own_kernels == "deepep" and ph == "decode" else "normal" if own_kernels == "deepep" else own_kernels
    payload = {d: deepep_payload(model, sc, f"{kind}.{d}") for d in ("dispatch", "combine")} if kind else {}
    if kind == "ll":  # DeepEP's low-latency kernels: a message per routed pair
        dispatch_bytes = routed * deepep_ll_dispatch_bytes(h, payload["dispatch"])
        combine_bytes = routed * payload_bytes(h, payload["combine"])
    else:  # once to each rank holding any of the token's experts, not once per expert
        copies = copies_per_token(moe, ep) / moe.top_k if exchange == "all_to_all" else 1.0
        out = payload_bytes(h, payload["dispatch"]) if kind else h * sent
        back = payload_bytes(h, payload["combine"]) if kind else h * _b(act)
        dispatch_bytes, combine_bytes = routed * copies * out, routed * copies * back

    def deepep(direction: str) -> dict:  # the engine's own kernel for the call, and the payload's format
        if not kind:
            return {}
        call = {"kernel": f"{kind}.{direction}@{payload[direction]}", "experts": moe.num_experts}
        if kind == "normal":  # across nodes a token goes once per remote node (perfmodel.routing.nodes_per_token)
            call["per_node"] = O.per_node_copies(group_tokens / ep, payload_bytes(h, payload[direction]), moe)
        return call

    if exchange == "all_to_all":
        ops.append(O.collective("moe.dispatch", "all_to_all", dispatch_bytes, ep, phase=ph, **deepep("dispatch")))
    elif exchange == "gather":
        ops.append(O.collective("moe.gather", "all_gather", group_tokens * h * sent, sc.moe_group, phase=ph))
    stored = expert_format(model, sc)
    w_experts = expert_product_format(model, sc)
    fused_shared = fuses_shared_expert(model, sc)
    # a shared expert folded into the module is one more expert each token picks: priced as the routed module
    # at (top_k + 1) / top_k as many tokens (the same token-expert pairs; it keeps the engine's measured module)
    module_tokens = group_tokens * (moe.top_k + 1) / moe.top_k if fused_shared else group_tokens
    experts = moe_expert_ops(module_tokens, h, width, moe.top_k, moe.num_experts, ep, w_experts, act, ph,
                             gated=model.mlp == "swiglu", fused=sc.kernels == "fused", imbalance=sc.moe_imbalance,
                             weight_dtype=stored, delivered=exchange == "all_to_all")
    if model.mlp == "swiglu" and sc.kernels == "fused":
        # the engine's fused MoE module, the one its measured MoE tables time (perfmodel.cost.tables), weight-only
        # experts included (their own class)
        fmt = _gemm_format(w_experts, model, stored)
        routing = sc.moe_routing or default_routing(model.family)
        # vLLM's FlashInfer TensorRT-LLM kernel on SM100: its monolithic or modular class, by release and router
        kernel = (sc.moe_module or "") if fmt == "fp8_block" else ""
        experts = [_in_module(op, module_tokens, h, width, moe.top_k, moe.num_experts, ep, fmt, routing, kernel)
                   for op in experts]
        layout = worst_case_layout(model, sc)
        if layout is not None:
            experts += padded_expert_ops(group_tokens, h, width, moe.top_k, moe.num_experts, ep, act, ph,
                                         computed=layout == "computed")
    ops += experts
    if exchange == "all_to_all":
        ops.append(O.collective("moe.combine", "all_to_all", combine_bytes, ep, phase=ph, **deepep("combine")))
        if shard > 1:  # each expert split over shard ranks: their partial outputs meet
            ops.append(O.collective("moe.allgather", "all_gather", tokens * h * _b(act), shard, phase=ph))
    elif exchange == "gather":  # every rank's partial outputs summed and each DP rank's own tokens scattered back
        ops.append(O.collective("moe.reduce_scatter", "reduce_scatter", group_tokens * h * _b(act), sc.moe_group,
                                phase=ph))
    if moe.num_shared_experts and not fused_shared:
        shared = _dense_ffn(model, ph, sc, tokens, module_format(model, sc, "shared_experts"), act,
                            prefix="moe.shared", width=moe.num_shared_experts * moe.shared_intermediate,
                            allreduce=False, residual=False)
        if moe.shared_expert_gate:  # Qwen2-MoE, Qwen3-Next, Qwen3.5: sigmoid(x W_g) scales the shared output
            shared += [O.gemm("moe.shared.gate", tokens, 1, h, act, phase=ph),
                       _act_op(O.residual("moe.shared.scale", tokens, h, act, phase=ph), sc)]
        on = shared_stream_on(sc, ph, tokens)
        if on is not None:  # the shared experts on a second stream beside the router and the routed experts
            ops = [O.on_stream(op, "main", on) for op in ops]
            shared = [O.on_stream(op, "side", on) for op in shared]
        ops += shared
    if exchange == "all_reduce":
        ops.append(O.collective("moe.allreduce", "all_reduce", tokens * h * _b(act), sc.moe_group, phase=ph))
    if sc.kernels != "fused":
        ops.append(O.residual("moe.residual", tokens, h, act, phase=ph))
    return ops
