"""How the fitted all-reduce reproduces the engines' own measured tables at decode sizes (docs/collectives.md).

    python docs/tools/comm_fit_check.py

Each imported engine folder holds its engine's all-reduce as aiconfigurator-core times it (custom_allreduce_perf,
in the folder's measurements.jsonl.gz: the rows the profile's alpha-beta fit was made from; vLLM's and SGLang's
CUDA-graph series, the one a decode step replays). For each folder and world size this prints that table's time
beside the fitted alpha-beta model's (:func:`perfmodel.cost.comm.collective_time`: the faster of the fitted NCCL and
engine models) and a projection's on the folder's own part (:func:`perfmodel.cost.time_op`, the table anchoring the
fit: :mod:`perfmodel.cost.comm_tables`), at the buffer sizes of decode steps: 128 KiB to 2 MiB (16 to 128 tokens of a
4,096- or 8,192-wide bf16 hidden state).
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# (part, folder, engine)
FOLDERS = (("h100-sxm", "h100-sxm-trtllm", "trtllm"), ("h200-sxm", "h200-sxm-trtllm", "trtllm"),
           ("b200", "b200-trtllm", "trtllm"), ("h200-sxm", "h200-sxm-vllm", "vllm"), ("b200", "b200-vllm", "vllm"),
           ("h200-sxm", "h200-sxm-sglang", "sglang"), ("b200", "b200-sglang", "sglang"))
SIZES = (131072, 524288, 2097152)
WORLDS = (2, 4, 8)


def measured(folder: str) -> dict[tuple[int, int], float]:
    """(world size, bytes) -> the engine all-reduce's median measured time (s): its CUDA-graph series where the
    table has one (:func:`perfmodel.cost.comm_tables.points`, the rows the projection is anchored on)."""
    import numpy as np

    from perfmodel.cost.comm_tables import ENGINE_SERIES, points

    out = {}
    for (series, world), (log_bytes, log_times) in points(str(ROOT / "calibration" / folder)).items():
        if series == ENGINE_SERIES:
            out.update({(world, int(round(b))): float(t) for b, t in zip(np.exp(log_bytes), np.exp(log_times))})
    return out


def compare() -> list[dict]:
    """A row per folder and world size: the measured, fitted and projected times at :data:`SIZES`."""
    from perfmodel import ops as O
    from perfmodel.cost import time_op
    from perfmodel.cost.comm import collective_time
    from perfmodel.resolve import resolve_hardware, setup

    out = []
    for part, folder, engine in FOLDERS:
        hw = resolve_hardware(part)
        prof = setup(hw, calibration=None, engine=engine).profile
        table = measured(folder)
        for p in WORLDS:
            cells = [(table[(p, b)], collective_time("all_reduce", b, p, p, hw, prof),
                      time_op(O.collective("ar", "all_reduce", b, p, phase="decode"), hw, prof, world=p).time)
                     for b in SIZES if (p, b) in table]
            if len(cells) == len(SIZES):
                out.append({"folder": folder, "gpus": p, "cells": cells})
    return out


def markdown() -> str:
    rows = compare()
    head = " | ".join(f"{b // 1024:,} KiB" for b in SIZES)
    lines = [f"| folder | GPUs | {head} |", "|---|---|" + "---|" * len(SIZES)]
    for r in rows:
        cells = " | ".join(f"{m * 1e6:.1f} / {f * 1e6:.1f} / {t * 1e6:.1f}" for m, f, t in r["cells"])
        lines.append(f"| {r['folder']} | {r['gpus']} | {cells} |")
    eight = [f / m for r in rows if r["gpus"] == 8 for m, f, _ in r["cells"]]
    two = [f / m for r in rows if r["gpus"] == 2 for m, f, _ in r["cells"]]
    priced = [t / m for r in rows for m, _, t in r["cells"]]
    lines += ["", "Measured / fitted / projected, in microseconds. Fitted over measured, median: "
              f"{statistics.median(two):.2f} at 2 GPUs, {statistics.median(eight):.2f} at 8 "
              f"({min(eight):.2f}-{max(eight):.2f}); projected over measured {min(priced):.2f}-{max(priced):.2f}."]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
