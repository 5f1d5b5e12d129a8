"""The sampling family: each method's efficiency over the logits it reads, from a calibration folder's
``sampling/`` measurements (:mod:`perfmodel.measure.sampling`) into ``Profile.mem_eta`` and ``mem_alpha_s`` under the
kinds ``sample_<method>`` (:data:`perfmodel.ops.SAMPLING_KINDS`).

A method's time is ``alpha + bytes / (eta * HBM bandwidth)`` with ``bytes`` one read of the fp32 logits, so ``eta``
is the reduce kernel's efficiency over the passes the method makes: carried to another part like every memory
kind (perfmodel.transfer), which assumes the passes, an algorithm's, stay the same. The rows are timed on their own
(flushed calls); ``alpha`` keeps the launch latency a kernel inside a step partly hides (a few microseconds,
against milliseconds at the batches where sampling matters).
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np

from ..sampling import SAMPLING_METHODS
from ..profile import Profile
from ..spec import HardwareSpec

SAMPLING_DIR = "sampling"  # the calibration folder's subfolder python -m perfmodel.measure.sampling writes


def sampling_rows(directory: Path) -> list[dict]:
    """The usable rows of ``directory/sampling/measurements.jsonl`` (none where it is missing)."""
    path = Path(directory) / SAMPLING_DIR / "measurements.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue  # a torn last line of a killed run
        t = r.get("time_s") if isinstance(r, dict) else None
        if (r.get("kind") == "sampling" and isinstance(t, (int, float)) and math.isfinite(t) and t > 0
                and not r.get("error") and str(r.get("check", "ok")) == "ok"):
            rows.append(r)
    return rows


def fit_method(rows: list[dict], bandwidth: float) -> tuple[float, float] | None:
    """(eta, alpha) of ``t = alpha + bytes / (eta * bandwidth)`` by least squares weighted to relative error (the
    times span three decades); None with fewer than two sizes."""
    b = np.array([4.0 * r["params"]["batch"] * r["params"]["vocab"] for r in rows])
    t = np.array([r["time_s"] for r in rows])
    if len(np.unique(b)) < 2:
        return None
    a = np.stack([np.ones_like(b), b / bandwidth], axis=1) / t[:, None]
    (alpha, inv_eta), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    if not (inv_eta > 0):
        return None
    return float(1.0 / inv_eta), float(max(alpha, 0.0))


def _time(fitted: tuple[float, float], row: dict, bandwidth: float) -> float:
    eta, alpha = fitted
    return alpha + 4.0 * row["params"]["batch"] * row["params"]["vocab"] / (bandwidth * eta)


def _errors(rows: list[dict], bandwidth: float) -> tuple[float, float | None]:
    """(median |error| of the fit on the rows it was fitted to, median |error| of each vocabulary's rows by the fit
    of the others: held out; None with one vocabulary)."""
    fitted = fit_method(rows, bandwidth)
    inside = statistics.median(abs(_time(fitted, r, bandwidth) / r["time_s"] - 1.0) for r in rows)
    held = []
    for v in {r["params"]["vocab"] for r in rows}:
        other = fit_method([r for r in rows if r["params"]["vocab"] != v], bandwidth)
        if other is not None:
            held += [abs(_time(other, r, bandwidth) / r["time_s"] - 1.0) for r in rows if r["params"]["vocab"] == v]
    return inside, (statistics.median(held) if held else None)


def fit_sampling(prof: Profile, directory: Path, hw: HardwareSpec) -> tuple[Profile, dict | None]:
    """(the profile with every measured method's kind fitted, the figures per method) where ``directory`` holds
    sampling measurements, else (``prof`` unchanged, None)."""
    rows = sampling_rows(directory)
    eta, alpha, figures = dict(prof.mem_eta), dict(prof.mem_alpha_s), {}
    for method in SAMPLING_METHODS:
        fitted = fit_method([r for r in rows if r["params"].get("method") == method], hw.hbm_bandwidth)
        if fitted is None:
            continue
        kind = f"sample_{method}"
        eta[kind], alpha[kind] = fitted
        mine = [r for r in rows if r["params"].get("method") == method]
        inside, held = _errors(mine, hw.hbm_bandwidth)
        figures[method] = {"eta": round(fitted[0], 5), "alpha_s": fitted[1], "rows": len(mine),
                           "median_abs_error": round(inside, 4),
                           "held_out_median_abs_error": None if held is None else round(held, 4)}
    if not figures:
        return prof, None
    return prof.with_(mem_eta=eta, mem_alpha_s=alpha), figures


def report_text(figures: dict) -> str:
    """A table of the fitted methods: efficiency over one read of the logits, the passes that is at the copy
    kernel's rate (0.9 of the bandwidth, the default), the fixed cost, and the fit's median absolute error on its
    own rows and on each vocabulary's rows fitted without them (held out)."""
    lines = ["| method | rows | eta over one read of the logits | about that many passes at 0.9 | alpha (us) | "
             "median abs. error (in-sample) | held out by vocabulary |", "|---|---|---|---|---|---|---|"]
    for method, f in figures.items():
        held = f.get("held_out_median_abs_error")
        lines.append(f"| {method} | {f['rows']} | {f['eta']:.4f} | {0.9 / f['eta']:.1f} | {f['alpha_s'] * 1e6:.1f} | "
                     f"{f['median_abs_error']:.1%} | {'-' if held is None else format(held, '.1%')} |")
    return "\n".join(lines) + "\n"
