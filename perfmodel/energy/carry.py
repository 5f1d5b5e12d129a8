"""Carrying power parameters measured on one part to another, by rules from TDP and process node.

Rules (each an estimate unless a source is named; docs/energy.md explains them):

1. **Idle and static power are the same share of the power limit** (estimate): board, HBM refresh, fans and
   leakage grow with the die area and voltage that the TDP is rated for.
2. **Energy per tensor FLOP follows the datasheet's TDP per peak FLOP/s** (estimate): a vendor rates a
   part's dense peak at the clock it sustains within its power limit, so the dynamic energy a FLOP costs
   goes as (TDP - static) / peak, format by format. This carries the process node and the tensor-core
   design together. A format the source part has no figure for (fp4 measured on an H200) starts from the
   source's nearest narrower-or-equal format (fp8, else bf16) and takes the target's rate ratio.
3. **Energy per HBM byte scales with the logic power of the process of the memory path** (estimate: the
   memory controller, L2 and on-die network are logic; the DRAM's own access energy is taken to change less
   across HBM generations and is not split out). The factors are TSMC's published iso-speed power
   reductions, below.

Process of each generation (compute die, memory path), with its source:
"""
from __future__ import annotations

from .. import generations
from ..errors import InputError

# Logic power at the same speed, relative to TSMC N7.
NODE_POWER: dict[str, tuple[float, str]] = {
    "N7": (1.0, "reference"),
    "N6": (1.0, "estimate: TSMC presents N6 as an N7 derivative (density); no power change taken"),
    "N5": (0.70, "TSMC: N5 up to 30% lower power than N7 at the same speed"),
    "4N": (0.70, "estimate: NVIDIA's custom N5-family process, taken as N5"),
    "4NP": (0.70 / 1.22, "TSMC: N4P 22% better power efficiency than N5 (4NP is NVIDIA's custom N4P)"),
    "N3": (0.70 * 0.725, "TSMC: N3 25-30% lower power than N5 at the same speed (midpoint)"),
    "N3P": (0.70 * 0.675 * 0.95, "TSMC: N3E 30-35% lower power than N5 (midpoint), N3P about 5% below N3E "
                                 "(estimate)"),
}

__doc__ += "\n".join(f"    {g.name}: {g.process[0]}/{g.process[1]} ({g.sources['process']})"
                      for g in generations.GENERATIONS.values() if g.process)


def process_node(generation: str) -> tuple[str, str]:
    """(compute-die process, memory-path process) of a generation; unknown generations are taken as
    Hopper's (estimate), which the docs say."""
    return generations.process(generation) or generations.process("hopper")


def node_factor(node: str) -> float:
    return NODE_POWER[node][0]


def _check(power: dict, source) -> None:
    for key in ("idle_w", "static_w", "j_per_byte", "j_per_flop"):
        if key not in power:
            raise InputError(f"power parameters lack {key!r}", field="profile.power")
    if not isinstance(power["j_per_flop"], dict) or not power["j_per_flop"]:
        raise InputError("expected a mapping format -> joules per FLOP", field="profile.power.j_per_flop")
    if source.tdp_w <= 0:
        raise InputError(f"{source.key}: power.tdp must be positive", field="power.tdp")


def carry_power(power: dict, source, target) -> dict:
    """``power`` (measured on ``source``) as it applies to ``target``, by the module's rules."""
    _check(power, source)
    if source.key == target.key:
        return dict(power)
    scale_tdp = target.tdp_w / source.tdp_w
    static_s = float(power["static_w"])
    static_t = static_s * scale_tdp
    dyn_s = max(source.tdp_w - static_s, 1e-9)
    dyn_t = max(target.tdp_w - static_t, 1e-9)
    measured = power["j_per_flop"]
    per_flop = {}
    for fmt, peak_t in target.tensor_flops.items():
        ref = fmt if fmt in measured and fmt in source.tensor_flops else _nearest(fmt, measured, source)
        if ref is None:
            continue
        peak_s = source.tensor_flops[ref]
        per_flop[fmt] = measured[ref] * (dyn_t / peak_t) / (dyn_s / peak_s)
    if "fp16" in measured and "bf16" in per_flop and "bf16" in measured:
        per_flop["fp16"] = per_flop["bf16"] * measured["fp16"] / measured["bf16"]
    if "fp32" in measured:  # vector fp32 carries by the vector rate, the same rule
        per_flop["fp32"] = measured["fp32"] * (dyn_t / target.vector_fp32_flops) / (dyn_s / source.vector_fp32_flops)
    mem = node_factor(process_node(target.generation)[1]) / node_factor(process_node(source.generation)[1])
    out = {**power, "idle_w": float(power["idle_w"]) * scale_tdp, "static_w": static_t, "j_per_flop": per_flop,
           "j_per_byte": float(power["j_per_byte"]) * mem, "tdp_w": float(target.tdp_w), "carried": 1.0}
    return out


def _nearest(fmt: str, measured: dict, source) -> str | None:
    order = {"fp4": ("fp8", "bf16"), "int8": ("fp8", "bf16"), "fp8": ("bf16",), "tf32": ("bf16",),
             "fp64": ("tf32", "bf16")}.get(fmt, ("bf16",))
    for ref in order:
        if ref in measured and ref in source.tensor_flops:
            return ref
    return None
