"""DeepSeek Sparse Attention's decode module as perfmodel composes it, beside SGLang's measured module
(docs/engines.md).

aiconfigurator-core 0.12.0 times SGLang 0.5.14's whole DSA attention module in decode
(``sparse_attention/sglang/0.5.14/dsa_generation_module_perf``: the latent projections, the lightning indexer's
products, logits and top-k, the sparse MLA kernel, the absorbed products and the output projection, without the
input RMSNorm and the all-reduce) for GLM-5-FP8 at TP 1-8, batch 1-1,024 and KV lengths 1-202,751. perfmodel does
not read that table: it prices the module op by op (``attn.*`` of a decode step, the all-reduce and the input norm
left out) from the GEMM, attention and memory-bound evidence of the part's SGLang folder. This sets the two side by
side at the KV format each part decodes over under SGLang's defaults (fp8 on B200/B300, bf16 on the H200 with its
FlashAttention-3 path), and over the other format, where the table has it, with ``--kv-dtype`` forced.

    python docs/tools/dsa_module_check.py      # 72 decode steps: seconds

Needs aiconfigurator-core 0.12.0 (``pip install -e '.[import]'``; docs/tools/regenerate.py skips the block without it).
"""
from __future__ import annotations

import statistics
from pathlib import Path

PARTS = (("h200", "h200_sxm"), ("b200", "b200_sxm"), ("b300", "b300_sxm"))
TP = 8
BATCHES = (1, 16, 64, 256)
CONTEXTS = (1024, 8192, 16384)
MODEL = "zai-org/GLM-5-FP8"
TABLE = "sparse_attention/sglang/0.5.14/dsa_generation_module_perf.parquet"
KV_NAMES = {"bf16": "bfloat16", "fp8": "fp8"}


def _table(folder: str):
    import aiconfigurator_core
    import pandas as pd

    path = Path(aiconfigurator_core.__file__).parent / "systems" / "data" / folder / TABLE
    d = pd.read_parquet(path)
    d = d[(d.model == MODEL) & (d.op_name == "dsa_generation_module") & (d.tp_size == TP)]
    return {(kv, int(b), int(s)): float(t) * 1e-3
            for kv, b, s, t in zip(d.kv_cache_dtype, d.batch_size, d.step, d.latency)}


def module_s(hw, model, prof, kv_dtype: str | None, batch: int, context: int) -> tuple[float, str]:
    """perfmodel's time for one layer's DSA module in a decode step, and the KV format it decoded over."""
    from perfmodel.graph import Step
    from perfmodel.projection import evaluate_step
    from perfmodel.resolve import resolve_scenario
    from perfmodel.scenario import Scenario

    sc = resolve_scenario(Scenario(engine="sglang", tp=TP, dtype="fp8", kv_dtype=kv_dtype, batch=batch,
                                   isl=context, osl=2, batching="static").validated(), hw, model)
    phase = evaluate_step(model, hw, sc, prof, Step("decode", batch, 1, context))
    t = sum(x.total for x in phase.times
            if x.op.name.startswith("attn.") and x.op.name not in ("attn.allreduce", "attn.norm"))
    return t / phase.layers, sc.kv


def rows() -> list[tuple]:
    """(part, KV format, default?, batch, context, measured s, projected s) for every point both price."""
    from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile

    model = resolve_model("zhipuai/GLM-5")
    out = []
    for part, folder in PARTS:
        hw = resolve_hardware(part)
        prof = resolve_profile(None, hw, "sglang")
        table = _table(folder)
        default_kv = module_s(hw, model, prof, None, 1, CONTEXTS[0])[1]
        # the part's default KV format, then the other one forced (where the table times it)
        for forced in (None,) + tuple(kv for kv in KV_NAMES if kv != default_kv):
            for batch in BATCHES:
                for context in CONTEXTS:
                    projected, kv = module_s(hw, model, prof, forced, batch, context)
                    measured = table.get((KV_NAMES.get(kv, kv), batch, context))
                    if measured is not None:
                        out.append((hw.name, kv, forced is None, batch, context, measured, projected))
    return out


def markdown() -> str:
    data = rows()
    lines = [f"GLM-5-FP8 at TP {TP} under SGLang, one decoder layer's DSA module in a decode step (us; measured: "
             "aiconfigurator-core 0.12.0's SGLang 0.5.14 table; projected: perfmodel's ops):", "",
             "| part | KV cache | batch | " + " | ".join(f"KV {c:,}: measured / projected" for c in CONTEXTS) + " |",
             "|---" * (3 + len(CONTEXTS)) + "|"]
    cells: dict = {}
    for name, kv, default, batch, context, measured, projected in data:
        cells.setdefault((name, kv, default, batch), {})[context] = f"{measured * 1e6:.1f} / {projected * 1e6:.1f}"
    for (name, kv, default, batch), by_ctx in cells.items():
        label = f"{kv}{' (default)' if default else ''}"
        lines.append(f"| {name} | {label} | {batch} | "
                     + " | ".join(by_ctx.get(c, "") for c in CONTEXTS) + " |")
    lines.append("")
    for default in (True, False):
        errs = {}
        for name, kv, d, batch, context, measured, projected in data:
            if d == default:
                errs.setdefault(name, []).append(projected / measured - 1)
        if errs:
            what = "at the default KV format" if default else "at the other format"
            lines.append(f"Median error of the projected module {what}: " + "; ".join(
                f"{name} {statistics.median(abs(e) for e in v):.0%} (signed {statistics.median(v):+.0%}, "
                f"{len(v)} points)" for name, v in errs.items()) + ".")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
