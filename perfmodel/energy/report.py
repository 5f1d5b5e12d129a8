"""Joules per token, average power, tokens per joule, dollars per million tokens for a projection.

A replica is the tp x pp GPUs that serve one copy of the model. Its energy over a step:

- every GPU draws ``static_w`` for the step's time (pipeline stages waiting for their turn included);
- the dynamic energy of the step's ops (one TP rank's ops, every stage) is paid once per TP rank, and, for
  decode, once per pipeline micro-batch (``pp`` micro-batches advance in one decode step, as the latency
  model's TPOT assumes).

Per token, with the projection's own definitions of TTFT, TPOT and throughput (README):

- ``joules_per_token.prefill``: the replica's energy of the TTFT prefill step / the prompt tokens it runs;
- ``joules_per_token.decode``: the replica's energy of the mean decode step / the batch;
- ``joules_per_token.output``: all-in energy per output token, each request's prefill amortised over its
  output tokens as the throughput formula amortises its time;
- ``avg_power_w``: per GPU, that energy times the throughput; ``tokens_per_joule`` = 1 / output J/token;
- ``usd_per_million_tokens``: GPU-hours at ``gpu_hour_usd`` per GPU per hour, per million output tokens;
- ``tokens_s_per_mw``: output tokens/s per megawatt of GPU board power (no host, network or cooling).
"""
from __future__ import annotations

import math

from .model import capped, dynamic_energy, limit_w, power_params


def replica_energy(phase, sc, hw, prof, params: dict | None = None, *, time_s=None, pipelined: bool = False) -> float:
    """Joules the tp x pp replica spends on one evaluated step (``time_s`` overrides the step's time, e.g.
    TPOT, the mean decode step, for the middle one)."""
    p = params if params is not None else power_params(prof, hw)
    t = phase.time_s if time_s is None else time_s
    dyn = capped(dynamic_energy(phase.times, p), t, p, limit_w(p, hw))  # the limit over the time charged
    copies = sc.tp * (sc.pp if pipelined else 1)
    return float(copies * dyn + sc.gpus * p["static_w"] * t)


def _finite(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def projection_energy(projection, gpu_hour_usd: float | None = None) -> dict:
    """Energy and cost figures of a :class:`perfmodel.projection.Projection` (module doc)."""
    p = projection
    sc, hw, prof = p.scenario, p.hardware, p.profile
    params = power_params(prof, hw)
    n_pre = max(int(p.prefill_requests), 1)
    e_pre = replica_energy(p.prefill, sc, hw, prof, params, time_s=p.ttft_s)
    j_prefill = e_pre / (n_pre * sc.prompt)  # per prompt token: text and image tokens
    batch = p.batch
    if p.decode is not None:
        e_dec = replica_energy(p.decode, sc, hw, prof, params, time_s=p.tpot_s, pipelined=True)
        j_decode = e_dec / batch
    else:
        e_dec, j_decode = 0.0, None
    if sc.batching == "static":
        j_out = (e_pre + (sc.osl - 1) * e_dec) / (batch * sc.osl)
    else:
        j_out = (j_decode or 0.0) + e_pre / n_pre / sc.osl
    thr = float(p.throughput_tok_s)
    replica_w = j_out * thr
    out = {
        "joules_per_token": {"prefill": _finite(j_prefill), "decode": _finite(j_decode) if j_decode else None,
                             "output": _finite(j_out)},
        "avg_power_w": _finite(replica_w / sc.gpus),
        "replica_power_w": _finite(replica_w),
        "prefill_power_w": _finite(e_pre / (sc.gpus * p.ttft_s)) if p.ttft_s > 0 else None,
        "decode_power_w": _finite(e_dec / (sc.gpus * p.tpot_s)) if p.decode is not None and p.tpot_s > 0 else None,
        "tokens_per_joule": _finite(1.0 / j_out) if j_out > 0 else None,
        "tokens_s_per_mw": _finite(thr / replica_w * 1e6) if replica_w > 0 else None,
        "usd_per_million_tokens": None,
        "power_model": power_source(prof, params),
    }
    if gpu_hour_usd is not None:
        out["usd_per_million_tokens"] = _finite(sc.gpus * gpu_hour_usd / 3600.0 / thr * 1e6) if thr > 0 else None
        out["gpu_hour_usd"] = float(gpu_hour_usd)
    return out


def power_source(prof, params: dict) -> str:
    """One line saying where the power parameters come from."""
    if not params.get("fitted"):
        return "documented defaults (estimates from TDP; docs/energy.md)"
    label = prof.spec_key or prof.name
    if params.get("carried"):
        return f"fitted on {label}, carried by TDP and process-node rules (docs/energy.md)"
    return f"fitted on {label} (NVML energy counter around sustained loops)"
