"""``perfmodel plan`` without ``--gpus`` (capacity planning): the JSON document and the terminal table."""
from __future__ import annotations

import math

from ..text import table
from ..units import format_si
from .report import plan_scenario

PRICE_SOURCE = "user input (--gpu-hour-usd); perfmodel ships no prices"


def capacity_document(parts, model, sc, profiles: dict, base, space, opts, result: dict, workload: dict) -> dict:
    """Everything ``perfmodel deploy`` reads (``candidates``, ``scenario``, ``arch`` of the chosen plan) and the
    search behind it. ``profiles``: {(part key, engine): profile}."""
    from .. import __version__
    from ..serialize import calibration_info, hardware_info

    rows = result["candidates"]
    chosen = rows[0]
    doc = {"tool": f"perfmodel {__version__}", "kind": "capacity plan",
           "model": {"key": model.key, "name": model.name},
           "arch": chosen["arch"],
           "parts": [{**hardware_info(p.hw), "gpu_hour_usd": p.price,
                      "price_source": PRICE_SOURCE if p.price is not None else None} for p in parts],
           "calibration": {f"{k[0]} {k[1]}": calibration_info(v) for k, v in sorted(profiles.items())},
           "rate_req_s": space.rate,
           "slo": {k: v * 1e3 for k, v in (("ttft_ms", opts.slo_ttft_s), ("tpot_ms", opts.slo_tpot_s),
                                           ("e2e_ms", opts.slo_e2e_s)) if v is not None},
           "attainment": space.attainment,
           "cost_basis": "usd_per_hour" if all(p.price is not None for p in parts) else "gpus",
           "workload": {**workload, "requests_per_trial": len(base), "mean_isl": float(base.isl.mean()),
                        "mean_osl": float(base.osl.mean())},
           "scenario": plan_scenario(sc),
           "search": {"engines": list(space.engines) if space.engines else [sc.engine],
                      "tp_options": list(space.tps), "pp_options": list(space.pps),
                      "batch_options": [str(b) for b in space.batches], "disaggregated": space.disagg,
                      "mixed_parts": space.mixed, "max_gpus": space.max_gpus, "finalists": space.finalists,
                      **result["stats"]},
           "notes": result["notes"],
           "candidates": rows,
           "chosen": chosen,
           "definition": ("each row is the best plan found for one part (or prefill part and decode part), one "
                          "engine, aggregated or disaggregated: the fewest GPUs (or the lowest $/h when every "
                          "part has a price) whose instances, each priced by the serving simulator, serve the "
                          "rate with the attainment share of requests within every SLO; checked by simulating "
                          "the whole plan at that rate (attainment, percentiles and energy are that run's); "
                          "ranked by $/h (else GPUs), then energy per output token; docs/capacity.md")}
    return finite(doc)


def capacity_table(doc: dict, top: int = 15) -> str:
    slo = ", ".join(f"{k.split('_')[0].upper()} <= {_num(v)} ms" for k, v in doc["slo"].items())
    w = doc["workload"]
    names = ", ".join(p["name"] for p in doc["parts"])
    priced = doc["cost_basis"] == "usd_per_hour"
    lines = [f"{doc['model']['name']}: capacity for {_num(doc['rate_req_s'])} requests/s, {slo} "
             f"({100 * doc['attainment']:.0f}% of requests), on {names}",
             f"workload: isl {w.get('isl_dist', _num(w['mean_isl']))}, osl {w.get('osl_dist', _num(w['mean_osl']))}"
             + (f" (trace {w['trace']})" if w.get("trace") else ""),
             ("prices: " + ", ".join(f"{p['key']} ${p['gpu_hour_usd']:g}/GPU-hour" for p in doc["parts"])
              + " (user input)") if priced else
             "prices: none given (--gpu-hour-usd PART=USD); ranked by GPUs", ""]
    rows = [["#", "plan", "engine", "GPUs", "$/h", "$/Mtok", "J/tok", "TTFT p90", "TPOT p90", "SLO met",
             "binding"]]
    for r in doc["candidates"][:top]:
        rows.append([str(r["rank"]), r["describe"], r["engine"], str(r["gpus"]), _num(r.get("usd_per_hour")),
                     _num(r.get("usd_per_million_tokens")), _num(r["joules_per_token"]), _num(r["ttft_p90_ms"]),
                     _num(r["tpot_p90_ms"]), "-" if r["attainment"] is None else f"{100 * r['attainment']:.0f}%",
                     r["binding"]])
    lines += table(rows, "rllrrrrrrrl")
    s = doc["search"]
    lines.append("")
    lines.append(f"search: {s['layouts']} instance layouts, {s['candidates']} candidates screened by the closed form, "
                 f"{s['simulated']} instance rate searches simulated, {len(doc['candidates'])} plans simulated end "
                 f"to end; {s['total_s']:.1f} s")
    for n in doc.get("notes", []):
        lines.append(f"note: {n}")
    lines.append(doc["definition"])
    return "\n".join(lines)


def _num(v) -> str:
    if v is None:
        return "-"
    return format_si(v, "") if abs(v) >= 1e4 else (f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}")


def finite(x):
    """None for anything not finite, so that the JSON never holds NaN or infinity."""
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
