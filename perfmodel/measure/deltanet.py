"""Gated DeltaNet's recurrence (Qwen3-Next, Qwen3.5), measured: flash-linear-attention's kernels on the attached GPU.

A Gated DeltaNet layer's token mixer keeps a key_head_dim x value_head_dim state per value head instead of a KV
cache. The cost model prices the recurrence as an estimate (perfmodel/graph.py: _linear_attention): a decode step
reads and writes the state (memory-bound), a prefill runs the chunked form as a product. This times what the
serving engines call for it, flash-linear-attention's Triton kernels (SGLang and vLLM ship copies of them):

- ``decode``: ``fused_recurrent_gated_delta_rule`` over one new token of each of ``batch`` sequences, each from
  its own fp32 state, the final states written back (as a decode step does);
- ``prefill``: ``chunk_gated_delta_rule`` over one sequence of ``tokens`` tokens from a zero state, the final
  state kept;

both with the gates in log space, the betas given, q and k L2-normalised inside the kernel, at each model's heads
over TP 1, 2, 4 and 8 (a TP rank runs its share of the heads). Rows go through :mod:`.store` as they are measured.
Evidence for the docs (``docs/tools/deltanet_check.py`` prices the same steps as the graph does).

    python -m perfmodel.measure.deltanet --out DIR [--quick] [--resume]
"""
from __future__ import annotations

import sys
from typing import Any

from .shapes import Case, Cases

# (model, key heads, value heads, key head dim, value head dim): the models' linear_attention descriptors
MODELS = (("qwen3-next-80b-a3b", 16, 32, 128, 128), ("qwen3.5-397b-a17b", 16, 64, 128, 128))
TPS = (1, 2, 4, 8)
DECODE_BATCH = (1, 8, 32, 128, 512)
PREFILL_TOKENS = (1024, 4096, 16384)


def deltanet_cases(quick: bool = False) -> list[Case]:
    cases = Cases()
    models = MODELS[:1] if quick else MODELS
    for model, kh, vh, dk, dv in models:
        for tp in (TPS[-1:] if quick else TPS):
            heads = {"model": model, "tp": tp, "key_heads": kh // tp, "value_heads": vh // tp, "dk": dk, "dv": dv}
            for b in (DECODE_BATCH[:2] if quick else DECODE_BATCH):
                cases.add("deltanet", {**heads, "phase": "decode", "batch": b, "tokens": 1}, f"deltanet-{model}")
            for t in (PREFILL_TOKENS[:1] if quick else PREFILL_TOKENS):
                cases.add("deltanet", {**heads, "phase": "prefill", "batch": 1, "tokens": t}, f"deltanet-{model}")
    return cases.items


def run_case(case: Case, ctx) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from .timing import timing_fields

    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule, fused_recurrent_gated_delta_rule
    except ImportError as e:
        raise RuntimeError(f"flash-linear-attention (fla-core) is not installed: {e}") from None
    p = case.params
    b, t, h, hv, dk, dv = p["batch"], p["tokens"], p["key_heads"], p["value_heads"], p["dk"], p["dv"]
    dt = torch.bfloat16
    q = ctx.randn(b, t, h, dk, dtype=dt)
    k = ctx.randn(b, t, h, dk, dtype=dt)
    v = ctx.randn(b, t, hv, dv, dtype=dt)
    g = F.logsigmoid(ctx.randn(b, t, hv, dtype=torch.float32))  # log decays in (-inf, 0)
    beta = torch.sigmoid(ctx.randn(b, t, hv, dtype=torch.float32)).to(dt)
    state = torch.zeros(b, hv, dk, dv, dtype=torch.float32, device=ctx.device)
    kernel = fused_recurrent_gated_delta_rule if p["phase"] == "decode" else chunk_gated_delta_rule

    def fn():
        return kernel(q, k, v, g=g, beta=beta, initial_state=state, output_final_state=True,
                      use_qk_l2norm_in_kernel=True)

    fn()
    t_ = ctx.timer.time(fn)
    return {**timing_fields(t_), "impl": f"fla {kernel.__name__}", "state_bytes": b * hv * dk * dv * 4}


def _describe(case: Case, row: dict) -> str:
    p = case.params
    msg = f"{row['time_s'] * 1e6:9.1f} us" if row.get("time_s") else f"error {row.get('error')}"
    return f"{p['model']} TP{p['tp']} {p['phase']:7s} batch {p['batch']:<4d} tokens {p['tokens']:<6d}: {msg}"


def main(argv: list[str] | None = None) -> int:
    from .suite import measure_standalone, standalone_args

    args = standalone_args("python -m perfmodel.measure.deltanet", __doc__, argv)
    return measure_standalone(deltanet_cases, args, suite="deltanet", describe=_describe, run=run_case)


if __name__ == "__main__":
    sys.exit(main())
