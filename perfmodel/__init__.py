"""perfmodel: analytical performance model and projection tool for LLM workloads on GPUs.

    from perfmodel import project
    p = project("b200", "llama70b", tp=2, dtype="fp8", isl=2048, osl=512)
    p.ttft_s, p.tpot_s, p.throughput_tok_s_per_gpu

Heavy modules load on first use, so ``import perfmodel`` (and the CLI) starts fast.
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["project", "Scenario", "load_spec", "load_model", "step", "__version__"]


def __getattr__(name):
    if name == "project":
        from .projection import project

        return project
    if name == "step":
        from .projection import step

        return step
    if name == "Scenario":
        from .scenario import Scenario

        return Scenario
    if name == "load_spec":
        from .spec import load_spec

        return load_spec
    if name == "load_model":
        from .models import load_model

        return load_model
    raise AttributeError(name)
