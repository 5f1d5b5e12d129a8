"""The power model: documented defaults, the parameters that apply to a part, and the energy of a step.

Energy of one evaluated step on one GPU (the ops of :class:`perfmodel.projection.Phase`, every pipeline
stage counted, as the phase lists them):

    E = static_w * t_step + min(sum over ops of count * dyn_op, (P_limit - static_w) * t_step)
    dyn_op = j_per_flop[format] * FLOPs (GEMM and attention) + j_per_byte * minimal HBM bytes (every
             non-collective op)

The ``min`` is the power limit: a step whose dynamic power would push the board past it runs at a lower
clock instead (the latency model already slows it, :mod:`perfmodel.power_clock`), drawing the limit for its time.
The limit holds on average over the power controller's window, which is longer than a kernel: the
calibration suite's whole-layer rows (1.7-3.1 ms a run) read the limit, not the mix of their kernels'
powers, so the cap applies to the step, not to each op. Launch gaps and host-bound stretches draw
``static_w`` (and count in the step's time, against which the cap is taken). Not modelled: vector FLOPs of memory-bound kernels
(their energy is in the bytes they move), the SerDes energy of NVLink/network transfers (their time draws
``static_w``), and HBM traffic beyond the minimal bytes.
"""
from __future__ import annotations

import numpy as np

from ..ops import COMM_KINDS, COMPUTE_KINDS
from ..spec import lineage_rank

# The defaults are the power rows measured on an H200 (calibration/h200, `kind: power`, NVML energy counter
# over ~1.5 s loops, 700 W limit), expressed as shares of the TDP and rates so that they carry to any part:
# an estimate for every other part. The fitted H200 parameters themselves are in docs/energy.md.
# idle row: 121.4 W with nothing running (clocks still up): 0.17 of the limit
IDLE_TDP_SHARE = 0.17
# static power while kernels run: the fit puts it at 117 W, within 4% of the idle row: 0.17 of the limit
STATIC_TDP_SHARE = 0.17
# a dense GEMM reaches the limit: 8192^3 bf16 ran at 667 TFLOP/s (0.67 of the 989.4 TFLOP/s peak) drawing
# 700 W, so a FLOP costs about (TDP - static) / (0.67 * peak)
GEMM_AT_LIMIT_SHARE = 0.67
# HBM: a 1 GiB device copy drew 640 W at 4.26 TB/s (bytes read plus written), (640 - 121) / 4.26e12 =
# 122 pJ per byte on a Hopper-class (TSMC 4N) part, scaled to other processes by the carry rules
J_PER_BYTE_HOPPER = 122e-12


def default_power(hw) -> dict:
    """Documented-default power parameters for ``hw``: the H200's measured shares (constants above),
    carried by TDP, peak rates and process node (an estimate on any other part)."""
    from .carry import node_factor, process_node

    static = STATIC_TDP_SHARE * hw.tdp_w
    dyn = hw.tdp_w - static
    per_flop = {f: dyn / (GEMM_AT_LIMIT_SHARE * peak) for f, peak in hw.tensor_flops.items() if peak > 0}
    if "bf16" in per_flop:
        per_flop.setdefault("fp16", per_flop["bf16"])
    per_flop["fp32"] = dyn / (GEMM_AT_LIMIT_SHARE * hw.vector_fp32_flops)  # plain fp32 on the vector units
    ref = node_factor(process_node("hopper")[1])
    return {"idle_w": IDLE_TDP_SHARE * hw.tdp_w, "static_w": static, "j_per_flop": per_flop,
            "j_per_byte": J_PER_BYTE_HOPPER * node_factor(process_node(hw.generation)[1]) / ref,
            "tdp_w": float(hw.tdp_w), "fitted": 0.0}


class UncarriedPower(ValueError):
    """Power parameters measured on another part reached the energy model without being carried: a programming
    error (profiles are carried once, by :func:`perfmodel.transfer.carry`, when resolved for a part)."""


def power_params(prof, hw) -> dict:
    """The power parameters that apply to ``hw``: the profile's (measured on ``hw`` or a part it is a what-if of,
    or carried to ``hw`` by :func:`perfmodel.transfer.carry`, the one path power takes to another part), completed
    with the documented defaults for what they lack; the defaults when it has none."""
    power = dict(prof.power or {})
    if not power:
        return default_power(hw)
    if not prof.spec_key or lineage_rank(prof.spec_key, hw) is not None or power.get("carried"):
        return _complete(power, hw)
    raise UncarriedPower(f"power parameters measured on {prof.spec_key} given for {hw.key}: resolve the profile "
                         "for the part (perfmodel.resolve), which carries it (perfmodel.transfer.carry)")


def _complete(power: dict, hw) -> dict:
    """Fill formats and fields a (fitted) dict lacks from the defaults, so every op can be priced."""
    base = default_power(hw)
    out = {**base, **power}
    flops = dict(base["j_per_flop"])
    flops.update(power.get("j_per_flop", {}))
    out["j_per_flop"] = flops
    return out


def flop_energy(params: dict, dtype: str) -> float:
    """Joules per FLOP of a product in ``dtype``: its own figure, else its tensor rate's, else bf16's."""
    from ..dtypes import TENSOR_RATE_KEY

    table = params["j_per_flop"]
    for key in (dtype, TENSOR_RATE_KEY.get(dtype, dtype), "bf16"):
        if key in table:
            return table[key]
    return next(iter(table.values()))


def op_energy(op, params: dict):
    """Dynamic joules of one run of ``op`` (before the power limit)."""
    if op.kind in COMM_KINDS:
        return 0.0 * op.bytes
    e = params["j_per_byte"] * op.bytes
    if op.kind in COMPUTE_KINDS:
        e = e + flop_energy(params, op.params["dtype"]) * op.flops
    return e


def dynamic_energy(times, params: dict):
    """Sum over timed ops (:class:`perfmodel.cost.OpTime`) of count * dynamic joules (before the limit)."""
    total = 0.0
    for t in times:
        total = total + op_energy(t.op, params) * t.op.count
    return total


def capped(dynamic_j, time_s, params: dict, limit: float):
    """Dynamic joules of a step of ``time_s``, held to the power limit (module doc)."""
    return np.minimum(dynamic_j, max(limit - params["static_w"], 0.0) * time_s)


def limit_w(params: dict, hw) -> float:
    return float(params.get("tdp_w") or hw.tdp_w)


def step_energy_parts(phase, hw, prof, params: dict | None = None):
    """(static joules, dynamic joules) of one evaluated step on one GPU (module doc)."""
    p = params if params is not None else power_params(prof, hw)
    return p["static_w"] * phase.time_s, capped(dynamic_energy(phase.times, p), phase.time_s, p, limit_w(p, hw))


def step_energy(phase, hw, prof, params: dict | None = None):
    """Joules of one evaluated step (:class:`perfmodel.projection.Phase`) on one GPU (module doc)."""
    s, d = step_energy_parts(phase, hw, prof, params)
    return s + d
