"""Operator graphs remembered: :func:`perfmodel.graph.build_ops` of a (model, scenario, step) asked for again (a
projection's steps on every call, a plan's layouts, a serving instance's op classes) is the list built the first time.

Keyed by the model itself (a frozen dataclass of immutable values: the same object is the same model for good; a
loaded model is one object per file state), the whole scenario's value with the type of every field, and the step's
phase and shape with their types (an int context and a float one build ops of other types). The whole scenario, not
the fields the graph reads today: a field the graph starts reading tomorrow cannot go stale. A step with array shapes
(a sweep, a serving table) is built every time. Callers get their own list; the ops themselves are frozen.
"""
from __future__ import annotations

import numpy as np

from .graph import Step, build_ops
from .memo import Bounded, typed_key
from .models import Model
from .ops import Op
from .scenario import Scenario

_GRAPHS = Bounded(256)  # a Llama-70B graph is a few kilobytes


def ops_for(model: Model, step: Step, sc: Scenario) -> list[Op]:
    """``build_ops(model, step, sc)``, remembered (module doc)."""
    shape = (step.batch, step.seq, step.context)
    if any(isinstance(x, np.ndarray) for x in shape):
        return build_ops(model, step, sc)
    key = (id(model), typed_key(sc), step.phase, typed_key(shape))
    hit = _GRAPHS.get(key) if key[1] is not None and key[3] is not None else None
    if hit is not None and hit[0] is model:
        return list(hit[1])
    ops = build_ops(model, step, sc)
    if key[1] is not None and key[3] is not None:
        _GRAPHS.put(key, (model, tuple(ops)))  # the model held, so that its id is not another's while cached
    return ops


def clear() -> None:
    _GRAPHS.clear()
