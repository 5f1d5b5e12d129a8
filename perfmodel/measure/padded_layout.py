"""A block-fp8 MoE layer's grouped products over DeepGEMM's contiguous layout, with and without its padding, measured.

vLLM runs block-fp8 experts through DeepGEMM's contiguous grouped product (``m_grouped_fp8_gemm_nt_contiguous``)
where it picks DeepGEMM (:data:`perfmodel.engines.VLLM_PADDING_SOURCE`): every local expert's rows aligned to
128-row blocks, the whole sized for the worst case, ``tokens x top_k + local experts x 127`` rows rounded up to
128, since the experts' token counts are not on the host. vLLM 0.12.0 fills the block ids of the rows no token
reaches with 0, so the product computes every such block as expert 0's; 0.13.0 fills them with -1, which DeepGEMM
skips. What those padded blocks cost beside the real ones is what this measures, on the attached GPU, with
PyTorch's fp8 grouped product (``torch._scaled_grouped_mm``: CUTLASS's persistent grouped kernel on Hopper, e4m3
operands with row-wise scales; a stand-in for DeepGEMM's kernel with 128-wide block scales, not the same code), in
three variants of each layer's product at a decode step's token counts:

- ``routed``: the blocks of the experts the step's tokens reach (each expert's rows rounded up to 128), as 0.13 runs;
- ``padded``: those and the rest of the worst-case layout as expert 0's rows, as 0.12 runs;
- ``dense``: the rest alone, one product of expert 0's weights (how the projection prices the padding,
  :func:`perfmodel.graph.padded_expert_ops`).

``(padded - routed) / dense`` says whether the padding adds its own product's time (1) or hides behind the real
blocks' weight traffic (0). The tokens pick their experts uniformly (a fixed seed); the layers are Qwen3-235B-A22B's
at TP 2 and 4 and EP 2 (the vLLM 0.12 rows of the silicon table), MiniMax-M2.5's at TP 4 and DeepSeek-V3's at TP 8.

    python -m perfmodel.measure.padded_layout --out DIR [--quick] [--resume]
"""
from __future__ import annotations

import sys
from typing import Any

from .shapes import Case, Cases

BLOCK_M = 128  # DeepGEMM's M block, the contiguous layout's alignment
# (layer, hidden, expert width on this rank, local experts, top_k, experts in all)
LAYERS = (("qwen3-235b tp2", 4096, 768, 128, 8, 128), ("qwen3-235b tp4", 4096, 384, 128, 8, 128),
          ("qwen3-235b ep2", 4096, 1536, 64, 8, 128), ("minimax-m2.5 tp4", 3072, 384, 256, 8, 256),
          ("deepseek-v3 tp8", 7168, 256, 256, 8, 256))
TOKENS = (1, 4, 16, 64, 256)
VARIANTS = ("routed", "padded", "dense")


def layout(tokens: int, local: int, top_k: int, all_experts: int, seed: int = 0) -> tuple[list[int], int]:
    """The local experts' rows, each rounded up to a block (0 where no token reaches the expert), and the rows of
    the worst-case layout vLLM allocates (``compute_aligned_M``): ``tokens`` tokens each picking ``top_k`` distinct
    experts of ``all_experts`` uniformly (``seed``), experts ``0..local-1`` on this rank."""
    import numpy as np

    rng = np.random.default_rng(seed)
    counts = np.zeros(all_experts, dtype=int)
    for _ in range(tokens):
        counts[rng.choice(all_experts, size=top_k, replace=False)] += 1
    aligned = [int(-(-c // BLOCK_M) * BLOCK_M) for c in counts[:local]]
    worst = -(-(tokens * top_k + local * (BLOCK_M - 1)) // BLOCK_M) * BLOCK_M
    return aligned, worst


def groups(p: dict[str, Any]) -> list[int]:
    """The rows of each group of the variant's product (:data:`VARIANTS`)."""
    aligned, worst = layout(p["tokens"], p["experts"], p["top_k"], p["all_experts"])
    tail = worst - sum(aligned)
    if p["variant"] == "routed":
        return aligned
    if p["variant"] == "padded":
        return [aligned[0] + tail] + aligned[1:]
    return [tail]


def padded_cases(quick: bool = False) -> list[Case]:
    cases = Cases()
    layers = LAYERS[:1] if quick else LAYERS
    for name, hidden, width, local, top_k, all_experts in layers:
        for tokens in (TOKENS[:1] if quick else TOKENS):
            for product, k, n in (("gate_up", hidden, 2 * width), ("down", width, hidden)):
                for variant in VARIANTS:
                    cases.add("padded_layout", {"layer": name, "product": product, "tokens": tokens, "k": k, "n": n,
                                                "experts": local, "top_k": top_k, "all_experts": all_experts,
                                                "variant": variant, "dtype": "fp8"}, f"padded-{name}")
    return cases.items


def run_case(case: Case, ctx) -> dict[str, Any]:
    """One variant's grouped product ``[rows, K] x [E, K, N]`` in e4m3 with row-wise scales, bf16 out."""
    import torch

    from .timing import timing_fields

    p = case.params
    if not ctx.fp8_ok or not hasattr(torch, "_scaled_grouped_mm"):
        raise RuntimeError("fp8 grouped products need a CUDA device of capability >= 9.0 and torch._scaled_grouped_mm")
    sizes = groups(p)
    rows, e, k, n = sum(sizes), len(sizes), p["k"], p["n"]
    f8 = torch.float8_e4m3fn
    a = ctx.randn(rows, k, dtype=torch.bfloat16).to(f8)
    b = ctx.randn(e, n, k, dtype=torch.bfloat16).to(f8).transpose(-2, -1)
    sa = torch.ones(rows, dtype=torch.float32, device=ctx.device)
    sb = torch.ones(e, n, dtype=torch.float32, device=ctx.device)
    offs = torch.tensor(sizes, device=ctx.device, dtype=torch.int32).cumsum(0, dtype=torch.int32)

    def fn():
        return torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=True)

    fn()
    t = ctx.timer.time(fn)
    return {**timing_fields(t), "rows": rows, "groups": e, "active": sum(1 for s in sizes if s),
            "flops": 2.0 * rows * k * n, "impl": "torch._scaled_grouped_mm e4m3 row-wise scales, fast accumulation"}


def _describe(case: Case, row: dict) -> str:
    p = case.params
    msg = f"{row['time_s'] * 1e6:9.1f} us over {row['rows']:6d} rows" if row.get("time_s") else f"error {row.get('error')}"
    return f"{p['layer']:17s} {p['product']:7s} tokens {p['tokens']:<4d} {p['variant']:6s}: {msg}"


def main(argv: list[str] | None = None) -> int:
    import torch

    from .suite import measure_standalone, standalone_args

    args = standalone_args("python -m perfmodel.measure.padded_layout", __doc__, argv)
    if not hasattr(torch, "_scaled_grouped_mm"):
        print(f"perfmodel: error: torch {torch.__version__} has no _scaled_grouped_mm (2.8 or later)", file=sys.stderr)
        return 2
    return measure_standalone(padded_cases, args, suite="padded-layout", describe=_describe, run=run_case)


if __name__ == "__main__":
    sys.exit(main())
