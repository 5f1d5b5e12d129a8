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

``launch``: ``eager`` times each call through fla's Python wrappers (a small call is bound by them: 40-180 us on
an H100); ``graph`` captures :data:`GRAPH_CALLS` calls in one CUDA graph and times its replay per call, as an
engine's decode graph runs them (the first run, on an H100, had eager rows only). Prefill rows cover several
sequences a call (``batch``) as a chunked prefill batches them.

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
# the CUDA-graph rows: decode batches to 1,024, prefills of (sequences, tokens each) from one short prompt to 64k
# tokens a call (the grid aiconfigurator-core's gdn tables use, thinned)
GRAPH_DECODE_BATCH = (1, 4, 16, 64, 256, 1024)
GRAPH_PREFILL = ((1, 64), (1, 256), (1, 1024), (1, 4096), (1, 16384), (4, 1024), (4, 4096), (16, 1024),
                 (16, 4096))
GRAPH_CALLS = 10  # calls captured in one graph, its replay timed and divided


def deltanet_cases(quick: bool = False) -> list[Case]:
    """The CUDA-graph rows first (what a killed run should keep), then the eager ones."""
    cases = Cases()
    models = MODELS[:1] if quick else MODELS
    layouts = [(model, tp, {"model": model, "tp": tp, "key_heads": kh // tp, "value_heads": vh // tp, "dk": dk,
                            "dv": dv})
               for model, kh, vh, dk, dv in models for tp in (TPS[-1:] if quick else TPS)]
    for model, tp, heads in layouts:
        for b in (GRAPH_DECODE_BATCH[:2] if quick else GRAPH_DECODE_BATCH):
            cases.add("deltanet", {**heads, "phase": "decode", "batch": b, "tokens": 1, "launch": "graph"},
                      f"deltanet-{model}")
        for b, t in (GRAPH_PREFILL[:2] if quick else GRAPH_PREFILL):
            cases.add("deltanet", {**heads, "phase": "prefill", "batch": b, "tokens": t, "launch": "graph"},
                      f"deltanet-{model}")
    for model, tp, heads in layouts:
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
    impl = f"fla {kernel.__name__}"
    if p.get("launch", "eager") == "graph":
        if not ctx.is_cuda:
            raise RuntimeError("graph launches need CUDA")
        from .timing import Timing, capture_graph

        def calls():
            for _ in range(GRAPH_CALLS):
                fn()

        graph, _ = capture_graph(calls, warmup=1)
        whole = ctx.timer.time(graph.replay)
        t_ = Timing(whole.median_s / GRAPH_CALLS, whole.p10_s / GRAPH_CALLS, whole.p90_s / GRAPH_CALLS, whole.reps,
                    [x / GRAPH_CALLS for x in whole.samples])
        impl += f", {GRAPH_CALLS} calls in one CUDA graph, replayed"
        del graph
    else:
        t_ = ctx.timer.time(fn)
    return {**timing_fields(t_), "impl": impl, "state_bytes": b * hv * dk * dv * 4}


def _describe(case: Case, row: dict) -> str:
    p = case.params
    msg = f"{row['time_s'] * 1e6:9.1f} us" if row.get("time_s") else f"error {row.get('error')}"
    return (f"{p['model']} TP{p['tp']} {p['phase']:7s} {p.get('launch', 'eager'):5s} batch {p['batch']:<4d} "
            f"tokens {p['tokens']:<6d}: {msg}")


def main(argv: list[str] | None = None) -> int:
    from .suite import measure_standalone, standalone_args

    args = standalone_args("python -m perfmodel.measure.deltanet", __doc__, argv)
    return measure_standalone(deltanet_cases, args, suite="deltanet", describe=_describe, run=run_case)


if __name__ == "__main__":
    sys.exit(main())
