"""The best evidence for each family of a projection's cost model: measured on the part, else carried.

Calibration folders measure different things. This project's own suite (``calibration/h200``) measures every
family through plain PyTorch (GEMMs, attention, memory-bound kernels, launches, training kernels, power);
a folder imported from an engine's kernel tables (``calibration/b200-trtllm``, :mod:`perfmodel.imports`)
measures that engine's GEMMs, attention and collectives on another part. A projection of engine E on part P
takes each family from the best profile that measured it:

1. measured on P itself (for the engine-specific families, with engine E first);
2. else measured on the part nearest P in generation (the same generation, then the closest older one, then
   newer), the engine-specific families with engine E first, and carried to P by :mod:`perfmodel.transfer`;
3. else the documented defaults.

Engine-specific families are the kernels an engine chooses (``gemm``, ``attention``, ``comm``); the others
(memory-bound kernels, launch gaps, training kernels, power) come from whichever profile measured them.
The result is one :class:`~perfmodel.profile.Profile` whose ``provenance["families"]`` says, per family, which
profile, part and engine it came from and whether it was carried, and whose ``name`` and ``label`` name the
profile that gave the GEMMs (the family that dominates a projection).
"""
from __future__ import annotations

from dataclasses import fields

from . import generations
from .profile import DEFAULTS, Profile
from .spec import HardwareSpec

# Profile fields per family. Fields not listed (name, description, validation, ...) come from the GEMM source.
FAMILY_FIELDS: dict[str, tuple[str, ...]] = {
    "gemm": tuple(f.name for f in fields(Profile) if f.name.startswith("gemm_") and "grouped" not in f.name),
    "moe": tuple(f.name for f in fields(Profile) if f.name.startswith("gemm_grouped")),
    "attention": tuple(f.name for f in fields(Profile) if f.name.startswith("attn_")),
    "memory": ("mem_eta", "mem_alpha_s", "row_s", "rows_per_sm", "standalone_overhead_s", "flush_writeback",
               "host_floor_s"),
    "launch": ("launch_graph_s", "launch_eager_s", "launch_queued_s", "token_return_s"),
    "comm": ("comm_alpha_s", "comm_eta", "comm_base_s", "scaleup_eta", "scaleout_eta", "overlap"),
    "training": ("training",),
    "power": ("power",),
}
ENGINE_FAMILIES = ("gemm", "attention", "comm", "moe")
# An engine's attention module includes writing the new K and V into the cache: that kernel's parameters travel
# with the attention family when the attention source fitted them.
ATTENTION_MEMORY_KINDS = ("kv_write",)


def measured_families(prof: Profile) -> tuple[str, ...]:
    """The families a fitted profile measured (recorded by ``perfmodel fit``; older profiles: inferred)."""
    if not prof.fitted:
        return ()
    recorded = prof.provenance.get("measured_families")
    if isinstance(recorded, list):
        return tuple(f for f in recorded if f in FAMILY_FIELDS)
    # profiles fitted before the record: this project's suite measured everything but collectives
    out = ["gemm", "attention", "memory", "launch"]
    if prof.comm_eta:
        out.append("comm")
    if prof.training:
        out.append("training")
    if prof.power:
        out.append("power")
    return tuple(out)


# Which other engine's kernels stand closest to an engine's, where its own were not measured: plain PyTorch's
# bf16 linear is what vLLM times for bf16 (torch.nn.functional.linear); vLLM and SGLang share FlashInfer and
# CUTLASS kernels; TensorRT-LLM's are its own.
ENGINE_NEAR = {"torch": ("torch", "vllm", "sglang", "trtllm"), "vllm": ("vllm", "sglang", "trtllm", "torch"),
               "sglang": ("sglang", "vllm", "trtllm", "torch"), "trtllm": ("trtllm", "vllm", "sglang", "torch")}


def _engine_distance(wanted: str, have: str) -> int:
    order = ENGINE_NEAR.get(wanted, (wanted,))
    return order.index(have) if have in order else len(order)


def _generation_distance(a: str, b: str) -> float:
    ga, gb = generations.order(a), generations.order(b)
    if ga is None or gb is None:
        return 0.0 if a == b else 50.0
    d = gb - ga  # target minus source: a source older than the target carries forward (preferred over newer)
    return d if d >= 0 else 0.5 - d


def _rank(hw: HardwareSpec, engine: str, family: str, prof: Profile, source: HardwareSpec | None):
    """Sort key: same part first, then the requested engine (engine families only), then generation distance,
    then the part whose bandwidth is closest, then the name (deterministic)."""
    same_part = prof.spec_key == hw.key or prof.spec_key in getattr(hw, "aliases", ())
    engine_miss = 0 if family not in ENGINE_FAMILIES else _engine_distance(engine, prof.engine)
    if source is None:
        gen, bw = 99.0, 99.0
    else:
        gen = _generation_distance(source.generation, hw.generation)
        bw = abs(source.hbm_bandwidth - hw.hbm_bandwidth) / hw.hbm_bandwidth
    return (not same_part, engine_miss, gen, bw, prof.name)


def choose(hw: HardwareSpec, engine: str, candidates: list[tuple[Profile, HardwareSpec | None]]) -> dict:
    """Per family, the (profile, its source spec) that stands for it, or None (defaults)."""
    out = {}
    for family in FAMILY_FIELDS:
        usable = [(p, s) for p, s in candidates if family in measured_families(p)
                  and (s is None or s.vendor == hw.vendor or p.spec_key == hw.key)]
        out[family] = min(usable, key=lambda ps: _rank(hw, engine, family, ps[0], ps[1])) if usable else None
    return out


def compose(hw: HardwareSpec, engine: str, candidates: list[tuple[Profile, HardwareSpec | None]]) -> Profile:
    """One profile for ``engine`` on ``hw``, each family from its best evidence (module doc)."""
    from .transfer import carry

    chosen = choose(hw, engine, candidates)
    if not any(chosen.values()):
        return DEFAULTS
    carried: dict[str, Profile] = {}

    def on_target(prof: Profile, source) -> Profile:
        if prof.name not in carried:
            carried[prof.name] = carry(prof, source, hw)
        return carried[prof.name]

    lead_family = next(f for f in ("gemm", "attention", "memory", "comm", "training", "power", "launch")
                       if chosen.get(f))
    lead = on_target(*chosen[lead_family])
    values = {}
    provenance_families = {}
    spreads = [lead.carry_spread]
    for family, pick in chosen.items():
        if pick is None:
            provenance_families[family] = {"source": "documented defaults"}
            for f in FAMILY_FIELDS[family]:
                values[f] = getattr(DEFAULTS, f)
            continue
        prof = on_target(*pick)
        spreads.append(prof.carry_spread)
        for f in FAMILY_FIELDS[family]:
            values[f] = getattr(prof, f)
        provenance_families[family] = {
            "profile": pick[0].name, "part": pick[0].spec_key, "engine": pick[0].engine,
            "carried": prof.carried_from != "" and pick[0].spec_key != hw.key,
            "source": (f"measured on {pick[0].device or pick[0].spec_key}" if pick[0].spec_key == hw.key
                       else f"carried from {pick[0].spec_key} ({pick[0].name})"),
        }
    att = chosen.get("attention")
    if att is not None and "kv_write" in att[0].provenance.get("module_kernels", ()):
        att_prof = on_target(*att)
        mem_eta, mem_alpha = dict(values["mem_eta"]), dict(values["mem_alpha_s"])
        for kind in ATTENTION_MEMORY_KINDS:
            mem_eta[kind], mem_alpha[kind] = att_prof.mem_eta[kind], att_prof.mem_alpha_s[kind]
        values["mem_eta"], values["mem_alpha_s"] = mem_eta, mem_alpha
    gem = chosen.get("gemm")
    if gem is not None and "quantize" in gem[0].provenance.get("module_kernels", ()):
        # the GEMM source measured its quantize kernel: it travels with the GEMMs
        g = on_target(*gem)
        mem_eta, mem_alpha = dict(values["mem_eta"]), dict(values["mem_alpha_s"])
        mem_eta["quantize"], mem_alpha["quantize"] = g.mem_eta["quantize"], g.mem_alpha_s["quantize"]
        values["mem_eta"], values["mem_alpha_s"] = mem_eta, mem_alpha
    moe = chosen.get("moe")
    if moe is not None:  # the permutes are part of the fused MoE module the MoE source measured
        moe_prof = on_target(*moe)
        mem_eta, mem_alpha = dict(values["mem_eta"]), dict(values["mem_alpha_s"])
        mem_eta["moe_permute"], mem_alpha["moe_permute"] = moe_prof.mem_eta["moe_permute"], moe_prof.mem_alpha_s["moe_permute"]
        values["mem_eta"], values["mem_alpha_s"] = mem_eta, mem_alpha
    # uncertainty: the GEMM source's residual bands; its validation and description
    sources = sorted({p.name for p, _ in (c for c in chosen.values() if c)})
    others = [s for s in sources if s != chosen[lead_family][0].name]
    description = lead.description + (f"; other families from {', '.join(others)}" if others else "")
    provenance = {**lead.provenance, "families": provenance_families, "engine_requested": engine}
    words = []
    for name in others:
        fams = [f for f, v in provenance_families.items() if v.get("profile") == name]
        carried_note = " carried" if any(provenance_families[f].get("carried") for f in fams) else ""
        words.append(f"{name}{carried_note} ({', '.join(fams)})")
    return lead.with_(**values, description=description, provenance=provenance, carry_spread=max(spreads),
                      other_sources="; ".join(words))
