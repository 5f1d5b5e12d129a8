"""MoE expert products of training measured on the H200 against the training graph's price.

Reads the rows :mod:`perfmodel.measure.grouped_gemm` wrote (``calibration/h200/grouped-gemm``) and prices each the
way ``perfmodel train`` prices an expert product on the H200: the forward as per-expert products over the local experts,
its data and weight gradients as :func:`perfmodel.train.graph.backward` derives them (bf16, the weight gradient
accumulated into an fp32 main gradient), each timed standalone with the profile ``perfmodel train --arch h200``
composes. Prints the median signed error per pass and rows an expert, and per model.

    python docs/tools/grouped_gemm_check.py [--folder DIR] [--format table|markdown]
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

FOLDER = ROOT / "calibration" / "h200" / "grouped-gemm"
ARCH = "h200-sxm"


def measured_rows(folder: Path) -> list[dict]:
    path = folder / "measurements.jsonl"
    if not path.is_file():  # the measurement is not in the repository until a run on a GPU writes it
        print(f"grouped_gemm_check: error: no measurements at {path} (python -m perfmodel.measure.grouped_gemm on "
              "a GPU writes them; --folder DIR reads another run)", file=sys.stderr)
        raise SystemExit(2)
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if r.get("kind") == "grouped_gemm" and r.get("time_s")]


def priced(rows: list[dict]) -> list[float]:
    """Seconds the training graph's cost model gives each measured pass, the op built as the measurement ran it:
    forward and data gradient as :func:`perfmodel.train.graph.backward` derives them, the weight gradient writing
    its bf16 product (the measurement's ``torch._grouped_mm`` output) - the training graph also reads and writes
    the fp32 main gradient there (Megatron's gradient-accumulation fusion), which this measurement does not run."""
    from dataclasses import replace

    from perfmodel import ops as O
    from perfmodel.cost import time_op
    from perfmodel.resolve import resolve_hardware, resolve_profile
    from perfmodel.train.graph import TrainOp, backward
    from perfmodel.train.scenario import TrainScenario

    hw = resolve_hardware(ARCH)
    prof = resolve_profile(None, hw, None)
    ts = TrainScenario(gpus=8, global_batch=8, seq=4096, dtype="bf16")
    out = []
    for r in rows:
        p = r["params"]
        # as train/graph.py's expert GEMMs: per-expert products over the local experts (TransformerEngine's grouped
        # linear), timed by the dense GEMM model, not a serving engine's fused-MoE efficiency
        fwd = O.gemm(f"moe.{p['product']}", p["rows"], p["n"], p["k"], "bf16", groups=p["experts"], phase="prefill")
        ops = {"fwd": fwd}
        for t in backward([TrainOp(fwd, "forward", "fwd")], ts):
            ops[t.role] = t.op
        w = ops["wgrad"]
        ops["wgrad"] = replace(w, bytes=w.bytes - p["experts"] * p["k"] * p["n"] * (4.0 + 4.0 - 2.0))
        out.append(float(time_op(ops[p["pass"]], hw, prof, standalone=True).time))
    return out


def compare(folder: Path = FOLDER) -> dict:
    rows = measured_rows(folder)
    prices = priced(rows)
    groups: dict[tuple, list[float]] = {}
    for r, t in zip(rows, prices):
        p = r["params"]
        err = t / r["time_s"] - 1.0
        groups.setdefault(("pass", p["pass"], p["rows"]), []).append(err)
        groups.setdefault(("model", p["model"], p["pass"]), []).append(err)
    return {k: {"n": len(v), "signed_median": statistics.median(v), "abs_median": statistics.median(map(abs, v))}
            for k, v in sorted(groups.items(), key=lambda kv: (kv[0][0], str(kv[0][1]), str(kv[0][2])))}


def table(result: dict, markdown: bool) -> str:
    head = ("by", "what", "pass / rows", "products", "price error (median, signed)", "|error| median")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] if markdown else ["  ".join(f"{h:>16}" for h in head)]
    for (by, a, b), v in result.items():
        what, sub = (a, f"{b} rows an expert") if by == "pass" else (a, b)
        cells = (by, str(what), str(sub), str(v["n"]), f"{v['signed_median']:+.1%}", f"{v['abs_median']:.1%}")
        lines.append("| " + " | ".join(cells) + " |" if markdown else "  ".join(f"{c:>16}" for c in cells))
    return "\n".join(lines)


def markdown() -> str:
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
