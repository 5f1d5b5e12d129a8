"""What a skewed router costs a fused MoE module, read from the engines' measured tables (docs/model.md).

Every imported calibration folder's MoE table (``tables.npz``, whole) times each shape under three routing
distributions: ``balanced`` and power-law token counts per expert of exponent 1.01 and 1.2 (aiconfigurator-core's
collectors). For each engine, with or without expert parallelism and by tokens in the step, the median over the
shapes measured under both (every part and format of that engine, the engine's main kernel) of the skewed time over
the balanced one.

    python docs/tools/routing_table.py
"""
from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

BANDS = ((1, 16), (17, 128), (129, 1024), (1025, 1 << 30))
SKEWS = ("power_law_1.01", "power_law_1.2")
ENGINES = {"trtllm": "TensorRT-LLM", "vllm": "vLLM", "sglang": "SGLang"}


def _band(tokens: float) -> str:
    for lo, hi in BANDS:
        if lo <= tokens <= hi:
            return f"{lo}-{hi}" if hi < 1 << 30 else f">{lo - 1}"
    return "?"


def ratios(root: Path = ROOT / "calibration") -> dict:
    """{(engine, ep > 1, band): {skew: [skewed / balanced, ...]}} over every folder's MoE tables."""
    from perfmodel.cost.table_store import FILE, decode, read_header
    from perfmodel.fit.skew import skew_pairs

    out: dict = defaultdict(lambda: defaultdict(list))
    for folder in sorted(p for p in root.iterdir() if (p / FILE).is_file()):
        engine = read_header(folder / FILE).get("provenance", {}).get("engine")
        for routing, ep, tokens, ratio in skew_pairs(decode(folder / FILE)[0]):
            if routing in SKEWS:
                out[(engine, ep, _band(tokens))][routing].append(ratio)
    return out


def table() -> str:
    data = ratios()
    lines = ["| engine | expert parallel | tokens in the step | shapes | power_law_1.01 / balanced | "
             "power_law_1.2 / balanced |", "|---|---|---|---|---|---|"]
    order = [f"{lo}-{hi}" if hi < 1 << 30 else f">{lo - 1}" for lo, hi in BANDS]
    for (engine, ep, band) in sorted(data, key=lambda k: (list(ENGINES).index(k[0]) if k[0] in ENGINES else 9,
                                                          k[1], order.index(k[2]))):
        cells = data[(engine, ep, band)]
        n = max(len(v) for v in cells.values())
        med = [f"{statistics.median(cells[s]):.2f}" if cells.get(s) else "" for s in SKEWS]
        lines.append(f"| {ENGINES.get(engine, engine)} | {'yes' if ep else 'no'} | {band} | {n:,} | {med[0]} | {med[1]} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
