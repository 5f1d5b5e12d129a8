"""Compute-communication overlap: how much of a collective stays on the critical path, and how much the
compute it runs beside slows down, per overlap method.

Two kernels running together share the GPU: a collective's kernels (NCCL runs one CTA per channel, each
on its own SM) take a share ``s`` of the SMs from the compute, so compute progresses at ``1 - s`` of its
speed while they run; the collective itself runs ``1 + i`` times slower beside compute than alone (the
interference ``i``: memory and L2 traffic, and SMs it waits for). With compute time ``T`` and collective
time ``C`` (each alone), started together:

- compute done first (``T / (1 - s) <= C (1 + i)``): compute ends at ``T / (1 - s)``, the collective has
  ``C - T / ((1 - s)(1 + i))`` left and finishes it alone;
- collective done first: it ends at ``C (1 + i)``; compute ends at ``T + s C (1 + i)``.

The *exposed* collective time is what runs after the compute ended (the collective's tail); the *compute
slowdown* is how much later the compute ended than ``T``. Their sum is what overlap adds to ``T``
(serially it would add ``C``). Methods:

- ``none``: the collective runs alone after the compute: exposed ``C``, slowdown 0.
- ``fixed``: the old ``--overlap F`` assumption: exposed ``C (1 - F)``, slowdown 0.
- ``stream``: the collective on a second stream beside independent compute (the two-kernel model above;
  e.g. a data-parallel gradient reduce under the backward, or one micro-batch's collective under the
  other's compute as in two-batch overlap).
- ``decomposed``: the producing GEMM split into ``n`` row chunks, each chunk's collective in flight while
  the next chunk computes (PyTorch async tensor parallelism, Megatron/TransformerEngine userbuffers done
  with separate kernels). Each chunk pays the GEMM a fixed ``chunk_overhead_s`` (a smaller GEMM's ramp and
  tail) and the collective its fixed latency ``a`` again. With chunk compute ``g`` and chunk collective
  ``c = (C - a)/n + a``: if the collective chunk (``x = c (1 + i)``) is shorter than the compute chunk
  (``y = g / (1 - s)``), compute spans ``n g + (n - 1) s x`` and only the last chunk's collective ``c`` shows;
  otherwise compute spans ``g + (n - 1) y`` and ``n c - (n - 1) y / (1 + i)`` shows. Decomposition is used
  only where it is faster than not overlapping (an engine falls back below a size).
- ``fused``: GEMM and collective in one kernel at tile granularity (Flux, NVLS/TMA-based fused kernels):
  the same pipeline with ``fused_chunks`` chunks, no per-chunk overhead, the collective's latency paid once,
  and the fused kernel's own (smaller) SM share and interference.

The exposed time never exceeds ``C``, is ``C`` for ``none``, and does not grow with the compute time
whenever ``s (1 + i) <= 1`` (overlapping two kernels is not slower than running them one after the other).

Parameters (``PARAMS``) are documented defaults, each an estimate with its reasoning, replaced by the values
``perfmodel fit`` writes into ``Profile.overlap`` from the suite's ``overlap`` rows (:func:`fit_overlap`).
Everything works on numbers, numpy arrays or Excel expressions (``xp``, :mod:`.backend`).
"""
from __future__ import annotations

import math
import numpy as np

from ..profile import OVERLAP_PARAMS as PARAMS  # the table lives with the profile's schema, which checks it
from ..profile import OverlapParam, check_overlap_params as check_params  # noqa: F401  (re-exported)
from .backend import NP

METHODS = ("none", "fixed", "stream", "decomposed", "fused")


FITTED_KEYS = ("sm_share", "interference", "chunk_overhead_s")  # what the overlap rows determine


def overlap_params(prof=None) -> dict:
    """The defaults with the profile's fitted values on top."""
    out = {k: p.default for k, p in PARAMS.items()}
    if prof is not None:
        out.update(getattr(prof, "overlap", None) or {})
    return out


def resolve_method(value) -> tuple[str, float]:
    """``--overlap`` as (method, fraction): a number in [0, 1] keeps its old meaning (a fixed fraction of every
    collective hidden; 0 is ``none``), a name picks a method."""
    from ..errors import InputError

    if isinstance(value, str):
        text = value.strip().lower()
        if text in METHODS and text != "fixed":
            return text, 0.0
        try:
            value = float(text)
        except ValueError:
            raise InputError(f"expected a fraction in [0, 1] or one of {', '.join(m for m in METHODS if m != 'fixed')}"
                             f", got {value!r}", field="--overlap") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0.0 <= value <= 1.0):
        raise InputError(f"expected a fraction in [0, 1] or an overlap method, got {value!r}", field="--overlap")
    return ("fixed", float(value)) if value > 0 else ("none", 0.0)


def _scalar(x):
    if isinstance(x, np.ndarray) and x.ndim == 0:
        return float(x)
    return x


def corun(compute_s, comm_s, s, i, xp=NP):
    """Two kernels started together: (compute end, collective end) under SM share ``s`` and interference ``i``."""
    y = compute_s / (1.0 - s)  # compute under the collective, if it lasts that long
    x = comm_s * (1.0 + i)  # the collective under compute, if it lasts that long
    compute_first = y <= x
    compute_end = xp.where(compute_first, y, compute_s + s * x)
    comm_end = xp.where(compute_first, y + comm_s - y / (1.0 + i), x)
    return compute_end, comm_end


def pipeline(compute_s, comm_s, n: int, overhead_s, latency_s, s, i, xp=NP):
    """A GEMM in ``n`` chunks with each chunk's collective behind it: (compute span, exposed collective)."""
    g = (compute_s + (n - 1) * overhead_s) / n
    c = (comm_s - latency_s) / n + latency_s
    x = c * (1.0 + i)
    y = g / (1.0 - s)
    short_comm = x <= y
    span = xp.where(short_comm, n * g + (n - 1) * s * x, g + (n - 1) * y)
    exposed = xp.where(short_comm, c, n * c - (n - 1) * y / (1.0 + i))
    return span, exposed


def exposed_comm(comm_time, compute_time, method: str, prof=None, *, fraction=0.0, chunks: int | None = None,
                 comm_alpha_s=None, xp=NP):
    """(exposed collective seconds, compute slowdown seconds) of a collective of ``comm_time`` (alone) next to
    ``compute_time`` of compute it can overlap (alone), by ``method`` (module doc). ``fraction``: the hidden
    share for ``fixed``; ``chunks``: the decomposition (default the ``chunks`` parameter); ``comm_alpha_s``:
    the collective's fixed latency, paid again by every chunk (default ``chunk_alpha_s``, at most the
    collective's time)."""
    if method == "none":
        return comm_time, 0.0 * comm_time
    if method == "fixed":
        return comm_time * (1.0 - fraction), 0.0 * comm_time
    if method not in METHODS:
        raise ValueError(f"unknown overlap method {method!r}; expected one of {', '.join(METHODS)}")
    p = overlap_params(prof)
    if method == "stream":
        compute_end, comm_end = corun(compute_time, comm_time, p["sm_share"], p["interference"], xp)
        exposed = xp.maximum(comm_end - compute_end, 0.0)
        return _scalar(exposed), _scalar(compute_end - compute_time)
    if method == "fused":
        n = max(1, int(round(p["fused_chunks"])))
        a = xp.minimum(p["chunk_alpha_s"] if comm_alpha_s is None else comm_alpha_s, comm_time)
        span, exposed = pipeline(compute_time, comm_time - a, n, 0.0, 0.0, p["fused_sm_share"],
                                 p["fused_interference"], xp)
        return _scalar(exposed + a), _scalar(span - compute_time)
    n = max(1, int(round(chunks if chunks is not None else p["chunks"])))
    if n == 1:
        return comm_time, 0.0 * comm_time
    a = xp.minimum(p["chunk_alpha_s"] if comm_alpha_s is None else comm_alpha_s, comm_time)
    span, exposed = pipeline(compute_time, comm_time, n, p["chunk_overhead_s"], a, p["sm_share"], p["interference"], xp)
    better = span + exposed < compute_time + comm_time  # else the engine does not decompose
    return (_scalar(xp.where(better, exposed, comm_time)),
            _scalar(xp.where(better, span - compute_time, 0.0 * comm_time)))


# ---------------------------------------------------------------------------------------------------------
# which compute a collective overlaps, in a step's list of timed ops
# ---------------------------------------------------------------------------------------------------------

_REDUCING = ("all_reduce", "reduce_scatter")


def overlap_windows(times, method: str) -> list:
    """For each timed op (``.op``, ``.time``) the compute time one run of it can hide under (None for ops
    that are not collectives). Ops only pair with ops of the same ``count`` (the same layers).

    - ``decomposed`` / ``fused``: the GEMM a collective pipelines with: the nearest GEMM before a reducing
      collective (all_reduce, reduce_scatter: its producer), after an all_gather (its consumer), before an
      all_to_all named ``combine`` and after any other all_to_all (``dispatch``); p2p none.
    - ``stream``: the compute between the previous collective and this one (what runs beside it when
      micro-batches alternate, or when the collective is independent of it).
    - ``none`` / ``fixed``: 0.
    """
    from ..ops import COMM_KINDS

    n = len(times)
    out: list = [None] * n
    for j, t in enumerate(times):
        op = t.op
        if op.kind not in COMM_KINDS:
            continue
        if method in ("none", "fixed") or op.kind == "p2p":
            out[j] = 0.0
            continue
        same = [k for k in range(n) if times[k].op.count == op.count]
        if method == "stream":
            before = [k for k in same if k < j]
            start = max((k for k in before if times[k].op.kind in COMM_KINDS), default=-1)
            out[j] = sum((times[k].time for k in before if k > start and times[k].op.kind not in COMM_KINDS), 0.0)
            continue
        after = op.kind == "all_gather" or (op.kind == "all_to_all" and "combine" not in op.name)
        cands = [k for k in same if (k > j if after else k < j) and times[k].op.kind == "gemm"]
        out[j] = times[min(cands) if after else max(cands)].time if cands else 0.0
    return out


def exposed_runs(times, method: str, prof=None, *, fraction=0.0, hw=None, world: int = 1, xp=NP) -> list:
    """For each timed op, the time one run of a collective adds to the step (exposed + the compute slowdown it
    causes), None for other ops: what :func:`perfmodel.step_accounting.account` books for a collective. ``none`` and
    ``fixed`` slow nothing down: their run is the exposed time itself (``fraction`` may be a cell).
    ``decomposed`` splits into one chunk per rank of the collective's group; with ``hw`` each chunk pays the
    collective's own latency (its time at zero bytes)."""
    windows = overlap_windows(times, method)
    out: list = [None] * len(times)
    for j, (t, win) in enumerate(zip(times, windows)):
        if win is None:
            continue
        alpha = None
        chunks = None
        if method in ("decomposed", "fused"):
            chunks = int(t.op.params.get("group", 1)) if method == "decomposed" else None
            if hw is not None:
                from .comm import collective_time

                alpha = collective_time(t.op.kind, 0.0, t.op.params.get("group", 2), world, hw, prof or _defaults(),
                                        xp=xp)
        exposed, slow = exposed_comm(t.time, win, method, prof, fraction=fraction, chunks=chunks, comm_alpha_s=alpha,
                                     xp=xp)
        out[j] = exposed if method in ("none", "fixed") else exposed + slow
    return out


def _defaults():
    from ..profile import DEFAULTS

    return DEFAULTS


# ---------------------------------------------------------------------------------------------------------
# fitting to the suite's overlap rows
# ---------------------------------------------------------------------------------------------------------

def _usable(r) -> bool:
    keys = ("time_s", "gemm_s", "comm_s")
    return (isinstance(r, dict) and r.get("kind") == "overlap" and not r.get("error") and isinstance(r.get("params"), dict)
            and all(isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool) and math.isfinite(r[k])
                    and r[k] > 0 for k in keys))


def predict_row(r: dict, params: dict) -> dict:
    """The model's times for one overlap row, from the row's own alone-times: stream rows (GEMM end,
    collective end), decomposed rows the pipeline's wall time. Also the exposed fraction (wall - GEMM alone)
    / collective alone, measured and predicted."""
    s, i = params["sm_share"], params["interference"]
    p = r["params"]
    t, c = float(r["gemm_s"]), float(r["comm_s"])
    if p.get("method") == "stream":
        ge, ce = corun(t, c, s, i)
        wall = max(float(ge), float(ce))
        return {"gemm_end_s": float(ge), "comm_end_s": float(ce), "wall_s": wall,
                "exposed_fraction": (wall - t) / c, "measured_exposed_fraction": (float(r["time_s"]) - t) / c}
    n = int(p.get("chunks", 1))
    g_n = float(r.get("gemm_chunks_s") or t)
    c_n = float(r.get("comm_chunks_s") or c)
    # the chunks' own alone-times: g_n = T + (n-1) overhead, c_n = n chunk collectives
    overhead = (g_n - t) / (n - 1) if n > 1 else 0.0
    latency = max(0.0, min(c, (c_n - c) / (n - 1))) if n > 1 else 0.0  # c_n = C + (n-1) a
    span, exposed = pipeline(t, c, n, overhead, latency, s, i)
    wall = float(span) + float(exposed)
    return {"wall_s": wall, "exposed_fraction": (wall - t) / c, "measured_exposed_fraction": (float(r["time_s"]) - t) / c}


def fit_overlap(rows: list[dict]) -> tuple[dict, dict]:
    """(fitted parameters for ``Profile.overlap``, a report) from the suite's overlap rows: the SM share and
    interference by least squares on the stream rows' two end times (log ratios), the chunk overhead as the
    median extra time of the decomposed rows' chunked GEMMs; the decomposed pipelines are then predicted
    from their own alone-times as a check. Empty when there are no usable rows."""
    rows = [r for r in rows if _usable(r)]
    stream = [r for r in rows if r["params"].get("method") == "stream"
              and all(isinstance(r.get(k), (int, float)) and r[k] > 0 for k in ("gemm_overlapped_s", "comm_overlapped_s"))]
    decomposed = [r for r in rows if r["params"].get("method") == "decomposed"]
    fitted: dict = {}
    report: dict = {"stream_rows": len(stream), "decomposed_rows": len(decomposed)}
    if len(stream) >= 2:
        from scipy.optimize import least_squares

        t = np.array([r["gemm_s"] for r in stream], dtype=float)
        c = np.array([r["comm_s"] for r in stream], dtype=float)
        ge = np.array([r["gemm_overlapped_s"] for r in stream], dtype=float)
        ce = np.array([r["comm_overlapped_s"] for r in stream], dtype=float)

        def resid(x):
            pg, pc = corun(t, c, x[0], x[1])
            return np.concatenate([np.log(pg / ge), np.log(pc / ce)])

        lo = [PARAMS["sm_share"].lo, PARAMS["interference"].lo]
        hi = [PARAMS["sm_share"].hi, PARAMS["interference"].hi]
        res = least_squares(resid, np.array([PARAMS["sm_share"].default, PARAMS["interference"].default]),
                            bounds=(lo, hi), loss="soft_l1", f_scale=0.1)
        fitted["sm_share"], fitted["interference"] = float(res.x[0]), float(res.x[1])
        report["stream_rms_log_error"] = float(np.sqrt(np.mean(res.fun ** 2)))
    extra = [(float(r["gemm_chunks_s"]) - float(r["gemm_s"])) / (int(r["params"]["chunks"]) - 1) for r in decomposed
             if int(r["params"].get("chunks", 1)) > 1 and isinstance(r.get("gemm_chunks_s"), (int, float))]
    if extra:
        fitted["chunk_overhead_s"] = float(min(max(float(np.median(extra)), 0.0), PARAMS["chunk_overhead_s"].hi))
    params = {**overlap_params(), **fitted}
    checks = []
    for r in stream + decomposed:
        pr = predict_row(r, params)
        checks.append({"id": r["id"], "method": r["params"]["method"], "measured_s": float(r["time_s"]),
                       "predicted_s": pr["wall_s"], "exposed_fraction": pr["measured_exposed_fraction"],
                       "predicted_exposed_fraction": pr["exposed_fraction"]})
    for method in ("stream", "decomposed"):
        pts = [abs(x["predicted_exposed_fraction"] - x["exposed_fraction"]) for x in checks if x["method"] == method]
        if pts:
            report[f"{method}_exposed_fraction_abs_error"] = {"median": float(np.median(pts)), "max": float(max(pts)),
                                                              "n": len(pts)}
    report["rows"] = checks
    return fitted, report
