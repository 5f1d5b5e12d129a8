"""The best evidence for each family of a projection's cost model: measured on the part, else carried.

Calibration folders measure different things. This project's own suite (``calibration/h200``) measures every
family through plain PyTorch as a microbenchmark times it (GEMMs, SDPA attention, memory-bound kernels,
launches, training kernels, power); a folder imported from an engine's kernel tables
(``calibration/b200-trtllm``, :mod:`perfmodel.imports`) measures that engine's GEMM and MoE modules, its
attention kernels and collectives on one part. A projection of engine E on part P takes each family from the
best profile that measured it, by these rules:

- **GEMMs and MoE of a serving engine (trtllm, vllm, sglang): the engine's own tables first**, from P or from
  a part of P's tensor-core instruction family (wgmma: Hopper; tcgen05: Blackwell), carried by
  :mod:`perfmodel.transfer`; then another engine's tables on P; then the nearest part. The engines' modules
  differ (fp8 and fp4 products with their quantize and scaling kernels, DeepGEMM or CUTLASS; MoE as CUTLASS,
  Triton or FlashInfer kernels) and their kernels are built per instruction family. Measured on the shipped
  tables (``python docs/tools/evidence_ranking.py``: each engine table's rows priced by what either rule would
  pick without it; cost model of commit 94ebb68): the engine's own table from a part of the same instruction
  family beat the nearest other engine's table on the part itself in 12 of 12 GEMM comparisons (h200-sxm-vllm's rows: h100-sxm-vllm carried
  9.3% median against h200-sxm-sglang's 15.0%) and 12 of 12 MoE comparisons (25.3% against 46.0%); from
  another instruction family it won 8 of 12 GEMM and only 2 of 12 MoE comparisons (h200-sxm-vllm's MoE rows:
  b200-vllm carried 52.5%), so across instruction families the part comes first. DeepEP's calls (``deepep``)
  rank so too: each engine builds and drives DeepEP its own way (TensorRT-LLM's low-latency dispatch on the
  H200 takes 66 us where SGLang's takes 9, docs/collectives.md), so SGLang on a GB200 takes its B200 fit, not
  TensorRT-LLM's GB200 one.
- **GEMMs of plain PyTorch (torch) and transformers (hf): the part first**, then the engine's nearness
  (each preset's ``near``, :mod:`perfmodel.engines`). Their unquantized products are the very call every engine table times for bf16
  (``torch.nn.functional.linear``, named in the imported rows), and the part's clocks and power limit set its
  rate: the kernels do not differ, the part does.
- **Attention: the kernel first, then the part, then the engine.** Each attention backend (an SDPA backend,
  FlashAttention-3, TensorRT-LLM's FMHA/XQA, MLA, FlashInfer; :mod:`perfmodel.attention_kernels`) takes its
  parameters from the best profile that fitted that backend: a profile that fitted another kernel is no
  evidence for this one (a TensorRT-LLM table on the H200 fits its own FMHA, not PyTorch's SDPA: pricing SDPA
  with it took FlashAttention-2 at the documented 0.35 of peak and missed the H200's own held-out prefill rows
  by 87% median, decode by 23%; :mod:`perfmodel.kernel_check`). An engine's own
  kernel is taken only from a part of the target's instruction family (the kernel is written for it;
  elsewhere :mod:`perfmodel.attention_kernels`' stand-in rule times it); an SDPA backend from any part of the
  vendor. Which backend plain PyTorch dispatches to (``attn_default``) comes from the best profile that saw
  the dispatch.
- **Everything else** (memory-bound kernels, launch gaps, training kernels, power, collectives): the part
  first, then the engine's nearness (collectives), then generation distance (the same generation, then the
  closest older one, then newer), then bandwidth.

A family (or attention backend) no profile of the vendor measured keeps the documented defaults: only then.
The result is one :class:`~perfmodel.profile.Profile` whose ``provenance["families"]`` says, per family, which
profile, part and engine it came from and whether it was carried (attention: per backend too, and the kernels
the engine runs), and whose ``name`` and ``label`` name the profile that gave the GEMMs (the family that
dominates a projection).
"""
from __future__ import annotations

from dataclasses import fields

from . import generations
from .attention_kernels import KERNELS
from .engines import SERVING_ENGINES, engine_distance
from .profile import DEFAULTS, Profile
from .spec import HardwareSpec, library_part, lineage_rank

# Profile fields per family. Fields not listed (name, description, validation, ...) come from the GEMM source.
FAMILY_FIELDS: dict[str, tuple[str, ...]] = {
    "gemm": tuple(f.name for f in fields(Profile) if f.name.startswith("gemm_") and "grouped" not in f.name),
    # the grouped kernel's rates and the routing time per token-expert pair are fitted together on the MoE rows
    "moe": (*(f.name for f in fields(Profile) if f.name.startswith("gemm_grouped")), "moe_pair_s"),
    "attention": tuple(f.name for f in fields(Profile) if f.name.startswith("attn_")),
    "memory": ("mem_eta", "mem_alpha_s", "row_s", "rows_per_sm", "standalone_overhead_s", "flush_writeback",
               "host_floor_s"),
    "launch": ("launch_graph_s", "launch_eager_s", "launch_queued_s", "token_return_s"),
    "comm": ("comm_alpha_s", "comm_eta", "comm_base_s", "scaleup_eta", "scaleout_eta", "overlap", "comm_table"),
    "training": ("training",),
    "power": ("power",),
    "deltanet": ("deltanet_scan",),
    "deepep": ("deepep_alpha_s", "deepep_expert_s", "deepep_eta"),
    # DeepEP's kernels across nodes: bound by the NICs, not the GPU, and timed on Hopper only (aiconfigurator-core
    # times Blackwell's on one node), so a family of its own, which a part borrows from the nearest that measured it
    "deepep_across": ("deepep_scaleout_alpha_s", "deepep_scaleout_eta"),
}
DEEPEP_FAMILIES = ("deepep", "deepep_across")  # evidence only for an engine that runs DeepEP (runs_deepep)
ENGINE_FAMILIES = ("gemm", "attention", "comm", "moe", "deltanet") + DEEPEP_FAMILIES
# Families whose modules differ from one serving engine to another: the engine's own tables from a part of the
# target's instruction family rank before another engine's tables on the part (module doc).
ENGINE_FIRST_FAMILIES = ("gemm", "moe", "deltanet", "deepep")
# An engine's attention module includes writing the new K and V into the cache: that kernel's parameters travel
# with the attention family when the attention source fitted them.
ATTENTION_MEMORY_KINDS = ("kv_write",)
# Gated DeltaNet's chunked kernel each engine runs (perfmodel.fit.deltanet.kernel_name: the kernels a profile fitted):
# vLLM FlashInfer's port; SGLang, TensorRT-LLM and plain PyTorch (transformers) flash-linear-attention's
# chunk_gated_delta_rule. A profile that fitted another kernel ranks after one that fitted the engine's.
DELTANET_KERNELS = {"vllm": "chunk_gated_delta_rule_flashinfer"}
DELTANET_DEFAULT_KERNEL = "chunk_gated_delta_rule"


def deltanet_kernel_miss(engine: str, prof: Profile) -> int:
    """0 where ``prof`` fitted the chunked kernel ``engine`` runs (or recorded none), else 1."""
    fitted = (prof.provenance.get("deltanet") or {}).get("kernels") or []
    if not fitted:
        return 0
    want = DELTANET_KERNELS.get(engine, DELTANET_DEFAULT_KERNEL)
    return 0 if want in fitted else 1


# the suite's SDPA backends: what a profile fitted before ``attention_backends`` was recorded measured
SDPA_BACKENDS = ("flash", "cudnn", "efficient")


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


def measured_backends(prof: Profile) -> tuple[str, ...]:
    """The attention backends a profile fitted (``provenance["attention_backends"]``; older profiles of this
    project's suite: its SDPA backends)."""
    if "attention" not in measured_families(prof):
        return ()
    recorded = prof.provenance.get("attention_backends")
    if isinstance(recorded, list):
        return tuple(b for b in recorded if b in KERNELS)
    return SDPA_BACKENDS


def _generation_distance(a: str, b: str) -> float:
    ga, gb = generations.order(a), generations.order(b)
    if ga is None or gb is None:
        return 0.0 if a == b else 50.0
    d = gb - ga  # target minus source: a source older than the target carries forward (preferred over newer)
    return d if d >= 0 else 0.5 - d


def _same_mma(source: HardwareSpec | None, hw: HardwareSpec) -> bool:
    """Whether the source part runs the target's tensor-core instruction family (kernels are built per family)."""
    if source is None:
        return False
    a, b = generations.get(source.generation), generations.get(hw.generation)
    return a is not None and b is not None and a.mma is not None and a.mma == b.mma


def _same_part(prof: Profile, hw: HardwareSpec) -> bool:
    """Measured on ``hw`` itself or on a part ``hw`` is a what-if of (:func:`perfmodel.spec.lineage_rank`)."""
    return lineage_rank(prof.spec_key, hw) is not None


def _part_distance(prof: Profile, hw: HardwareSpec) -> int:
    """0 for the part itself, k for the k-th part it extends, past every one of those for any other part."""
    rank = lineage_rank(prof.spec_key, hw)
    return len(hw.lineage) + 1 if rank is None else rank


def _rank(hw: HardwareSpec, engine: str, family: str, prof: Profile, source: HardwareSpec | None,
          ref: HardwareSpec | None = None):
    """Sort key (module doc): for a serving engine's GEMMs and MoE, its own tables from the target's instruction
    family first; then the same part; then the requested engine (engine families only), generation distance,
    the part whose bandwidth is closest to that of the part ``hw`` stands for (``ref``,
    :func:`perfmodel.spec.library_part`: a what-if keeps its part's evidence; ranked by its own changed bandwidth,
    a GH200 with 6% more had swapped its MoE and collective profiles for another part's and slowed 2.6%), and the
    name (deterministic)."""
    ref = hw if ref is None else ref
    same_part = _same_part(prof, hw)
    distance = _part_distance(prof, hw)
    engine_miss = 0 if family not in ENGINE_FAMILIES else engine_distance(engine, prof.engine)
    own_kernels = not (family in ENGINE_FIRST_FAMILIES and engine in SERVING_ENGINES) or (
        engine_miss == 0 and (same_part or _same_mma(source, hw)))
    if source is None:
        gen, bw = 99.0, 99.0
    else:
        gen = _generation_distance(source.generation, ref.generation)
        bw = abs(source.hbm_bandwidth - ref.hbm_bandwidth) / ref.hbm_bandwidth
    kernel_miss = deltanet_kernel_miss(engine, prof) if family == "deltanet" else 0
    return (not own_kernels, distance, kernel_miss, engine_miss, gen, bw, prof.name)


def runs_deepep(engine: str) -> bool:
    """Whether the engine's MoE all-to-all runs DeepEP's kernels (its preset's ``moe_all_to_all``)."""
    from .engines import ENGINES

    eng = ENGINES.get(engine)
    return eng is not None and eng.moe_all_to_all == "deepep"


def _usable(hw: HardwareSpec, prof: Profile, source: HardwareSpec | None) -> bool:
    """Nothing carries across vendors (perfmodel.transfer): a profile of another vendor's part is no evidence."""
    return source is None or source.vendor == hw.vendor or _same_part(prof, hw)


def choose(hw: HardwareSpec, engine: str, candidates: list[tuple[Profile, HardwareSpec | None]],
           attention: dict | None = None) -> dict:
    """Per family, the (profile, its source spec) that stands for it, or None (defaults). Attention: the profile
    of the backend the engine runs in prefill (``attention``, :func:`choose_attention`, has every backend's)."""
    out = {}
    ref = library_part(hw)
    for family in FAMILY_FIELDS:
        if family in DEEPEP_FAMILIES and not runs_deepep(engine):  # another engine's kernels: no evidence for it
            out[family] = None
            continue
        usable = [(p, s) for p, s in candidates if family in measured_families(p) and _usable(hw, p, s)]
        rank = lambda ps: _rank(hw, engine, family, ps[0], ps[1], ref)  # noqa: E731
        out[family] = min(usable, key=rank) if usable else None
    attention = attention or choose_attention(hw, engine, candidates)
    out["attention"] = attention["backends"].get(attention["kernels"]["prefill"])
    return out


def choose_attention(hw: HardwareSpec, engine: str, candidates: list[tuple[Profile, HardwareSpec | None]]) -> dict:
    """The attention evidence: ``backends`` (backend -> the (profile, source spec) that fitted it: the same
    part first, then the engine's nearness, then generation), ``dispatch`` (the profile whose observed PyTorch dispatch gives
    ``attn_default``, or None) and ``kernels`` (phase -> the backend that times the engine's kernel there)."""
    from .attention_kernels import resolve
    from .engines import engine_for
    from .errors import InputError

    backends = {}
    ref = library_part(hw)
    for key, kernel in KERNELS.items():
        usable = [(p, s) for p, s in candidates if key in measured_backends(p) and _usable(hw, p, s)
                  and (not kernel.carried or _same_part(p, hw) or _same_mma(s, hw))]
        if usable:
            backends[key] = min(usable, key=lambda ps: _rank(hw, engine, "attention", ps[0], ps[1], ref))
    seen = [(p, s) for p, s in candidates if p.fitted and p.provenance.get("attention_dispatch") and _usable(hw, p, s)]
    dispatch = min(seen, key=lambda ps: _rank(hw, engine, "attention", ps[0], ps[1], ref)) if seen else None
    default = dispatch[0].attn_default if dispatch else DEFAULTS.attn_default
    try:
        name = engine_for(engine, hw.vendor).attention_for(hw.generation)
    except InputError:  # not an engine preset: what plain PyTorch dispatches to
        name = "auto"
    kernels = {phase: resolve(name, phase, hw.generation, default, backends).backend for phase in ("prefill", "decode")}
    return {"backends": backends, "dispatch": dispatch, "kernels": kernels}


def _backend_keys(d: dict, backend: str) -> dict:
    """A per-backend parameter dict's entries for one backend (``cudnn``, ``cudnn.decode``, ``trtllm.fp8``...)."""
    return {k: v for k, v in d.items() if k == backend or k.startswith(backend + ".")}


def _where(prof: Profile, hw: HardwareSpec) -> str:
    return (f"measured on {prof.device or prof.spec_key} ({prof.name})" if _same_part(prof, hw)
            else f"carried from {prof.spec_key} ({prof.name})")


def _entry(prof: Profile, hw: HardwareSpec) -> dict:
    return {"profile": prof.name, "part": prof.spec_key, "engine": prof.engine, "carried": not _same_part(prof, hw),
            "source": _where(prof, hw)}


def choose_host(hw: HardwareSpec, engine: str, candidates: list[tuple[Profile, HardwareSpec | None]]):
    """The (profile, its source spec) whose host costs stand for a projection on ``hw`` (``Profile.host``), or
    None: the same part's first, then the nearest part as for any other family. Any vendor's: the host costs
    describe the machine that drove the GPU, not the GPU."""
    usable = [(p, s) for p, s in candidates if p.fitted and p.host]
    if not usable:
        return None
    ref = library_part(hw)
    return min(usable, key=lambda ps: _rank(hw, engine, "host", ps[0], ps[1], ref))


def host_provenance(prof: Profile | None, hw: HardwareSpec) -> dict:
    """Where a composed profile's host costs came from (``provenance["host"]``), in words."""
    if prof is None:
        return {"source": "documented defaults (estimate: perfmodel.host_costs)"}
    where = f"the host of {prof.device or prof.spec_key}'s calibration ({prof.name})"
    carried = "" if _same_part(prof, hw) else ", carried unchanged (the host is not the GPU)"
    return {"profile": prof.name, "part": prof.spec_key, "source": f"measured on {where}{carried}"}


def compose(hw: HardwareSpec, engine: str, candidates: list[tuple[Profile, HardwareSpec | None]]) -> Profile:
    """One profile for ``engine`` on ``hw``, each family from its best evidence (module doc); the host costs
    (``Profile.host``) from :func:`choose_host`, unchanged."""
    from .transfer import carry

    attention = choose_attention(hw, engine, candidates)
    chosen = choose(hw, engine, candidates, attention)
    host = choose_host(hw, engine, candidates)
    if not any(chosen.values()) and not attention["backends"]:
        if host is None:
            return DEFAULTS
        return DEFAULTS.with_(host=dict(host[0].host), provenance={"host": host_provenance(host[0], hw)})
    carried: dict[str, Profile] = {}

    def on_target(prof: Profile, source) -> Profile:
        if prof.name not in carried:
            carried[prof.name] = carry(prof, source, hw)
        return carried[prof.name]

    lead_family = next((f for f in ("gemm", "attention", "memory", "comm", "training", "power", "launch")
                        if chosen.get(f)), None)
    lead = on_target(*chosen[lead_family]) if lead_family else DEFAULTS
    values = {}
    provenance_families = {}
    spreads = [lead.carry_spread]
    for family, pick in chosen.items():
        if family == "attention":
            continue
        if pick is None:
            if family not in DEEPEP_FAMILIES or runs_deepep(engine):  # (another engine's kernels: nothing to say)
                provenance_families[family] = {"source": "documented defaults"}
            for f in FAMILY_FIELDS[family]:
                values[f] = getattr(DEFAULTS, f)
            continue
        prof = on_target(*pick)
        spreads.append(prof.carry_spread)
        for f in FAMILY_FIELDS[family]:
            values[f] = getattr(prof, f)
        provenance_families[family] = _entry(pick[0], hw)
    residuals = dict(lead.residual_quantiles)
    # attention: each backend's parameters (and its residual band) from the profile that fitted it; the
    # parameters not kept per backend from the source of the engine's own kernel
    att = chosen.get("attention")
    att_prof = on_target(*att) if att is not None else DEFAULTS
    per_backend = [f for f in FAMILY_FIELDS["attention"] if f != "attn_default" and isinstance(getattr(DEFAULTS, f), dict)]
    for f in FAMILY_FIELDS["attention"]:
        values[f] = dict(getattr(DEFAULTS, f)) if f in per_backend else getattr(att_prof, f)
    backends_info = {}
    for key, pick in attention["backends"].items():
        prof = on_target(*pick)
        for f in per_backend:
            kept = {k: v for k, v in values[f].items() if k not in _backend_keys(values[f], key)}
            values[f] = {**kept, **_backend_keys(getattr(prof, f), key)}
        if f"attention:{key}" in prof.residual_quantiles:
            residuals[f"attention:{key}"] = prof.residual_quantiles[f"attention:{key}"]
        backends_info[key] = _entry(pick[0], hw)
    if attention["dispatch"] is not None:
        values["attn_default"] = dict(attention["dispatch"][0].attn_default)
    kernels = attention["kernels"]
    if att is None:
        provenance_families["attention"] = {"source": "documented defaults"}
    else:
        spreads.append(att_prof.carry_spread)
        if "attention" in att_prof.residual_quantiles:
            residuals["attention"] = att_prof.residual_quantiles["attention"]
        phases = sorted(set(kernels.values()), key=list(kernels.values()).index)
        words = "; ".join(f"{b} " + (backends_info[b]["source"] if b in backends_info else "documented defaults")
                          for b in phases)
        provenance_families["attention"] = {**_entry(att[0], hw), "source": words, "kernels": dict(kernels),
                                            "backends": backends_info,
                                            "dispatch": _entry(attention["dispatch"][0], hw)
                                            if attention["dispatch"] else {"source": "documented defaults"}}
        if "kv_write" in att[0].provenance.get("module_kernels", ()):
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
    provenance_families = {f: provenance_families[f] for f in FAMILY_FIELDS if f in provenance_families}
    # uncertainty: the GEMM source's residual bands (attention's from its backends' sources); its validation
    lead_name = chosen[lead_family][0].name if lead_family else ""
    sources = sorted({p.name for p, _ in (c for c in chosen.values() if c)})
    others = [s for s in sources if s != lead_name]
    description = lead.description + (f"; other families from {', '.join(others)}" if others else "")
    values["host"] = dict(host[0].host) if host is not None else {}
    provenance = {**lead.provenance, "families": provenance_families, "engine_requested": engine,
                  "host": host_provenance(host[0] if host is not None else None, hw),
                  "attention_backends": sorted(backends_info),
                  "attention_dispatch": (attention["dispatch"][0].provenance.get("attention_dispatch", {})
                                         if attention["dispatch"] else {})}
    words = []
    for name in others:
        fams = [f for f, v in provenance_families.items() if v.get("profile") == name]
        carried_note = " carried" if any(provenance_families[f].get("carried") for f in fams) else ""
        words.append(f"{name}{carried_note} ({', '.join(fams)})")
    return lead.with_(**values, description=description, provenance=provenance, carry_spread=max(spreads),
                      residual_quantiles=residuals, other_sources="; ".join(words))
