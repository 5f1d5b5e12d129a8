"""Carrying a calibration profile measured on one part to another, by explicit rules.

What carries, and why:

- **Efficiencies carry relative to sustained ceilings**: GEMM ``gemm_eta`` per format, attention ``attn_eta``
  per backend, the memory kernels' ``mem_eta``, ``attn_dec_eta`` and ``gemm_mem_eta``, the collectives' link
  efficiencies and their fixed costs. They describe how well the software uses what the machine sustains;
  where both parts' specs give sustained ceilings (``sustained:``: large-GEMM rate per format, streaming
  bandwidth, NCCL all-reduce bus bandwidth and small-message time, measured by one procedure,
  :mod:`perfmodel.sustained`), each efficiency is scaled by the target's sustained share of its datasheet
  figure over the source's (:func:`sustained_ratios`): a Blackwell part that sustains 0.62 of its datasheet
  bf16 rate against an H200's 0.72 is not carried as if it sustained 0.72. Where either part lacks the figure
  the fraction of the datasheet figure carries unchanged (the rule before sustained ceilings; the backtest in
  docs/backtest.md compares both). A format the source part cannot run natively (fp4 on an H200) was never
  measured: it takes the source's fp8 efficiency, scaled by the target's fp4 share over the source's fp8 share,
  and the projection says so.
- **Structure carries**: tile shapes, the K-loop prologue ``gemm_k0``, split-K limits, flash block sizes. The
  tile-efficiency constant ``gemm_tile_c`` scales with the tensor FLOPs per SM per clock
  (:func:`tensor_flops_per_sm_clock`, each format its own): it stands for operand traffic against MMA work. Tile
  and wave quantization are recomputed on the target's SM count. The CTAs in flight a stream needs stay per SM
  on another part and stay the measured total in a what-if of the part (:func:`_structure`); a what-if of a
  measured part takes these structural rules too.
  Which backend plain PyTorch dispatches to (``attn_default``) carries within a vendor: it is decided by the
  software (torch and cuDNN versions), and the target is assumed to run the same stack.
- **Kernel fixed costs scale with clock**: ``gemm_overhead_s``, ``attn_overhead_s`` and the memory kernels'
  ``mem_alpha_s`` are ramp-up and drain, counted in cycles, so they scale by source clock / target clock.
- **Host latencies carry as-is**: launch gaps (host software). Collective fixed costs scale with the parts'
  measured small-message all-reduce times where both specs give one.
- **Softmax cycles follow the special-function units** (``attn_sfu_cycles``): divided by the target's
  exponential throughput per SM relative to the source's (:func:`sfu_exp_rate`, from
  :mod:`perfmodel.generations`: Blackwell Ultra doubles it).
- **Training factors carry as-is** (``Profile.training``): each is a ratio of a training kernel's measured time to
  the cost model's for the same work on the measured part, the model's own efficiencies carrying by the rules
  above. The MoE expert products' grouped efficiency (``grouped_gemm_eta``: the grouped kernel's rate over the
  dense GEMM model's; ``grouped_gemm_rows0``: rows of per-expert cost) is such a ratio of two kernels' rates, like
  the serving MoE ratios ``gemm_grouped_eta``: carrying it unchanged assumes the target's grouped kernel falls
  short of its dense one by the same share (the same kernel family, CUTLASS grouped against cuBLAS, on each), with
  the dense rate itself carried by the GEMM family's rule. Not measured on any part but the H200.
- **Power carries by TDP and process node** (:func:`perfmodel.energy.carry.carry_power`, its rules and
  sources in docs/energy.md).
- **Nothing carries across vendors**: efficiencies measured on one vendor's software stack say little
  about another's; the target keeps the documented defaults and a wide band.

Each carry widens the uncertainty band by ``carry_spread`` (log-space): the kernel-level cross-generation backtest's
spread (``calibration/backtest.json``, written by ``perfmodel backtest --summary calibration/backtest.json``: per
family the 80th percentile of the carried classes' error, the median over families), or the 0.10 estimate where
none is committed.
"""
from __future__ import annotations

from . import generations
from .energy.carry import carry_power
from .profile import DEFAULTS, MAX_ETA, TABLE_FIELDS, Profile
from .spec import HardwareSpec, library_part, lineage_rank

SAME_VENDOR_SPREAD = 0.10  # estimate, where no backtest summary is committed: a generation change within one vendor
CROSS_VENDOR_SPREAD = 0.30  # estimate


SUMMARY = "backtest.json"  # the committed backtest summary under calibration/ (perfmodel.backtest writes it)


def carry_spread(default: float) -> float:
    """The committed backtest's carry spread (calibration/backtest.json), else ``default``."""
    import json

    from .paths import calibration_dir

    p = calibration_dir() / SUMMARY
    try:
        value = json.loads(p.read_text(encoding="utf-8"))["spread"]["carry_spread"]
    except (OSError, ValueError, KeyError, TypeError):
        return default
    return float(value) if isinstance(value, (int, float)) and 0 < value < 2 else default


def same_vendor_spread() -> float:
    return carry_spread(SAME_VENDOR_SPREAD)


def carry(profile: Profile, source: HardwareSpec | None, target: HardwareSpec, *, sustained: bool = True) -> Profile:
    """The profile as it applies to ``target``. Identity when the target is the part it was measured on.
    ``sustained=False``: ignore both parts' sustained ceilings (the datasheet-only rule the backtest compares)."""
    if not profile.fitted:
        return profile
    if lineage_rank(profile.spec_key, target) is not None:
        # the part itself, or a what-if of it: its fractions apply to the new figures, and what is counted per
        # SM or per cycle follows the figures it is counted against (identity for the part itself)
        if source is None:
            return profile
        kw = _structure(profile, source, target, what_if=True)
        if profile.power and float(profile.power.get("tdp_w", target.tdp_w)) != float(target.tdp_w):
            kw["power"] = carry_power(profile.power, source, target)  # a what-if of the power limit
        return profile.with_(**kw)
    label = profile.spec_key or profile.name
    if source is not None and source.vendor != target.vendor:
        return DEFAULTS.with_(name=DEFAULTS.name, carried_from="", carry_spread=CROSS_VENDOR_SPREAD,
                              description=f"documented defaults: the {label} profile does not carry across vendors")
    eta = dict(profile.gemm_eta)
    measured = set(profile.provenance.get("measured_formats", eta))
    measured |= {k for k in eta if k.endswith("_block")}  # variants only a fit writes
    for fmt in target.tensor_flops:
        if fmt not in measured:
            eta[fmt] = eta.get("fp8" if fmt in ("fp4", "int8") and "fp8" in measured else "bf16", eta["bf16"])
    ratios = sustained_ratios(source, target) if sustained and source is not None else {}
    attn_eta = dict(profile.attn_eta)
    if ratios:
        for fmt in list(eta):
            r = ratios.get(_RATE_KEY.get(fmt.split("_")[0], fmt.split("_")[0]))
            if fmt not in measured and fmt in ("fp4", "int8"):  # carried from fp8: relative to its sustained share
                r = ratios.get(f"{fmt}_from_fp8", r)
            if r is not None:
                eta[fmt] = min(eta[fmt] * r, MAX_ETA)
        for k in attn_eta:
            r = ratios.get("fp8" if k.endswith(".fp8") else "bf16")
            if r is not None:
                attn_eta[k] = min(attn_eta[k] * r, MAX_ETA)
    bw = ratios.get("bandwidth", 1.0)
    link = ratios.get("allreduce_busbw", 1.0)
    lat = ratios.get("allreduce_latency", 1.0)
    capped = lambda d, r: {k: min(v * r, 1.0) for k, v in d.items()}  # noqa: E731
    return profile.with_(
        **(_structure(profile, source, target) if source is not None else {}),
        carried_from=label,
        gemm_eta=eta,
        attn_eta=attn_eta,
        gemm_mem_eta=min(profile.gemm_mem_eta * bw, 1.0),
        mem_eta=capped(profile.mem_eta, bw),
        attn_dec_eta=capped(profile.attn_dec_eta, bw),
        gemm_prologue_eta=capped(profile.gemm_prologue_eta, bw),
        comm_eta={k: min(v * link, MAX_ETA) for k, v in profile.comm_eta.items()},
        scaleup_eta=min(profile.scaleup_eta * link, MAX_ETA),
        comm_alpha_s={k: v * lat for k, v in profile.comm_alpha_s.items()},
        # DeepEP's kernels: their fixed and per-expert times as the collectives' latency, their rate as a link share
        deepep_alpha_s={k: v * lat for k, v in profile.deepep_alpha_s.items()},
        deepep_expert_s={k: v * lat for k, v in profile.deepep_expert_s.items()},
        deepep_eta={k: min(v * link, MAX_ETA) for k, v in profile.deepep_eta.items()},
        power=carry_power(profile.power, source, target) if profile.power and source is not None else profile.power,
        carry_spread=max(profile.carry_spread, same_vendor_spread()),
        # a part's measured tables price that part alone (perfmodel.cost.tables): never another part's shapes
        **{f: "" for f in TABLE_FIELDS.values()},
        description=f"{profile.description}; carried from {label} to {target.key}"
                    + (" relative to both parts' sustained ceilings" if ratios else ""),
        provenance={**profile.provenance, "carry": {"from": label, "to": target.key, "sustained_ratios": ratios}},
    )


def _structure(profile: Profile, source: HardwareSpec, target: HardwareSpec, *, what_if: bool = False) -> dict:
    """What a profile counts per SM, per cycle or per byte in flight, restated for ``target``'s figures: the
    rules that hold for a what-if of the measured part as for another part (each factor is exactly 1 where the
    figures it follows are equal).

    - Tile efficiency: ``gemm_tile_c`` follows the bf16 tensor FLOPs per SM clock, and each other format's
      products follow that format's own rate (``gemm_tile_c_fmt``), so a faster bf16 path never slows fp8.
    - Streaming concurrency: the distinct tiles (CTAs) in flight a kernel needs to stream at full bandwidth
      (``gemm_mem_ctas``, ``attn_mem_ctas``, per SM). In a what-if of the measured part (``what_if``) the
      kernels are the part's, so the total they need does not follow the SM count: the per-SM constants are
      restated so their total over the target's SMs is the source's (more SMs alone neither help nor hurt a
      stream). Carried to another part they stay per SM: its kernels keep as many tiles in flight per SM as
      the source's; carried to a what-if of another part, per SM of that part (:func:`perfmodel.spec.
      library_part`). Restating the total by the bandwidth ratio instead (Little's law at fixed bytes per tile)
      was tried and backtested worse (docs/what-if.md).
    - Kernel fixed costs are cycles: they scale by source clock / target clock.
    - A MoE module's routing time per token-expert pair (``moe_pair_s``) moves each pair's rows through memory
      (expanding, sorting, zero-filling): it scales by source bandwidth / target bandwidth.
    - Softmax cycles follow the SM's exponential throughput."""
    clock = source.boost_clock_hz / target.boost_clock_hz
    bf16 = tensor_flops_per_sm_clock(target) / tensor_flops_per_sm_clock(source)
    tile_c = profile.gemm_tile_c * bf16
    tile_fmt = dict(profile.gemm_tile_c_fmt)
    for fmt in target.tensor_flops:
        if fmt != "bf16" and fmt in source.tensor_flops:
            own = tensor_flops_per_sm_clock(target, fmt) / tensor_flops_per_sm_clock(source, fmt)
            tile_fmt[fmt] = tile_fmt.get(fmt, 1.0) * own / bf16
    # whose SMs the kernels' concurrency is counted on: the measured part's in a what-if of it, else the library
    # part the target stands for (a sweep of another part's SM count keeps that part's)
    streams = (source if what_if else library_part(target)).sm_count / target.sm_count
    sfu = sfu_exp_rate(source.generation) / sfu_exp_rate(target.generation)
    return {
        "gemm_tile_c": tile_c,
        "gemm_tile_c_fmt": tile_fmt,
        "gemm_mem_ctas": profile.gemm_mem_ctas * streams,
        # every backend's, those without a fitted figure at the cost model's 1.0 (perfmodel.cost.attention)
        "attn_mem_ctas": {k: profile.attn_mem_ctas.get(k, 1.0) * streams
                          for k in {*profile.attn_mem_ctas, *profile.attn_eta}},
        "attn_sfu_cycles": {k: v * sfu for k, v in profile.attn_sfu_cycles.items()},
        "gemm_overhead_s": profile.gemm_overhead_s * clock,
        "gemm_prologue_s": {k: v * clock for k, v in profile.gemm_prologue_s.items()},
        "attn_overhead_s": {k: v * clock for k, v in profile.attn_overhead_s.items()},
        "mem_alpha_s": {k: v * clock for k, v in profile.mem_alpha_s.items()},
        "moe_pair_s": {k: v * source.hbm_bandwidth / target.hbm_bandwidth for k, v in profile.moe_pair_s.items()},
    }


def tensor_flops_per_sm_clock(spec: HardwareSpec, fmt: str = "bf16") -> float:
    """Dense tensor FLOPs of a format per SM per boost-clock cycle: what one SM's tensor cores consume between
    operand loads. The tile-efficiency constant (``gemm_tile_c``: a narrow tile's operand traffic against its MMA
    work) scales with it, the operand path per SM per cycle taken as the same (estimate): an H20's or an L40S's SMs
    feed tensor cores a quarter as fast as an H100's, so a decode GEMM's 8-row tiles are not compute-bound there."""
    return spec.tensor_rate(fmt) / spec.sm_count / spec.boost_clock_hz


def sfu_exp_rate(generation: str) -> float:
    """Exponentials per clock per SM relative to Hopper's (:mod:`perfmodel.generations`, with sources); 1.0
    where the table has no figure (estimate: as Hopper)."""
    rate = generations.sfu_exp_rate(generation)
    return 1.0 if rate is None else rate


# the sustained-rate key a GEMM format's efficiency follows
_RATE_KEY = {"bf16": "bf16", "fp16": "bf16", "tf32": "bf16", "fp8": "fp8", "int8": "fp8", "fp4": "fp4"}


def sustained_ratios(source: HardwareSpec, target: HardwareSpec) -> dict[str, float]:
    """For each sustained ceiling both parts give (their spec's ``sustained:``), the target's share of its
    datasheet figure over the source's: how much better or worse the target sustains what its datasheet
    promises. A format the source lacks (fp4 on an H200, carried from fp8) compares the target's fp4 share
    with the source's fp8 share (``fp4_from_fp8``)."""
    out: dict[str, float] = {}

    def share(spec: HardwareSpec, key: str) -> float | None:
        s = spec.sustained.get(key)
        if s is None:
            return None
        peak = {"bandwidth": spec.hbm_bandwidth, "allreduce_busbw": spec.scaleup_bandwidth}.get(key)
        if peak is None:
            peak = spec.tensor_flops.get(key)
        return s / peak if peak else None

    for key in ("bf16", "fp8", "fp4", "bandwidth", "allreduce_busbw"):
        a, b = share(source, key), share(target, key)
        if a and b:
            out[key] = b / a
    a, b = share(source, "fp8"), share(target, "fp4")
    if a and b and "fp4" not in out:
        out["fp4_from_fp8"] = b / a
    la, lb = source.sustained.get("allreduce_latency"), target.sustained.get("allreduce_latency")
    if la and lb:
        out["allreduce_latency"] = lb / la
    return out
