"""Decode attention with k query rows a sequence: the attention of a speculative verify step, measured.

A speculative decode (MTP, a draft model, an EAGLE head) verifies 1 + K tokens a sequence in one step, so its
attention has 1 + K query rows over each sequence's KV cache where a plain decode step has one. The cost model
prices it as a decode kernel with packed query rows (:mod:`perfmodel.cost.attention`): the KV cache is read once
for all of a sequence's rows, so the step costs little more than a one-row decode until the rows fill the
kernel's query block. This module measures that claim on the attached GPU with PyTorch's SDPA (the plain
dispatch, whose backend is recorded, and FlashAttention forced), at the per-GPU heads of Llama-3.1-8B (32 query
heads, 8 KV), Llama-3.1-70B at TP 8 (8 and 1) and at TP 1 (64 and 8), head size 128, bf16, rows 1, 2, 4 and 8,
batch 1 to 64, KV length 1,024 to 16,384. No causal mask among the k new rows (the timing is the cache read's;
a mask over k x k entries does not change it).

Rows go through :mod:`.store` as they are measured (a killed run keeps them). Validation evidence only: nothing
here is fitted; ``docs/tools/verify_attention_check.py`` sets the cost model's prices beside them.

    python -m perfmodel.measure.verify_attention --out DIR [--quick] [--resume]
"""
from __future__ import annotations

import sys

from .shapes import Case, Cases

HEADS = ((32, 8), (8, 1), (64, 8))  # (query heads, KV heads) per GPU
HEAD_DIM = 128
ROWS = (1, 2, 4, 8)
BATCHES = (1, 8, 32, 64)
KV_LENGTHS = (1024, 4096, 16384)
BACKENDS = ("default", "flash")


def verify_cases(quick: bool = False) -> list[Case]:
    """Every (heads, batch, KV length, rows, backend) case, rows innermost so a shape's k sweep runs together."""
    cases = Cases()
    heads = HEADS[:1] if quick else HEADS
    batches = (1, 8) if quick else BATCHES
    lengths = (1024,) if quick else KV_LENGTHS
    for hq, hkv in heads:
        for b in batches:
            for skv in lengths:
                for backend in BACKENDS:
                    for k in ROWS:
                        cases.add("attention", {"backend": backend, "batch": b, "heads_q": hq, "heads_kv": hkv,
                                                "seq_q": k, "seq_kv": skv, "head_dim": HEAD_DIM, "causal": False,
                                                "dtype": "bf16"}, f"verify-h{hq}-kv{hkv}")
    return cases.items


def _describe(case: Case, row: dict) -> str:
    p, t = case.params, row.get("time_s")
    return (f"{p['backend']:7s} b{p['batch']:<3d} h{p['heads_q']}/{p['heads_kv']} kv{p['seq_kv']:<6d} k{p['seq_q']}: "
            + (f"{t * 1e6:8.1f} us {row.get('dispatched', '')}" if t else f"error {row.get('error')}"))


def main(argv: list[str] | None = None) -> int:
    from .suite import measure_standalone, standalone_args

    args = standalone_args("python -m perfmodel.measure.verify_attention", __doc__, argv)
    return measure_standalone(verify_cases, args, suite="verify-attention", describe=_describe)


if __name__ == "__main__":
    sys.exit(main())
