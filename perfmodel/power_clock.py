"""A kernel's clock under the power limit, as physics: how much slower a compute-bound kernel runs inside a long
step than when it was measured alone.

Measured on an H200 (``calibration/h200/clock-course``, :mod:`perfmodel.measure.clock_course`, 2026-12-04): a
stream of large bf16 or fp8 GEMMs runs at the boost clock for its first ~20 ms, then the power controller
(software power cap, NVML reason 0x4) pulls the clock down within ~50 ms, and after ~2 s the kernels take
1.19-1.21x their boost time; memory-bound streams (a copy, a batch-16 decode GEMM) draw 580-630 W, stay under
the 700 W limit and never slow. GEMMs taking turns with copies slow nearly as much as alone (a call 1.145x,
against 1.19x for the GEMMs alone); the calls' time-weighted demand, the rule a step is priced by, predicts it
within a few percent (``python -m perfmodel.fit.clock``). So:

- a kernel's **demand** is the dynamic power it would draw at the boost clock over the dynamic budget (power
  limit minus static power): ``demand_at_peak[format]`` times its share of the datasheet peak, plus
  ``demand_per_bandwidth`` times its share of the datasheet bandwidth (dimensionless, so it carries to other
  parts: a vendor rates a part's peak at the clock its TDP sustains, the energy carry's rule 2);
- under the limit its **steady stretch** is ``max(1, demand) ** (1 / alpha)``: dynamic power goes as
  ``f ** alpha`` along the DVFS curve (``alpha`` = 2: an estimate between fixed voltage, 1, and voltage
  proportional to frequency, 3);
- the stretch sets in after ``onset_s`` with a time constant ``tau_s`` for ``fast_share`` of it, the rest with
  ``slow_tau_s`` (the driver's 1 s power average catching up): over a compute-bound stretch of ``S`` seconds from
  rest, the mean is ``1 + (steady - 1) * mean_onset(S)``;
- a kernel **timed alone** shows the mean of that time course over the window its table timed it in
  (``Profile.gemm_timing``: this suite's 25 ms warmup and 80 ms of repetitions, or an imported table's few
  CUDA-graph replays, :data:`perfmodel.profile.IMPORT_TIMING`): a short kernel ran at the boost clock, a 40 ms
  one already at the limit (:func:`alone_stretch`). The fitted cost model is the boost-clock time; alone and
  in a step are the same structure at two clocks.

A projection prices a step as it runs in a benchmark or a server: the load repeats for far longer than the
controller's time constants (a 50 ms burst after 50 ms of idle already kept 58% of the steady stretch), and the
controller follows power over tens of milliseconds, far longer than a step's kernels, so the step's compute ops
run at :func:`steady_stretch` of the step's time-weighted demand (:func:`perfmodel.cost.step_demand`): at most
1.19-1.21x their boost time on an H200 at full demand, nothing in a memory-bound decode step, never a factor of
two. One step from rest would see :func:`from_rest_stretch` instead (reported beside it). Written against a math backend (:mod:`perfmodel.cost.backend`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .cost.backend import NP


@dataclass(frozen=True)
class ClockModel:
    alpha: float  # dynamic power ~ f ** alpha along the DVFS curve (estimate)
    onset_s: float  # compute-bound time before the controller acts
    tau_s: float  # time constant of the clock's fall after the onset
    alone_share: float  # share of the steady stretch the suite's timing of a rested kernel showed (a check)
    fast_share: float = 1.0  # share of the steady stretch the fast response reaches (the rest: slow_tau_s)
    slow_tau_s: float = 1.0  # time constant of the slow remainder (the driver's ~1 s power average)
    demand_at_peak: dict[str, float] = field(default_factory=dict)  # per format, at the datasheet peak
    demand_per_bandwidth: float = 0.0  # the demand of streaming at the datasheet bandwidth
    source: str = ""

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ClockModel":
        base = DEFAULT_CLOCK
        return cls(alpha=float(d.get("alpha", base.alpha)), onset_s=float(d.get("onset_s", base.onset_s)),
                   tau_s=float(d.get("tau_s", base.tau_s)), alone_share=float(d.get("alone_share", base.alone_share)),
                   fast_share=float(d.get("fast_share", base.fast_share)),
                   slow_tau_s=float(d.get("slow_tau_s", base.slow_tau_s)),
                   demand_at_peak={**base.demand_at_peak, **{str(k): float(v) for k, v in
                                                              dict(d.get("demand_at_peak", {})).items()}},
                   demand_per_bandwidth=float(d.get("demand_per_bandwidth", base.demand_per_bandwidth)),
                   source=str(d.get("source", "")))

    def format_demand(self, fmt: str) -> float:
        """A format's demand at peak: its own, else its dtype's, fp4 and int8 from fp8, else bf16's."""
        table = self.demand_at_peak
        base = fmt.split("_")[0]
        for key in (fmt, base, "fp8" if base in ("fp4", "int8") else "bf16", "bf16"):
            if key in table:
                return table[key]
        return 0.0


# Documented defaults: the fit of the H200 courses (python -m perfmodel.fit.clock calibration/h200/clock-course),
# used where a profile carries no clock model of its own.
DEFAULT_CLOCK = ClockModel(alpha=2.0, onset_s=0.0337, tau_s=0.0219, alone_share=0.553, fast_share=0.630,
                           slow_tau_s=0.209, demand_at_peak={"bf16": 1.76, "fp16": 1.76, "fp8": 1.97},
                           demand_per_bandwidth=0.893,
                           source="H200 clock courses, 2026-12-04 (calibration/h200/clock-course)")


_PARSED: dict[int, tuple[dict, ClockModel]] = {}  # id of a profile's clock dict -> (the dict, its model)


def clock_model(prof) -> ClockModel:
    """The clock model a profile carries (``power.clock``, fitted by ``perfmodel fit``), else the default.
    Parsed once per dict (the cost formulas ask for it per tile)."""
    d = (prof.power or {}).get("clock") if prof is not None else None
    if not isinstance(d, dict):
        return DEFAULT_CLOCK
    hit = _PARSED.get(id(d))
    if hit is None or hit[0] is not d:
        if len(_PARSED) > 256:
            _PARSED.clear()
        hit = _PARSED[id(d)] = (d, ClockModel.from_dict(d))
    return hit[1]


def steady_stretch(demand, alpha: float, xp=NP):
    """A kernel's time at the power-limited clock over its boost time, once the clock has settled."""
    if type(demand) is float and xp is NP:  # one Python number (a serving simulation's step): no numpy call
        return (demand if demand > 1.0 or demand != demand else 1.0) ** (1.0 / alpha)  # max, NaN kept, as numpy's
    return xp.power(xp.maximum(demand, 1.0), 1.0 / alpha)


def onset(t, model: "ClockModel", xp=NP):
    """Share of the steady stretch reached ``t`` seconds into a compute-bound stretch from rest: the fast
    response ``1 - exp(-(t - onset) / tau)`` (zero before the onset) for ``fast_share`` of it, the slow
    remainder ``1 - exp(-t / slow_tau)``."""
    fast = 1.0 - xp.exp(-xp.maximum(t - model.onset_s, 0.0) / model.tau_s)
    slow = 1.0 - xp.exp(-t / model.slow_tau_s)
    return model.fast_share * fast + (1.0 - model.fast_share) * slow


def mean_onset(stretch_s, model: "ClockModel", xp=NP):
    """Mean of :func:`onset` over a compute-bound stretch of ``stretch_s`` seconds from rest."""
    s = xp.maximum(stretch_s, 1e-12)
    u = xp.maximum(stretch_s - model.onset_s, 0.0)
    fast = (u - model.tau_s * (1.0 - xp.exp(-u / model.tau_s))) / s
    slow = 1.0 - model.slow_tau_s * (1.0 - xp.exp(-stretch_s / model.slow_tau_s)) / s
    return model.fast_share * fast + (1.0 - model.fast_share) * slow


def kernel_demand(model: ClockModel, fmt: str, flops, nbytes, seconds, peak: float, bw: float, xp=NP):
    """The demand of a kernel doing ``flops`` in ``fmt`` and moving ``nbytes`` in ``seconds`` (module doc)."""
    t = xp.maximum(seconds, 1e-12)
    return model.format_demand(fmt) * flops / (t * peak) + model.demand_per_bandwidth * nbytes / (t * bw)


def measure_window(t_kernel, timing: dict, xp=NP):
    """(start, end) seconds of load at which a kernel of ``t_kernel`` was timed, by the protocol ``timing``
    (``Profile.gemm_timing``): after its warmup, over its timed calls."""
    start = xp.maximum(timing["warmup_calls"] * t_kernel, timing["warmup_s"])
    length = xp.minimum(xp.maximum(timing["target_s"], timing["min_reps"] * t_kernel), timing["max_reps"] * t_kernel)
    return start, start + length


def alone_stretch(model: ClockModel, demand, t_kernel, timing: dict, xp=NP):
    """A kernel's measured time over its boost time: the mean of the clock's fall over the window its table
    timed it in (a long kernel, or a long protocol, already ran at the limit)."""
    a, b = measure_window(t_kernel, timing, xp)
    share = (b * mean_onset(b, model, xp) - a * mean_onset(a, model, xp)) / xp.maximum(b - a, 1e-12)
    return 1.0 + (steady_stretch(demand, model.alpha, xp) - 1.0) * share


def from_rest_stretch(model: ClockModel, step_demand, stretch_s, xp=NP):
    """The mean stretch over one compute-bound stretch of ``stretch_s`` from a rested part (the time course),
    where a repeated load settles at :func:`steady_stretch` of the step's demand."""
    return 1.0 + (steady_stretch(step_demand, model.alpha, xp) - 1.0) * mean_onset(stretch_s, model, xp)
