"""Every operator kind perfmodel/ops.py declares reaches the places docs/developing.md's recipe names: a kind added
to ops.py alone fails here, naming what it lacks (the profile's defaults, a cost, a measurement or a stand-in)."""
from __future__ import annotations

import math

import pytest

from perfmodel import ops as O
from perfmodel.cost import time_op
from perfmodel.fit.latency import RESEMBLES
from perfmodel.measure.shapes import FAMILIES
from perfmodel.profile import DEFAULTS, MEMORY_OP_KINDS
from perfmodel.resolve import resolve_hardware


def test_kinds_are_declared_once():
    assert len(set(O.KINDS)) == len(O.KINDS)
    assert not set(O.COMPUTE_KINDS) & set(O.MEMORY_KINDS) and not set(O.COMM_KINDS) & set(O.MEMORY_KINDS)


@pytest.mark.parametrize("kind", O.MEMORY_KINDS)
def test_memory_kind_has_profile_defaults(kind):
    missing = [f"perfmodel/profile.py {what}" for what, have in (
        ("MEMORY_OP_KINDS", kind in MEMORY_OP_KINDS), ("mem_eta", kind in DEFAULTS.mem_eta),
        ("mem_alpha_s", kind in DEFAULTS.mem_alpha_s)) if not have]
    assert not missing, f"{kind}: no entry in " + ", ".join(missing)


@pytest.mark.parametrize("kind", O.MEMORY_KINDS)
def test_memory_kind_is_measured_or_resembles_a_measured_one(kind):
    assert kind in FAMILIES or RESEMBLES.get(kind) in FAMILIES, (
        f"{kind}: neither measured by the suite (perfmodel/measure/shapes.py FAMILIES) nor given a measured kind's "
        "parameters (perfmodel/fit/latency.py RESEMBLES)")


@pytest.mark.parametrize("kind", O.MEMORY_KINDS)
def test_memory_kind_is_timed(kind):
    """time_op prices it with the memory model: more bytes take longer, and the time is finite."""
    hw = resolve_hardware("h200-sxm")
    params = {"tokens": 64, "hidden": 4096}

    def t(nbytes):
        return time_op(O.Op(f"x.{kind}", kind, "decode", 0.0, nbytes, params), hw, DEFAULTS).time

    small, big = t(1e6), t(1e9)
    assert math.isfinite(big) and 0 < small < big
