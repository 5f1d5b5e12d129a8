"""Energy and cost: a power model per part, energy of a step, joules and dollars per token.

The model (docs/energy.md has it with every source):

    P = static_w + (sum over formats of j_per_flop[f] * FLOPs_f + j_per_byte * HBM bytes) / t,
    capped at the power limit (the spec's ``power.tdp``);  idle (no kernel running): idle_w.

Its parameters live in ``Profile.power`` (numbers, or dicts of numbers):

- ``idle_w``: board power with nothing running;
- ``static_w``: power while kernels run, before any work is counted (clocks up, leakage, fans, HBM refresh);
- ``j_per_flop``: joules per tensor-core FLOP, by format (bf16, fp16, fp8, tf32, fp4, ...);
- ``j_per_byte``: joules per byte moved through HBM;
- ``tdp_w``: the power limit of the part these numbers describe (a carried dict names its target's);
- ``fitted``: 1 when fitted from the suite's ``power`` rows, 0 for the documented defaults.

``perfmodel.fit.power.fit_power`` fits them from measurements (the fitting layer, above this one),
``carry_power`` carries them to another part, ``step_energy`` prices one evaluated step and
``projection_energy`` a whole projection.
"""
from __future__ import annotations

from .carry import carry_power, process_node
from .model import default_power, op_energy, power_params, step_energy, step_energy_parts
from .report import projection_energy, replica_energy

__all__ = ["carry_power", "default_power", "op_energy", "power_params",
           "process_node", "projection_energy", "replica_energy", "step_energy", "step_energy_parts"]
