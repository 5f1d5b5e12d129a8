"""Gated DeltaNet's chunked prefill: the scan model fitted to each engine's measured kernel, beside the product
estimate it replaced.

Every imported calibration folder whose engine table times the chunked gated delta rule (aiconfigurator-core's
``gdn_perf``: flash-linear-attention's ``chunk_gated_delta_rule`` in SGLang, FlashInfer's port in vLLM,
TensorRT-LLM's own, each under CUDA graphs; :mod:`perfmodel.imports.aiconfigurator`) carries the three constants
``perfmodel fit`` fitted to those calls (:mod:`perfmodel.fit.deltanet`, :mod:`perfmodel.cost.scan`). This prints,
per folder, the calls, the constants, the fit's median |error| in-sample and on a quarter of the shapes held out,
and the median |error| on the same calls of what the graph priced before: the chunked form's FLOPs as one
tensor-core product on the folder's fitted GEMM model, the state read and written once. Beside them, the decode
step: the tables' one-token recurrent kernel against the graph's (the fp32 state streamed by the memory model).

    python docs/tools/deltanet_tables.py
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def product_estimate(p: dict, hw, prof) -> float:
    """Seconds the graph priced a chunked call at before the scan: its FLOPs as one product at the tensor cores."""
    from perfmodel.cost import time_op
    from perfmodel.ops import Op

    chunk, dk, dv = 64, p["dk"], p["dv"]
    tokens = p["batch"] * p["tokens"]
    v = p["value_heads"] * dv
    k_eff = (2.0 * chunk * (2 * dk + 2 * dv) + 6.0 * dk * dv) / (2.0 * dv)
    io = tokens * (2 * p["key_heads"] * dk + 2 * v + 2 * p["value_heads"]) * 2
    state = p["batch"] * p["value_heads"] * dk * dv * 4
    op = Op("linear.core", "gemm", "prefill", 2.0 * tokens * v * k_eff, io + 2.0 * state,
            {"m": tokens, "n": v, "k": k_eff, "dtype": "bf16", "groups": 1, "out_dtype": "bf16"})
    return float(time_op(op, hw, prof).time)


def decode_estimate(p: dict, hw, prof) -> float:
    """Seconds of the graph's decode ``linear.core`` for a one-token call (perfmodel/graph.py: _linear_attention):
    each sequence's fp32 state read and written, q, k, v and the gates in, the output out."""
    from perfmodel.cost import time_op
    from perfmodel.ops import elementwise

    b, vh, kh, dk, dv = p["batch"], p["value_heads"], p["key_heads"], p["dk"], p["dv"]
    io = b * (2 * kh * dk + vh * dv + 2 * vh + vh * dv) * 2
    op = elementwise("linear.core", "copy", reads=1, writes=1, flops_per_elem=6.0, elems=b * vh * dk * dv,
                     dtype="fp32", phase="decode", extra_bytes=io)
    return float(time_op(op, hw, prof).time)


def rows() -> list[dict]:
    from perfmodel.fit.deltanet import DELTANET_DIR, scan_rows
    from perfmodel.fit.directory import side_folders
    from perfmodel.measure.store import read_rows
    from perfmodel.paths import calibration_dir
    from perfmodel.profile import load_profile
    from perfmodel.spec import load_spec

    out = []
    for folder in sorted(p for p in calibration_dir().iterdir() if (p / "profile.json").is_file()):
        prof = load_profile(folder / "profile.json")
        found = prof.provenance.get("deltanet")
        if not found:
            continue
        path = folder / "measurements.jsonl.gz"
        calls = scan_rows(read_rows(path if path.is_file() else folder / "measurements.jsonl"))
        hw = load_spec(prof.spec_key)
        if not calls:  # this project's own runs on the part (wherever filed: what the fit read)
            calls = [r for _, sub, part in side_folders(folder, DELTANET_DIR, hw) if part.key == hw.key
                     for r in scan_rows(sub)]
        before = statistics.median(abs(product_estimate(r["params"], hw, prof) / r["time_s"] - 1) for r in calls)
        steps = [r for r in read_rows(path if path.is_file() else folder / "measurements.jsonl")
                 if r.get("kind") == "deltanet" and (r.get("params") or {}).get("phase") == "decode" and r.get("time_s")]
        dec = [decode_estimate(r["params"], hw, prof) / r["time_s"] - 1 for r in steps]
        out.append({"folder": folder.name, "engine": prof.engine, "kernels": ", ".join(found["kernels"]),
                    "rows": found["rows"], "scan": prof.deltanet_scan, "fit": found["median_abs_error"],
                    "held": found["held_out_median_abs_error"], "before": before,
                    "decode": (len(dec), statistics.median(abs(e) for e in dec), statistics.median(dec)) if dec else None})
    return out


OWN = "h200/deltanet-h100-graph"  # this project's run under CUDA graphs (python -m perfmodel.measure.deltanet)


def own_run() -> dict | None:
    """The scan fitted to this project's own CUDA-graph rows, and the same part's SGLang table (the same
    flash-linear-attention kernels) on them."""
    import numpy as np

    from perfmodel.fit.deltanet import fit_scan, predict, scan_rows
    from perfmodel.fit.directory import match_spec
    from perfmodel.measure.store import read_rows
    from perfmodel.paths import calibration_dir
    from perfmodel.profile import load_profile

    path = calibration_dir() / OWN / "measurements.jsonl"
    if not path.is_file():
        return None
    rows = read_rows(path)
    hw = match_spec(next((r["env"] for r in rows if r.get("env")), {}), None)
    found = fit_scan(rows, hw, OWN)
    calls = scan_rows(rows)
    t = np.array([r["time_s"] for r in calls])
    table = load_profile(calibration_dir() / f"{hw.key}-sglang" / "profile.json").deltanet_scan
    e = predict(calls, table, hw.sm_count) / t - 1
    return {**found, "device": hw.name, "part": hw.key, "table_abs": float(np.median(np.abs(e))),
            "table_signed": float(np.median(e))}


def markdown() -> str:
    lines = ["| folder | kernel | calls | fixed (us) | a chunk step (us) | a token and head (ns) | median \\|error\\| "
             "in-sample | held out | the product estimate before | decode steps: calls, graph's median \\|error\\| "
             "(signed) |", "|---|---|---|---|---|---|---|---|---|---|"]
    found = rows()
    for r in found:
        s = r["scan"]
        held = "-" if r["held"] is None else f"{r['held']:.1%}"
        lines.append(f"| {r['folder']} | {r['kernels']} | {r['rows']:,} | {s['fixed_s'] * 1e6:.1f} | "
                     f"{s['chunk_s'] * 1e6:.2f} | {s['token_s'] * 1e9:.2f} | {r['fit']:.1%} | {held} | "
                     f"{r['before']:.1%} | " + ("-" if r["decode"] is None else
                                                 f"{r['decode'][0]:,}, {r['decode'][1]:.1%} ({r['decode'][2]:+.1%})")
                     + " |")
    if found:
        lines += ["", f"Median over the {len(found)} folders: the scan {statistics.median(r['fit'] for r in found):.1%} "
                      f"in-sample, {statistics.median(r['held'] for r in found if r['held'] is not None):.1%} held "
                      f"out; the product estimate {statistics.median(r['before'] for r in found):.1%}."]
    own = own_run()
    if own is not None:
        s = own["scan"]
        lines += ["", f"This project's own run ({own['device']}, `calibration/{OWN}/`, {own['rows']} prefill calls under "
                      f"CUDA graphs): fixed {s['fixed_s'] * 1e6:.1f} us, {s['chunk_s'] * 1e6:.2f} us a chunk step, "
                      f"{s['token_s'] * 1e9:.2f} ns a token and head; median |error| {own['median_abs_error']:.1%} "
                      f"in-sample, {own['held_out_median_abs_error']:.1%} held out. The {own['part']}-sglang table's "
                      f"constants (the same kernels) price these calls at {own['table_abs']:.1%} median |error| "
                      f"({own['table_signed']:+.1%} signed)."]
    return "\n".join(lines)


def main() -> int:
    print(markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
