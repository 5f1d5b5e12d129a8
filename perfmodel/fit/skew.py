"""The cost of a skewed router, from an engine's measured MoE tables, into ``Profile.gemm_grouped_skew``.

aiconfigurator's collectors time every MoE shape under balanced routing and under power-law token counts per
expert (:data:`perfmodel.routing.ROUTINGS`). The ratio of the two at the same shape is the skew's cost for that
engine's kernel: below one at decode batches (fewer distinct experts hit, fewer weights read), above one at large
steps (the busiest expert, or with expert parallelism the busiest rank, sets the pace). Per routing, with and
without expert parallelism and per power of two of the step's tokens, the median over every shape and format of
the table (the engine's main kernels). A ratio of one kernel under two loads: carried to another part unchanged
(perfmodel.transfer), where no table of the part's own prices the module.
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict

from ..routing import skew_key

MIN_SHAPES = 5  # shapes a bin needs before its median stands for it


def skew_pairs(classes):
    """(routing, expert parallel, tokens, skewed time / balanced time) for every shape a folder's table classes
    (:class:`perfmodel.cost.table_store.ClassRows`) time under balanced routing and a skewed one, with the same
    kernel (the engine's main ones)."""
    by = {(c.key, c.kernel): c for c in classes if c.key[0] == "moe" and c.main}
    for (key, kernel), bal in by.items():
        if key[2] != "balanced":
            continue
        base = {tuple(d): t for d, t in zip(bal.dims.tolist(), bal.times.tolist())}
        for (other_key, other_kernel), cls in by.items():
            if other_kernel != kernel or other_key[:2] != key[:2] or other_key[2] == "balanced":
                continue
            for d, t in zip(cls.dims.tolist(), cls.times.tolist()):
                b = base.get(tuple(d))
                if b and t > 0:  # dims: tokens, hidden, width, top_k, experts, ep
                    yield other_key[2], d[5] > 1, d[0], t / b


def fit_skew(classes) -> dict[str, float]:
    """``Profile.gemm_grouped_skew`` from a folder's table classes; empty where the tables hold no MoE shape under
    two routings."""
    bins: dict[str, list[float]] = defaultdict(list)
    for routing, ep, tokens, ratio in skew_pairs(classes):
        bins[skew_key(routing, ep, round(math.log2(max(tokens, 1.0))))].append(ratio)
    return {k: round(statistics.median(v), 4) for k, v in sorted(bins.items()) if len(v) >= MIN_SHAPES}
