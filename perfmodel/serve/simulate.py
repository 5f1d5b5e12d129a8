"""A serving run: requests through one or more instances, aggregated or disaggregated (xPyD), with
latency percentiles, throughput, goodput, Little's-law check, energy and cost.

- **Aggregated**: ``replicas`` identical instances (data parallel), requests dealt round-robin.
- **Disaggregated xPyD**: x prefill instances (requests dealt round-robin) produce each request's first
  token and its prompt's KV cache; the cache goes to a decode instance over the scale-up link (NVLink) when
  all x + y instances fit one scale-up domain, else over the scale-out network (``kv_link`` forces one),
  timed by :func:`perfmodel.cost.comm.collective_time` as a point-to-point transfer, each GPU sending its
  share in parallel, transfers from one prefill instance one after another; decode instances take the
  requests round-robin in the order their caches arrive. The prefill instance frees the blocks when the
  prompt is done (the transfer is not held against its cache).

Closed loop (``reqs.concurrency`` C, :func:`perfmodel.serve.workload.closed_loop_requests`; aggregated layouts
only): the client keeps C requests in flight, replicas share them as evenly as possible (requests dealt
round-robin). Latencies, goodput and throughput are those of the steady state: the requests of
:func:`perfmodel.serve.workload.closed_loop_window` (warm-up and drain left out), the throughput by Little's law
(C / mean E2E of those requests, exact when the client holds C in the system); ITL, energy and the Little's-law
check cover the whole run, and ``closed_loop`` has the whole-run means beside the steady-state ones.

Speculative decoding (``sc.mtp``, :mod:`perfmodel.speculative`): each request's accepted run at each of its
verify steps is drawn ahead from the acceptance distribution (``sc.accepted_run``) with the run's seed
(``ServeOptions.seed``, the workload's ``--seed``), the same draws whichever instance serves it; the instances'
steps are verify steps with their drafting (:mod:`perfmodel.serve.steptime`, :mod:`perfmodel.serve.engine`), the
MTP module's or draft model's weights and KV cache in the memory the instance admits against
(:mod:`perfmodel.capacity`). The result's ``speculation`` has the acceptance observed and the ITL per emitted
token beside ``itl_ms``'s per step (:func:`perfmodel.serve.metrics.speculation_metrics`).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import InputError
from ..host_costs import request_overhead_s
from ..resolve import resolve_scenario
from .engine import BLOCK_SIZE, SPEC_STREAM, AcceptedRuns, EngineConfig, check_fits, simulate_instance
from .metrics import request_metrics, speculation_metrics
from .steptime import StepModel, kv_pool_blocks


@dataclass(frozen=True)
class ServeOptions:
    block_size: int = BLOCK_SIZE
    prefix_caching: bool = False
    replicas: int = 1
    disagg: tuple[int, int] | None = None  # (prefill instances, decode instances)
    prefill_tp: int | None = None
    decode_tp: int | None = None
    # scenario fields one side's instances set beyond tp, as ((field, value), ...): ep, attention_dp, max_batch
    prefill_layout: tuple = ()
    decode_layout: tuple = ()
    kv_link: str = "auto"  # auto | scaleup | scaleout
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    slo_e2e_s: float | None = None
    gpu_hour_usd: float | None = None
    seed: int = 0  # speculative decoding: the seed of the accepted runs (the workload's --seed)


@dataclass
class Instance:
    sc: object
    steps: StepModel
    cfg: EngineConfig


def parse_disagg(text: str | None) -> tuple[int, int] | None:
    """'2p4d' -> (2, 4); None or '' -> None."""
    if not text:
        return None
    t = text.strip().lower()
    import re

    m = re.fullmatch(r"(\d{1,6})p(\d{1,6})d", t)
    if not m or not (1 <= int(m.group(1)) <= MAX_INSTANCES and 1 <= int(m.group(2)) <= MAX_INSTANCES):
        raise InputError(f"expected XpYd with 1 <= X, Y <= {MAX_INSTANCES} (e.g. 1p2d), got {text[:40]!r}",
                         field="--disagg")
    return int(m.group(1)), int(m.group(2))


# most instances of one role a simulation holds (each keeps its own queues and step tables; 99999999999p1d ran
# out of memory): past a thousand the closed forms of `perfmodel project` answer at a fraction of the cost
MAX_INSTANCES = 1024


def max_seqs_for(model, sc, hw, reqs) -> int:
    """Running-sequence cap: ``--batch`` N, or with ``max`` the largest batch whose KV cache for the mean
    request fits (perfmodel.capacity.max_batch), never above the token budget."""
    from .. import capacity

    mean = sc.with_(isl=max(int(round(float(reqs.isl.mean()))), 1), osl=max(int(round(float(reqs.osl.mean()))), 1))
    if sc.batch == "max":
        b = int(capacity.max_batch(model, mean, hw))
        if b < 1:
            capacity.check_fits(model, mean, hw, b)
        b = min(b, getattr(sc, "max_batch", None) or b)  # memory, and the engine's scheduler limit
    else:
        b = int(sc.batch)
    return max(1, min(b, sc.prefill_chunk))


def step_budget(sc, max_seqs: int, reqs) -> int:
    """Tokens a step may carry: the engine's chunk, or, for an engine that does not chunk (torch), as many
    as ``max_seqs`` mean prompts, the step ``--batch max`` was sized for (perfmodel.capacity)."""
    mean_isl = max(int(np.ceil(float(reqs.isl.mean()))), 1)
    q = sc.verify_tokens  # a verify step's tokens a sequence
    return int(max(min(sc.prefill_chunk, max_seqs * mean_isl), max_seqs * q, 1))


def build_instance(hw, model, sc, prof, reqs, role: str, opts: ServeOptions, power: dict | None, *,
                   max_seqs: int | None = None, steps: StepModel | None = None,
                   cache: dict | None = None) -> Instance:
    """Step-time tables and engine limits of one instance of layout ``sc`` serving ``reqs``. ``max_seqs``
    overrides the running-sequence cap; ``steps`` reuses tables built for a cap at least as large; ``cache``
    (a dict the caller keeps) reuses tables built with exactly the same arguments, so a run answers the
    same with or without it (hardware, model and profile are keyed by identity: keep them alive)."""
    from ..graph import check_layout

    longest = int(np.argmax(reqs.isl + reqs.osl))
    check_layout(model, sc.with_(isl=int(reqs.isl[longest]), osl=int(reqs.osl[longest])))  # one line if no engine runs it
    cap = max_seqs_for(model, sc, hw, reqs)
    max_seqs = cap if max_seqs is None else max(1, min(int(max_seqs), sc.prefill_chunk))
    sc = sc.with_(prefill_chunk=step_budget(sc, max_seqs, reqs))
    blocks = kv_pool_blocks(model, hw, sc, max_seqs, opts.block_size, mean_len=float(np.mean(reqs.isl + reqs.osl)))
    if blocks < 1:
        from .. import capacity

        capacity.check_fits(model, sc, hw, 0)
    cfg = EngineConfig(max_seqs=max_seqs, token_budget=sc.rank_chunk, kv_blocks=blocks, ranks=sc.attention_dp,
                       block_size=opts.block_size, prefix_caching=opts.prefix_caching, role=role,
                       spec=int(getattr(sc, "mtp", 0) or 0), verify=sc.verify_tokens if sc.tree else 0,
                       seed=opts.seed, prefill_first=sc.schedule == "prefill_first",
                       accepted_run=tuple(sc.accepted_run) if getattr(sc, "mtp", 0) else (), request_s=request_overhead_s(sc, hw, model, prof) if role != "decode" else 0.0)
    check_fits(reqs, cfg)
    if steps is None or steps.max_seqs < max_seqs:
        lengths = np.unique(reqs.isl)
        hint = tuple(int(x) for x in lengths[:16]) if lengths.size <= 16 else ()
        kw = dict(max_tokens=sc.rank_chunk if role != "decode" else max_seqs, max_seqs=max_seqs,
                  max_context=int((reqs.isl + reqs.osl).max()) + 1, piece_hint=hint,
                  streamed=float(np.mean(reqs.osl)) / 2)
        key = (id(model), id(hw), id(prof), sc, power is None, tuple(sorted(kw.items())))
        steps = cache.get(key) if cache is not None else None
        if steps is None:
            steps = StepModel(model, hw, sc, prof, power=power, **kw)
            if cache is not None:
                cache[key] = steps
    return Instance(sc, steps, cfg)


def _deal(n: int, k: int) -> list[np.ndarray]:
    idx = np.arange(n)
    return [idx[i::k] for i in range(k)]


def kv_transfer_s(model, hw, prof, sc_p, sc_d, tokens: np.ndarray, link: str, world: int) -> np.ndarray:
    from .. import capacity
    from ..cost.comm import collective_time

    per_token = max(capacity.kv_bytes_per_token(model, sc_p), capacity.kv_bytes_per_token(model, sc_d))
    if link == "scaleup":
        world = 1
    elif link == "scaleout":
        world = hw.scaleup_domain + 1
    return np.asarray(collective_time("p2p", per_token * tokens.astype(float), 2, world, hw, prof,
                                      sol=sc_p.mode == "sol"), dtype=float)


def simulate(hw, model, sc, prof, reqs, opts: ServeOptions = ServeOptions(), *, cache: dict | None = None) -> dict:
    """Simulate ``reqs`` on the layout (module doc); the result as a JSON-ready dict. ``cache``: step-time
    tables kept across calls (:func:`build_instance`)."""
    from ..energy.model import power_params

    if opts.kv_link not in ("auto", "scaleup", "scaleout"):
        raise InputError(f"expected auto, scaleup or scaleout, got {opts.kv_link!r}", field="--kv-link")
    if not 1 <= opts.replicas <= MAX_INSTANCES:
        raise InputError(f"expected 1 to {MAX_INSTANCES} replicas, got {opts.replicas}", field="--replicas")
    runs = None
    if getattr(sc, "mtp", 0):
        from ..speculative import check_draft

        check_draft(model, sc)  # one line for a draft model no engine runs (no MTP layer: graph.check_layout)
        runs = AcceptedRuns.draw(reqs.osl, sc.validated().accepted_run, np.random.default_rng([opts.seed, SPEC_STREAM]))
    power = power_params(prof, hw)
    t0 = time.perf_counter()
    if opts.disagg:
        out = _disaggregated(hw, model, sc, prof, reqs, opts, power, t0, runs)
    else:
        out = _aggregated(hw, model, sc, prof, reqs, opts, power, t0, cache, runs)
    return out



def _speculation(sc, runs: list, spans: list, extra: list) -> dict:
    """The ``speculation`` block of a result (:func:`perfmodel.serve.metrics.speculation_metrics`) from the
    instances' verified steps (``runs``: (AcceptedRuns, InstanceResult) pairs)."""
    counts = np.zeros(sc.mtp + 1, dtype=np.int64)
    for drawn, r in runs:
        if not r.verified:
            continue
        p0, k = np.asarray(r.verified, dtype=np.int64).T
        # every draw a verify step used: indices p0 + 1 .. p0 + k of each (a run is cum[i] - cum[i - 1])
        idx = np.repeat(p0 - np.cumsum(k) + k, k) + np.arange(1, int(k.sum()) + 1)
        sizes = drawn.cum[idx] - drawn.cum[idx - 1]
        counts += np.bincount(sizes - 1, minlength=sc.mtp + 1)[: sc.mtp + 1]
    return speculation_metrics(sc, counts, spans, extra)


def _aggregated(hw, model, sc, prof, reqs, opts, power, t0, cache=None, drawn=None) -> dict:
    sc = resolve_scenario(sc, hw, model).validated()
    inst = build_instance(hw, model, sc, prof, reqs, "mixed", opts, power, cache=cache)
    t_build = time.perf_counter() - t0
    n = len(reqs)
    conc = getattr(reqs, "concurrency", None)
    arrival = np.array(reqs.arrival, dtype=float)
    first = np.zeros(n)
    finish = np.zeros(n)
    pre = np.zeros(n, dtype=int)
    spans, extra, runs, verified = [], [], [], []
    in_sys = 0.0
    peak = 0
    # closed loop: no more replicas than requests in flight, the concurrency split as evenly as it goes
    k = opts.replicas if conc is None else min(opts.replicas, int(conc))
    for i, idx in enumerate(_deal(n, k)):
        if idx.size == 0:
            continue
        sub = reqs.subset(idx)
        if conc is not None:
            sub.concurrency = int(conc) // k + (1 if i < int(conc) % k else 0)
        sub_runs = drawn.take(idx) if drawn is not None else None
        r = simulate_instance(inst.steps, inst.cfg, sub, sub_runs)
        if drawn is not None:
            verified.append((sub_runs, r))
        first[idx], finish[idx], pre[idx] = r.first_token, r.finish, r.preemptions
        arrival[idx] = r.arrival
        spans += r.itl_spans
        extra += r.itl_extra
        in_sys += r.in_system_s
        peak += r.peak_in_system
        runs.append((inst, r))
    t_sim = time.perf_counter() - t0 - t_build
    slo = dict(slo_ttft_s=opts.slo_ttft_s, slo_tpot_s=opts.slo_tpot_s, slo_e2e_s=opts.slo_e2e_s)
    out = request_metrics(arrival, first, finish, reqs.isl, reqs.osl, spans, extra, in_system_s=in_sys, **slo)
    whole = out
    if conc is not None:
        out = _steady_state(whole, arrival, first, finish, reqs, spans, extra, int(conc), peak, slo)
    gpus = sc.gpus * opts.replicas
    out["scenario"] = scenario_dict(sc)
    out["layout"] = {"mode": "aggregated", "replicas": opts.replicas, "gpus": gpus,
                     "instance": _instance_info(inst)}
    out["preemptions"] = int(pre.sum())
    out["prefix_cache_hit_tokens"] = int(sum(r.cached_tokens for _, r in runs))
    out["energy"] = _energy(runs, power, reqs, whole, opts, gpus)
    if drawn is not None:
        out["speculation"] = _speculation(sc, verified, spans, extra)
    out["simulation"] = {"steps": int(sum(r.steps for _, r in runs)), "build_s": t_build, "simulate_s": t_sim}
    return out


def _steady_state(whole: dict, arrival, first, finish, reqs, spans, extra, conc: int, peak: int, slo: dict) -> dict:
    """Metrics of a closed-loop run over its steady-state window (module doc)."""
    from .workload import closed_loop_window

    lo, hi = closed_loop_window(len(reqs), conc)
    sel = slice(lo, hi)
    out = request_metrics(arrival[sel], first[sel], finish[sel], reqs.isl[sel], reqs.osl[sel], spans, extra, **slo)
    mean_e2e = float(np.mean(finish[sel] - arrival[sel]))
    if mean_e2e > 0:  # Little's law: the client holds C in the system, so C / mean E2E requests a second
        rate = conc / mean_e2e
        out["request_throughput_req_s"] = rate
        out["throughput_tok_s"] = rate * float(reqs.osl[sel].mean())
        out["input_throughput_tok_s"] = rate * float(reqs.isl[sel].mean())
        if out["slo_attainment"] is not None:
            out["goodput_req_s"] = rate * out["slo_attainment"]
    out["littles_law"] = whole.get("littles_law")
    # the first C requests: the burst every closed-loop benchmark starts with (a diagnostic: how much a mean
    # over a short run that includes it would differ from the steady state)
    burst = slice(0, min(conc, len(reqs)))
    fw = request_metrics(arrival[burst], first[burst], finish[burst], reqs.isl[burst], reqs.osl[burst], [], [])
    out["closed_loop"] = {"concurrency": conc, "requests": len(reqs), "warmup_requests": lo,
                          "measured_requests": hi - lo, "drain_requests": len(reqs) - hi,
                          "peak_in_flight": peak, "duration_s": whole["duration_s"],
                          "whole_run": {k: whole[k]["mean"] for k in ("ttft_ms", "tpot_ms", "e2e_ms")},
                          "first_wave": {k: fw[k]["mean"] for k in ("ttft_ms", "tpot_ms", "e2e_ms")}}
    return out


def _side(sc, hw, model, tp: int | None, layout: tuple):
    """One side's instance layout: the scenario with that side's TP and other layout fields."""
    return resolve_scenario(sc.with_(tp=tp or sc.tp, **dict(layout)), hw, model).validated()


@dataclass
class DisaggPass:
    first: np.ndarray
    finish: np.ndarray
    preemptions: np.ndarray
    spans: list
    extra: list
    runs: list
    verified: list = None  # speculation: (AcceptedRuns, InstanceResult) of the decode instances


def disagg_pass(ip: Instance, idn: Instance, reqs, x: int, y: int, xfer: np.ndarray, drawn=None) -> DisaggPass:
    """Requests at fixed arrival times through ``x`` prefill instances, the KV transfer, ``y`` decode instances
    (each side's instance built on its own part where they differ: perfmodel.serve.capacity_plan)."""
    n = len(reqs)
    first = np.zeros(n)
    finish = np.zeros(n)
    pre = np.zeros(n, dtype=int)
    spans, extra, runs, verified = [], [], [], []
    ready = np.zeros(n)
    for idx in _deal(n, x):
        if idx.size == 0:
            continue
        r = simulate_instance(ip.steps, ip.cfg, reqs.subset(idx))
        first[idx], pre[idx] = r.first_token, r.preemptions
        spans += r.itl_spans
        extra += r.itl_extra
        runs.append((ip, r))
        busy = 0.0  # the instance's link sends one cache after another, in the order prompts finish
        for j in idx[np.argsort(r.first_token, kind="stable")]:
            start = max(first[j], busy)
            busy = start + xfer[j]
            ready[j] = busy
    finish[:] = first
    dec = np.nonzero(reqs.osl > 1)[0]
    dec = dec[np.argsort(ready[dec], kind="stable")]
    for k in range(y):
        idx = dec[k::y]
        if idx.size == 0:
            continue
        sub = reqs.subset(idx).with_arrival(ready[idx])
        sub_runs = drawn.take(idx) if drawn is not None else None
        r = simulate_instance(idn.steps, idn.cfg, sub, sub_runs)
        if drawn is not None:
            verified.append((sub_runs, r))
        finish[idx] = r.finish
        pre[idx] += r.preemptions
        spans += r.itl_spans
        extra += r.itl_extra
        extra += (r.first_token - first[idx]).tolist()  # first token (prefill) to the second (decode)
        runs.append((idn, r))
    return DisaggPass(first, finish, pre, spans, extra, runs, verified)


def _closed_loop_disagg(ip: Instance, idn: Instance, reqs, x: int, y: int, xfer: np.ndarray, conc: int, drawn=None):
    """A closed-loop client against disaggregated workers: request C + k is sent when the k-th request
    finishes, which the workers decide. Solved as a fixed point of the arrival times: start with every request
    sent at 0 (too early), simulate, send each later request at the finish it waits for, again; arrivals only
    grow, and each pass settles at least one more round of C requests, so it ends within n / C + 1 passes."""
    n = len(reqs)
    arrival = np.zeros(n)
    for _ in range(n // conc + 2):
        run = disagg_pass(ip, idn, reqs.with_arrival(arrival), x, y, xfer, drawn)
        nxt = arrival.copy()
        nxt[conc:] = np.sort(run.finish)[: n - conc]
        if np.array_equal(nxt, arrival):
            break
        arrival = nxt
    return arrival, run


def _disaggregated(hw, model, sc, prof, reqs, opts, power, t0, drawn=None) -> dict:
    x, y = opts.disagg
    sc_p = _side(sc, hw, model, opts.prefill_tp, opts.prefill_layout)
    sc_d = _side(sc, hw, model, opts.decode_tp, opts.decode_layout)
    conc = getattr(reqs, "concurrency", None)
    ip = build_instance(hw, model, sc_p, prof, reqs, "prefill", opts, power)
    idn = build_instance(hw, model, sc_d, prof, reqs, "decode", opts, power)
    t_build = time.perf_counter() - t0
    world = x * sc_p.gpus + y * sc_d.gpus
    link = opts.kv_link if opts.kv_link != "auto" else ("scaleup" if world <= hw.scaleup_domain else "scaleout")
    xfer = kv_transfer_s(model, hw, prof, sc_p, sc_d, reqs.isl, link, world)
    if conc is None:
        arrival, run = reqs.arrival, disagg_pass(ip, idn, reqs, x, y, xfer, drawn)
    else:
        arrival, run = _closed_loop_disagg(ip, idn, reqs, x, y, xfer, int(conc), drawn)
    first, finish, pre, spans, extra, runs = run.first, run.finish, run.preemptions, run.spans, run.extra, run.runs
    t_sim = time.perf_counter() - t0 - t_build
    slo = dict(slo_ttft_s=opts.slo_ttft_s, slo_tpot_s=opts.slo_tpot_s, slo_e2e_s=opts.slo_e2e_s)
    out = request_metrics(arrival, first, finish, reqs.isl, reqs.osl, spans, extra, **slo)
    whole = out
    if conc is not None:
        out = _steady_state(whole, arrival, first, finish, reqs, spans, extra, int(conc), int(conc), slo)
    out["scenario"] = scenario_dict(sc_p)
    out["layout"] = {"mode": "disaggregated", "prefill_instances": x, "decode_instances": y, "gpus": world,
                     "prefill": _instance_info(ip), "decode": _instance_info(idn),
                     "kv_transfer": {"link": link, "mean_ms": float(xfer.mean() * 1e3),
                                     "p99_ms": float(np.percentile(xfer, 99) * 1e3)}}
    out["preemptions"] = int(pre.sum())
    out["prefix_cache_hit_tokens"] = int(sum(r.cached_tokens for _, r in runs))
    out["energy"] = _energy(runs, power, reqs, whole, opts, world)
    if drawn is not None:
        out["speculation"] = _speculation(sc_d, run.verified, spans, extra)
    out["simulation"] = {"steps": int(sum(r.steps for _, r in runs)), "build_s": t_build, "simulate_s": t_sim}
    return out


def _instance_info(inst: Instance) -> dict:
    c = inst.cfg
    return {"engine": getattr(inst.sc, "engine", None), "tp": inst.sc.tp, "pp": inst.sc.pp, "ep": inst.sc.ep,
            "attention_dp": c.ranks, "gpus": inst.sc.gpus, "max_seqs": c.max_seqs,
            "token_budget": c.token_budget,  # a rank's, with attention data parallelism (each its own) "kv_blocks": c.kv_blocks, "block_size": c.block_size,
            "kv_tokens": c.kv_blocks * c.block_size, "prefix_caching": c.prefix_caching, "role": c.role}


def _energy(runs, power: dict, reqs, metrics: dict, opts: ServeOptions, gpus: int) -> dict:
    """Energy over the run: every GPU at static power while its instance runs a step, at idle power
    otherwise, plus the steps' dynamic energy (once per TP rank and pipeline micro-batch)."""
    window = metrics["duration_s"]
    total = idle = pre = 0.0
    for inst, r in runs:
        g = inst.sc.gpus
        copies = inst.sc.tp * inst.sc.pp
        idle_s = max(window - r.busy_s, 0.0)
        busy_j = g * power["static_w"] * r.busy_s + copies * r.dynamic_j
        pre_j = g * power["static_w"] * r.prefill_s + copies * r.prefill_dynamic_j
        if inst.cfg.role == "prefill":
            pre_j = busy_j
        elif inst.cfg.role == "decode":
            pre_j = 0.0
        total += busy_j + g * power["idle_w"] * idle_s
        idle += g * power["idle_w"] * idle_s
        pre += pre_j
    # instances with no requests still idle through the window
    used = sum(inst.sc.gpus for inst, _ in runs)
    if gpus > used:
        idle += (gpus - used) * power["idle_w"] * window
        total += (gpus - used) * power["idle_w"] * window
    out_tokens = float(reqs.osl.sum())
    in_tokens = float(reqs.isl.sum())
    # what is neither idle nor prefill; a run with no decode step leaves rounding (a few 1e-15 J) below zero
    decode_j = max(total - idle - pre, 0.0)
    e = {
        "total_j": total, "idle_j": idle,
        "joules_per_token": {"prefill": pre / in_tokens, "decode": decode_j / out_tokens, "output": total / out_tokens},
        "avg_power_w": total / (window * gpus),
        "tokens_per_joule": out_tokens / total if total > 0 else None,
        "tokens_s_per_mw": metrics["throughput_tok_s"] / (total / window) * 1e6 if total > 0 else None,
        "usd_per_million_tokens": None,
    }
    if opts.gpu_hour_usd is not None:
        e["usd_per_million_tokens"] = gpus * opts.gpu_hour_usd / 3600.0 * window / out_tokens * 1e6
        e["gpu_hour_usd"] = opts.gpu_hour_usd
    return e


def scenario_dict(sc) -> dict:
    d = asdict(sc)
    d["kv_dtype"] = sc.kv
    d["gpus"] = sc.gpus
    return d
