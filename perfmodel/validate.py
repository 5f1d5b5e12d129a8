"""Predicted against published results (``perfmodel validate``).

Reads a table like ``shared/reference/public_validation.csv``: one published measurement a row, with the
hardware, model, parallel layout, precision, sequence lengths, batch and metric. Inference rows are
projected with the scenario the row describes; training rows are listed as not modelled yet.
"""
from __future__ import annotations

import csv
import io
import math
import statistics
from pathlib import Path

from .errors import InputError

REQUIRED = ("id", "kind", "model", "hardware", "tp", "pp", "precision", "isl", "osl", "batch", "metric", "value")
METRICS = {"output_throughput_per_gpu": "throughput_tok_s_per_gpu", "ttft": "ttft_ms", "tpot": "tpot_ms",
           "output_throughput": "throughput_tok_s"}


def default_csv() -> Path:
    """The published-results table shipped in the repository (a copy of the shared reference table)."""
    from .paths import workloads_dir

    cand = workloads_dir() / "validation" / "public_validation.csv"
    if cand.is_file():
        return cand
    raise InputError("no validation table found; pass --csv PATH", field="--csv")


def _float(row, col, where):
    try:
        v = float(row[col])
    except (TypeError, ValueError):
        raise InputError(f"expected a number, got {row.get(col)!r}", file=where, field=col) from None
    if not math.isfinite(v) or v <= 0:
        raise InputError(f"expected a positive finite published value, got {row.get(col)!r}", file=where, field=col)
    return v


def engine_of(row: dict, engine: str) -> str:
    """The engine a row was measured with: ``engine`` unless it is ``auto``, else read off the row's source."""
    if engine != "auto":
        return engine
    text = f"{row.get('source', '')} {row.get('notes', '')}".lower()
    for key, words in (("trtllm", ("tensorrt-llm", "trt-llm", "trtllm")), ("vllm", ("vllm",)),
                       ("sglang", ("sglang",))):
        if any(w in text for w in words):
            return key
    return "auto"


def _int(row, col, where):
    try:
        return int(float(row[col]))
    except (TypeError, ValueError):
        raise InputError(f"expected an integer, got {row.get(col)!r}", file=where, field=col) from None


def _scenario_for(row: dict, where: str, engine: str):
    from .scenario import Scenario

    precision = row["precision"].strip().lower()
    osl = _int(row, "osl", where)
    static = "static" in (row.get("notes") or "").lower() or row["metric"] == "ttft"
    return Scenario(isl=_int(row, "isl", where), osl=max(1, osl), batch=_int(row, "batch", where),
                    tp=_int(row, "tp", where), pp=_int(row, "pp", where), dtype=precision,
                    batching="static" if static else "continuous", engine=engine_of(row, engine)).validated()


def run_validation(path=None, *, calibration=None, mode: str = "latency", engine: str = "auto") -> list[dict]:
    """Project every row of the table; ``engine`` overrides the engine read off each row's source."""
    from .projection import project_resolved
    from .resolve import resolve_hardware, resolve_model, resolve_profile

    p = Path(path) if path else default_csv()
    if not p.is_file():
        raise InputError("no such file", file=str(p))
    if p.stat().st_size > 8 * 2**20:
        raise InputError("larger than 8 MiB: not a validation table", file=str(p))
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text", file=str(p)) from None
    rows = list(csv.DictReader(io.StringIO(text)))
    if rows:
        missing = [c for c in REQUIRED if c not in rows[0]]
        if missing:
            raise InputError(f"missing column(s) {', '.join(missing)}", file=str(p))
    out = []
    for i, row in enumerate(rows, start=2):
        where = f"{p}:{i}"
        rec = {"id": row["id"], "kind": row["kind"], "hardware": row["hardware"], "model": row["model"],
               "metric": row["metric"], "unit": row.get("unit", ""), "published": _float(row, "value", where),
               "predicted": None, "error": None, "status": "ok", "calibration": None, "engine": None}
        if row["kind"] == "training":
            out.append(_training(rec, row, calibration))
            continue
        if row["kind"] != "inference" or row["metric"] not in METRICS:
            rec["status"] = f"{row['kind']} metric {row['metric']!r} not projected"
            out.append(rec)
            continue
        sc = _scenario_for(row, where, engine).with_(mode=mode)
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
        rec.update(predicted=value, error=value / rec["published"] - 1.0, calibration=prof.label,
                   engine=proj.scenario.engine)
        out.append(rec)
    return out


def _training(rec: dict, row: dict, calibration) -> dict:
    """A training row, projected by perfmodel.train."""
    from .train.validate import training_value

    try:
        value, label = training_value(row, calibration)
    except InputError as e:
        rec["status"] = f"not projected: {e.detail}"
        return rec
    rec.update(predicted=value, error=value / rec["published"] - 1.0, calibration=label, engine="megatron")
    return rec


def summary(rows: list[dict]) -> dict:
    """Median |error| overall and by metric, and the median and signed median by part and metric."""
    done = [r for r in rows if r["error"] is not None]
    by_metric: dict[str, list[float]] = {}
    by_part: dict[str, list[float]] = {}
    for r in done:
        by_metric.setdefault(r["metric"], []).append(r["error"])
        by_part.setdefault(f"{r['hardware']} {r['metric']}", []).append(r["error"])
    return {"rows": len(done), "refused": sum(1 for r in rows if r["status"].startswith("does not fit")),
            "median_abs_error": statistics.median(abs(r["error"]) for r in done) if done else None,
            "by_metric": {k: statistics.median(abs(x) for x in v) for k, v in by_metric.items()},
            "by_part": {k: {"n": len(v), "median_abs_error": statistics.median(abs(x) for x in v),
                            "signed_median": statistics.median(v)} for k, v in sorted(by_part.items())}}


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
                     + ", ".join(f"{k} {v:.1%}" for k, v in s["by_metric"].items()) + ")"
                     + (f"; {s['refused']} refused for memory" if s["refused"] else ""))
        lines.append("by part and metric (median |error|, signed median):")
        for k, v in s["by_part"].items():
            lines.append(f"  {k:<44} n={v['n']:<3} {v['median_abs_error']:>6.1%}  {v['signed_median']:>+7.1%}")
    return "\n".join(lines)


def validation_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    cols = ["id", "kind", "hardware", "model", "metric", "unit", "published", "predicted", "error", "status",
            "calibration", "engine"]
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: r.get(c) for c in cols})
    return buf.getvalue()
