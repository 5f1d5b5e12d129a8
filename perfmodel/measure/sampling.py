"""Sampling the next token from a decode step's logits, measured: the GPU work after the LM head.

Every decode step ends by picking one token a sequence from its ``[batch, vocab]`` fp32 logits. At small batch it
is a few microseconds; at the batches small-active MoE models run (1,000-2,000 sequences of a 150k-200k vocabulary)
the logits are 0.5-1.6 GB, read at least once. How much more depends on what the request asks for, so this
measures the four ways the engines' samplers run (PyTorch's versions of them; the engines' own kernels, such as
FlashInfer's sorting-free top-p, are not these):

- ``greedy``: ``argmax`` over the vocabulary (temperature 0: TensorRT-LLM's default sampling parameters);
- ``random``: temperature, softmax and one draw by the exponential race ``argmax(p / q), q ~ Exp(1)`` (vLLM's
  ``random_sample``: no top-k or top-p);
- ``top_k``: ``topk(logits, 50)``, softmax over the 50 and one draw;
- ``top_p``: the sort-based top-p (0.95) and top-k mask vLLM falls back to without FlashInfer (sort the vocabulary,
  softmax, cumulative sum, mask, scatter back), then the exponential race.

at the vocabularies of Llama 3 (128,256), DeepSeek-V3 (129,280), Qwen3 (151,936) and gpt-oss (201,088) and batches
1 to 2,048. Rows go through :mod:`.store` as they are measured (a killed run keeps them).
``perfmodel fit`` reads ``DIR/sampling/measurements.jsonl`` (:mod:`perfmodel.fit.sampling`).

    python -m perfmodel.measure.sampling --out DIR [--quick] [--resume]
"""
from __future__ import annotations

import sys
from typing import Any

from .shapes import Case, Cases

VOCABS = (128256, 129280, 151936, 201088)
BATCHES = (1, 8, 64, 256, 1024, 2048)
METHODS = ("greedy", "random", "top_k", "top_p")
TOP_K = 50
TOP_P = 0.95


def sampling_cases(quick: bool = False) -> list[Case]:
    cases = Cases()
    vocabs = VOCABS[:1] if quick else VOCABS
    batches = (1, 8) if quick else BATCHES
    for v in vocabs:
        for b in batches:
            for method in METHODS:
                cases.add("sampling", {"method": method, "batch": b, "vocab": v, "dtype": "fp32"}, f"sampling-{v}")
    return cases.items


def logits_bytes(p: dict[str, Any]) -> float:
    """One read of the step's logits (fp32)."""
    return 4.0 * p["batch"] * p["vocab"]


def sampler(method: str, logits):
    """The callable that samples one token a row of ``logits`` by ``method`` (module doc)."""
    import torch

    def race(probs):  # one draw from each row's distribution without a prefix sum (vLLM's random_sample)
        q = torch.empty_like(probs).exponential_()
        return probs.div_(q).argmax(dim=-1)

    if method == "greedy":
        return lambda: logits.argmax(dim=-1)
    if method == "random":
        return lambda: race(torch.softmax(logits / 0.7, dim=-1))
    if method == "top_k":
        def top_k():
            vals, idx = torch.topk(logits, TOP_K, dim=-1)
            return idx.gather(-1, race(torch.softmax(vals / 0.7, dim=-1)).unsqueeze(-1))
        return top_k
    if method == "top_p":
        def top_p():
            vals, idx = logits.sort(dim=-1, descending=False)
            kth = vals[:, -TOP_K].unsqueeze(-1)  # top-k mask first, as vLLM's apply_top_k_top_p
            vals = vals.masked_fill(vals < kth, float("-inf"))
            probs = vals.softmax(dim=-1)
            cum = probs.cumsum(dim=-1)
            vals = vals.masked_fill(cum <= 1 - TOP_P, float("-inf"))
            masked = torch.empty_like(logits).scatter_(-1, idx, vals)
            return race(masked.softmax(dim=-1))
        return top_p
    raise ValueError(f"unknown sampling method {method!r}")


def run_case(case: Case, ctx) -> dict[str, Any]:
    import torch

    from .timing import timing_fields

    p = case.params
    logits = ctx.randn(p["batch"], p["vocab"], dtype=torch.float32) * 3.0
    fn = sampler(p["method"], logits)
    out = fn()
    ok = tuple(out.reshape(-1).shape) == (p["batch"],) and bool((out >= 0).all()) and bool((out < p["vocab"]).all())
    t = ctx.timer.time(fn)
    gbps = logits_bytes(p) / t.median_s / 1e9 if t.median_s else None
    return {**timing_fields(t), "bytes": logits_bytes(p), "check": "ok" if ok else "FAIL token out of range",
            "impl": f"torch {p['method']} sampler over fp32 logits", "logits_gb_per_s": gbps}


def _describe(case: Case, row: dict) -> str:
    p = case.params
    msg = (f"{row['time_s'] * 1e6:9.1f} us ({row['logits_gb_per_s']:7.1f} GB/s of logits)" if row.get("time_s")
           else f"error {row.get('error')}")
    return f"{p['method']:6s} b{p['batch']:<5d} V{p['vocab']}: {msg}"


def main(argv: list[str] | None = None) -> int:
    from .suite import measure_standalone, standalone_args

    args = standalone_args("python -m perfmodel.measure.sampling", __doc__, argv)
    return measure_standalone(sampling_cases, args, suite="sampling", describe=_describe, run=run_case)


if __name__ == "__main__":
    sys.exit(main())
