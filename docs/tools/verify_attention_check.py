"""Verify-step attention (k query rows a sequence) measured on the H200 against the cost model's price.

Reads the rows :mod:`perfmodel.measure.verify_attention` wrote (``calibration/h200/verify-attention``) and prices
each shape as ``perfmodel predict --arch h200-sxm`` prices it (plain PyTorch's kernels, the H200's standalone
calibration; a forced FlashAttention row with ``kernel`` flash). Prints, per backend and query rows k: the median
signed error of the price, and the median over shapes of t(k) / t(1) measured and priced - how much a verify step's
attention costs over a plain decode step's.

    python docs/tools/verify_attention_check.py [--folder DIR] [--format table|markdown]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FOLDER = ROOT / "calibration" / "h200" / "verify-attention"
COLUMNS = ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim", "causal", "dtype")


def measured_rows(folder: Path) -> list[dict]:
    rows = []
    with open(folder / "measurements.jsonl", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                if r.get("kind") == "attention" and r.get("time_s"):
                    rows.append(r)
    return rows


def compare(folder: Path = FOLDER) -> dict:
    """{(backend, k): {n, signed_median, ratio_measured, ratio_priced}} over the folder's shapes."""
    from perfmodel.predict import predict_rows

    rows = measured_rows(folder)
    cells = []
    for r in rows:
        p = r["params"]
        cell = {"op": "attention", **{c: str(p[c]).lower() for c in COLUMNS}}
        if p["backend"] == "flash":
            cell["kernel"] = "flash"
        cells.append(cell)
    priced = predict_rows(cells, "h200-sxm", source=str(folder))
    by_shape: dict[tuple, dict[int, tuple[float, float]]] = {}
    for r, p in zip(rows, priced):
        q = r["params"]
        shape = (q["backend"], q["batch"], q["heads_q"], q["heads_kv"], q["seq_kv"])
        by_shape.setdefault(shape, {})[q["seq_q"]] = (r["time_s"], float(p["time_ms"]) * 1e-3)
    out: dict[tuple, dict] = {}
    for shape, ks in by_shape.items():
        if 1 not in ks:
            continue
        m1, p1 = ks[1]
        for k, (m, p) in ks.items():
            cell = out.setdefault((shape[0], k), {"err": [], "rm": [], "rp": []})
            cell["err"].append(p / m - 1.0)
            cell["rm"].append(m / m1)
            cell["rp"].append(p / p1)
    return {key: {"n": len(v["err"]), "signed_median": statistics.median(v["err"]),
                  "abs_median": statistics.median(abs(e) for e in v["err"]),
                  "ratio_measured": statistics.median(v["rm"]), "ratio_priced": statistics.median(v["rp"])}
            for key, v in sorted(out.items())}


def table(result: dict, markdown: bool) -> str:
    head = ("backend", "k rows", "shapes", "price error (median, signed)", "|error| median",
            "t(k)/t(1) measured", "t(k)/t(1) priced")
    lines = []
    if markdown:
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    else:
        lines.append("  ".join(f"{h:>14}" for h in head))
    for (backend, k), v in result.items():
        cells = (backend, str(k), str(v["n"]), f"{v['signed_median']:+.1%}", f"{v['abs_median']:.1%}",
                 f"{v['ratio_measured']:.2f}", f"{v['ratio_priced']:.2f}")
        lines.append("| " + " | ".join(cells) + " |" if markdown else "  ".join(f"{c:>14}" for c in cells))
    return "\n".join(lines)


def markdown() -> str:
    """The table of docs/speculative.md's ``verify-attention`` block (calibration/h200/verify-attention)."""
    return table(compare(FOLDER), True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--folder", type=Path, default=FOLDER)
    ap.add_argument("--format", choices=("table", "markdown"), default="table")
    args = ap.parse_args(argv)
    print(table(compare(args.folder), args.format == "markdown"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
