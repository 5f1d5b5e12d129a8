"""Do NVIDIA's imported tables time what this project's suite times? Shapes both measured, compared.

    python -m perfmodel.imports.crosscheck calibration/h200 --system h200_sxm [--engine trtllm]

For every bf16 GEMM shape in the suite's folder that the package's GEMM table also has, the ratio of the
table's latency to the suite's, separately for the suite's standalone rows (one launch, L2 flushed before it)
and its in-stream rows (replayed back to back from a CUDA graph). The imported rows are treated as in-stream
(perfmodel/imports/aiconfigurator.py); a median near 1 against the in-stream rows is what says so.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from ..errors import InputError


def compare(suite_dir: str | Path, system: str, engine: str = "trtllm") -> dict:
    from ..measure.store import read_rows
    from . import aiconfigurator as aic

    src = aic.find_source(None)
    hit = aic.find_table(src, system, "gemm", engine, "gemm_perf", aic.current_version(src, system, engine))
    if hit is None:
        raise InputError(f"no GEMM table for {system} / {engine}", field="--system")
    cols = aic.read_columns(hit[0], ("gemm_dtype", "m", "n", "k", "latency"))
    table = {(int(m), int(n), int(k)): float(t) * aic.MS
             for dt, m, n, k, t in zip(cols["gemm_dtype"], cols["m"], cols["n"], cols["k"], cols["latency"])
             if dt == "bfloat16"}
    path = Path(suite_dir) / "measurements.jsonl"
    out: dict[str, list[float]] = {"standalone": [], "in-stream": []}
    for r in read_rows(path):
        p = r.get("params") or {}
        kind = r.get("kind")
        if not isinstance(r.get("time_s"), (int, float)) or p.get("dtype") != "bf16":
            continue
        if kind == "gemm" or (kind == "instream" and p.get("op") == "gemm"):
            key = (p.get("m"), p.get("n"), p.get("k"))
            if key in table:
                out["standalone" if kind == "gemm" else "in-stream"].append(table[key] / float(r["time_s"]))
    return {k: {"n": len(v), "median": statistics.median(v) if v else None,
                "p10": sorted(v)[len(v) // 10] if v else None, "p90": sorted(v)[(9 * len(v)) // 10] if v else None}
            for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfmodel.imports.crosscheck", description=__doc__.splitlines()[0])
    ap.add_argument("suite_dir")
    ap.add_argument("--system", required=True)
    ap.add_argument("--engine", default="trtllm")
    args = ap.parse_args(argv)
    try:
        res = compare(args.suite_dir, args.system, args.engine)
    except InputError as e:
        print(f"perfmodel: error: {e}", file=sys.stderr)
        return 2
    for side, s in res.items():
        if s["n"]:
            print(f"table / suite, {side:<10} n={s['n']:<4} median {s['median']:.3f}  (P10 {s['p10']:.3f}, "
                  f"P90 {s['p90']:.3f})")
        else:
            print(f"table / suite, {side:<10} no shape in common")
    return 0


if __name__ == "__main__":
    sys.exit(main())
