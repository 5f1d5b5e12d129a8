"""What a projection assumes runs, per operator family: the engine, its kernels, and which efficiencies
were measured on the part and which were carried from another kernel or format.

``choices(hw, sc, prof)`` is what the projection's JSON reports under ``kernels`` and what its
assumptions say in words.
"""
from __future__ import annotations

from .attention_kernels import resolve
from .cost import own_attention_backends
from .dtypes import TENSOR_RATE_KEY
from .engines import engine_for
from .profile import Profile
from .scenario import Scenario, require_resolved
from .spec import HardwareSpec

_ROTARY = {"kv_write": "folded into the KV-cache write", "kernel": "one kernel on queries and keys",
           "eager": "plain PyTorch (five calls on queries, five on keys)"}


def choices(hw: HardwareSpec, sc: Scenario, prof: Profile, model=None) -> dict:
    """Per family: the kernel, and whether its efficiency was measured on ``prof``'s part or carried; with the
    engine's defaults for ``model``'s architecture the scenario runs (:attr:`perfmodel.engines.Engine.
    model_defaults`)."""
    require_resolved(sc, "kernel_choices.choices")
    eng = engine_for(sc.engine, hw.vendor)
    out: dict = {"engine": {"key": eng.key, "name": eng.name, "version": eng.version, "sources": dict(eng.sources)}}
    out["engine"]["model_defaults"] = [
        {"field": d.field, "value": d.value, "rule": d.note(), "source": d.source}
        for d in eng.model_defaults_for(model, hw.generation) if getattr(sc, d.field) == d.value]
    out["gemm"] = _gemm(sc, prof)
    attention = {}
    for phase in ("prefill", "decode"):
        r = resolve(sc.attention_kernel or "auto", phase, hw.generation, prof.attn_default,
                    own_attention_backends(prof))
        measured = r.backend in prof.provenance.get("attention_backends", ()) if prof.fitted else False
        attention[phase] = {
            "kernel": r.kernel.key, "name": r.kernel.name, "timed_as": r.backend,
            "carried": r.carried or not measured,
            "source": r.kernel.source if r.carried else ("measured" if measured else "documented default"),
            "note": r.note,
        }
    fp8 = sc.fp8_attention and sc.kv == "fp8"
    attention["dtype"] = "fp8" if fp8 else sc.act_dtype
    out["attention"] = attention
    fused = sc.kernels == "fused"
    out["norm"] = "RMSNorm with the residual add fused in" if fused else "RMSNorm, then a separate residual add"
    out["activation"] = "SwiGLU in one kernel" if fused else "silu(gate) * up: two eager kernels"
    out["rotary"] = _ROTARY[sc.rotary]
    out["launch"] = {"auto": "decode replayed from CUDA graphs, prefill dispatched eagerly",
                     "graph": "CUDA graph replay", "eager": "eager dispatch"}[sc.launch]
    out["kv_cache"] = sc.kv
    out["memory"] = {"free": f"KV cache gets {sc.mem_fraction:.0%} of the memory free after weights and activations",
                     "static": f"weights and KV cache within {sc.mem_fraction:.1%} of device-visible memory, "
                               "activations outside"}.get(sc.mem_policy,
                                                          f"{sc.mem_fraction:.0%} of device-visible memory in all")
    out["scheduler"] = {"prefill_chunk": sc.prefill_chunk, "max_batch": sc.max_batch}
    return out


def _gemm(sc: Scenario, prof: Profile) -> dict:
    key = TENSOR_RATE_KEY[sc.dtype]
    measured = set(prof.provenance.get("measured_formats", ())) if prof.fitted else set()
    if sc.dtype in measured or key in measured:
        return {"dtype": sc.dtype, "carried": False, "source": f"measured on {prof.device or prof.name}"}
    like = "fp8" if key in ("fp4", "int8") and "fp8" in measured else "bf16"
    if not prof.fitted:
        return {"dtype": sc.dtype, "carried": True, "source": "documented default (uncalibrated)"}
    return {"dtype": sc.dtype, "carried": True,
            "source": f"{sc.dtype} was not measured on {prof.device or prof.name}: its fraction of the datasheet's "
                      f"dense rate is carried from {like} (perfmodel/transfer.py); block scales counted in its bytes"}


def assumption_lines(ch: dict) -> list[str]:
    """The choices as sentences for a projection's assumptions."""
    version = f"; {ch['engine']['version']}" if ch["engine"].get("version") else ""
    out = [f"engine: {ch['engine']['name']} (--engine {ch['engine']['key']}{version}; presets in docs/engines.md)"]
    rules = [d["rule"] for d in ch["engine"].get("model_defaults", ())]
    if rules:
        out.append(f"{ch['engine']['name']}'s defaults for this model's architecture: {'; '.join(rules)} (its "
                   "server arguments, the sources in the JSON's kernels.engine.model_defaults)")
    for phase in ("prefill", "decode"):
        a = ch["attention"][phase]
        line = f"{phase} attention: {a['name']}"
        if a["carried"] and a["source"] != "documented default":
            line += (f", timed with the {a['timed_as']} backend's efficiencies (carried: the rule and its source "
                     f"are in perfmodel/attention_kernels.py and the JSON's kernels.attention)")
        elif a["carried"]:
            line += " (documented default efficiencies: not measured)"
        if a["note"]:
            line += f"; {a['note']}"
        out.append(line)
    if ch["attention"]["dtype"] == "fp8":
        out.append("attention's matrix products in fp8 over the fp8 KV cache; their efficiency is the bf16 "
                   "kernel's scaled by the FA3 paper's fp8/bf16 ratio (perfmodel/attention_kernels.py)")
    if ch["gemm"]["carried"]:
        out.append(f"{ch['gemm']['dtype']} GEMMs: {ch['gemm']['source']}")
    out.append(f"kernels: {ch['norm']}; {ch['activation']}; rotary {ch['rotary']}; KV cache {ch['kv_cache']}")
    out.append(f"kernel launches: {ch['launch']}")
    out.append(f"memory: {ch['memory']}")
    if ch["scheduler"]["max_batch"] < 1 << 30:
        out.append(f"scheduler: at most {ch['scheduler']['max_batch']} sequences at once, "
                   f"{ch['scheduler']['prefill_chunk']} prefill tokens a step")
    return out
