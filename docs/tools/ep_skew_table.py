"""Whether the engines' measured MoE tables time the busiest expert-parallel rank (docs/validation-silicon.md).

A step with experts spread over ranks (EP) waits for its busiest rank. aiconfigurator-core times each MoE shape on
one rank, under balanced routing and under power-law token counts per expert (perfmodel.routing.ROUTINGS). If the
rank it times were a typical one, spreading the experts (EP n) against splitting each expert (TP n, every rank the
same share of every expert) would cost the same under either routing; if it is the busiest, the skewed routing
costs EP more than TP. This prints, per engine folder and step size, the median over every shape a folder's whole
tables (``tables.npz``, the engine's main kernels) time both ways of EP n over TP n at the same tokens, under
balanced routing and under power_law_1.2, and the second over the first.

    python docs/tools/ep_skew_table.py
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FOLDERS = ("h200-sxm-sglang", "b200-sglang", "h200-sxm-vllm", "b200-vllm", "h200-sxm-trtllm", "b200-trtllm")
BANDS = ((64, "1-64"), (1024, "128-1,024"), (8192, "1,536-8,192"), (float("inf"), "12,288-16,384"))
SKEWED = "power_law_1.2"


def ratios(folder: str) -> dict[tuple[str, str], list[float]]:
    """(routing, step-size band) -> EP n / TP n time ratios over the folder's shapes timed both ways."""
    import numpy as np

    from perfmodel.cost.table_store import decode

    classes, _ = decode(ROOT / "calibration" / folder / "tables.npz")
    out: dict[tuple[str, str], list[float]] = {}
    for c in classes:
        if c.key[0] != "moe" or not c.main or c.key[2] not in ("balanced", SKEWED):
            continue
        # dims: tokens, hidden, width a rank, experts a rank, top-k, EP (perfmodel.cost.tables._moe_dims)
        times = {tuple(d): t for d, t in zip(c.dims.tolist(), c.times.tolist())}
        for (tokens, hidden, width, local, top_k, ep), t in times.items():
            if ep <= 1:
                continue
            split = next((times[k] for w in (width / ep, float(np.ceil(width / ep)))
                          if (k := (tokens, hidden, w, local * ep, top_k, 1.0)) in times), None)
            if split:
                band = next(name for top, name in BANDS if tokens <= top)
                out.setdefault((c.key[2], band), []).append(t / split)
    return out


def table() -> str:
    lines = ["| folder | tokens a step | shapes | EP n / TP n, balanced | EP n / TP n, power_law_1.2 | skewed / "
             "balanced |", "|---|---|---|---|---|---|"]
    for folder in FOLDERS:
        r = ratios(folder)
        for _, band in BANDS:
            bal, skew = r.get(("balanced", band)), r.get((SKEWED, band))
            if not bal or not skew:
                continue
            b, s = statistics.median(bal), statistics.median(skew)
            lines.append(f"| {folder} | {band} | {len(skew):,} | {b:.2f} | {s:.2f} | {s / b:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
