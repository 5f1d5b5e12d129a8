"""Serving metrics as vLLM's benchmark (benchmarks/benchmark_serving.py) defines them.

- **TTFT**: from a request's arrival to its first output token.
- **TPOT**: per request, (end-to-end latency - TTFT) / (output tokens - 1), for requests with more than
  one output token; percentiles are over requests.
- **ITL**: every gap between consecutive output tokens of a request, pooled over all requests;
  percentiles are over the pooled gaps (a preemption shows as one long gap). With speculative decoding a
  step emits several tokens of a sequence at once and ``itl_ms`` is the gap between steps (streamed chunks), as
  vLLM's benchmark_serving and TensorRT-LLM's port of it append one gap per streamed chunk; SGLang's
  bench_serving shares a chunk's gap evenly among its tokens, which is ``speculation.itl_per_token_ms``
  (:func:`speculation_metrics`; the scripts as read in 2025, an estimate for other versions). TPOT is per emitted
  token in all of them (the definition above), so it varies per request with its accepted runs.
- **E2E**: from arrival to the last output token.
- **Duration**: from the first arrival to the last token of the run; throughputs are totals over it.
- **Goodput**: requests per second that met every SLO given (TTFT, TPOT, E2E); **SLO attainment** is the
  share of requests that did.
"""
from __future__ import annotations

import math

import numpy as np

QUANTILES = (50, 90, 99)


def _clean(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def summary_ms(values_s: np.ndarray) -> dict:
    """p50/p90/p99 and mean of seconds, in milliseconds (None where there are no values)."""
    v = np.asarray(values_s, dtype=float)
    if v.size == 0:
        return {f"p{q}": None for q in QUANTILES} | {"mean": None}
    out = {f"p{q}": _clean(np.percentile(v, q) * 1e3) for q in QUANTILES}
    out["mean"] = _clean(v.mean() * 1e3)
    return out


def weighted_percentiles(values: np.ndarray, weights: np.ndarray, qs=QUANTILES) -> list[float]:
    """np.percentile (linear interpolation) of the array where each value is repeated ``weight`` times."""
    order = np.argsort(values, kind="stable")
    v = values[order]
    cw = np.cumsum(weights[order])
    total = cw[-1]
    out = []
    for q in qs:
        pos = q / 100.0 * (total - 1)
        lo = math.floor(pos)
        i0 = int(np.searchsorted(cw, lo + 1))
        i1 = int(np.searchsorted(cw, min(lo + 2, total)))
        frac = pos - lo
        out.append(float(v[i0] + (v[i1] - v[i0]) * frac))
    return out


def _step_gaps(spans: list) -> tuple[list, list]:
    """Every decode step's gap of runs of steps [(first step s, last step s, steps, sequences)], and its weight
    (the sequences that waited it), as lists of arrays."""
    vals, wts = [], []
    for t0, t1, k, n in spans:
        if n <= 0:
            continue
        if k == 1:
            vals.append(np.array([t0]))
        else:
            vals.append(t0 + (t1 - t0) * np.arange(k) / (k - 1))
        wts.append(np.full(k, n, dtype=np.int64))
    return vals, wts


def itl_summary_ms(spans: list, extra: list) -> dict:
    """ITL from runs of decode steps [(first step s, last step s, steps, sequences)] and single gaps."""
    vals, wts = _step_gaps(spans)
    if extra:
        vals.append(np.asarray(extra, dtype=float))
        wts.append(np.ones(len(extra), dtype=np.int64))
    if not vals:
        return {f"p{q}": None for q in QUANTILES} | {"mean": None}
    v = np.concatenate(vals)
    w = np.concatenate(wts)
    ps = weighted_percentiles(v, w)
    out = {f"p{q}": _clean(p * 1e3) for q, p in zip(QUANTILES, ps)}
    out["mean"] = _clean(float(np.dot(v, w) / w.sum()) * 1e3)
    return out


def request_metrics(arrival, first, finish, isl, osl, itl_spans, itl_extra, *, slo_ttft_s=None, slo_tpot_s=None,
                    slo_e2e_s=None, in_system_s: float | None = None) -> dict:
    """Latency percentiles, throughputs, goodput and Little's-law quantities of one run (module doc)."""
    arrival = np.asarray(arrival, dtype=float)
    ttft = first - arrival
    e2e = finish - arrival
    multi = osl > 1
    tpot = np.where(multi, (finish - first) / np.maximum(osl - 1, 1), 0.0)
    start = float(arrival.min())
    end = float(finish.max())
    duration = max(end - start, 1e-12)
    good = np.ones(arrival.size, dtype=bool)
    slo = {}
    if slo_ttft_s is not None:
        good &= ttft <= slo_ttft_s
        slo["ttft_ms"] = slo_ttft_s * 1e3
    if slo_tpot_s is not None:
        good &= ~multi | (tpot <= slo_tpot_s)
        slo["tpot_ms"] = slo_tpot_s * 1e3
    if slo_e2e_s is not None:
        good &= e2e <= slo_e2e_s
        slo["e2e_ms"] = slo_e2e_s * 1e3
    n = arrival.size
    out = {
        "requests": int(n),
        "duration_s": duration,
        "ttft_ms": summary_ms(ttft),
        "tpot_ms": summary_ms(tpot[multi]),
        "itl_ms": itl_summary_ms(itl_spans, itl_extra),
        "e2e_ms": summary_ms(e2e),
        "throughput_tok_s": float(osl.sum()) / duration,
        "input_throughput_tok_s": float(isl.sum()) / duration,
        "request_throughput_req_s": n / duration,
        "goodput_req_s": float(good.sum()) / duration if slo else None,
        "slo_attainment": float(good.mean()) if slo else None,
        "slo": slo or None,
    }
    if in_system_s is not None:
        out["littles_law"] = {"mean_in_system": in_system_s / duration, "arrival_rate_req_s": n / duration,
                              "mean_e2e_s": float(e2e.mean()),
                              "arrival_rate_x_mean_e2e": n / duration * float(e2e.mean())}
    load = overload(arrival, finish, ttft)
    if load is not None:
        out["load"] = load
    return out


OVERLOAD_SHORTFALL = 0.05  # served rate this far below the offered rate ...
OVERLOAD_TTFT_GROWTH = 2.0  # ... and the last quarter's median TTFT this many times the first quarter's
OVERLOAD_MIN_REQUESTS = 8


def overload(arrival, finish, ttft) -> dict | None:
    """Whether the queue grew without bound over the run, from the simulation's own per-request times.

    Offered rate: requests over the span of their arrivals. Served rate: requests over the span of their
    finishes (the departure rate; while the layout keeps up it equals the arrival rate, shifted by one
    latency; when it does not, the layout is busy throughout and departures come at its capacity, however
    long the run). Overloaded when the served rate falls more than 5% short of the offered rate AND the median
    TTFT of the last quarter of arrivals is more than twice that of the first quarter: the second condition
    tells a queue that grew across the run (TTFT growing with arrival order) from a short run whose departure
    span is stretched only by the last request's own latency. None for a closed loop's placeholder arrivals
    (all at 0) or fewer than 8 requests."""
    n = arrival.size
    if n < OVERLOAD_MIN_REQUESTS:
        return None
    a_span = float(arrival.max() - arrival.min())
    f_span = float(finish.max() - finish.min())
    if not (a_span > 0 and f_span > 0):
        return None
    offered = (n - 1) / a_span
    served = min((n - 1) / f_span, offered)
    order = np.argsort(arrival, kind="stable")
    q = max(n // 4, 1)
    first_q = float(np.median(ttft[order[:q]]))
    last_q = float(np.median(ttft[order[-q:]]))
    growing = last_q > OVERLOAD_TTFT_GROWTH * first_q
    return {"overloaded": bool(served < (1 - OVERLOAD_SHORTFALL) * offered and growing),
            "offered_req_s": offered, "served_req_s": served,
            "ttft_first_quarter_ms": first_q * 1e3, "ttft_last_quarter_ms": last_q * 1e3}


def speculation_metrics(sc, counts: np.ndarray, spans: list, extra: list) -> dict:
    """Speculative decoding's figures of a run: the acceptance given (``sc``) and observed, from ``counts`` (how
    many of the sequences' verify steps accepted a run of 1, ..., K + 1 tokens: the runs drawn, the last step's
    tokens past a request's output length included, as an engine's acceptance counter has them), and the ITL per
    emitted token: each step's gap shared by the tokens it emits, the runs as observed over the run (module doc)."""
    k = int(sc.mtp)
    counts = np.asarray(counts, dtype=np.int64)
    steps = int(counts.sum())
    sizes = np.arange(1, k + 2)
    reached = counts[::-1].cumsum()[::-1]  # verify steps whose run reached position i (i = 0 .. K)
    observed = [float(reached[i + 1] / reached[i]) if reached[i] else None for i in range(k)]
    out = {"draft_tokens": k, "drafter": sc.draft or "the model's MTP module",
           "acceptance": list(sc.acceptance), "observed_acceptance": observed,
           "expected_tokens_per_step": float(sc.tokens_per_step),
           "observed_tokens_per_step": float(counts @ sizes / steps) if steps else None,
           "verify_steps": steps, "accepted_runs": {str(int(n)): int(c) for n, c in zip(sizes, counts)}}
    vals, wts = _step_gaps(spans)
    empty = {f"p{q}": None for q in QUANTILES} | {"mean": None}
    if not steps or not (vals or extra):
        return out | {"itl_per_token_ms": empty}
    v = np.concatenate(vals) if vals else np.zeros(0)
    w = np.concatenate(wts) if wts else np.zeros(0, dtype=np.int64)
    # a step of gap t whose sequences emit r tokens with the observed share counts[r] / steps: r gaps of t / r;
    # weights scaled by ``steps`` to stay whole (a single gap, e.g. across a preemption, weighs ``steps``)
    pv = (v[:, None] / sizes[None, :]).ravel()
    pw = (w[:, None] * (counts * sizes)[None, :]).ravel()
    if extra:
        pv = np.concatenate([pv, np.asarray(extra, dtype=float)])
        pw = np.concatenate([pw, np.full(len(extra), steps, dtype=np.int64)])
    keep = pw > 0
    pv, pw = pv[keep], pw[keep]
    if not pv.size:
        return out | {"itl_per_token_ms": empty}
    ps = weighted_percentiles(pv, pw)
    per = {f"p{q}": _clean(p * 1e3) for q, p in zip(QUANTILES, ps)}
    per["mean"] = _clean(float(np.dot(pv, pw.astype(float)) / pw.sum()) * 1e3)
    return out | {"itl_per_token_ms": per}
