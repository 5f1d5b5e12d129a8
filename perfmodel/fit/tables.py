"""Held-out validation of the measured tables (:mod:`perfmodel.cost.tables`) beside the fitted model's.

For each class of a folder's imported tables (whole, ``tables.npz``, where the import wrote it: every measured
shape, not the fit's 3,000-row subsample), a quarter of the rows, picked by a hash of their shape
(:meth:`perfmodel.cost.table_store.ClassRows.held_out`; the same shape is held out in every format and kernel), are
priced from the remaining rows exactly as a projection would price them (:mod:`perfmodel.cost.tables`: interpolated
in log space, detrended by the fitted profile, non-decreasing in the batch, clamped and faded within the reach), and
the median and P90 of |predicted / measured - 1| are reported next to the fitted model's on the same rows, and next
to interpolating log time itself (no trend), the alternative the design rejected. Whether projections use each
class's table (it must beat the fit on these rows at the median, :func:`perfmodel.cost.tables.judge`) is reported
with it.

``perfmodel fit`` writes the result into ``validation.json(.gz)`` (a ``tables`` section) and ``validation.md``
(a table "fitted vs interpolated held-out error per class"). Without refitting::

    python -m perfmodel.fit.tables calibration/b200-trtllm calibration/h200-sxm-vllm   # print the tables
    python -m perfmodel.fit.tables --write calibration/*-trtllm                       # and write the sections

The report classes pool a table's classes over what does not change the kernel family (head dims, causal or
packed flags): GEMMs per format, attention per backend, phase, dtype and KV-cache dtype, MoE per format and
routing distribution; a kernel the engine does not run on the part (CUTLASS beside TensorRT-LLM's min-latency NVFP4
MoE) is reported apart, in brackets. The fitted profile was fitted to the subsample: at most 3,000 rows a table,
a few percent of a whole table's held-out rows. For GEMMs the table's own spread is reported beside the errors
(:func:`adjacent_spread`): what m and m + 1 rows take, which bounds what any interpolant reaches.
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np

from ..cost.table_store import ClassRows
from ..cost.tables import (NEIGHBOURS_PER_DIM, NOISE_DIP, REACH, Interpolant, engine_kernel, fitted_times, judge,
                           module_fit)
from .latency import error_summary

SECTION = "## Fitted vs interpolated held-out error per class"
GOAL = {"median_abs_error": 0.03, "p90_abs_error": 0.10}  # issue 24's goal for the tables, per class


def report_class(key: tuple) -> str:
    """The report class of a table class key (module doc)."""
    if key[0] == "gemm":
        return f"gemm {key[1]}"
    if key[0] == "attention":
        _, backend, phase, dtype, kv = key[:5]
        window = dict(key[8:]).get("window")  # a sliding window: kernels of their own, reported apart
        return (f"attention {backend} {phase} {dtype}" + (f" kv {kv}" if kv != dtype else "")
                + (" (sliding window)" if window else ""))
    fmt, dist = key[1], key[2]
    return f"moe {fmt}" + ("" if dist == "balanced" else f" ({dist} routing)")


def validate_classes(classes: list[ClassRows], prof, hw, *, holdout: float = 0.25, seed: int = 0) -> dict:
    """The held-out validation of a folder's measured classes (:func:`perfmodel.cost.tables.folder_classes`)
    against ``prof`` (its fitted profile) on ``hw`` (module doc)."""
    pooled: dict[str, dict[str, list]] = {}
    kernels: dict[tuple, list[str]] = {}
    main: dict[tuple, list[str]] = {}
    for cls in classes:
        kernels.setdefault(cls.key, []).append(cls.kernel)
        if cls.main:
            main.setdefault(cls.key, []).append(cls.kernel)
    for cls in classes:
        got = _held_out_class(cls, prof, hw, holdout, seed)
        if got is None:
            continue
        name = report_class(cls.key)
        if engine_kernel(prof.engine, cls.key, kernels[cls.key], main.get(cls.key)) != cls.kernel:
            # a kernel the engine does not run here (another MoE backend): evidence for carrying, never priced
            name += f" [{cls.kernel.removeprefix('moe_torch_flow_')}]"
            got["used"] = np.zeros_like(got["used"])
        acc = pooled.setdefault(name, {k: [] for k in got})
        for k, v in got.items():
            acc[k].append(v)
    classes = {}
    for name in sorted(pooled, key=_order):
        cat = {k: np.concatenate(v) for k, v in pooled[name].items()}
        meas = cat["measured"]
        classes[name] = {"n": int(len(meas)), "covered": int(cat["covered"].sum()),
                         "used_by_projections": int(cat["used"].sum()),
                         "fitted": _errors(cat["fitted"], meas), "interpolated": _errors(cat["table"], meas),
                         "log_time": _errors(cat["log_time"], meas), "adjacent_rows": _spread(cat["adjacent"])}
    return {"method": (f"residual log(measured / fitted) interpolated in log2 of the shape dims: multilinear on "
                       f"fully measured grid cells, else a weighted local plane through the "
                       f"{NEIGHBOURS_PER_DIM} d + 1 nearest rows; the table's time non-decreasing along the first "
                       f"dim (dips under {NOISE_DIP:.0%} raised); clamped to the measured range and faded to the fit "
                       f"across a factor {REACH:g} beyond it, the fit alone further (perfmodel.cost.tables)"),
            "holdout_share": holdout, "seed": seed, "goal": GOAL, "classes": classes}


def _held_out_class(cls: ClassRows, prof, hw, holdout: float, seed: int) -> dict | None:
    """One class's held-out rows: measured, fitted, table-priced (from the training rows, exactly as a projection
    prices a shape: :func:`perfmodel.cost.tables.judge`) and log-time-interpolated times, coverage, and whether
    projections use the class's table."""
    from ..cost import time_op

    if not len(cls):
        return None
    price = lambda op, h, p: time_op(op, h, p).time  # noqa: E731
    dims, measured = cls.dims, cls.times
    fitted = fitted_times(cls, prof, hw, price)
    held = cls.held_out(holdout, seed)
    got = judge(cls.key, cls.kernel, held, dims, measured, fitted,
                module_fit(cls.key, cls.template, prof, hw, price))
    train = ~held & np.isfinite(fitted) & (fitted > 0)
    if not held.any() or not train.any():
        return None
    log_time = Interpolant(np.log2(dims[train]), np.log(measured[train]))
    c, inside = log_time.clamp(np.log2(dims[held]))
    got["log_time"] = np.where(inside, np.exp(log_time.at(c)), got["fitted"])
    got["used"] = np.full(int(held.sum()), got["used"])
    got["adjacent"] = adjacent_spread(cls)
    return got


# GEMMs of m and m + 1 rows from this many rows up do the same work within 3%: how far apart the table times them is
# its own spread (tile and wave steps the kernels take, the heuristics' choices, noise), which no interpolant of
# the other rows can recover for a held-out one
ADJACENT_MIN_ROWS = 32


def adjacent_spread(cls: ClassRows) -> np.ndarray:
    """|t(m + 1) / t(m) - 1| over a GEMM class's pairs of rows at the same n and k, m >= :data:`ADJACENT_MIN_ROWS`
    (the tables' grids measure m and m + 1 at every step from 17 rows up); empty for other classes."""
    if cls.key[0] != "gemm" or not len(cls):
        return np.zeros(0)
    times = {tuple(d): t for d, t in zip(cls.dims.tolist(), cls.times.tolist())}
    out = [times[(m + 1.0, n, k)] / t - 1.0 for (m, n, k), t in times.items()
           if m >= ADJACENT_MIN_ROWS and (m + 1.0, n, k) in times]
    return np.abs(np.array(out))


def _spread(values: np.ndarray) -> dict | None:
    if not len(values):
        return None
    return {"pairs": int(len(values)), "median": float(np.median(values)), "p90": float(np.percentile(values, 90))}


def _errors(pred, meas) -> dict:
    e = error_summary(np.asarray(pred), np.asarray(meas))
    return {"median_abs_error": e["median_abs_error"], "p90_abs_error": e["p90_abs_error"]}


def _order(name: str):
    return (["gemm", "attention", "moe"].index(name.split()[0]), "routing" in name, name)


def validate_folder(path, *, holdout: float | None = None, seed: int | None = None) -> dict:
    """The held-out validation of a calibration folder as shipped: its rows and its ``profile.json``, with the
    fit's share and seed (the ``holdout_share`` and ``seed`` its validation recorded)."""
    from ..cost.tables import folder_classes, without_tables
    from ..errors import InputError
    from ..profile import load_profile
    from ..spec import load_spec

    d = Path(path)
    classes = folder_classes(d)
    if classes is None:
        raise InputError("no tables.npz nor measurements.jsonl(.gz) here", file=str(d))
    prof = without_tables(load_profile(d))
    v = prof.validation or {}
    holdout = v.get("holdout_share", 0.25) if holdout is None else holdout
    seed = v.get("seed", 0) if seed is None else seed
    return validate_classes(classes, prof, load_spec(prof.spec_key), holdout=holdout, seed=seed)


def markdown(result: dict) -> str:
    """The validation.md section: one row a class, fitted vs interpolated median and P90."""
    pct = lambda v: "-" if v is None else f"{v:.1%}"  # noqa: E731
    lines = [SECTION, "",
             f"Held-out rows (share {result['holdout_share']:g}, seed {result['seed']}, by a hash of each row's shape) "
             "priced from the remaining rows of their class as a projection prices them (`perfmodel.cost.tables`); "
             f"the goal is {GOAL['median_abs_error']:.0%} median and {GOAL['p90_abs_error']:.0%} P90 per class. "
             "*covered*: rows within the reach of the others; *used*: rows of the table classes projections use (a "
             "class whose table misses its held-out rows by more than the fit does, at the median, is left to the "
             "fit; a bracketed kernel is one the engine does not run here); *log time*: interpolating log time "
             "itself, without the fit's trend; *adjacent rows*: how far apart the table times GEMMs of m and m + 1 "
             "rows (m >= 32, same n and k), its own spread, which no interpolant recovers for a held-out row.", "",
             "| class | held-out rows | covered | used | fitted median | fitted P90 | interpolated median "
             "| interpolated P90 | log time median | log time P90 | adjacent rows median / P90 |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, c in result["classes"].items():
        f, t, r = c["fitted"], c["interpolated"], c["log_time"]
        lines.append(f"| {name} | {c['n']} | {c['covered']} | {c['used_by_projections']} "
                     f"| {pct(f['median_abs_error'])} | {pct(f['p90_abs_error'])} "
                     f"| {pct(t['median_abs_error'])} | {pct(t['p90_abs_error'])} | {pct(r['median_abs_error'])} "
                     f"| {pct(r['p90_abs_error'])} | {adjacent_text(c)} |")
    return "\n".join(lines) + "\n"


def adjacent_text(c: dict) -> str:
    """A class's adjacent-row spread, "median / P90", or "-" (not a GEMM class)."""
    a = c.get("adjacent_rows")
    return "-" if not a else f"{a['median']:.1%} / {a['p90']:.1%}"


def with_section(text: str, section: str) -> str:
    """``text`` (a validation.md) with its tables section replaced by ``section``, or appended."""
    start = text.find(SECTION)
    if start < 0:
        return text.rstrip("\n") + "\n\n" + section
    end = text.find("\n## ", start + len(SECTION))
    rest = "" if end < 0 else text[end + 1:]
    return text[:start] + section + ("\n" + rest if rest else "")


def write_sections(path, result: dict) -> list[Path]:
    """Put ``result`` into the folder's validation.json(.gz) (its ``tables`` key) and validation.md."""
    from ..io import write_bytes_atomic, write_text_atomic

    d = Path(path)
    written = []
    for name in ("validation.json.gz", "validation.json"):
        f = d / name
        if not f.is_file():
            continue
        raw = gzip.decompress(f.read_bytes()) if name.endswith(".gz") else f.read_bytes()
        doc = json.loads(raw)
        doc["tables"] = result
        text = json.dumps(doc, indent=1, allow_nan=False) + "\n"
        if name.endswith(".gz"):
            write_bytes_atomic(f, gzip.compress(text.encode("utf-8"), mtime=0))
        else:
            write_text_atomic(f, text)
        written.append(f)
    md = d / "validation.md"
    if md.is_file():
        write_text_atomic(md, with_section(md.read_text(encoding="utf-8"), markdown(result)))
        written.append(md)
    return written


def text_table(name: str, result: dict) -> str:
    """A terminal table of one folder's result."""
    pct = lambda v: "    -" if v is None else f"{v:5.1%}"  # noqa: E731
    lines = [f"{name}", f"  {'class':44s} {'rows':>5s} {'cov':>5s} {'used':>5s}   fitted med/P90   table med/P90"
                        "   log-time med/P90   adjacent rows"]
    for cls, c in result["classes"].items():
        f, t, r = c["fitted"], c["interpolated"], c["log_time"]
        lines.append(f"  {cls:44s} {c['n']:5d} {c['covered']:5d} {c['used_by_projections']:5d}   "
                     f"{pct(f['median_abs_error'])} {pct(f['p90_abs_error'])}    "
                     f"{pct(t['median_abs_error'])} {pct(t['p90_abs_error'])}   "
                     f"{pct(r['median_abs_error'])} {pct(r['p90_abs_error'])}     {adjacent_text(c)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfmodel.fit.tables", description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", help="calibration folders (imported engine tables)")
    ap.add_argument("--write", action="store_true", help="write the section into validation.json(.gz) and .md")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)
    results = {}
    for folder in args.folders:
        result = validate_folder(folder)
        results[str(folder)] = result
        if not args.json:
            print(text_table(str(folder), result))
        if args.write:
            for f in write_sections(folder, result):
                print(f"  wrote {f}", file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
