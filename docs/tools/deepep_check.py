"""DeepEP's measured low-latency dispatch and combine beside the all-to-all a projection prices (docs/collectives.md).

aiconfigurator-core ships SGLang 0.5.12's DeepEP low-latency kernels timed on one node of each part
(``systems/data/<part>/comm/sglang/0.5.12/wideep_deepep_ll_perf.parquet``: tokens per rank, hidden size, experts,
top-k; microseconds and the GB/s each moved). For DeepSeek-V3's MoE (hidden 7,168, 256 experts, top-8) this
prints, per part and tokens per rank, the measured dispatch and combine against perfmodel's ``moe.dispatch`` and
``moe.combine`` of a decode step at EP 8 over attention DP 8 with ``--moe-exchange all_to_all`` under the SGLang
preset, and the bytes per routed token-expert pair each side moves (the table's: its GB/s times its time).

    python docs/tools/deepep_check.py

Needs aiconfigurator-core 0.12.0 (``pip install -e '.[import]'``; docs/tools/regenerate.py skips the block
without it).
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PARTS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200",
         "gb300": "gb300"}
HIDDEN, EXPERTS, TOP_K, EP = 7168, 256, 8, 8
TOKENS = (8, 64, 256, 1024)


def measured(system: str):
    """The table's rows at DeepSeek-V3's MoE shape, by tokens per rank."""
    import pandas as pd

    from perfmodel.imports.aiconfigurator import find_source

    path = find_source().data / system / "comm" / "sglang" / "0.5.12" / "wideep_deepep_ll_perf.parquet"
    d = pd.read_parquet(path)
    d = d[(d.hidden_size == HIDDEN) & (d.num_experts == EXPERTS) & (d.num_topk == TOP_K) & (d.node_num == 1)]
    return {int(r.num_token): r for r in d.itertuples()}


def projected(part: str, tokens: int) -> tuple:
    """(dispatch s, combine s, dispatch bytes, combine bytes) of one MoE layer's exchange on one rank."""
    from perfmodel.projection import step

    ph = step(part, "deepseek-v3", "decode", tokens * EP, context=1024, tp=1, attention_dp=EP, ep=EP, dtype="fp8",
              engine="sglang", batching="static", moe_exchange="all_to_all")
    ops = {t.op.name: t for t in ph.times}
    d, c = ops["moe.dispatch"], ops["moe.combine"]
    return d.time, c.time, d.op.params["bytes"], c.op.params["bytes"]


def markdown() -> str:
    errors: dict[str, list[float]] = {"dispatch": [], "combine": []}
    lines = ["| part | tokens per rank | dispatch measured / projected (us) | combine measured / projected (us) | "
             "bytes per token-expert pair, dispatch measured / projected | combine measured / projected |",
             "|---|---|---|---|---|---|"]
    for system, part in PARTS.items():
        rows = measured(system)
        for n in TOKENS:
            if n not in rows:
                continue
            r = rows[n]
            d_s, c_s, d_b, c_b = projected(part, n)
            pairs = n * TOP_K  # routed token-expert pairs of this rank's tokens
            errors["dispatch"].append(d_s * 1e6 / r.dispatch_avg_t_us - 1)
            errors["combine"].append(c_s * 1e6 / r.combine_avg_t_us - 1)
            md_b = r.dispatch_bandwidth_gbps * r.dispatch_avg_t_us * 1e3 / pairs
            mc_b = r.combine_bandwidth_gbps * r.combine_avg_t_us * 1e3 / pairs
            lines.append(f"| {part} | {n:,} | {r.dispatch_avg_t_us:.1f} / {d_s * 1e6:.1f} | "
                         f"{r.combine_avg_t_us:.1f} / {c_s * 1e6:.1f} | {md_b:,.0f} / {d_b / pairs:,.0f} | "
                         f"{mc_b:,.0f} / {c_b / pairs:,.0f} |")
    summary = "; ".join(f"{k} {statistics.median(abs(e) for e in v) * 100:.0f}% (signed "
                        f"{statistics.median(v) * 100:+.0f}%)" for k, v in errors.items())
    return "\n".join(lines) + f"\n\nMedian |error| of the projected times over these rows: {summary}."


if __name__ == "__main__":
    print(markdown())
