"""Gated DeltaNet's chunked prefill: a scan over chunks, not a product.

flash-linear-attention's ``chunk_gated_delta_rule`` (SGLang's and TensorRT-LLM's copies, vLLM's FlashInfer port)
splits each sequence into chunks of :data:`CHUNK` tokens. Most of its kernels work on every chunk at once (the
chunk's key products, the triangular solve, the output), but the state pass walks the chunks of a sequence one
after another: one CTA per (sequence, value head, :data:`BLOCK_V` columns of the value dim) carries the
``key_dim x BLOCK_V`` state from chunk to chunk. With a few sequences of a few heads (a TP rank's share of one
prompt) that is a few dozen CTAs on a hundred-odd SMs, each step a chain of small products: the time grows with
the chunks of the longest sequence, not with the FLOPs (priced as a tensor-core product it missed the engines'
measured calls by 50-90%: ``python docs/tools/deltanet_tables.py``).

The time of one call, from three fitted constants (``Profile.deltanet_scan``, :mod:`perfmodel.fit.deltanet`):

    fixed_s + ceil(tokens per sequence / CHUNK) x chunk_s x waves + sequences x tokens x value heads x token_s

``waves``: the state pass's CTAs over the SMs, rounded up. ``fixed_s``: the call's kernels at their smallest;
``chunk_s``: one step of the state pass; ``token_s``: the work every chunk does in parallel, per token and
value head. A chunked prefill's sequences differ in length; a step prices their mean.
"""
from __future__ import annotations

from ..ops import SCAN_CHUNK as CHUNK  # tokens a chunk (the kernels' BT), the graph's too
BLOCK_V = 64  # value columns one CTA of the state pass carries (estimate: the kernels autotune their BV)
FIELDS = ("fixed_s", "chunk_s", "token_s")


def scan_time(sequences, tokens, value_heads: int, head_dim_v: int, sms: int, scan: dict, xp):
    """Seconds of one chunked gated-delta-rule call over ``sequences`` sequences of ``tokens`` new tokens in all
    (numbers, arrays or workbook expressions), ``value_heads`` heads of ``head_dim_v`` on this GPU."""
    per_seq = tokens / xp.maximum(sequences, 1)
    ctas = sequences * value_heads * -(-head_dim_v // BLOCK_V)
    waves = xp.ceil(ctas / sms)
    return (scan["fixed_s"] + xp.ceil(per_seq / CHUNK) * scan["chunk_s"] * waves
            + tokens * value_heads * scan["token_s"])
