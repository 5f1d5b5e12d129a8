"""Fused (flash) attention time: block work over the SMs, with split-KV for decode.

A flash forward kernel gives each CTA one block of ``block_q`` query rows of one head and walks the key
blocks (only those at or below the diagonal when causal). With a single query per sequence (decode), the
query heads of one KV group are packed as rows (GQA packing) and the key sequence is split across CTAs
until the SMs are full (split-KV). Time is the larger of the average SM load and the longest CTA (a
longest-first schedule achieves about that), at ``attn_eta`` of the per-SM dense bf16 peak per block,
each CTA paying ``attn_cta_blocks`` blocks' worth of prologue and epilogue (loading Q, writing O),
joined with the time to stream Q, K, V and O from HBM, plus a fixed overhead.

Written against a math backend (:mod:`.backend`).
"""
from __future__ import annotations

from .backend import NP
from .gemm import power_limited


def attention_time(batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, head_dim_v, causal, nbytes, peak, sms, bw,
                   prof, xp=NP, packed=False, sustained=None):
    """``packed``: a decode kernel that computes only the real query rows (serving engines' decode
    attention), rather than padding them to ``attn_block_q`` as a flash prefill kernel does."""
    bq, bk = float(prof.attn_block_q), float(prof.attn_block_k)
    single = seq_q <= 1.0
    if packed:
        bq = xp.where(single, 1.0, bq)
    group = heads_q / heads_kv
    rows = xp.where(single, seq_q * group, seq_q)  # GQA packing of one-query decode
    grid_heads = xp.where(single, heads_kv, heads_q)
    nq = xp.ceil(rows / bq)
    nk = xp.ceil(seq_kv / bk)
    prefix = xp.maximum(nk - nq, 0.0)  # key blocks before the first query block (cached context)
    c0 = prof.attn_cta_blocks
    per_head = xp.where(causal, nq * (nq + 1.0) / 2.0 + nq * prefix, nq * nk)
    ctas = batch * grid_heads * nq
    split = xp.where(xp.logical_and(single, ctas < 0.8 * sms),
                     xp.clip(xp.ceil(sms / ctas), 1.0, xp.minimum(nk, 128.0)), 1.0)
    work = batch * grid_heads * per_head + ctas * split * c0
    longest = nk / split + c0
    t_block = 2.0 * bq * bk * (head_dim + head_dim_v) / (peak / sms * prof.attn_eta)
    t_c = power_limited(xp.maximum(work / sms, longest) * t_block, prof, sustained, xp)
    units = ctas * split
    t_m = nbytes / (bw * prof.attn_dec_eta * xp.minimum(1.0, units / sms))
    p = prof.gemm_softness
    t = (t_c**p + t_m**p) ** (1.0 / p)
    return t + prof.attn_overhead_s, t_c, t_m
