"""The fitted model of a weight-only MoE format against NVIDIA's measured tables of it (issue 25's gpt-oss
diagnosis): gpt-oss's experts are MXFP4 weights under bf16 activations (``w4a16_mxfp4`` on Hopper, ``w4a8_mxfp4_mxfp8``
with MXFP8 activations on Blackwell), Kimi K2's INT4 (``int4_wo``). The import keeps them as classes of their own
(``bf16_wfp4``, ``fp8_wfp4``, ``bf16_wint4``): a part with the engine's table is priced by it; this reports how far
the fitted model (what a part without the table gets) stands from the table. Needs aiconfigurator-core
(``pip install '.[import]'``).

    python docs/tools/moe_format_check.py [--system h200_sxm] [--engine trtllm] [--format w4a16_mxfp4]
"""
from __future__ import annotations

import argparse

import numpy as np


def check(system: str, engine: str, fmt: str) -> str:
    from perfmodel.cost import time_op
    from perfmodel.graph import moe_expert_ops
    from perfmodel.imports import aiconfigurator as aic
    from perfmodel.resolve import resolve_hardware, resolve_profile

    src = aic.find_source(None)
    hit = aic.find_table(src, system, "moe", engine, "moe_perf", aic.current_version(src, system, engine))
    if hit is None:
        return f"no moe_perf table for {system} / {engine}"
    rows = [r for r in aic._rows(aic.read_columns(hit[0], aic.MOE_COLUMNS))
            if r["moe_dtype"] == fmt and r.get("distribution", "balanced") == "balanced"]
    if not rows:
        return f"{system} / {engine}: no balanced rows of {fmt}"
    hw = resolve_hardware(aic.SYSTEMS[system])
    prof = resolve_profile(None, hw, engine)
    by_tokens: dict[int, list[float]] = {}
    for r in rows:
        act, _ = aic.MOE_FORMATS[fmt]
        ops = moe_expert_ops(r["num_tokens"], r["hidden_size"], r["inter_size"] // r["moe_tp_size"], r["topk"],
                             r["num_experts"], r["moe_ep_size"], act, "bf16", "standalone",
                             weight_dtype=aic.MOE_WEIGHTS.get(fmt))
        t = sum(float(time_op(op, hw, prof).time) * op.count for op in ops)
        by_tokens.setdefault(r["num_tokens"], []).append(t / (r["latency"] * 1e-3) - 1.0)
    every = [e for v in by_tokens.values() for e in v]
    lines = [f"{system} / {engine}, {fmt}: {len(every)} balanced rows, fitted model ({prof.label}) against table "
             "median signed "
             f"{np.median(every):+.1%}", "| tokens | rows | median signed error |", "|---|---|---|"]
    lines += [f"| {t} | {len(v)} | {np.median(v):+.1%} |" for t, v in sorted(by_tokens.items())]
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--system", default="h200_sxm")
    ap.add_argument("--engine", default="trtllm")
    ap.add_argument("--format", default="w4a16_mxfp4")
    a = ap.parse_args()
    print(check(a.system, a.engine, a.format))
