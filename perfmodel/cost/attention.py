"""Fused (flash) attention time: block work over the SMs, with split-KV for decode.

A flash forward kernel gives each CTA one block of ``block_q`` query rows of one head and walks the key
blocks (only those at or below the diagonal when causal). With a single query per sequence (decode), the
query heads of one KV group are packed as rows (GQA packing) and the key sequence is split across CTAs
until the SMs are full (split-KV). Time is the larger of the average SM load and the longest CTA (a
longest-first schedule achieves about that), at ``attn_eta`` of the per-SM dense bf16 peak per block,
each CTA paying ``attn_cta_blocks`` blocks' worth of prologue and epilogue (loading Q, writing O),
joined with the time to stream Q, K, V and O from HBM, plus a fixed overhead.

Every backend (FlashAttention-2, cuDNN, ...) has its own fitted efficiencies and fixed cost
(``Profile.attn_eta[backend]`` and so on); the structure is shared. Written against a math backend
(:mod:`.backend`).
"""
from __future__ import annotations

from .backend import NP
from .gemm import power_limited


def attention_time(batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, head_dim_v, causal, nbytes, peak, sms, bw,
                   prof, xp=NP, packed=False, sustained=None, backend="flash", eta_scale=1.0):
    """``packed``: a decode kernel that computes only the real query rows (serving engines' decode
    attention), rather than padding them to the block height as a flash prefill kernel does.
    ``backend``: whose fitted parameters and block shapes apply; ``eta_scale``: a factor on its compute
    efficiency (fp8 attention)."""
    eta, dec_eta = prof.attn_eta[backend] * eta_scale, prof.attn_dec_eta[backend]
    c0, overhead, tail = prof.attn_cta_blocks[backend], prof.attn_overhead_s[backend], prof.attn_tail[backend]
    single = seq_q <= 1.0
    # block shapes: a decode kernel (one query a sequence) may tile differently from the prefill kernel
    bq = xp.where(single, float(prof.attn_block_q[f"{backend}.decode"]), float(prof.attn_block_q[backend]))
    bk = xp.where(single, float(prof.attn_block_k[f"{backend}.decode"]), float(prof.attn_block_k[backend]))
    if packed:
        bq = xp.where(single, 1.0, bq)
    group = heads_q / heads_kv
    rows = xp.where(single, seq_q * group, seq_q)  # GQA packing of one-query decode
    grid_heads = xp.where(single, heads_kv, heads_q)
    nq = xp.ceil(rows / bq)
    nk = xp.ceil(seq_kv / bk)
    # causal: query block i reaches key block ceil((i + 1) bq / bk); keys before the first query (cached
    # context of a chunked prefill) are visible to every query block
    r = bq / bk
    triangle = r * nq * (nq + 1.0) / 2.0 + nq * xp.maximum(1.0 - r, 0.0) / 2.0
    prefix = xp.maximum(seq_kv - seq_q, 0.0) / bk
    per_head = xp.where(causal, triangle + nq * prefix, nq * nk)
    ctas = batch * grid_heads * nq
    split = xp.where(xp.logical_and(single, ctas < 0.8 * sms),
                     xp.clip(xp.ceil(sms / ctas), 1.0, xp.minimum(nk, 128.0)), 1.0)
    work = batch * grid_heads * per_head + ctas * split * c0
    longest = nk / split + c0
    # the SMs drain the CTAs: no faster than the average load or the longest CTA, and ``tail`` of the
    # longest CTA is paid on top when they do not start longest-first
    blocks = xp.maximum(work / sms + tail * longest, longest)
    t_block = 2.0 * bq * bk * (head_dim + head_dim_v) / (peak / sms * eta)
    t_c = power_limited(blocks * t_block, prof, sustained, xp)
    units = ctas * split
    t_m = nbytes / (bw * dec_eta * xp.minimum(1.0, units / sms))
    p = prof.attn_softness[backend]  # how far block compute and KV streaming overlap (large: fully)
    t = (t_c**p + t_m**p) ** (1.0 / p)
    return t + overhead, t_c, t_m
