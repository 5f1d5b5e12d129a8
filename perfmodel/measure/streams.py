"""A MoE layer's shared experts on a second CUDA stream beside its routed experts, measured.

TensorRT-LLM and SGLang replay a decode step's MoE layers with the shared experts on one stream and the router and
routed experts on another (vLLM from 0.12 in steps of at most 256 tokens; perfmodel.engines, ``shared_stream``).
How much of the shorter path the longer one hides is a property of the GPU's scheduling of two small kernel
streams, not of either path: this measures it. One decode layer's two paths at a model's shapes on one TP rank
(bf16 products), each captured ten times over in a CUDA graph and replayed:

- ``main``: the router's product, softmax and top-k, the tokens permuted to their experts (uniform routing, drawn
  once), the grouped gate-up product (``torch._grouped_mm`` over every expert of the rank), SiLU and product, the
  grouped down product, the weighted un-permute;
- ``side``: the shared expert (gate-up, SiLU and product, down; Qwen3.5's sigmoid gate and scaling);
- ``serial``: both on one stream; ``streams``: the side path forked onto a second stream and joined, as the
  engines do.

The overlap model (:func:`perfmodel.step_accounting.stream_regions`) predicts ``streams`` from ``main`` and ``side``:
``docs/tools/streams_check.py`` compares.

    python -m perfmodel.measure.streams --out DIR [--quick] [--resume]
"""
from __future__ import annotations

import sys
from typing import Any

from .shapes import Case, Cases

# (model, hidden, experts, top-k, expert width, shared experts' width, shared gate, TP degrees): the models' MoE
# layers as workloads/models/ describes them (tests/test_shared_stream.py checks), at the TP degrees the measured
# serving runs use
MODELS = (("deepseek-v3", 7168, 256, 8, 2048, 2048, False, (8, 4)),
          ("qwen3.5-397b-a17b", 4096, 512, 10, 1024, 1024, True, (8, 4)),
          ("glm-5", 6144, 256, 8, 2048, 2048, False, (8,)),
          ("llama-4-maverick", 5120, 128, 1, 8192, 8192, False, (8,)))
BATCHES = (1, 4, 16, 64, 256)
LAYERS = 10  # repetitions of the layer in one captured graph
PATHS = ("main", "side", "serial", "streams")


def stream_cases(quick: bool = False) -> list[Case]:
    cases = Cases()
    for name, hidden, experts, top_k, width, shared, gate, tps in (MODELS[:1] if quick else MODELS):
        for tp in (tps[:1] if quick else tps):
            shape = {"model": name, "tp": tp, "hidden": hidden, "experts": experts, "top_k": top_k,
                     "width": -(-width // tp), "shared_width": -(-shared // tp), "shared_gate": gate}
            for b in (BATCHES[:2] if quick else BATCHES):
                for path in PATHS:
                    cases.add("streams", {**shape, "batch": b, "path": path}, f"streams-{name}")
    return cases.items


def _layer(p: dict[str, Any], ctx):
    """The two paths of one layer as closures over their tensors: (main, side, join)."""
    import torch
    import torch.nn.functional as F

    dt = torch.bfloat16
    b, h, e, k, w, ws = p["batch"], p["hidden"], p["experts"], p["top_k"], p["width"], p["shared_width"]
    gen = torch.Generator().manual_seed(0)
    picks = torch.stack([torch.randperm(e, generator=gen)[:k] for _ in range(b)])  # [b, k] distinct experts
    order = torch.argsort(picks.flatten(), stable=True)
    counts = torch.bincount(picks.flatten(), minlength=e)
    dev = ctx.device
    token_of_pair = (order // k).to(dev)
    offs = torch.cumsum(counts, 0).to(torch.int32).to(dev)
    x = ctx.randn(b, h, dtype=dt)
    w_router = ctx.randn(e, h, dtype=dt)
    w_up = ctx.randn(e, 2 * w, h, dtype=dt).transpose(-2, -1)  # [e, h, 2w], column-major as the kernels take it
    w_down = ctx.randn(e, h, w, dtype=dt).transpose(-2, -1)  # [e, w, h]
    w_s_up, w_s_down = ctx.randn(2 * ws, h, dtype=dt), ctx.randn(h, ws, dtype=dt)
    w_gate = ctx.randn(1, h, dtype=dt) if p["shared_gate"] else None
    out = torch.zeros(b, h, dtype=dt, device=dev)
    scale = torch.rand(b * k, 1, dtype=dt, device=dev)
    box: dict[str, Any] = {}

    def main():
        probs = F.linear(x, w_router).float().softmax(-1)
        box["top"] = probs.topk(k, dim=-1)
        xp = x.index_select(0, token_of_pair)
        up = torch._grouped_mm(xp, w_up, offs=offs)
        act = F.silu(up[:, :w]) * up[:, w:]
        y = torch._grouped_mm(act, w_down, offs=offs)
        out.zero_()
        out.index_add_(0, token_of_pair, y * scale)

    def side():
        up = F.linear(x, w_s_up)
        s = F.linear(F.silu(up[:, :ws]) * up[:, ws:], w_s_down)
        if w_gate is not None:
            s = s * torch.sigmoid(F.linear(x, w_gate))
        box["shared"] = s

    def join():
        out.add_(box["shared"])

    return main, side, join


def run_case(case: Case, ctx) -> dict[str, Any]:
    import torch

    from .timing import Timing, capture_graph, timing_fields

    if not ctx.is_cuda:
        raise RuntimeError("two streams in a CUDA graph need CUDA")
    p = case.params
    main, side, join = _layer(p, ctx)
    second = torch.cuda.Stream()

    def layer():
        if p["path"] == "main":
            main()
        elif p["path"] == "side":
            side()
        elif p["path"] == "serial":
            side()
            main()
            join()
        else:  # the engines' fork and join: the side stream waits for the layer's input, the main one for its output
            here = torch.cuda.current_stream()
            second.wait_stream(here)
            with torch.cuda.stream(second):
                main()
            side()
            here.wait_stream(second)
            join()

    def layers():
        for _ in range(LAYERS):
            layer()

    layers()
    graph, _ = capture_graph(layers, warmup=1)
    whole = ctx.timer.time(graph.replay)
    t = Timing(whole.median_s / LAYERS, whole.p10_s / LAYERS, whole.p90_s / LAYERS, whole.reps,
               [x / LAYERS for x in whole.samples])
    del graph
    return {**timing_fields(t), "impl": f"torch._grouped_mm bf16 routed experts, F.linear shared expert; {LAYERS} "
                                        "layers in one CUDA graph, replayed"}


def layer_times(rows) -> dict[tuple, dict[str, float]]:
    """Each measured layout's seconds per path, keyed (model, TP, batch, run): rows of several runs are kept apart by
    the order they come in (a layout measured twice gives runs 0 and 1)."""
    times: dict[tuple, dict[str, float]] = {}
    for r in rows:
        p = r.get("params") or {}
        if r.get("kind") != "streams" or r.get("error") or not r.get("time_s"):
            continue
        key = (p["model"], p["tp"], p["batch"])
        run = 0
        while p["path"] in times.get(key + (run,), {}):
            run += 1
        times.setdefault(key + (run,), {})[p["path"]] = float(r["time_s"])
    return {k: t for k, t in times.items() if len(t) == len(PATHS)}


def hidden_fractions(rows) -> dict[tuple, float]:
    """Per measured layout and run (:func:`layer_times`), the share of the side path's time the second stream hides:
    (serial - streams) / side, the same kernels in the same graph with and without the second stream."""
    return {k: (t["serial"] - t["streams"]) / t["side"] for k, t in layer_times(rows).items()}


def _describe(case: Case, row: dict) -> str:
    p = case.params
    msg = f"{row['time_s'] * 1e6:9.1f} us" if row.get("time_s") else f"error {row.get('error')}"
    return f"{p['model']} TP{p['tp']} batch {p['batch']:<4d} {p['path']:8s}: {msg}"


def main(argv: list[str] | None = None) -> int:
    from .suite import measure_standalone, standalone_args

    args = standalone_args("python -m perfmodel.measure.streams", __doc__, argv)
    return measure_standalone(stream_cases, args, suite="streams", describe=_describe, run=run_case)


if __name__ == "__main__":
    sys.exit(main())
