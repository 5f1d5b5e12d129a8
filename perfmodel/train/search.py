"""``perfmodel train --search``: the fastest parallel layouts that fit a GPU count.

Enumerates TP (powers of two dividing the heads, within one scale-up domain), CP (powers of two up to 16
that cut the sequence into 2 x cp chunks), PP (divisors of what is left, at most the layer count), the DP
that remains (dividing the global batch), micro-batch sizes 1, 2, 4, 8, and EP for MoE models; sequence
parallelism whenever TP > 1 (same traffic, less memory). Schedules: the scenario's own if it was chosen
(not 1F1B), else 1F1B and interleaved with 2 and 4 chunks. Recompute: the least that fits (none, then
selective, then full), decided on memory alone before any timing. Every layout that fits is projected and
the fastest listed.
"""
from __future__ import annotations

from ..errors import InputError
from ..models import Model
from ..profile import Profile
from ..spec import HardwareSpec
from .memory import least_recompute
from .project import TrainProjection, project_training
from .scenario import TrainScenario

MICRO_BATCHES = (1, 2, 4, 8)


def _pow2_upto(n: int) -> list[int]:
    out, x = [], 1
    while x <= n:
        out.append(x)
        x *= 2
    return out


def candidates(model: Model, base: TrainScenario, hw: HardwareSpec, schedules: list[tuple[str, int]] | None = None):
    """Every validated scenario of the search space, with the least recompute that fits (or None if none fit)."""
    g = base.gpus
    tps = [t for t in _pow2_upto(min(g, hw.scaleup_domain)) if model.heads % t == 0]
    cps = [c for c in _pow2_upto(min(g, 16)) if base.seq % (2 * c) == 0]
    seen = 0
    for tp in tps:
        for cp in cps:
            if g % (tp * cp):
                continue
            rest = g // (tp * cp)
            for pp in [d for d in range(1, rest + 1) if rest % d == 0 and d <= model.layers]:
                dp = rest // pp
                if base.global_batch % dp:
                    continue
                eps = [1]
                if model.moe is not None:
                    eps = [e for e in _pow2_upto(dp * cp) if model.moe.num_experts % e == 0 and e <= 64]
                for mb in MICRO_BATCHES:
                    if base.global_batch % (dp * mb):
                        continue
                    scheds = schedules or ([("1f1b", 1)] if pp == 1 else [("1f1b", 1), ("interleaved", 2),
                                                                            ("interleaved", 4)])
                    for ep in eps:
                        for sched, v in scheds:
                            if pp == 1 and sched != "1f1b":
                                continue
                            ts = base.with_(tp=tp, cp=cp, pp=pp, dp=None, ep=ep, micro_batch=mb, schedule=sched,
                                            interleave=v, sequence_parallel=tp > 1)
                            try:
                                ts = ts.validated(model)
                            except InputError:
                                continue
                            seen += 1
                            yield least_recompute(model, ts, hw), seen


def search(hw: HardwareSpec, model: Model, base: TrainScenario, prof: Profile, *, top: int = 10,
           schedules: list[tuple[str, int]] | None = None) -> tuple[list[TrainProjection], int]:
    """(the ``top`` fastest projections that fit, how many layouts were considered)."""
    results: list[TrainProjection] = []
    considered = 0
    for ts, seen in candidates(model, base, hw, schedules):
        considered = seen
        if ts is None:
            continue
        results.append(project_training(hw, model, ts, prof))
    results.sort(key=lambda p: p.step_time_s)
    return results[:top], considered
