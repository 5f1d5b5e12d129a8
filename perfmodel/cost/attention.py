"""Fused (flash) attention time: block work over the SMs, with split-KV for decode.

A flash forward kernel gives each CTA one block of ``block_q`` query rows of one head and walks the key
blocks (only those at or below the diagonal when causal). With a single query per sequence (decode; or a few,
speculative decoding's verification, under an engine's decode kernel), the query heads of one KV group are
packed as rows (GQA packing) and the key sequence is split across CTAs until the SMs are full (split-KV). Time is
the larger of the average SM load and the longest CTA (a longest-first schedule achieves about that), at
``attn_eta`` of the per-SM dense bf16 peak per block, each CTA paying ``attn_cta_blocks`` blocks' worth of
prologue and epilogue (loading Q, writing O), joined with the time to stream Q, K, V and O from HBM, plus a fixed
overhead.

Every backend (FlashAttention-2, cuDNN, ...) has its own fitted efficiencies and fixed cost
(``Profile.attn_eta[backend]`` and so on); the structure is shared. Written against a math backend
(:mod:`.backend`).
"""
from __future__ import annotations

from .backend import NP
from .gemm import power_clocked


def attention_time(batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, head_dim_v, causal, nbytes, peak, sms, bw,
                   prof, xp=NP, packed=False, sustained=None, backend="flash", eta_scale=1.0, clock=None,
                   kv_dtype=None, window=0, fmt="bf16", decode=False):
    """``packed``: a decode kernel that computes only the real query rows (serving engines' decode
    attention), rather than padding them to the block height as a flash prefill kernel does.
    ``decode``: the op is a decode step's; under a packed (serving engine's) kernel its few query tokens a
    sequence (speculative decoding's verification of draft tokens) are packed rows of the decode kernel, as
    one query is: TensorRT-LLM's XQA and MLA generation kernels, FlashInfer's and FlashMLA's decode kernels
    take several query tokens a sequence; a flash prefill kernel would pad each to a block.
    ``backend``: whose fitted parameters and block shapes apply; ``eta_scale``: a factor on its compute
    efficiency (fp8 attention)."""
    eta, dec_eta = prof.attn_eta[backend] * eta_scale, prof.attn_dec_eta[backend]
    c0, tail = prof.attn_cta_blocks[backend], prof.attn_tail[backend]
    single = (seq_q > 0.0) if (decode and packed) else (seq_q <= 1.0)
    # an engine's decode kernel may have a fixed cost of its own (attn_overhead_s["<backend>.decode"]), and one
    # per KV-cache format where it runs another kernel for it ("<backend>.decode.fp8")
    overhead = prof.attn_overhead_s[backend]
    dec = prof.attn_overhead_s.get(f"{backend}.decode.{kv_dtype}", prof.attn_overhead_s.get(f"{backend}.decode"))
    if dec is not None:
        overhead = xp.where(single, dec, overhead)
    # block shapes: a decode kernel (one query a sequence) may tile differently from the prefill kernel
    bq = xp.where(single, float(prof.attn_block_q[f"{backend}.decode"]), float(prof.attn_block_q[backend]))
    bk = xp.where(single, float(prof.attn_block_k[f"{backend}.decode"]), float(prof.attn_block_k[backend]))
    group = heads_q / heads_kv
    rows = xp.where(single, seq_q * group, seq_q)  # GQA packing of one-query decode
    if packed:  # one CTA takes a KV head's real query rows, no padding to the block height
        bq = xp.where(single, xp.maximum(rows, 1.0), bq)
    grid_heads = xp.where(single, heads_kv, heads_q)
    nq = xp.ceil(rows / bq)
    nk = xp.ceil(seq_kv / bk)
    # causal: query block i reaches key block ceil((i + 1) bq / bk); keys before the first query (cached
    # context of a chunked prefill) are visible to every query block
    r = bq / bk
    triangle = r * nq * (nq + 1.0) / 2.0 + nq * xp.maximum(1.0 - r, 0.0) / 2.0
    prefix = xp.maximum(seq_kv - seq_q, 0.0) / bk
    per_head = xp.where(causal, triangle + nq * prefix, nq * nk)
    if window:  # a sliding window: each query block walks at most the window's key blocks (and one partial)
        reach = xp.ceil(window / bk) + 1.0
        per_head = xp.minimum(per_head, nq * reach)
        nk = xp.minimum(nk, reach)
    ctas = batch * grid_heads * nq
    # split-KV decode cuts each sequence's keys until the CTAs fill the SMs (taken as continuous: the kernels'
    # heuristics round differently, and a step function would make a step's time fall as its batch grows)
    split = xp.where(single, xp.clip(sms / ctas, 1.0, xp.minimum(nk, 128.0)), 1.0)
    work = batch * grid_heads * per_head + ctas * split * c0
    longest = nk / split + c0
    # the SMs drain the CTAs: no faster than the average load or the longest CTA, and ``tail`` of the
    # longest CTA is paid on top when they do not start longest-first
    blocks = xp.maximum(work / sms + tail * longest, longest)
    t_block = 2.0 * bq * bk * (head_dim + head_dim_v) / (peak / sms * eta)
    # the softmax of a block's bq x bk scores runs on the SM's special-function and FMA units, not the tensor
    # cores: ``attn_sfu_cycles`` cycles per score at the SM clock, joined with the block's matrix products by a
    # p-norm (p = 1: one after the other; large: hidden under them, as warp-specialised kernels try). Its share
    # grows where tensor rates per SM outpace clocks (Blackwell) and at small head dims.
    sfu = prof.attn_sfu_cycles.get(backend)
    if sfu is not None and clock is not None:
        t_sfu = bq * bk * sfu / clock
        q = prof.attn_sfu_p.get(backend, 1.0)
        t_block = xp.power(xp.power(t_block, q) + xp.power(t_sfu, q), 1.0 / q)
    t_c0 = blocks * t_block
    units = ctas * split
    # streaming the KV cache at full bandwidth needs ``attn_mem_ctas`` CTAs in flight per SM (Little's law: one
    # CTA keeps too few loads outstanding); fewer stream proportionally slower
    t_m = nbytes / (bw * dec_eta * xp.minimum(1.0, units / (sms * prof.attn_mem_ctas.get(backend, 1.0))))
    # at the power-limited clock (alone or in a step), from the FLOPs the blocks execute
    t_c = power_clocked(t_c0, blocks * sms * 2.0 * bq * bk * (head_dim + head_dim_v), nbytes, t_m, fmt, peak, bw,
                        prof, sustained, xp, timing=prof.attn_timing)
    p = prof.attn_softness[backend]  # how far block compute and KV streaming overlap (large: fully)
    t = xp.power(xp.power(t_c, p) + xp.power(t_m, p), 1.0 / p)
    # each CTA's own latency (launch, loading Q, the split-KV reduction, writing O): ``attn_cta_cycles`` at the
    # SM clock, once per wave of CTAs over the SMs: what a decode of many short sequences is bound by
    cta = prof.attn_cta_cycles.get(backend)
    if cta is not None and clock is not None:
        t = t + (units / sms) * cta / clock
    return t + overhead, t_c, t_m
