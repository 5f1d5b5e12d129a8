"""Gated DeltaNet's chunked prefill: the three constants of :mod:`perfmodel.cost.scan` from measured calls.

Rows of kind ``deltanet`` in phase ``prefill`` and timed under CUDA graphs (the launches a decode graph or a
chunked prefill amortises; an eager row is bound by flash-linear-attention's Python wrappers and says nothing of
the kernels):

- this project's own, ``python -m perfmodel.measure.deltanet --out DIR/deltanet[-<part>]`` beside the suite
  (``launch: graph``; its environment names the part);
- an engine's, imported from aiconfigurator-core's ``gdn_perf`` tables (:mod:`perfmodel.imports.aiconfigurator`:
  every row is a CUDA-graph time) into the folder's own measurements.

Fitted by least squares on log time (every shape weighs alike, from a one-token call of 20 us to 64k tokens of
60 ms) with the constants kept positive; a quarter of the shapes held out by a hash of the shape report the
error the fit makes on shapes it did not see. The fitted part's SM count sets the state pass's waves.
"""
from __future__ import annotations

import hashlib
import math
import numpy as np

from ..cost.scan import FIELDS, scan_time
from ..profile import Profile
from ..spec import HardwareSpec

DELTANET_DIR = "deltanet"  # the calibration folder's subfolders python -m perfmodel.measure.deltanet writes
MIN_ROWS = 8  # fewer measured calls than this fit nothing (three constants, a spread of shapes)
HOLDOUT = 0.25


def scan_rows(rows: list[dict]) -> list[dict]:
    """The rows a fit can use: prefill calls of the chunked recurrence, timed under CUDA graphs, with a positive
    time and every shape field a positive integer."""
    out = []
    for r in rows:
        if not isinstance(r, dict) or r.get("kind") != "deltanet" or r.get("error"):
            continue
        p, t = r.get("params") or {}, r.get("time_s")
        if p.get("phase") != "prefill" or p.get("launch") != "graph":  # a row without it was launched eagerly
            continue
        if not (isinstance(t, (int, float)) and math.isfinite(t) and t > 0):
            continue
        if all(isinstance(p.get(k), int) and p[k] > 0 for k in ("batch", "tokens", "value_heads", "dv")):
            out.append(r)
    return out


def kernel_name(r: dict) -> str:
    """The chunked kernel a row timed: an imported row's kernel source, this project's row's fla function
    (its ``impl``: ``fla chunk_gated_delta_rule[, how it was launched]``)."""
    named = r["params"].get("kernel")
    if named:
        return str(named)
    impl = str(r.get("impl") or "").split(",")[0].split()
    return impl[-1] if impl else ""


def _arrays(rows: list[dict]) -> tuple[np.ndarray, ...]:
    p = [r["params"] for r in rows]
    seqs = np.array([q["batch"] for q in p], dtype=float)
    tokens = seqs * np.array([q["tokens"] for q in p], dtype=float)  # the rows' tokens are per sequence
    heads = np.array([q["value_heads"] for q in p], dtype=float)
    dv = np.array([q["dv"] for q in p], dtype=float)
    return seqs, tokens, heads, dv, np.array([r["time_s"] for r in rows], dtype=float)


def predict(rows: list[dict], scan: dict, sms: int) -> np.ndarray:
    """Each row's time by the scan model with ``scan``'s constants on a part of ``sms`` SMs."""
    seqs, tokens, heads, dv, _ = _arrays(rows)
    out = np.empty(len(rows))
    for d in np.unique(dv):  # the CTAs a head needs depend on its value dim: one evaluation per dim
        m = dv == d
        out[m] = scan_time(seqs[m], tokens[m], heads[m], int(d), sms, scan, np)
    return out


def _held_out(r: dict) -> bool:
    p = r["params"]
    key = f"{p['batch']}|{p['tokens']}|{p['value_heads']}|{p['dv']}".encode()
    return int(hashlib.sha256(key).hexdigest()[:8], 16) / 2**32 < HOLDOUT


def fit_constants(rows: list[dict], sms: int) -> dict | None:
    """The least-squares constants (log time, positive) over ``rows``, or None with fewer than MIN_ROWS."""
    from scipy.optimize import least_squares

    if len(rows) < MIN_ROWS:
        return None
    t = _arrays(rows)[-1]

    def residual(x):
        return np.log(predict(rows, dict(zip(FIELDS, np.exp(x))), sms)) - np.log(t)

    start = np.log([float(np.min(t)), 2e-6, 2e-9])
    fit = least_squares(residual, start, method="trf")
    return {k: float(f"{v:.4g}") for k, v in zip(FIELDS, np.exp(fit.x))}


def _median_abs(rows: list[dict], scan: dict, sms: int) -> float:
    t = _arrays(rows)[-1]
    return float(np.median(np.abs(predict(rows, scan, sms) / t - 1.0)))


def fit_scan(rows: list[dict], hw: HardwareSpec, source: str) -> dict | None:
    """The fitted constants with their evidence (rows, kernels, in-sample and held-out median |error|), or None."""
    usable = scan_rows(rows)
    scan = fit_constants(usable, hw.sm_count)
    if scan is None:
        return None
    train = [r for r in usable if not _held_out(r)]
    held = [r for r in usable if _held_out(r)]
    held_err = None
    if len(train) >= MIN_ROWS and held:
        held_err = round(_median_abs(held, fit_constants(train, hw.sm_count), hw.sm_count), 4)
    kernels = sorted({kernel_name(r) for r in usable} - {""})
    return {"scan": scan, "rows": len(usable), "source": source, "kernels": kernels,
            "median_abs_error": round(_median_abs(usable, scan, hw.sm_count), 4),
            "held_out_median_abs_error": held_err}


def fit_deltanet(prof: Profile, rows: list[dict], hw: HardwareSpec,
                 subfolders: list[tuple[str, list[dict]]] = ()) -> tuple[Profile, dict | None]:
    """(the profile with ``deltanet_scan`` fitted, the evidence) from the folder's own rows (an engine's imported
    table), else from the first of ``subfolders`` (name, rows: ``deltanet*/`` measured on ``hw`` itself) that
    fits; else (``prof`` unchanged, None)."""
    found = fit_scan(rows, hw, "the folder's measurements")
    for name, sub in subfolders:
        if found is not None:
            break
        found = fit_scan(sub, hw, f"{name}/")
    if found is None:
        return prof, None
    return prof.with_(deltanet_scan=found["scan"]), found


def report_text(found: dict) -> str:
    s = found["scan"]
    held = found["held_out_median_abs_error"]
    return (f"Gated DeltaNet's chunked prefill ({found['rows']} calls from {found['source']}; "
            f"{', '.join(found['kernels']) or 'kernel not named'}): fixed {s['fixed_s'] * 1e6:.1f} us, "
            f"{s['chunk_s'] * 1e6:.2f} us a chunk step, {s['token_s'] * 1e9:.2f} ns a token and value head; "
            f"median |error| {found['median_abs_error']:.1%} in-sample, "
            f"{'-' if held is None else format(held, '.1%')} held out (a quarter of the shapes).\n")
