"""Pipeline schedules: the time ``m`` micro-batches take through ``p`` stages, and the bubble.

Each stage ``k`` spends, per micro-batch, ``F_k`` on its forward and ``B_k`` on its backward (recompute and
exposed communication included), of which ``W_k`` computes weight gradients. With the slowest stage's
``t = F + B`` (and its F, B, W):

- **1F1B** (PipeDream-Flush; Narayanan et al. 2021): ``(m - 1) t_max + sum_k t_k``; for equal stages
  ``(m + p - 1) t``, a bubble of ``(p - 1) / (m + p - 1)`` of the step.
- **Interleaved 1F1B** with ``v`` model chunks per rank (Narayanan et al. 2021, section 2.2.2):
  ``(m + (p - 1) / v) t``; the bubble shrinks by ``v`` at ``v`` times the point-to-point traffic.
- **Zero-bubble** (ZB-H1; Qi et al. 2023, "Zero Bubble Pipeline Parallelism", section 3): the backward is
  split into the input gradient B and the weight gradient W, which fills the drain: a bubble of
  ``(p - 1)(F + B_input - W)``, never below 0, at 1F1B's activation memory.
- **DualPipe** (DeepSeek-V3 technical report, Table 2): micro-batches enter from both ends; a bubble of
  ``(p / 2 - 1)(F&B + B - 3 W)`` where ``F&B`` is a forward and a backward chunk run together (taken as
  ``F + B``: their computation does not overlap, only their communication), at twice the parameters.

The bubble fraction is the share of the step the slowest stage spends waiting: ``1 - m t_max / T``.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StageTime:
    forward: float  # per micro-batch, seconds
    backward: float  # per micro-batch (recompute and exposed communication included)
    weight_grad: float  # the part of backward that computes weight gradients

    @property
    def total(self) -> float:
        return self.forward + self.backward


@dataclass(frozen=True)
class PipelineTime:
    time_s: float  # from the first forward to the last backward
    bubble_s: float  # time the slowest stage waits
    bubble_fraction: float
    busy_s: float  # m x the slowest stage's per-micro-batch time


def pipeline_time(schedule: str, stages: list[StageTime], m: int, v: int = 1) -> PipelineTime:
    """Time of ``m`` micro-batches through ``stages`` (one per pipeline rank) under ``schedule``."""
    p = len(stages)
    slow = max(stages, key=lambda s: s.total)
    t = slow.total
    busy = m * t
    if p == 1:
        total = busy
    elif schedule == "1f1b":
        total = (m - 1) * t + sum(s.total for s in stages)
    elif schedule == "interleaved":
        total = busy + (p - 1) * t / v
    elif schedule == "zero-bubble":
        b_input = slow.backward - slow.weight_grad
        total = busy + (p - 1) * max(0.0, slow.forward + b_input - slow.weight_grad)
    elif schedule == "dualpipe":
        fb = slow.forward + slow.backward
        total = busy + (p / 2 - 1) * max(0.0, fb + slow.backward - 3.0 * slow.weight_grad)
    else:
        raise ValueError(f"unknown schedule {schedule!r}")
    bubble = total - busy
    return PipelineTime(total, bubble, bubble / total if total > 0 else 0.0, busy)


def bubble_fraction_1f1b(p: int, m: int) -> float:
    """The textbook 1F1B bubble for equal stages: (p - 1) / (m + p - 1)."""
    return (p - 1) / (m + p - 1)
