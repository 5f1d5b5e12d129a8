"""``serve`` and ``plan`` results as JSON documents and terminal tables."""
from __future__ import annotations

import math

from ..text import table
from ..units import format_si


def _header(hw, model, prof) -> dict:
    from .. import __version__
    from ..serialize import calibration_info, hardware_info

    return {"tool": f"perfmodel {__version__}", "arch": hardware_info(hw),
            "model": {"key": model.key, "name": model.name}, "calibration": calibration_info(prof)}


def assumptions(result: dict) -> list[str]:
    lay = result["layout"]
    schedule = ("prompts first, in steps of their own while the decoding sequences wait (SGLang's), then decode"
                if result.get("scenario", {}).get("schedule") == "prefill_first" else
                "decode first, then chunked prefill of running prompts in the same step (vLLM's)")
    out = [f"scheduler: {schedule}; FCFS admission within the token budget, the sequence cap and free KV blocks (1% "
           "watermark); preemption by recompute, latest admitted first",
           "step times from the calibrated latency model (one forward pass over every token of the step; "
           "decode attention at the batch's mean context)",
           "energy: static power while a step runs, idle power between, dynamic energy per FLOP and HBM byte "
           "held to the power limit per step (docs/energy.md)"]
    if lay["mode"] == "disaggregated":
        out.append(f"KV cache moved over the {lay['kv_transfer']['link']} link, each prefill instance sending "
                   "one cache at a time; prefill instances free a request's blocks when its prompt is done")
    if lay.get("replicas", 1) > 1:
        out.append("requests dealt round-robin over the replicas")
    return out


def serve_document(hw, model, sc, prof, reqs, workload: dict, result: dict) -> dict:
    doc = _header(hw, model, prof)
    doc["workload"] = {**workload, "requests": len(reqs), "mean_isl": float(reqs.isl.mean()),
                       "mean_osl": float(reqs.osl.mean()),
                       "prefix_groups": int(reqs.prefix_group.max() + 1) if reqs.prefix_group.size else 0}
    doc.update(result)
    doc["assumptions"] = assumptions(result)
    return _finite(doc)


def _finite(x):
    """None for anything not finite, so that the JSON never holds NaN or infinity."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        try:
            return _finite(x.item())
        except (ValueError, AttributeError):
            return x
    return x


def _num(v, fmt: str = "{:,.3g}") -> str:
    if v is None:
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return fmt.format(v)


def _layout_line(doc: dict) -> str:
    lay = doc["layout"]
    if lay["mode"] == "aggregated":
        i = lay["instance"]
        dp = i.get("attention_dp", 1)
        group = f"TP {i['tp']} x attention DP {dp}, EP {i['ep']}" if dp > 1 else f"TP {i['tp']}"
        budget = f"{i['token_budget']} tokens a step" + (f" on each of {dp} ranks" if dp > 1 else "")
        return (f"aggregated: {lay['replicas']} x ({group}, PP {i['pp']}) = {lay['gpus']} GPUs; engine "
                f"{i['engine']}; up to {i['max_seqs']} sequences, {budget}, "
                f"KV cache {i['kv_tokens']:,} tokens{', prefix caching' if i['prefix_caching'] else ''}")
    p, d = lay["prefill"], lay["decode"]
    return (f"disaggregated {lay['prefill_instances']}P{lay['decode_instances']}D: prefill TP {p['tp']}, decode "
            f"TP {d['tp']} (up to {d['max_seqs']} sequences), {lay['gpus']} GPUs; engine {p['engine']}; KV over "
            f"{lay['kv_transfer']['link']} ({_num(lay['kv_transfer']['mean_ms'])} ms mean)")


def serve_table(doc: dict) -> str:
    w = doc["workload"]
    if w.get("arrival") == "trace":
        wl = f"trace {w['trace']}"
    else:
        wl = f"{w['arrival']} {_num(w['rate_req_s'])} req/s, isl {w['isl_dist']}, osl {w['osl_dist']}"
    lines = [f"{doc['model']['name']} on {doc['arch']['name']}",
             _layout_line(doc),
             f"workload: {w['requests']:,} requests, {wl} (mean isl {w['mean_isl']:.0f}, osl {w['mean_osl']:.0f})",
             f"calibration: {doc['calibration']['label']}", ""]
    rows = [["latency (ms)", "P50", "P90", "P99", "mean"]]
    for key, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E")):
        s = doc[key]
        rows.append([label] + [_num(s[k]) for k in ("p50", "p90", "p99", "mean")])
    lines += table(rows, "lrrrr")
    load = doc.get("load") or {}
    if load.get("overloaded"):
        lines.append("")
        lines.append(f"overloaded: arrivals exceed what the layout serves ({_num(load['offered_req_s'])} req/s offered, "
                     f"{_num(load['served_req_s'])} req/s served); the queue grew through the run (median TTFT "
                     f"{_num(load['ttft_first_quarter_ms'])} ms in the first quarter of arrivals, "
                     f"{_num(load['ttft_last_quarter_ms'])} ms in the last): the latencies above depend on the run's "
                     "length, not on the layout")
    gpus = doc["layout"]["gpus"]
    lines.append("")
    lines.append(f"  throughput      {doc['throughput_tok_s']:,.0f} output tok/s ({doc['throughput_tok_s'] / gpus:,.0f} "
                 f"per GPU), {doc['request_throughput_req_s']:.3g} req/s over {doc['duration_s']:.4g} s")
    if doc["slo"]:
        slo = ", ".join(f"{k.split('_')[0].upper()} <= {_num(v)} ms" for k, v in doc["slo"].items())
        lines.append(f"  goodput         {doc['goodput_req_s']:.3g} req/s; SLO attainment "
                     f"{100 * doc['slo_attainment']:.1f}% ({slo})")
    e = doc["energy"]
    j = e["joules_per_token"]
    cost = f"; ${e['usd_per_million_tokens']:.3g} per million output tokens" if e.get("usd_per_million_tokens") else ""
    lines.append(f"  energy          {j['output']:.3g} J per output token (prefill {j['prefill']:.3g} J per input "
                 f"token, decode {j['decode']:.3g}), {e['avg_power_w']:.0f} W per GPU, "
                 f"{e['tokens_per_joule']:.3g} tok/J{cost}")
    queue = (f"{doc['littles_law']['mean_in_system']:.3g} requests in the system on average; "
             if doc.get("littles_law") else "")
    lines.append(f"  queue           {queue}{doc['preemptions']} preemptions; {doc['prefix_cache_hit_tokens']:,} "
                 "prompt tokens from the prefix cache")
    spec = doc.get("speculation")
    if spec:  # ITL above is per step (streamed chunk); docs/speculative.md
        # a run without verify steps (every output one token long) observed nothing: None, shown as '-'
        obs = ", ".join(_num(x) for x in spec["observed_acceptance"] if x is not None) or "-"
        per = spec["itl_per_token_ms"]
        lines.append(f"  speculation     {spec['draft_tokens']} draft tokens a step from {spec['drafter']}: acceptance "
                     f"{obs} observed, {_num(spec['observed_tokens_per_step'])} tokens per verify step; ITL per "
                     f"emitted token P50 {_num(per['p50'])}, P90 {_num(per['p90'])}, mean {_num(per['mean'])} ms")
    sim = doc["simulation"]
    lines.append(f"  simulated       {sim['steps']:,} steps in {sim['build_s'] + sim['simulate_s']:.2f} s "
                 f"(tables {sim['build_s']:.2f} s)")
    lines.append("")
    lines.append("TPOT and ITL as vLLM's benchmark_serving defines them (docs/serving.md)")
    return "\n".join(lines)


def plan_document(hw, model, sc, prof, base, space, opts, rows: list[dict], workload: dict) -> dict:
    doc = _header(hw, model, prof)
    doc["gpus"] = space.gpus
    doc["slo"] = {k: v for k, v in (("ttft_ms", opts.slo_ttft_s and opts.slo_ttft_s * 1e3),
                                    ("tpot_ms", opts.slo_tpot_s and opts.slo_tpot_s * 1e3)) if v}
    doc["attainment"] = space.attainment
    doc["workload"] = {**workload, "requests_per_trial": len(base), "mean_isl": float(base.isl.mean()),
                       "mean_osl": float(base.osl.mean())}
    doc["scenario"] = plan_scenario(sc)
    doc["candidates"] = rows
    doc["definition"] = ("goodput: the highest request rate at which at least the attainment share of requests "
                         "meet every SLO, times that share; ranked by output tokens/s of goodput per GPU used")
    return _finite(doc)


def plan_scenario(sc) -> dict:
    """What the plan's layouts ran under beyond each row's own fields, for the next step to read (``perfmodel
    deploy``: weights' format, expert and attention data parallelism, speculation): every engine's alike; the
    KV-cache format, token budget, memory share and MoE exchange only where given (else each engine's own
    default, or rule: the exchange of wide expert parallelism)."""
    out = {"dtype": sc.dtype, "ep": sc.ep, "attention_dp": sc.attention_dp, "mtp": sc.mtp}
    if sc.mtp:  # the acceptance the plan was sized for, per draft position
        out["mtp_accept"] = list(sc.acceptance)
    if sc.draft:
        out["draft"] = sc.draft
    for key in ("kv_dtype", "prefill_chunk", "mem_fraction", "moe_exchange"):
        if getattr(sc, key, None):
            out[key] = getattr(sc, key)
    if sc.engine != "auto":
        out["engine"] = sc.engine
    return out


def plan_table(doc: dict, top: int = 15) -> str:
    slo = ", ".join(f"{k.split('_')[0].upper()} <= {_num(v)} ms" for k, v in doc["slo"].items())
    w = doc["workload"]
    lines = [f"{doc['model']['name']} on {doc['arch']['name']}: best layouts of {doc['gpus']} GPUs for {slo} "
             f"({100 * doc['attainment']:.0f}% of requests)",
             f"workload: isl {w['isl_dist']}, osl {w['osl_dist']}; {w['requests_per_trial']} requests per trial",
             f"calibration: {doc['calibration']['label']}", ""]
    rows = [["#", "layout", "engine", "GPUs", "goodput req/s", "tok/s/GPU", "TTFT p90", "TPOT p90", "SLO met",
             "J/tok", "$/Mtok"]]
    for r in doc["candidates"][:top]:
        rows.append([str(r["rank"]), r["describe"], str(r.get("engine") or "-"), str(r["gpus"]),
                     _num(r["goodput_req_s"]), _num(r["goodput_tok_s_per_gpu"]),
                     _num(r["ttft_p90_ms"]), _num(r["tpot_p90_ms"]),
                     "-" if r["attainment"] is None else f"{100 * r['attainment']:.0f}%",
                     _num(r["joules_per_token"]), _num(r.get("usd_per_million_tokens"))])
    lines += table(rows, "rllrrrrrrrr")
    lines.append("")
    lines.append(doc["definition"])
    return "\n".join(lines)


def _si(v: float, unit: str) -> str:
    return format_si(v, unit)
