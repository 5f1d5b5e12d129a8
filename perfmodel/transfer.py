"""Carrying a calibration profile measured on one part to another, by explicit rules.

What carries, and why:

- **Fractions of peak carry unchanged**: GEMM ``gemm_eta`` per format, attention ``attn_eta`` per backend, the memory
  kernels' ``mem_eta`` and ``attn_dec_eta``, the collectives' link efficiencies. They describe how well the
  software uses the machine, and the target's own peaks, bandwidths and SM count enter through the spec.
  A format the source part cannot run natively (fp4 on an H200) was never measured: it takes the
  source's fp8 fraction, or bf16's, and the projection says so.
- **Structure carries**: tile shapes, the K-loop prologue ``gemm_k0``, the tile-efficiency constant,
  split-K limits, flash block sizes. Tile and wave quantization are recomputed on the target's SM count.
  Which backend plain PyTorch dispatches to (``attn_default``) carries within a vendor: it is decided by the
  software (torch and cuDNN versions), and the target is assumed to run the same stack.
- **Kernel fixed costs scale with clock**: ``gemm_overhead_s``, ``attn_overhead_s`` and the memory kernels'
  ``mem_alpha_s`` are ramp-up and drain, counted in cycles, so they scale by source clock / target clock.
- **Host and link latencies carry as-is**: launch gaps (host software) and collective alpha.
- **Power carries by TDP and process node** (:func:`perfmodel.energy.carry.carry_power`, its rules and
  sources in docs/energy.md).
- **Nothing carries across vendors**: efficiencies measured on one vendor's software stack say little
  about another's; the target keeps the documented defaults and a wide band.

Each carry widens the uncertainty band by ``carry_spread`` (log-space): an estimate for a change of
generation within one vendor, to be replaced by the cross-generation backtest's residuals.
"""
from __future__ import annotations

from .energy.carry import carry_power
from .profile import DEFAULTS, Profile
from .spec import HardwareSpec

SAME_VENDOR_SPREAD = 0.10  # estimate: a generation change within one vendor, on top of the fit's residuals
CROSS_VENDOR_SPREAD = 0.30  # estimate


def carry(profile: Profile, source: HardwareSpec | None, target: HardwareSpec) -> Profile:
    """The profile as it applies to ``target``. Identity when the target is the part it was measured on."""
    if not profile.fitted or profile.spec_key == target.key:
        return profile
    label = profile.spec_key or profile.name
    if source is not None and source.vendor != target.vendor:
        return DEFAULTS.with_(name=DEFAULTS.name, carried_from="", carry_spread=CROSS_VENDOR_SPREAD,
                              description=f"documented defaults: the {label} profile does not carry across vendors")
    clock = (source.boost_clock_hz / target.boost_clock_hz) if source is not None else 1.0
    eta = dict(profile.gemm_eta)
    measured = set(profile.provenance.get("measured_formats", eta))
    for fmt in target.tensor_flops:
        if fmt not in measured:
            eta[fmt] = eta.get("fp8" if fmt in ("fp4", "int8") and "fp8" in measured else "bf16", eta["bf16"])
    return profile.with_(
        carried_from=label,
        gemm_eta=eta,
        gemm_overhead_s=profile.gemm_overhead_s * clock,
        attn_overhead_s={k: v * clock for k, v in profile.attn_overhead_s.items()},
        mem_alpha_s={k: v * clock for k, v in profile.mem_alpha_s.items()},
        power=carry_power(profile.power, source, target) if profile.power and source is not None else profile.power,
        carry_spread=max(profile.carry_spread, SAME_VENDOR_SPREAD),
        description=f"{profile.description}; carried from {label} to {target.key}",
    )
