"""Each serving engine's own MoE all-to-all calls, as fitted and as a projection prices them (docs/collectives.md).

aiconfigurator-core 0.12.0 times the all-to-all each engine runs (``perfmodel import aiconfigurator`` brings them
into its folders as rows of kind ``deepep``; ``perfmodel fit`` fits them, :mod:`perfmodel.fit.deepep`): SGLang's
DeepEP calls (``wideep_deepep_*``), vLLM 0.24's and TensorRT-LLM 1.3.0rc11's DeepEP builds (``moe_a2a_perf``,
TensorRT-LLM's in several payload formats) and TensorRT-LLM's MNNVL all-to-all on the GB200 (``trtllm_alltoall_perf``,
its NVLink one-sided kernel). This prints

- ``fits``: per folder, its fitted calls (fixed time, bandwidth, error in-sample and on the shapes held out);
- ``steps``: one MoE layer's dispatch and combine as a projection prices them at DeepSeek-V3's MoE (fp8 experts,
  EP 8 over attention DP 8, ``--moe-exchange all_to_all``): a decode step of 8 and 128 tokens a rank and a prefill
  of 4,096, under each engine on each part;
- ``mnnvl``: the GB200's MNNVL calls against the fit and against the collective model that priced TensorRT-LLM's
  all-to-all before, by expert-parallel size.

    python docs/tools/a2a_engines.py
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ENGINE_FOLDERS = ("h100-sxm-vllm", "h200-sxm-vllm", "b200-vllm", "b300-vllm", "h100-sxm-trtllm", "h200-sxm-trtllm",
                  "b200-trtllm", "b300-trtllm", "gb200-trtllm", "gb300-trtllm")
PARTS = ("h200-sxm", "b200", "gb200")
ENGINES = ("sglang", "vllm", "trtllm")
EP = 8


def _rows(name: str) -> list[dict]:
    from perfmodel.fit.deepep import deepep_rows
    from perfmodel.fit.directory import measurements_path
    from perfmodel.measure.store import read_rows

    return deepep_rows(read_rows(measurements_path(ROOT / "calibration" / name)))


def fits() -> str:
    from perfmodel.fit.deepep import fit_keys
    from perfmodel.profile import load_profile

    lines = ["| folder | call | fixed (us) | per expert (ns) | bandwidth (GB/s) | shapes fitted: median \\|error\\| | "
             "held out: median \\|error\\| |", "|---|---|---|---|---|---|---|"]
    unfitted = []
    for name in ENGINE_FOLDERS:
        report = load_profile(ROOT / "calibration" / name).provenance.get("deepep") or {}
        for key, f in report.items():
            if key == "across":
                continue
            tr, ho = f["train"], f["held_out"]
            held = f"{ho['median_abs_error']:.1%} ({ho['n']})" if ho["n"] else "-"
            lines.append(f"| {name} | {key} | {f['alpha_s'] * 1e6:.1f} | {f['expert_s'] * 1e9:.1f} | "
                         f"{f['bandwidth_gbs']:.0f} | {tr['median_abs_error']:.1%} ({tr['n']}) | {held} |")
        rows = _rows(name)
        keys = fit_keys(rows)
        for key in sorted(set(keys.values()) - set(report)):
            t = [r["time_s"] * 1e6 for r in rows if keys[id(r)] == key]
            unfitted.append(f"{name} {key} ({len(t)} calls, {min(t):.0f}-{max(t):.0f} us)")
    return "\n".join(lines) + ("\n\nNot fitted (their times do not grow with their bytes; the collective model "
                               "prices them): " + "; ".join(unfitted) + "." if unfitted else "")


def formats() -> str:
    """TensorRT-LLM's normal dispatch in NVFP4 against bf16 at the same shapes (4,096 tokens a rank and more)."""
    from perfmodel.graph import payload_bytes

    lines = ["| folder | shapes | NVFP4 / bf16 time, median (range) | NVFP4 / bf16 bytes |", "|---|---|---|---|"]
    for name in ENGINE_FOLDERS:
        if not name.endswith("trtllm"):
            continue
        by = {}
        for r in _rows(name):
            p = r["params"]
            if p["direction"] == "normal.dispatch" and p["tokens"] >= 4096:
                by.setdefault((p["hidden"], p["tokens"], p["top_k"], p["experts"]), {})[p["format"]] = r["time_s"]
        ratios = [v["nvfp4"] / v["bf16"] for v in by.values() if {"nvfp4", "bf16"} <= set(v)]
        if ratios:
            lines.append(f"| {name} | {len(ratios)} | {statistics.median(ratios):.2f} ({min(ratios):.2f}-"
                         f"{max(ratios):.2f}) | {payload_bytes(7168, 'nvfp4') / payload_bytes(7168, 'bf16'):.2f} |")
    return "\n".join(lines)


def _exchange(part: str, engine: str, phase: str, tokens: int) -> tuple[float, float, str, str]:
    """(dispatch s, combine s, dispatch kernel) of one MoE layer on one rank."""
    from perfmodel.projection import step

    decode = phase == "decode"  # a decode step of ``tokens`` sequences a rank, or one prompt of ``tokens`` a rank
    ph = step(part, "deepseek-v3", phase, tokens * EP if decode else EP, seq=None if decode else tokens,
              context=1024 if decode else 0, tp=1, attention_dp=EP, ep=EP, dtype="fp8", engine=engine,
              batching="static", moe_exchange="all_to_all")
    ops = {t.op.name: t for t in ph.times}
    return ops["moe.dispatch"].time, ops["moe.combine"].time, ops["moe.dispatch"].op.params.get("kernel", "")


def steps() -> str:
    from perfmodel.resolve import resolve_hardware, resolve_profile

    lines = ["| part | engine | kernels (dispatch) | DeepEP fit from | decode, 8 tokens a rank: dispatch / combine "
             "(us) | decode, 128 | prefill, 4,096 |", "|---|---|---|---|---|---|---|"]
    for part in PARTS:
        for engine in ENGINES:
            prof = resolve_profile(None, resolve_hardware(part), engine)
            src = (prof.provenance.get("families", {}).get("deepep") or {}).get("profile", "none")
            cells, kernels = [], []
            for phase, n in (("decode", 8), ("decode", 128), ("prefill", 4096)):
                d, c, k = _exchange(part, engine, phase, n)
                cells.append(f"{d * 1e6:,.0f} / {c * 1e6:,.0f}")
                kernels.append(k)
            lines.append(f"| {part} | {engine} | {', '.join(dict.fromkeys(kernels))} | {src} | " + " | ".join(cells)
                         + " |")
    return "\n".join(lines)


def mnnvl() -> str:
    from perfmodel.cost.comm import collective_time, deepep_time
    from perfmodel.fit.deepep import MNNVL_DIRECTIONS, deepep_rows
    from perfmodel.fit.directory import measurements_path
    from perfmodel.measure.store import read_rows
    from perfmodel.profile import DEFAULTS, load_profile
    from perfmodel.spec import load_spec

    folder = ROOT / "calibration" / "gb200-trtllm"
    prof, hw = load_profile(folder), load_spec("gb200")
    rows = [r for r in deepep_rows(read_rows(measurements_path(folder)))
            if r["params"]["direction"] in MNNVL_DIRECTIONS]
    lines = ["| call | EP | calls | the fit: median \\|error\\| (signed) | fitted on every copy instead | the "
             "collective model |", "|---|---|---|---|---|---|"]
    for direction in MNNVL_DIRECTIONS:
        mine = [r for r in rows if r["params"]["direction"] == direction]
        every = _every_copy_fit(mine, hw.scaleup_bandwidth)
        for ep in sorted({r["params"]["ranks"] for r in mine}):
            fit, whole, plain = [], [], []
            for r in (r for r in mine if r["params"]["ranks"] == ep):
                p, t = r["params"], r["time_s"]
                fit.append(deepep_time(direction, p["bytes"], p["experts"], hw, prof, ep) / t - 1)
                whole.append((every[0] + p["bytes"] * every[1]) / t - 1)
                plain.append(collective_time("all_to_all", p["bytes"], ep, ep, hw, DEFAULTS) / t - 1)
            lines.append(f"| {direction} | {ep} | {len(fit)} | {_med(fit)} | {_med(whole)} | {_med(plain)} |")
    return "\n".join(lines)


def _every_copy_fit(rows: list[dict], link_bw: float) -> tuple[float, float]:
    """(fixed s, s a byte) of the calls fitted as perfmodel.fit.deepep does but on every copy a rank sends, its
    own included (all the rows: the comparison is in-sample)."""
    import numpy as np
    from scipy.optimize import nnls

    t = np.array([r["time_s"] for r in rows])
    a = np.c_[np.ones(len(t)), [r["params"]["bytes"] for r in rows]]
    x, _ = nnls(a / t[:, None], np.ones(len(t)))
    return float(x[0]), float(x[1])


def _med(errors: list[float]) -> str:
    return f"{statistics.median(abs(e) for e in errors):.1%} ({statistics.median(errors):+.1%})"


def markdown() -> str:
    return (f"The fits (`perfmodel fit DIR --only deepep`; the shapes each fit held out are a quarter, by a hash of "
            f"the shape):\n\n{fits()}\n\nOne MoE layer's exchange on a rank as a projection prices it "
            f"(DeepSeek-V3, fp8 experts, EP {EP} over attention DP {EP}, `--moe-exchange all_to_all`; the kernel "
            f"names the call and its payload's format):\n\n{steps()}\n\nTensorRT-LLM's normal dispatch in NVFP4 "
            f"against bf16 (the same shapes, 4,096 tokens a rank and more):\n\n{formats()}\n\nTensorRT-LLM's MNNVL "
            f"calls on the GB200 (its table, DeepSeek-V3's MoE, NVFP4 out, bf16 back; the fit's own rows, so "
            f"in-sample but for the quarter it held out), by expert-parallel size: the fit (on the bytes that leave "
            f"the rank), the same form fitted on every copy a rank sends, and the collective model on the same "
            f"bytes:\n\n{mnnvl()}")


if __name__ == "__main__":
    print(markdown())
