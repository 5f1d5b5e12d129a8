"""SLA planning: which layout of N GPUs serves the most requests per second per GPU within the SLOs.

Candidates:

- **aggregated**: tensor parallel ``tp`` x pipeline ``pp`` instances, as many as fit in N GPUs, each with a
  running-sequence cap ``batch`` (a lower cap trades throughput for TPOT);
- **disaggregated xPyD**: x prefill instances of ``tp_p`` GPUs and y decode instances of ``tp_d`` GPUs
  (decode cap ``batch``), x * tp_p + y * tp_d <= N.

Goodput of a candidate: the highest request rate at which at least ``attainment`` of the requests meet
every SLO (TTFT and TPOT; vLLM's goodput definition), times the share that met them, found by bisection on
the rate with the same requests (a unit-rate arrival sequence scaled to each rate, so that the answer
moves smoothly with the rate). An aggregated candidate is one instance at rate / instances (requests
dealt evenly). A disaggregated one is sized the way aiconfigurator sizes it: the highest rate one prefill
instance sustains with ``attainment`` of its requests within the TTFT SLO, the same for one decode
instance against the TPOT SLO (its TPOT counting the KV-cache transfer and the wait for a decode slot),
and x and y chosen so that neither side limits the other more than it must; the best layouts are then
simulated end to end at their rate and reported as simulated. Ranked by goodput per GPU used.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..resolve import resolve_scenario
from .simulate import ServeOptions, build_instance, max_seqs_for, simulate
from .engine import simulate_instance

BISECT_STEPS = 9  # the rate to within 1/512 of the bracket


@dataclass
class PlanSpace:
    gpus: int
    tps: tuple[int, ...] = (1, 2, 4, 8)
    pps: tuple[int, ...] = (1,)
    batches: tuple = (16, 32, 64, 128, 256, "max")
    disagg: bool = True
    attainment: float = 0.9
    verify: int = 3  # disaggregated layouts simulated end to end, per engine
    engines: tuple[str, ...] | None = None  # None: the scenario's


def attained(first, finish, arrival, osl, slo_ttft, slo_tpot, start_offset=None) -> float:
    ok = np.ones(arrival.size, dtype=bool)
    ttft = first - arrival
    if slo_ttft is not None:
        ok &= ttft <= slo_ttft
    if slo_tpot is not None:
        begin = first if start_offset is None else start_offset
        multi = osl > 1
        tpot = np.where(multi, (finish - begin) / np.maximum(osl - 1, 1), 0.0)
        ok &= ~multi | (tpot <= slo_tpot)
    return float(ok.mean())


def max_rate(attain, hi: float, target: float) -> tuple[float, float]:
    """Highest rate r in (0, hi] with attain(r) >= target, by bisection (hi doubled until it fails):
    (rate, attainment there); (0, a) when even a trickle misses the target."""
    lo_rate = hi * 1e-3
    a_lo = attain(lo_rate)
    if a_lo < target:
        return 0.0, a_lo
    for _ in range(6):
        a_hi = attain(hi)
        if a_hi < target:
            break
        lo_rate, a_lo, hi = hi, a_hi, hi * 2.0
    else:
        return hi, a_hi
    for _ in range(BISECT_STEPS):
        mid = math.sqrt(lo_rate * hi)
        a = attain(mid)
        if a >= target:
            lo_rate, a_lo = mid, a
        else:
            hi = mid
    return lo_rate, a_lo


def _saturation_rate(hw, model, sc, prof, reqs) -> float:
    """Requests/s one instance sustains at its largest batch (the projection's throughput / mean output)."""
    from ..projection import project_resolved

    mean = sc.with_(isl=max(int(round(float(reqs.isl.mean()))), 1), osl=max(int(round(float(reqs.osl.mean()))), 1),
                    batch="max")
    p = project_resolved(hw, model, mean, prof)
    return max(p.throughput_tok_s / mean.osl, 1e-6)


def layout_runs(model, sc, reqs) -> bool:
    """Whether an engine runs the layout at all (TP dividing the heads, PP within the layers...)."""
    from ..graph import check_layout

    try:
        check_layout(model, sc.with_(isl=1, osl=1))
    except InputError:
        return False
    return True


def layout_fits(model, sc, hw, reqs) -> bool:
    from .. import capacity

    mean = sc.with_(isl=max(int(round(float(reqs.isl.mean()))), 1), osl=max(int(round(float(reqs.osl.mean()))), 1))
    return capacity.max_batch(model, mean, hw) >= 1


def plan(hw, model, sc, prof, base, space: PlanSpace, opts: ServeOptions) -> list[dict]:
    """Candidates ranked by goodput per GPU (module doc). ``base``: requests at 1 request/s."""
    from ..energy.model import power_params

    if opts.slo_ttft_s is None and opts.slo_tpot_s is None:
        raise InputError("planning needs at least one SLO", field="--slo-ttft-ms")
    if space.gpus < 1:
        raise InputError(f"expected a positive number of GPUs, got {space.gpus}", field="--gpus")
    if not 0.0 < space.attainment <= 1.0:
        raise InputError(f"expected a share in (0, 1], got {space.attainment}", field="--attainment")
    power = power_params(prof, hw)
    rows: list[dict] = []
    for engine in space.engines or (sc.engine,):
        layouts = []
        for tp in space.tps:
            for pp in space.pps:
                if tp * pp > space.gpus:
                    continue
                ep = sc.ep if tp % sc.ep == 0 else 1
                trial = resolve_scenario(sc.with_(tp=tp, pp=pp, ep=ep, engine=engine), hw, model).validated()
                if layout_runs(model, trial, base) and layout_fits(model, trial, hw, base):
                    layouts.append(trial)
        found = []
        for lay in layouts:
            found += _aggregated(hw, model, lay, prof, base, space, opts, power)
        if space.disagg and opts.slo_ttft_s is not None and opts.slo_tpot_s is not None:
            found += _disaggregated(hw, model, sc.with_(engine=engine), layouts, prof, base, space, opts, power)
        for r in found:
            r["engine"] = layouts[0].engine if layouts else engine
        rows += found
    if not rows:
        raise InputError(f"{model.name} fits no layout of at most {space.gpus} GPUs of {hw.name}", field="--gpus")
    rows = _collapse(rows)
    rows.sort(key=lambda r: -r["goodput_tok_s_per_gpu"])
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    return rows


def _collapse(rows: list[dict]) -> list[dict]:
    """A cap above what the load reaches changes nothing: of caps of one layout whose goodput is within
    0.5% of a smaller cap's, keep the smallest, marked "or more"."""
    groups: dict = {}
    for r in sorted(rows, key=lambda r: r["batch"]):
        key = (r["layout"], r.get("engine"), r["tp"], r.get("decode_tp"), r["pp"], r.get("instances"),
               r.get("prefill_instances"), r.get("decode_instances"))
        kept = groups.setdefault(key, [])
        if kept and abs(r["goodput_req_s"] - kept[-1]["goodput_req_s"]) <= 0.005 * max(kept[-1]["goodput_req_s"], 1e-12):
            if not kept[-1]["describe"].endswith(" or more"):
                kept[-1]["describe"] += " or more"
            continue
        kept.append(r)
    return [r for kept in groups.values() for r in kept]


def batch_caps(model, sc, hw, base, space: PlanSpace) -> list[int]:
    cap = max_seqs_for(model, sc.with_(batch="max"), hw, base)
    out = sorted({min(cap, b) if b != "max" else cap for b in space.batches})
    return [b for b in out if b >= 1]


def _aggregated(hw, model, lay, prof, base, space, opts, power) -> list[dict]:
    instances = space.gpus // lay.gpus
    sat = _saturation_rate(hw, model, lay, prof, base)
    steps = None
    rows = []
    for b in reversed(batch_caps(model, lay, hw, base, space)):
        inst = build_instance(hw, model, lay.with_(batch=b), prof, base, "mixed", opts, power, max_seqs=b,
                              steps=steps)
        steps = inst.steps

        def attain(rate, inst=inst):
            reqs = base.with_arrival(base.arrival / rate)
            r = simulate_instance(inst.steps, inst.cfg, reqs)
            return attained(r.first_token, r.finish, reqs.arrival, reqs.osl, opts.slo_ttft_s, opts.slo_tpot_s)

        rate, att = max_rate(attain, 1.3 * sat, space.attainment)
        total = rate * instances
        row = {"layout": "aggregated", "describe": f"{instances} x (tp {lay.tp}, pp {lay.pp}), batch {b}",
               "instances": instances, "tp": lay.tp, "pp": lay.pp, "batch": b, "gpus": instances * lay.gpus,
               "rate_req_s": total, "attainment": att}
        if rate > 0:
            reqs = base.with_arrival(base.arrival / rate)
            out = simulate(hw, model, lay.with_(batch=b), prof, reqs, opts)
            row.update(_summary(out, instances, instances * lay.gpus, base))
        else:
            row.update(_empty())
        rows.append(row)
    return rows


def _disaggregated(hw, model, sc, layouts, prof, base, space, opts, power) -> list[dict]:
    from .simulate import kv_transfer_s

    prefill = []  # (layout, rate one prefill instance sustains)
    for lay in layouts:
        if lay.pp != 1:
            continue
        inst = build_instance(hw, model, lay, prof, base, "prefill", opts, power)

        def attain(rate, inst=inst):
            reqs = base.with_arrival(base.arrival / rate)
            r = simulate_instance(inst.steps, inst.cfg, reqs)
            return attained(r.first_token, r.first_token, reqs.arrival, reqs.osl, opts.slo_ttft_s, None)

        isl = max(int(round(float(base.isl.mean()))), 1)
        budget = inst.cfg.token_budget  # a rank's (attention data parallelism: each rank its own)
        per_step = inst.cfg.prompts_per_step(isl)
        t, _ = inst.steps.step(0, 0.0, [(min(isl, budget), 0)] * per_step)
        r, _ = max_rate(attain, 1.3 * per_step / t, space.attainment)
        if r > 0:
            prefill.append((lay, r))
    decode = []  # (layout, batch, rate one decode instance sustains)
    for lay in layouts:
        if lay.pp != 1:
            continue
        steps = None
        xfer = kv_transfer_s(model, hw, prof, lay, lay, base.isl, opts.kv_link if opts.kv_link != "auto"
                              else "scaleup", 1)
        found = []
        for b in reversed(batch_caps(model, lay, hw, base, space)):
            inst = build_instance(hw, model, lay.with_(batch=b), prof, base, "decode", opts, power, max_seqs=b,
                                  steps=steps)
            steps = inst.steps
            multi = base.osl > 1

            def attain(rate, inst=inst):
                ready = base.arrival / rate
                reqs = base.subset(np.nonzero(multi)[0]).with_arrival(ready[multi])
                r = simulate_instance(inst.steps, inst.cfg, reqs)
                begin = reqs.arrival - xfer[multi]  # the first token came out before the cache moved
                return attained(r.first_token, r.finish, reqs.arrival, reqs.osl, None, opts.slo_tpot_s,
                                 start_offset=begin)

            t, _ = inst.steps.step(b, float(base.isl.mean() + base.osl.mean() / 2), ())
            r, _ = max_rate(attain, 1.3 * b / (t * float(base.osl.mean())), space.attainment)
            if r > 0:
                found.append((lay, b, r))
        if found:  # the smallest cap within 0.5% of the best rate
            top = max(r for _, _, r in found)
            decode.append(min((f for f in found if f[2] >= 0.995 * top), key=lambda f: f[1]))
    combos = []
    for lp, rp in prefill:
        for ld, b, rd in decode:
            best = None
            for x in range(1, space.gpus // lp.gpus + 1):
                left = space.gpus - x * lp.gpus
                y_max = left // ld.gpus
                if y_max < 1:
                    break
                y = min(y_max, max(1, math.ceil(x * rp / rd)))
                rate = min(x * rp, y * rd)
                used = x * lp.gpus + y * ld.gpus
                key = rate / used
                if best is None or key > best[0]:
                    best = (key, x, y, rate, used)
            if best:
                combos.append((best, lp, ld, b))
    combos.sort(key=lambda c: -c[0][0])
    rows = []
    for (key, x, y, rate, used), lp, ld, b in combos[: space.verify]:
        reqs = base.with_arrival(base.arrival / rate)
        # each side at the sequence cap it was screened at (the prefill side's own, not the decode side's batch,
        # whose activations and logits could leave a prefill instance no KV cache for a prompt)
        o = ServeOptions(**{**opts.__dict__, "disagg": (x, y), "prefill_tp": lp.tp, "decode_tp": ld.tp,
                            "prefill_layout": (("batch", lp.batch),)})
        out = simulate(hw, model, sc.with_(batch=b, tp=lp.tp, pp=1), prof, reqs, o)
        row = {"layout": "disaggregated",
               "describe": f"{x}P (tp {lp.tp}) + {y}D (tp {ld.tp}), decode batch {b}",
               "prefill_instances": x, "decode_instances": y, "tp": lp.tp, "decode_tp": ld.tp, "pp": 1,
               "batch": b, "gpus": used, "rate_req_s": rate, "attainment": out["slo_attainment"]}
        row.update(_summary(out, 1, used, base))
        rows.append(row)
    return rows


def _summary(out: dict, instances: int, gpus: int, base) -> dict:
    mean_osl = float(base.osl.mean())
    good = (out["goodput_req_s"] or 0.0) * instances
    return {"goodput_req_s": good, "goodput_tok_s_per_gpu": good * mean_osl / gpus,
            "attainment": out["slo_attainment"],
            "ttft_p90_ms": out["ttft_ms"]["p90"], "tpot_p90_ms": out["tpot_ms"]["p90"],
            "throughput_tok_s": out["throughput_tok_s"] * instances,
            "joules_per_token": out["energy"]["joules_per_token"]["output"],
            "usd_per_million_tokens": out["energy"]["usd_per_million_tokens"]}


def _empty() -> dict:
    return {"goodput_req_s": 0.0, "goodput_tok_s_per_gpu": 0.0, "ttft_p90_ms": None, "tpot_p90_ms": None,
            "throughput_tok_s": 0.0, "joules_per_token": None, "usd_per_million_tokens": None}
