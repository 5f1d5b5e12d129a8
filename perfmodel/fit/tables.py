"""Held-out validation of the measured tables (:mod:`perfmodel.cost.tables`) beside the fitted model's.

For each class of a folder's imported rows, the rows the fit held out (its own split,
:func:`perfmodel.fit.latency.is_held_out`, so the two figures are comparable) are priced from the remaining rows
exactly as a projection would price them (:mod:`perfmodel.cost.tables`: interpolated in log space, detrended by
the fitted profile, non-decreasing in the batch, clamped and faded within the reach), and the median and P90 of
|predicted / measured - 1| are reported next to the fitted model's on the same rows, and next to interpolating log
time itself (no trend), the alternative the design rejected. Whether projections use each class's table (it must
beat the fit on these rows at the median, :func:`perfmodel.cost.tables.judge`) is reported with it.

``perfmodel fit`` writes the result into ``validation.json(.gz)`` (a ``tables`` section) and ``validation.md``
(a table "fitted vs interpolated held-out error per class"). Without refitting::

    python -m perfmodel.fit.tables calibration/b200-trtllm calibration/h200-sxm-vllm   # print the tables
    python -m perfmodel.fit.tables --write calibration/*-trtllm                       # and write the sections

The report classes pool a table's classes over what does not change the kernel family (head dims, causal or
packed flags): GEMMs per format, attention per backend, phase, dtype and KV-cache dtype, MoE per format and
routing distribution.
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np

from ..cost.tables import NEIGHBOURS_PER_DIM, NOISE_DIP, REACH, Interpolant, class_data, group_rows, judge, module_fit
from .latency import error_summary, is_held_out

SECTION = "## Fitted vs interpolated held-out error per class"
GOAL = {"median_abs_error": 0.03, "p90_abs_error": 0.10}  # issue 24's goal for the tables, per class


def report_class(key: tuple) -> str:
    """The report class of a table class key (module doc)."""
    if key[0] == "gemm":
        return f"gemm {key[1]}"
    if key[0] == "attention":
        _, backend, phase, dtype, kv = key[:5]
        return f"attention {backend} {phase} {dtype}" + (f" kv {kv}" if kv != dtype else "")
    fmt, dist = key[1], key[2]
    return f"moe {fmt}" + ("" if dist == "balanced" else f" ({dist} routing)")


def validate_rows(rows, prof, hw, *, holdout: float = 0.25, seed: int = 0) -> dict:
    """The held-out validation of a folder's rows against ``prof`` (its fitted profile) on ``hw`` (module doc)."""
    pooled: dict[str, dict[str, list]] = {}
    for key, kernels in group_rows(rows).items():
        for kernel, class_rows in kernels.items():
            got = _held_out_class(key, kernel, class_rows, prof, hw, holdout, seed)
            if got is None:
                continue
            acc = pooled.setdefault(report_class(key), {k: [] for k in got})
            for k, v in got.items():
                acc[k].append(v)
    classes = {}
    for name in sorted(pooled, key=_order):
        cat = {k: np.concatenate(v) for k, v in pooled[name].items()}
        meas = cat["measured"]
        classes[name] = {"n": int(len(meas)), "covered": int(cat["covered"].sum()),
                         "used_by_projections": int(cat["used"].sum()),
                         "fitted": _errors(cat["fitted"], meas), "interpolated": _errors(cat["table"], meas),
                         "log_time": _errors(cat["log_time"], meas)}
    return {"method": (f"residual log(measured / fitted) interpolated in log2 of the shape dims: multilinear on "
                       f"fully measured grid cells, else a weighted local plane through the "
                       f"{NEIGHBOURS_PER_DIM} d + 1 nearest rows; the table's time non-decreasing along the first "
                       f"dim (dips under {NOISE_DIP:.0%} raised); clamped to the measured range and faded to the fit "
                       f"across a factor {REACH:g} beyond it, the fit alone further (perfmodel.cost.tables)"),
            "holdout_share": holdout, "seed": seed, "goal": GOAL, "classes": classes}


def _held_out_class(key: tuple, kernel: str, rows, prof, hw, holdout: float, seed: int) -> dict | None:
    """One class's held-out rows: measured, fitted, table-priced (from the training rows, exactly as a projection
    prices a shape: :func:`perfmodel.cost.tables.judge`) and log-time-interpolated times, coverage, and whether
    projections use the class's table."""
    from ..cost import time_op

    price = lambda op, h, p: time_op(op, h, p).time  # noqa: E731
    ids, measured, fitted, dims, template = class_data(rows, prof, hw, price)
    if not ids:
        return None
    got = judge(key, kernel, ids, dims, measured, fitted, module_fit(key, template, prof, hw, price), holdout, seed)
    held = np.array([is_held_out(i, holdout, seed) for i in ids], dtype=bool)
    train = ~held & np.isfinite(fitted) & (fitted > 0)
    if not held.any() or not train.any():
        return None
    log_time = Interpolant(np.log2(dims[train]), np.log(measured[train]))
    c, inside = log_time.clamp(np.log2(dims[held]))
    got["log_time"] = np.where(inside, np.exp(log_time.at(c)), got["fitted"])
    got["used"] = np.full(int(held.sum()), got["used"])
    return got


def _errors(pred, meas) -> dict:
    e = error_summary(np.asarray(pred), np.asarray(meas))
    return {"median_abs_error": e["median_abs_error"], "p90_abs_error": e["p90_abs_error"]}


def _order(name: str):
    return (["gemm", "attention", "moe"].index(name.split()[0]), "routing" in name, name)


def validate_folder(path, *, holdout: float | None = None, seed: int | None = None) -> dict:
    """The held-out validation of a calibration folder as shipped: its rows and its ``profile.json``, with the
    fit's own split (the ``holdout_share`` and ``seed`` its validation recorded)."""
    from ..cost.tables import measurement_file, without_tables
    from ..errors import InputError
    from ..measure.store import read_rows
    from ..profile import load_profile
    from ..spec import load_spec

    d = Path(path)
    file = measurement_file(d)
    if file is None:
        raise InputError("no measurements.jsonl(.gz) here", file=str(d))
    prof = without_tables(load_profile(d))
    v = prof.validation or {}
    holdout = v.get("holdout_share", 0.25) if holdout is None else holdout
    seed = v.get("seed", 0) if seed is None else seed
    return validate_rows(read_rows(file), prof, load_spec(prof.spec_key), holdout=holdout, seed=seed)


def markdown(result: dict) -> str:
    """The validation.md section: one row a class, fitted vs interpolated median and P90."""
    pct = lambda v: "-" if v is None else f"{v:.1%}"  # noqa: E731
    lines = [SECTION, "",
             f"Held-out rows (the fit's split: share {result['holdout_share']:g}, seed {result['seed']}) priced from "
             "the remaining rows of their class as a projection prices them (`perfmodel.cost.tables`); the goal is "
             f"{GOAL['median_abs_error']:.0%} median and {GOAL['p90_abs_error']:.0%} P90 per class. *covered*: rows "
             "within the reach of the others; *used*: rows of the table classes projections use (a class whose "
             "table misses its held-out rows by more than the fit does, at the median, is left to the fit); "
             "*log time*: interpolating log time itself, without the fit's trend.", "",
             "| class | held-out rows | covered | used | fitted median | fitted P90 | interpolated median "
             "| interpolated P90 | log time median | log time P90 |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, c in result["classes"].items():
        f, t, r = c["fitted"], c["interpolated"], c["log_time"]
        lines.append(f"| {name} | {c['n']} | {c['covered']} | {c['used_by_projections']} "
                     f"| {pct(f['median_abs_error'])} | {pct(f['p90_abs_error'])} "
                     f"| {pct(t['median_abs_error'])} | {pct(t['p90_abs_error'])} | {pct(r['median_abs_error'])} "
                     f"| {pct(r['p90_abs_error'])} |")
    return "\n".join(lines) + "\n"


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
    lines = [f"{name}", f"  {'class':40s} {'rows':>5s} {'cov':>5s} {'used':>5s}   fitted med/P90   table med/P90"
                        "   log-time med/P90"]
    for cls, c in result["classes"].items():
        f, t, r = c["fitted"], c["interpolated"], c["log_time"]
        lines.append(f"  {cls:40s} {c['n']:5d} {c['covered']:5d} {c['used_by_projections']:5d}   "
                     f"{pct(f['median_abs_error'])} {pct(f['p90_abs_error'])}    "
                     f"{pct(t['median_abs_error'])} {pct(t['p90_abs_error'])}   "
                     f"{pct(r['median_abs_error'])} {pct(r['p90_abs_error'])}")
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
