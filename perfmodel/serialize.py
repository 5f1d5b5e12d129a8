"""Projections and steps as plain dicts (JSON) and flat rows (CSV). Times in ms at this edge."""
from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np

from . import __version__
from .cost import OpTime, clock_info
from .energy import projection_energy
from .kernel_choices import choices as kernel_choices
from .scenario import require_resolved


def _num(x) -> Any:
    a = np.asarray(x)
    if a.ndim == 0:
        v = a.item()
        return round(v, 9) if isinstance(v, float) else v
    return a.tolist()


def op_row(t: OpTime) -> dict:
    op = t.op
    return {"name": op.name, "phase": op.phase, "kind": op.kind, "count": _num(op.count), "scope": op.scope,
            "flops": _num(op.flops), "bytes": _num(op.bytes), "time_ms": _num(t.time * 1e3),
            "total_ms": _num(t.total * 1e3), "bound": _num(t.bound),
            "params": {k: _num(v) for k, v in op.params.items()}}


def calibration_info(prof) -> dict:
    return {"profile": prof.name if prof.fitted else None, "label": prof.label, "fitted": prof.fitted,
            "device": prof.device or None, "carried_from": prof.carried_from or None,
            "description": prof.description, "validation": prof.validation or None,
            "engine": prof.engine if prof.fitted else None,
            # per cost-model family: which profile (part, engine) it came from and whether it was carried
            "families": prof.provenance.get("families") if prof.fitted else None,
            # the engine release whose MoE tables priced it, where one was named (perfmodel.releases)
            "release_tables": prof.provenance.get("release_tables"),
            "carry": prof.provenance.get("carry") if prof.carried_from else None}


def hardware_info(hw) -> dict:
    return {"key": hw.key, "name": hw.name, "vendor": hw.vendor, "generation": hw.generation,
            "files": list(hw.files), "sha256": hw.sha256}


def phase_bound(phase) -> str:
    """The resource that takes the largest share of the phase's time."""
    share: dict[str, float] = {}
    for t in phase.times:
        share[str(t.bound)] = share.get(str(t.bound), 0.0) + float(t.total)
    return max(share, key=share.get) if share else "none"


def projection_dict(p, gpu_hour_usd: float | None = None) -> dict:
    sc = asdict(p.scenario)
    sc["kv_dtype"] = p.scenario.kv
    sc["gpus"] = p.scenario.gpus
    if p.scenario.image_tokens:
        sc["prompt"] = p.scenario.prompt
    else:  # a text-only projection's JSON as it was before images existed
        for k in ("images", "image_size", "video_frames", "image_tokens"):
            sc.pop(k)
    ops = [op_row(t) for t in p.prefill.times]
    if p.decode is not None:
        ops += [op_row(t) for t in p.decode.times]
    return {
        "tool": f"perfmodel {__version__}",
        "arch": hardware_info(p.hardware),
        "model": {"key": p.model.key, "name": p.model.name, "params": p.model.param_count(),
                  "active_params": p.model.active_param_count(), "notes": list(p.model.notes)},
        "scenario": sc,
        "batch": p.batch,
        "prefill_requests": p.prefill_requests,
        "ttft_ms": p.ttft_s * 1e3,
        "tpot_ms": p.tpot_s * 1e3,
        "e2e_ms": p.e2e_s * 1e3,
        "throughput_tok_s": p.throughput_tok_s,
        "throughput_tok_s_per_gpu": p.throughput_tok_s_per_gpu,
        "mfu": p.mfu,
        "mbu": p.mbu,
        "bound": {"prefill": phase_bound(p.prefill), "decode": phase_bound(p.decode) if p.decode else None},
        "bands": {k: {"p10": v[0], "p50": v[1], "p90": v[2]} for k, v in p.bands.items()},
        "memory": p.memory.as_dict(),
        "energy": projection_energy(p, gpu_hour_usd),
        "ops": ops,
        # the power-limited clock of each phase and each compute op's time in the step over its time alone
        "power_clock": ({"prefill": clock_info(p.prefill.times, p.hardware, p.profile),
                         "decode": clock_info(p.decode.times, p.hardware, p.profile) if p.decode else None}
                        if p.scenario.mode != "sol" else None),
        "calibration": calibration_info(p.profile),
        "engine": p.scenario.engine,
        "kernels": kernel_choices(p.hardware, p.scenario, p.profile, p.model),
        "assumptions": p.assumptions,
    }


def step_dict(hw, model, sc, prof, phase) -> dict:
    require_resolved(sc, "serialize.step_dict")
    return {
        "tool": f"perfmodel {__version__}",
        "arch": hardware_info(hw),
        "model": {"key": model.key, "name": model.name},
        "phase": phase.name, "batch": _num(phase.batch), "seq": _num(phase.seq), "context": _num(phase.context),
        "tp": sc.tp, "pp": sc.pp, "ep": sc.ep, "dtype": sc.dtype, "kv_dtype": sc.kv, "launch": sc.launch,
        "engine": sc.engine, "kernels": sc.kernels, "kernel_choices": kernel_choices(hw, sc, prof, model),
        "mode": sc.mode,
        "time_ms": _num(phase.time_s * 1e3),
        "layer_ms": _num(phase.layer_time_s() * 1e3),
        "launch_gaps_ms": _num(phase.kernels_s * 1e3),
        "bound": phase_bound(phase),
        "ops": [op_row(t) for t in phase.times],
        "power_clock": clock_info(phase.times, hw, prof) if sc.mode != "sol" else None,
        "calibration": calibration_info(prof),
    }


PROJECTION_CSV_FIELDS = ("arch", "model", "isl", "osl", "batch", "tp", "pp", "ep", "dtype", "kv_dtype", "ttft_ms",
                         "tpot_ms", "e2e_ms", "throughput_tok_s", "throughput_tok_s_per_gpu", "mfu", "mbu",
                         "bound_prefill", "bound_decode", "weights_bytes", "kv_cache_bytes", "joules_per_token_output",
                         "avg_power_w", "tokens_per_joule", "usd_per_million_tokens", "engine", "calibration")


def projection_csv_row(p, gpu_hour_usd: float | None = None) -> dict:
    d = projection_dict(p, gpu_hour_usd)
    e = d["energy"]
    return {"arch": p.hardware.key, "model": p.model.key, "isl": p.scenario.isl, "osl": p.scenario.osl,
            "batch": p.batch, "tp": p.scenario.tp, "pp": p.scenario.pp, "ep": p.scenario.ep, "dtype": p.scenario.dtype,
            "kv_dtype": p.scenario.kv, "ttft_ms": d["ttft_ms"], "tpot_ms": d["tpot_ms"], "e2e_ms": d["e2e_ms"],
            "throughput_tok_s": d["throughput_tok_s"], "throughput_tok_s_per_gpu": d["throughput_tok_s_per_gpu"],
            "mfu": d["mfu"], "mbu": d["mbu"], "bound_prefill": d["bound"]["prefill"],
            "bound_decode": d["bound"]["decode"], "weights_bytes": d["memory"]["weights"],
            "kv_cache_bytes": d["memory"]["kv_cache"], "joules_per_token_output": e["joules_per_token"]["output"],
            "avg_power_w": e["avg_power_w"], "tokens_per_joule": e["tokens_per_joule"],
            "usd_per_million_tokens": e["usd_per_million_tokens"], "engine": p.scenario.engine,
            "calibration": p.profile.label}
