"""Microkernel calibration suite: measures copy, reduce, GEMM, attention, elementwise kernels,
launch overhead, collectives and whole decoder layers through PyTorch, one JSON row a case.

Import-light: nothing here imports torch. ``run_suite`` loads the suite (and torch) on first call.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["run_suite", "MEASUREMENTS", "ENVIRONMENT"]

MEASUREMENTS = "measurements.jsonl"
ENVIRONMENT = "environment.json"


def run_suite(device: str, suite: str, out_dir: Path, *, resume: bool = False, nproc: int = 1,
              progress: bool = True, only: set[str] | None = None,
              time_budget_s: float | None = None) -> int:
    """Measure ``suite`` ("quick" or "full") on ``device`` ("cuda" or "cpu") into ``out_dir``;
    returns the number of rows written. See perfmodel.measure.suite.run_suite."""
    from .suite import run_suite as _run

    return _run(device, suite, out_dir, resume=resume, nproc=nproc, progress=progress, only=only,
                time_budget_s=time_budget_s)
