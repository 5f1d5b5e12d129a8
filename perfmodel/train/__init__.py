"""Training projection: step time, tokens/s, model and hardware TFLOP/s per GPU, MFU and memory of 3D/4D
parallel LLM training, through the same specs, models, operator graph and cost model as inference.

``perfmodel train ...`` (:mod:`perfmodel.cli.train`) or, in Python::

    from perfmodel.train import project_train
    p = project_train("h100-sxm", "llama-3.1-70b", gpus=64, tp=8, pp=4, global_batch=256, seq=8192)
    p.step_time_s, p.mfu, p.memory.total

Modules: :mod:`.scenario` (the layout), :mod:`.graph` (forward, backward, recompute operators),
:mod:`.cost` (their times), :mod:`.memory`, :mod:`.schedule`, :mod:`.project`, :mod:`.search`, :mod:`.fit`,
:mod:`.validate`; docs/training.md has the definitions and references. Nothing heavy is imported here.
"""
from __future__ import annotations


def project_train(hardware, model, scenario=None, *, profile=None, **overrides):
    """Project one training scenario; ``hardware`` and ``model`` may be names, paths or loaded objects and
    keyword arguments override :class:`~perfmodel.train.scenario.TrainScenario` fields."""
    from ..resolve import resolve_hardware, resolve_model, resolve_profile
    from .project import project_training
    from .scenario import TrainScenario

    hw = resolve_hardware(hardware)
    mdl = resolve_model(model)
    ts = (scenario or TrainScenario()).with_(**overrides)
    prof = profile if profile is not None else resolve_profile(None, hw, "torch")
    return project_training(hw, mdl, ts, prof)


__all__ = ["project_train"]
