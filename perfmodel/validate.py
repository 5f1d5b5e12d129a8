"""Predicted against published results (``perfmodel validate``).

Reads a table like ``shared/reference/public_validation.csv``: one published measurement a row, with the
hardware, model, parallel layout, precision, sequence lengths, batch and metric. Inference rows are
projected with the scenario the row describes; training rows are listed as not modelled yet.
"""
from __future__ import annotations

import csv
import io
import statistics
from pathlib import Path

from .errors import InputError

REQUIRED = ("id", "kind", "model", "hardware", "tp", "pp", "precision", "isl", "osl", "batch", "metric", "value")
METRICS = {"output_throughput_per_gpu": "throughput_tok_s_per_gpu", "ttft": "ttft_ms", "tpot": "tpot_ms",
           "output_throughput": "throughput_tok_s"}


def default_csv() -> Path:
    from .paths import repo_root

    for cand in (repo_root().parent / "shared" / "reference" / "public_validation.csv",
                 repo_root() / "shared" / "reference" / "public_validation.csv"):
        if cand.is_file():
            return cand
    raise InputError("no validation table found; pass --csv PATH", field="--csv")


def _int(row, col, where):
    try:
        return int(float(row[col]))
    except (TypeError, ValueError):
        raise InputError(f"expected an integer, got {row.get(col)!r}", file=where, field=col) from None


def _scenario_for(row: dict, where: str):
    from .scenario import Scenario

    precision = row["precision"].strip().lower()
    osl = _int(row, "osl", where)
    static = "static" in (row.get("notes") or "").lower() or row["metric"] == "ttft"
    return Scenario(isl=_int(row, "isl", where), osl=max(1, osl), batch=_int(row, "batch", where),
                    tp=_int(row, "tp", where), pp=_int(row, "pp", where), dtype=precision,
                    batching="static" if static else "continuous").validated()


def run_validation(path=None, *, calibration=None, mode: str = "latency") -> list[dict]:
    from .projection import project_resolved
    from .resolve import resolve_hardware, resolve_model, resolve_profile

    p = Path(path) if path else default_csv()
    if not p.is_file():
        raise InputError("no such file", file=str(p))
    rows = list(csv.DictReader(io.StringIO(p.read_text(encoding="utf-8-sig"))))
    if rows:
        missing = [c for c in REQUIRED if c not in rows[0]]
        if missing:
            raise InputError(f"missing column(s) {', '.join(missing)}", file=str(p))
    out = []
    for i, row in enumerate(rows, start=2):
        where = f"{p}:{i}"
        rec = {"id": row["id"], "kind": row["kind"], "hardware": row["hardware"], "model": row["model"],
               "metric": row["metric"], "unit": row.get("unit", ""), "published": float(row["value"]),
               "predicted": None, "error": None, "status": "ok", "calibration": None}
        if row["kind"] != "inference":
            rec["status"] = "not modelled: training support is a later issue"
            out.append(rec)
            continue
        if row["metric"] not in METRICS:
            rec["status"] = f"metric {row['metric']!r} not projected"
            out.append(rec)
            continue
        sc = _scenario_for(row, where).with_(mode=mode)
        hw = resolve_hardware(row["hardware"])
        model = resolve_model(row["model"])
        prof = resolve_profile(calibration, hw)
        try:
            proj = project_resolved(hw, model, sc, prof)
        except InputError as e:
            rec["status"] = f"does not fit: {e.detail}"
            out.append(rec)
            continue
        key = METRICS[row["metric"]]
        value = {"throughput_tok_s_per_gpu": proj.throughput_tok_s_per_gpu, "ttft_ms": proj.ttft_s * 1e3,
                 "tpot_ms": proj.tpot_s * 1e3, "throughput_tok_s": proj.throughput_tok_s}[key]
        rec.update(predicted=value, error=value / rec["published"] - 1.0, calibration=prof.label)
        out.append(rec)
    return out


def summary(rows: list[dict]) -> dict:
    errs = [abs(r["error"]) for r in rows if r["error"] is not None]
    by_metric: dict[str, list[float]] = {}
    for r in rows:
        if r["error"] is not None:
            by_metric.setdefault(r["metric"], []).append(abs(r["error"]))
    return {"rows": len(errs), "median_abs_error": statistics.median(errs) if errs else None,
            "by_metric": {k: statistics.median(v) for k, v in by_metric.items()}}


def validation_table(rows: list[dict]) -> str:
    lines = [f"{'id':<34}{'hardware':<15}{'metric':<27}{'published':>11}{'predicted':>11}{'error':>9}  calibration"]
    for r in rows:
        if r["predicted"] is None:
            lines.append(f"{r['id']:<34}{r['hardware']:<15}{r['metric']:<27}{r['published']:>11.4g}{'-':>11}{'':>9}  "
                         f"{r['status']}")
            continue
        lines.append(f"{r['id']:<34}{r['hardware']:<15}{r['metric']:<27}{r['published']:>11.4g}"
                     f"{r['predicted']:>11.4g}{r['error']:>+9.1%}  {r['calibration']}")
    s = summary(rows)
    if s["median_abs_error"] is not None:
        lines.append("")
        lines.append(f"median |error| over {s['rows']} projected rows: {s['median_abs_error']:.1%}  ("
                     + ", ".join(f"{k} {v:.1%}" for k, v in s["by_metric"].items()) + ")")
    return "\n".join(lines)


def validation_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    cols = ["id", "kind", "hardware", "model", "metric", "unit", "published", "predicted", "error", "status",
            "calibration"]
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: r.get(c) for c in cols})
    return buf.getvalue()
