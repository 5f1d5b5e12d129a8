"""Fit the tuning model's constants to measured Triton rows (``perfmodel tune fit DIR``).

As :mod:`perfmodel.fit` does for the latency model: least squares on log(predicted / measured)
over the constants of :mod:`.constants`, each within its physical bounds and fitted in log space, with
WHOLE SHAPES held out by a deterministic hash of their name (a third by default). The fit never sees a
held-out shape; the evidence reported is the ranking on those (``perfmodel tune evaluate DIR``), and a
k-fold cross-validation over every shape (each fold's constants fitted without it) so that the figure
does not rest on one lucky split. The profile stores constants only.

The loss weighs what ranking needs: every shape counts the same (a row weighs 1/sqrt(rows of its
shape)), rows near their shape's best count more than ones several times slower (1 / (1 + (ln(t /
best) / 0.5)^2)), and a robust loss (soft L1) keeps a few catastrophic rows (configurations that spill
thousands of registers) from pulling the constants.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

import numpy as np

from ..dtypes import bytes_per_element
from ..errors import InputError
from . import attention_model, gemm_model
from .constants import BOUNDS, TuneConstants, TuneProfile, default_constants, with_values
from .dataset import ShapeRows, fold_of, is_held_out, load_measurements
from .machine import machine
from .resources import attention_footprint, gemm_footprint, k_aligned
from .space import parse_attention_key, parse_gemm_key

HOLDOUT = 1.0 / 3.0
FOLDS = 5
NEAR_BEST_SCALE = 0.5  # ln(t / best) at which a row's weight halves... to 1/2
ROBUST_SCALE = 0.15  # soft-L1 scale of the log residual (~15%)
STARTS = 4  # seeded starts besides the estimates (see _starts)
# every constant is fitted; a constant the training rows cannot inform (its gradient is zero, e.g. the
# unaligned-load cost when no training shape has K off a multiple of 16) stays at its estimate
FIT_NAMES = tuple(BOUNDS)


@dataclass
class KindRows:
    kind: str
    features: dict
    time: np.ndarray
    weight: np.ndarray
    shape_index: np.ndarray


def _entry_rows(entry: ShapeRows, hw) -> tuple[dict, list[float]] | None:
    """Features and measured seconds of the configurations of one shape that ran and that the model
    considers valid."""
    times = entry.times()
    if not times:
        return None
    dtype = entry.shape.get("dtype", "bf16")
    cfgs, fps, ts = [], [], []
    for key, t in times.items():
        if entry.kind == "gemm":
            cfg = parse_gemm_key(key)
            k = entry.shape["k"]
            fp = gemm_footprint(hw, cfg, dtype, k_aligned(k), k % (cfg.block_k * cfg.split_k) == 0)
        else:
            cfg = parse_attention_key(key)
            fp = attention_footprint(hw, cfg, entry.shape["head_dim"], dtype, bool(entry.shape["causal"]))
        if fp.invalid:
            continue
        cfgs.append(cfg)
        fps.append(fp)
        ts.append(t)
    if not cfgs:
        return None
    if entry.kind == "gemm":
        s = entry.shape
        return gemm_model.gemm_features(s["m"], s["n"], s["k"], cfgs, fps), ts
    return attention_model.attention_features(entry.shape, cfgs, fps), ts


def build_rows(entries: list[ShapeRows], hw) -> dict[str, KindRows]:
    parts: dict[str, list] = {"gemm": [], "attention": []}
    for i, entry in enumerate(entries):
        got = _entry_rows(entry, hw)
        if got is None:
            continue
        feats, ts = got
        t = np.asarray(ts)
        near = 1.0 / (1.0 + (np.log(t / t.min()) / NEAR_BEST_SCALE) ** 2)
        w = near / math.sqrt(len(t))
        parts[entry.kind].append((feats, t, w, np.full(len(t), i)))
    out = {}
    for kind, items in parts.items():
        if not items:
            continue
        concat = gemm_model.concat_features if kind == "gemm" else attention_model.concat_features
        out[kind] = KindRows(kind, concat([x[0] for x in items]), np.concatenate([x[1] for x in items]),
                             np.concatenate([x[2] for x in items]), np.concatenate([x[3] for x in items]))
    return out


def predict_rows(rows: dict[str, KindRows], hw, prof, consts: TuneConstants, dtype: str = "bf16") -> dict:
    mach = machine(hw, prof, dtype, consts)
    e = bytes_per_element(dtype)
    out = {}
    for kind, r in rows.items():
        times = gemm_model.gemm_times if kind == "gemm" else attention_model.attention_times
        out[kind] = times(r.features, mach, e)["time"]
    return out


def _log_bounds(name: str) -> tuple[float, float]:
    lo, hi = BOUNDS[name]
    return math.log(max(lo, 1e-3 * hi if lo <= 0 else lo)), math.log(hi)


def fit_constants(entries: list[ShapeRows], hw, prof, start: TuneConstants | None = None,
                  names: tuple[str, ...] = FIT_NAMES) -> tuple[TuneConstants, dict]:
    """Least squares on the weighted log residuals of ``entries`` (training shapes only)."""
    from scipy.optimize import least_squares

    base = start or default_constants(prof)
    rows = build_rows(entries, hw)
    if not rows:
        raise InputError("no measured rows to fit (every row failed or the model rules every one out)")
    kinds = sorted(rows)
    weights = np.concatenate([rows[k].weight for k in kinds])
    measured = np.concatenate([rows[k].time for k in kinds])
    bounds = [_log_bounds(n) for n in names]
    x0 = np.array([min(max(math.log(max(getattr(base, n), 1e-30)), lo), hi) for n, (lo, hi) in zip(names, bounds)])

    def consts_of(x):
        return with_values(base, {n: float(math.exp(v)) for n, v in zip(names, x)})

    def predicted(x):
        pred = predict_rows(rows, hw, prof, consts_of(x))
        return np.maximum(np.concatenate([pred[k] for k in kinds]), 1e-12)

    def residuals(x):
        return weights * np.log(predicted(x) / measured)

    def solve(start):
        return least_squares(residuals, start, bounds=(lo, hi), loss="soft_l1", f_scale=ROBUST_SCALE,
                             diff_step=1e-3, max_nfev=400)

    t0 = time.perf_counter()
    r0 = residuals(x0)
    lo, hi = np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])
    res, nfev = None, 0
    for start in _starts(x0, lo, hi, names):
        r = solve(start)
        nfev += r.nfev
        if res is None or r.cost < res.cost - 1e-12:
            res = r
    fitted = consts_of(res.x)
    moved = tuple(n for n, a, b in zip(names, x0, res.x) if abs(a - b) > 1e-9)
    pred = predict_rows(rows, hw, prof, fitted)
    info = {"rows": int(len(measured)), "shapes": len(entries), "cost_start": float(0.5 * np.sum(r0 ** 2)),
            "cost": float(res.cost), "evaluations": int(nfev), "seconds": time.perf_counter() - t0,
            "fitted": list(moved), "log_error": _log_error(rows, pred)}
    return fitted, info


def _starts(x0, lo, hi, names, extra: int = STARTS) -> list:
    """Where the local fits start: the estimates, the estimates with every p-norm exponent near a hard max,
    and ``extra`` seeded draws around the estimates (the loss has several basins; the lowest wins)."""
    rng = np.random.default_rng(0)
    out = [x0]
    sharp = x0.copy()
    for i, n in enumerate(names):
        if n in ("resource_join", "overlap_join", "softness"):
            sharp[i] = hi[i] - 0.05
    out.append(sharp)
    for _ in range(extra):
        out.append(np.clip(x0 + rng.normal(0.0, 0.5, len(x0)), lo + 1e-9, hi - 1e-9))
    return out


def _log_error(rows: dict[str, KindRows], pred: dict) -> dict:
    """Median and P90 of |log(predicted / measured)| per kind (absolute time accuracy, all rows)."""
    out = {}
    for kind, r in rows.items():
        err = np.abs(np.log(pred[kind] / r.time))
        out[kind] = {"rows": int(len(err)), "median_abs": float(np.median(err)), "p90_abs": float(np.percentile(err, 90))}
    return out


# --- the whole procedure: split, fit, judge ----------------------------------------------------------------

def split(entries: list[ShapeRows], holdout: float, seed: int) -> tuple[list[ShapeRows], list[ShapeRows]]:
    train = [e for e in entries if not is_held_out(e.key, holdout, seed)]
    held = [e for e in entries if is_held_out(e.key, holdout, seed)]
    return train, held


def kfold(entries: list[ShapeRows], hw, prof, *, folds: int = FOLDS, seed: int = 0, top: int = 8,
          tol: float = 0.02, log=None) -> dict:
    """Each shape judged by constants fitted on the other folds."""
    from .evaluate import evaluate_shape, summarize

    judged = []
    per_fold = []
    for f in range(folds):
        train = [e for e in entries if fold_of(e.key, folds, seed) != f]
        test = [e for e in entries if fold_of(e.key, folds, seed) == f]
        if not test or not train:
            continue
        consts, info = fit_constants(train, hw, prof)
        items = [evaluate_shape(e, hw, prof, consts, top=top, tol=tol) for e in test]
        judged += items
        s = summarize(items, top, tol)
        per_fold.append({"fold": f, "train_shapes": len(train), "test_shapes": len(test),
                         "hit_rate": s.get("hit_rate"), "median_top1_slowdown": s.get("median_top1_slowdown")})
        if log:
            log(f"  fold {f}: {len(test)} shapes judged, hit rate {s.get('hit_rate', float('nan')):.0%}, "
                f"median top-1 slowdown {s.get('median_top1_slowdown', float('nan')):.1%}")
    return {"folds": folds, "seed": seed, "summary": summarize(judged, top, tol), "per_fold": per_fold,
            "misses": sorted(x["shape"] for x in judged if x.get("complete") and not x.get("hit"))}


def fit_directory(directory, hw, prof, *, holdout: float = HOLDOUT, seed: int = 0, folds: int = FOLDS,
                  top: int = 8, tol: float = 0.02, log=None) -> tuple[TuneProfile, dict]:
    """Fit on the training shapes of the folder's rows; judge the held-out shapes; run the k-fold.
    Returns the tune profile (constants and the evidence) and the held-out evaluation."""
    from .evaluate import evaluate_entries

    if not 0 < holdout < 1:
        raise InputError(f"expected a fraction between 0 and 1, got {holdout}", field="--holdout")
    if folds < 2:
        raise InputError(f"expected at least 2 folds, got {folds}", field="--folds")
    data = load_measurements(directory)
    entries = [e for e in data.shapes if e.times()]
    train, held = split(entries, holdout, seed)
    if not train or not held:
        raise InputError(f"{len(entries)} measured shapes cannot be split into training and held-out ones",
                         file=str(directory))
    if log:
        log(f"tune fit: {len(entries)} shapes in {len(data.files)} file(s); fitting on {len(train)}, "
            f"holding out {len(held)}")
    consts, info = fit_constants(train, hw, prof)
    held_eval = evaluate_entries(held, hw, prof, consts, top=top, tol=tol)
    train_eval = evaluate_entries(train, hw, prof, consts, top=top, tol=tol)
    held_rows = build_rows(held, hw)
    held_err = _log_error(held_rows, predict_rows(held_rows, hw, prof, consts)) if held_rows else {}
    if log:
        log(f"tune fit: {info['rows']} training rows, {info['evaluations']} evaluations, {info['seconds']:.1f} s")
        log(f"tune fit: {folds}-fold cross-validation")
    kf = kfold(entries, hw, prof, folds=folds, seed=seed, top=top, tol=tol, log=log)
    env_device = ""
    for e in entries:
        row = next(iter(e.rows.values()), {})
        env = row.get("env") or {}
        if env.get("device_name"):
            env_device = str(env["device_name"])
            break
    evidence = {
        "measurements": data.files, "rows": data.rows, "superseded_rows": data.superseded,
        "holdout": holdout, "seed": seed, "train_shapes": sorted(e.key for e in train),
        "held_out_shapes": sorted(e.key for e in held),
        "fit": info, "train": train_eval["summary"], "held_out": held_eval["summary"],
        "held_out_log_error": held_err, "kfold": kf,
        "estimates_held_out": evaluate_entries(held, hw, prof, default_constants(prof), top=top, tol=tol)["summary"],
    }
    tp = TuneProfile(hw.key, env_device, consts, tuple(info["fitted"]), evidence)
    return tp, held_eval


def fit_text(tp: TuneProfile) -> str:
    ev = tp.evidence
    d = TuneConstants()
    lines = [f"tune profile for {tp.spec_key} ({tp.device or 'device unknown'}): fitted on "
             f"{len(ev['train_shapes'])} shapes ({ev['fit']['rows']} rows), {len(ev['held_out_shapes'])} held out",
             f"{'constant':<28} {'estimate':>12} {'fitted':>12}  bounds"]
    for name, (lo, hi) in BOUNDS.items():
        lines.append(f"{name:<28} {getattr(d, name):>12.4g} {getattr(tp.constants, name):>12.4g}  [{lo:g}, {hi:g}]"
                     + ("" if name in tp.fitted else "  (not moved)"))
    for kind, e in ev["fit"]["log_error"].items():
        he = ev["held_out_log_error"].get(kind)
        lines.append(f"{kind}: |log(pred/meas)| median {e['median_abs']:.1%} train"
                     + (f", {he['median_abs']:.1%} held out (P90 {he['p90_abs']:.0%})" if he else ""))
    from .evaluate import summary_line

    lines.append("held out, fitted constants: " + summary_line(ev["held_out"]))
    lines.append("held out, estimates:        " + summary_line(ev["estimates_held_out"]))
    kf = ev["kfold"]
    lines.append(f"{kf['folds']}-fold, every shape held out once: " + summary_line(kf["summary"]))
    if kf.get("misses"):
        lines.append("k-fold misses: " + ", ".join(kf["misses"]))
    return "\n".join(lines)


def median_or_nan(xs) -> float:
    return statistics.median(xs) if xs else float("nan")
