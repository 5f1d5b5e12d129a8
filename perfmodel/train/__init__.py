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
    from ..resolve import resolve_hardware, resolve_model
    from .project import project_training
    from .scenario import TrainScenario

    hw = resolve_hardware(hardware)
    mdl = resolve_model(model)
    ts = (scenario or TrainScenario()).with_(**overrides)
    prof = profile if profile is not None else training_profile(None, hw, ts, mdl)
    return project_training(hw, mdl, ts, prof)


def training_profile(calibration, hw, ts, model=None, base=None):
    """The profile a training projection on ``hw`` takes: plain PyTorch's evidence (the suite's kernels, its
    training factors), and where ``ts`` may dispatch its experts with DeepEP and the calibration is automatic
    (None), DeepEP's fitted kernels from the part's evidence for an engine that runs them (SGLang's imported tables,
    perfmodel.fit.deepep): the suite never times DeepEP. ``base``: the first already resolved (the CLI's); ``model``:
    a dense one borrows nothing."""
    from ..evidence import DEEPEP_FAMILIES, FAMILY_FIELDS
    from ..resolve import resolve_profile

    prof = resolve_profile(calibration, hw, "torch") if base is None else base
    if calibration is not None or ts.moe_dispatcher == "alltoall" or (model is not None and model.moe is None):
        return prof  # (auto may resolve to a DeepEP dispatcher)
    kernels = resolve_profile(None, hw, "sglang")
    sources = {f: s for f in DEEPEP_FAMILIES if (s := kernels.provenance.get("families", {}).get(f))}
    return prof.with_(**{f: getattr(kernels, f) for fam in DEEPEP_FAMILIES for f in FAMILY_FIELDS[fam]},
                      provenance={**prof.provenance, "families": {**prof.provenance.get("families", {}), **sources}})


__all__ = ["project_train", "training_profile"]
