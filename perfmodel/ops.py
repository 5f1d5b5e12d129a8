"""Operators with closed-form FLOPs and bytes.

An :class:`Op` is pure data: what one kernel (or one collective) does, never how long it takes. Shape
fields may be Python numbers or numpy arrays (a sweep builds one op whose ``m`` is an array of batch
sizes); every formula here is plain arithmetic, so both work.

Bytes are the minimum the operator must move through HBM: each input read once, each output written
once. Whether a real kernel moves more (eager elementwise chains, re-reads) is the cost model's business.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .dtypes import bytes_per_element
from .sampling import SAMPLING_KINDS

# Operator kinds and the cost family that times them.
COMPUTE_KINDS = ("gemm", "attention", "scan")
MEMORY_KINDS = ("rmsnorm", "layernorm", "swiglu", "gelu", "rotary", "residual", "embedding", "kv_write", "quantize",
                "moe_permute", "topk", "copy", "reduce") + SAMPLING_KINDS
COMM_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")
SCAN_CHUNK = 64  # tokens a chunk of Gated DeltaNet's chunked recurrence (flash-linear-attention's BT)
KINDS = COMPUTE_KINDS + MEMORY_KINDS + COMM_KINDS


@dataclass(frozen=True)
class Op:
    name: str  # e.g. "attn.qkv"
    kind: str  # one of KINDS
    phase: str  # prefill | decode | standalone
    flops: Any  # float or array
    bytes: Any  # HBM bytes (compute/memory ops) or message bytes per rank (collectives)
    params: dict[str, Any] = field(default_factory=dict)
    count: float = 1.0  # how many times it runs in the step (e.g. once per layer: count = layers)
    scope: str = "layer"  # layer (inside a decoder block) | model (embedding, LM head, final norm)
    kernels: float = 1.0  # kernel launches it stands for

    def with_count(self, count: float) -> "Op":
        return replace(self, count=count)


def gemm(name: str, m, n, k, dtype: str, *, phase: str = "standalone", groups=1, out_dtype: str | None = None,
         weight_dtype: str | None = None, count: float = 1.0, scope: str = "layer") -> Op:
    """C[m,n] = A[m,k] @ B[k,n], ``groups`` independent products of that shape in one launch.

    ``dtype`` is the operand format the tensor cores run (fp8 products write bf16 by default); ``weight_dtype``
    a narrower format the weights are stored in (weight-only quantization: read at their size, dequantized in
    the kernel's mainloop), recorded as the op's ``weights``.
    """
    a_b = bytes_per_element(dtype)
    w_b = bytes_per_element(weight_dtype or dtype)
    out = out_dtype or ("bf16" if dtype in ("fp8", "fp4", "int8") else dtype)
    o_b = bytes_per_element(out)
    flops = 2.0 * m * n * k * groups
    nbytes = groups * (m * k * a_b + k * n * w_b + m * n * o_b)
    params = {"m": m, "n": n, "k": k, "dtype": dtype, "groups": groups, "out_dtype": out}
    if weight_dtype and weight_dtype != dtype:
        params["weights"] = weight_dtype
    return Op(name, "gemm", phase, flops, nbytes, params, count, scope)


def causal_pairs(seq_q, seq_kv, causal):
    """(query, key) pairs a fused attention evaluates: queries are the last seq_q of seq_kv positions."""
    full = seq_q * seq_kv
    tri = seq_q * (seq_kv - seq_q) + seq_q * (seq_q + 1) / 2.0
    return tri if causal else full


# Two CUDA streams inside a step: an op's params name its stream (STREAM: "main" or "side") in a region of one MoE
# layer, and whether the side stream is used (STREAM_ON: 1.0 or 0.0, or an array or formula of them); the step's
# accounting overlaps the two paths (perfmodel.step_accounting.stream_regions)
STREAM, STREAM_ON = "stream", "stream_on"


def on_stream(op: Op, stream: str, on) -> Op:
    """``op`` on ``stream`` ("main" or "side") of its MoE layer's two-stream region, the side stream used where
    ``on`` is 1."""
    return replace(op, params={**op.params, STREAM: stream, STREAM_ON: on})


def backend_of(*values):
    """The math backend of shape values: Excel for formulas (the what-if workbook's cells), numpy otherwise."""
    from .cost.backend import NP, XL, Expr  # imported here: perfmodel.cost imports this module

    return XL if any(isinstance(v, Expr) for v in values) else NP


def windowed_pairs(seq_q, seq_kv, causal, window):
    """Pairs when each query sees at most its ``window`` latest keys (sliding-window attention): query i of
    seq_q (after seq_kv - seq_q cached keys) sees min(seq_kv - seq_q + i + 1, window) of them."""
    xp = backend_of(seq_q, seq_kv, window)
    if not causal:
        return seq_q * xp.minimum(seq_kv, window)
    first = seq_kv - seq_q + 1.0  # keys the first new query sees
    free = xp.clip(window - first + 1.0, 0.0, seq_q)  # queries below the window
    return free * first + free * (free - 1.0) / 2.0 + (seq_q - free) * window


def attention(name: str, batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, *, causal: bool, dtype: str = "bf16",
              head_dim_v=None, kv_dtype: str | None = None, phase: str = "standalone", count: float = 1.0,
              window=0) -> Op:
    """Fused attention forward (flash style): softmax(Q K^T) V without materialising the scores. ``window``:
    a sliding window of that many keys per query (0: none); the keys read are the window's."""
    dv = head_dim if head_dim_v is None else head_dim_v
    act_b = bytes_per_element(dtype)
    kv_b = bytes_per_element(kv_dtype or dtype)
    if window:
        pairs = windowed_pairs(seq_q, seq_kv, causal, window)
        keys = backend_of(seq_q, seq_kv, window).minimum(seq_kv, window + seq_q - 1)
    else:
        pairs, keys = causal_pairs(seq_q, seq_kv, causal), seq_kv
    flops = 2.0 * batch * heads_q * pairs * (head_dim + dv)
    nbytes = (batch * heads_q * seq_q * (head_dim + dv) * act_b
              + batch * heads_kv * keys * (head_dim + dv) * kv_b)
    params = {"batch": batch, "heads_q": heads_q, "heads_kv": heads_kv, "seq_q": seq_q, "seq_kv": seq_kv,
              "head_dim": head_dim, "head_dim_v": dv, "causal": bool(causal), "dtype": dtype,
              "kv_dtype": kv_dtype or dtype}
    if window:
        params["window"] = window
    return Op(name, "attention", phase, flops, nbytes, params, count)


def kv_write(name: str, tokens, heads_q, heads_kv, head_dim, *, act_dtype: str, kv_dtype: str, rope_q: bool = False,
             phase: str = "standalone", count: float = 1.0, head_dim_v=None) -> Op:
    """New K and V of ``tokens`` tokens into the cache: read them from the QKV output, write them in the
    cache's format. ``rope_q``: the same kernel applies rotary to the queries too (reads and writes Q), as
    engines that fold rotary into the cache write do."""
    dv = head_dim if head_dim_v is None else head_dim_v
    elems = tokens * heads_kv * (head_dim + dv)
    act_b = bytes_per_element(act_dtype)
    q_bytes = 2.0 * tokens * heads_q * head_dim * act_b if rope_q else 0.0
    return Op(name, "kv_write", phase, 0.0, elems * (act_b + bytes_per_element(kv_dtype)) + q_bytes,
              {"tokens": tokens, "elems": elems, "dtype": kv_dtype}, count)


def quantize(name: str, tokens, hidden, dtype: str, *, phase: str = "standalone", count: float = 1.0,
             scope: str = "layer") -> Op:
    """A quantized GEMM's input, ``tokens x hidden`` bf16 values, written in ``dtype`` (fp8 with a static scale,
    NVFP4 with its block scales) by one kernel."""
    nbytes = tokens * hidden * (bytes_per_element("bf16") + bytes_per_element(dtype))
    return Op(name, "quantize", phase, 2.0 * tokens * hidden, nbytes, {"tokens": tokens, "hidden": hidden,
                                                                        "dtype": dtype}, count, scope)


def scan(name: str, sequences, tokens, value_heads: int, key_heads: int, head_dim_k: int, head_dim_v: int,
         dtype: str, *, chunk: int, state_bytes, phase: str = "prefill", count: float = 1.0) -> Op:
    """Gated DeltaNet's chunked recurrence over ``tokens`` new tokens of ``sequences`` sequences
    (:mod:`perfmodel.cost.scan` times it). Per token and value head about 2 chunk (2 dk + 2 dv) FLOPs inside
    its chunk and 6 dk dv against the state; it reads q, k, v and the gates, writes the output, and reads and
    writes every sequence's state once (``state_bytes``)."""
    b = bytes_per_element(dtype)
    qk, v = key_heads * head_dim_k, value_heads * head_dim_v
    per_token = 2.0 * chunk * (2 * head_dim_k + 2 * head_dim_v) + 6.0 * head_dim_k * head_dim_v
    io = tokens * (2 * qk + 2 * v + 2 * value_heads) * b
    params = {"sequences": sequences, "tokens": tokens, "value_heads": value_heads, "key_heads": key_heads,
              "head_dim_k": head_dim_k, "head_dim_v": head_dim_v, "dtype": dtype}
    return Op(name, "scan", phase, per_token * tokens * value_heads, io + 2.0 * state_bytes, params, count)


def elementwise(name: str, kind: str, *, reads, writes, flops_per_elem: float, elems, dtype: str,
                phase: str = "standalone", count: float = 1.0, scope: str = "layer", params: dict | None = None,
                extra_bytes=0.0, kernels: float = 1.0) -> Op:
    """A memory-bound operator over ``elems`` elements: ``reads`` inputs and ``writes`` outputs of that size."""
    b = bytes_per_element(dtype)
    nbytes = (reads + writes) * elems * b + extra_bytes
    p = {"dtype": dtype}
    p.update(params or {})
    return Op(name, kind, phase, flops_per_elem * elems, nbytes, p, count, scope, kernels)


def rmsnorm(name: str, tokens, hidden, dtype: str, **kw) -> Op:
    # x*rsqrt(mean(x^2)+eps)*w: square, sum, scale, multiply ~ 4 FLOPs an element; the weight is read once
    return elementwise(name, "rmsnorm", reads=1, writes=1, flops_per_elem=4.0, elems=tokens * hidden, dtype=dtype,
                       params={"tokens": tokens, "hidden": hidden},
                       extra_bytes=hidden * bytes_per_element(dtype), **kw)


def layernorm(name: str, tokens, hidden, dtype: str, **kw) -> Op:
    return elementwise(name, "layernorm", reads=1, writes=1, flops_per_elem=7.0, elems=tokens * hidden, dtype=dtype,
                       params={"tokens": tokens, "hidden": hidden},
                       extra_bytes=2 * hidden * bytes_per_element(dtype), **kw)


def swiglu(name: str, tokens, width, dtype: str, **kw) -> Op:
    # silu(gate) * up: read gate and up, write one; silu ~ 4 FLOPs (exp, add, div, mul) + 1 multiply
    return elementwise(name, "swiglu", reads=2, writes=1, flops_per_elem=5.0, elems=tokens * width, dtype=dtype,
                       params={"tokens": tokens, "width": width}, **kw)


def gelu(name: str, tokens, width, dtype: str, **kw) -> Op:
    return elementwise(name, "gelu", reads=1, writes=1, flops_per_elem=8.0, elems=tokens * width, dtype=dtype,
                       params={"tokens": tokens, "width": width}, **kw)


def rotary(name: str, tokens, heads, head_dim, dtype: str, **kw) -> Op:
    # x*cos + rotate_half(x)*sin on q and k heads; cos/sin tables read once per token
    return elementwise(name, "rotary", reads=1, writes=1, flops_per_elem=3.0, elems=tokens * heads * head_dim,
                       dtype=dtype, params={"tokens": tokens, "heads": heads, "head_dim": head_dim},
                       extra_bytes=2 * tokens * head_dim * bytes_per_element(dtype), **kw)


def residual(name: str, tokens, hidden, dtype: str, **kw) -> Op:
    return elementwise(name, "residual", reads=2, writes=1, flops_per_elem=1.0, elems=tokens * hidden, dtype=dtype,
                       params={"tokens": tokens, "hidden": hidden}, **kw)


def copy(name: str, nbytes, **kw) -> Op:
    """Device-to-device copy of a buffer of ``nbytes``: read it once, write it once."""
    return Op(name, "copy", kw.pop("phase", "standalone"), 0.0, 2.0 * nbytes, {"bytes": nbytes}, **kw)


def collective(name: str, kind: str, nbytes, group: int, *, phase: str, count: float = 1.0,
               scope: str = "layer", span: str = "auto", kernel: str = "", experts: int = 0,
               per_node: dict | None = None) -> Op:
    """A collective over ``group`` ranks. ``nbytes`` is the buffer in NCCL's convention: the reduced buffer
    (all_reduce), the gathered output (all_gather), the full input (reduce_scatter), each rank's send
    buffer (all_to_all), the message (p2p). ``kernel``: an engine's own kernel for it where its cost differs
    from the collective model's (``ll.dispatch``, ``ll.combine``: DeepEP's low-latency MoE exchange over a
    model of ``experts`` experts; ``normal.dispatch``, ``normal.combine``: its normal kernels;
    :func:`perfmodel.cost.comm.deepep_time`). ``per_node``: of an all-to-all whose kernel sends a token once per
    remote node when the group spans several scale-up domains (DeepEP's normal kernels), what prices that share
    (:func:`per_node_copies`)."""
    params = {"bytes": nbytes, "group": group, "span": span}
    if kernel:
        params.update(kernel=kernel, experts=experts)
    if per_node is not None:
        params["per_node"] = per_node
    return Op(name, kind, phase, 0.0, nbytes, params, count, scope)


def per_node_copies(tokens, copy_bytes: float, moe, kernel: str = "") -> dict:
    """An all-to-all's per-node sending: each of a rank's ``tokens`` goes once to every remote node holding any
    of its experts (the model's ``moe`` routing: experts, top-k, expert groups, groups a token), ``copy_bytes``
    a copy; the node count is the hardware's, so the bytes are reckoned at pricing
    (:func:`perfmodel.cost.comm.per_node_bytes`). ``kernel``: the fitted kernel that prices that sending across
    nodes where it differs from the op's own (HybridEP inside a domain is the link's, across nodes DeepEP's)."""
    out = {"tokens": tokens, "copy_bytes": copy_bytes,
           "routing": [moe.num_experts, moe.top_k, moe.expert_groups, moe.groups_per_token]}
    if kernel:
        out["kernel"] = kernel
    return out


def sample(name: str, rows, vocab: int, method: str, **kw) -> Op:
    """Picking one token for each of ``rows`` logit rows of ``vocab`` fp32 entries by ``method``
    (:data:`perfmodel.sampling.SAMPLING_METHODS`):
    its bytes are one read of the logits; how many passes the method makes is its kind's efficiency."""
    return elementwise(name, f"sample_{method}", reads=1, writes=0, flops_per_elem=1.0, elems=rows * vocab,
                       dtype="fp32", params={"rows": rows, "vocab": vocab, "method": method}, **kw)
