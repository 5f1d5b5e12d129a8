"""A part's sustained ceilings, read off a calibration folder's measured rows (``perfmodel sustained DIR``).

One procedure for every part, so the figures the hardware specs carry under ``sustained:`` are comparable:

- **GEMM rate per format** (bf16, fp8 with a per-tensor scale, fp4): the median FLOP/s of the products whose
  M, N and K are all at least 4096 (compute-bound at the power-limited clock). Rows that time an engine's
  linear module have their input-quantization prologue (the folder's own fitted one) taken out first.
- **Streaming bandwidth**: the median of bytes moved / time over the rows that stream the most: decode
  attention over at least 512 MB of KV cache (an engine's tables; not MLA, whose latent is shared by every head),
  else device copies of at least 256 MB.
- **All-reduce**: NCCL over 4 GPUs (the world size every table has; else the largest measured inside one
  scale-up domain): the median bus bandwidth of messages of at least 256 MB, and the median time of messages of
  at most 16 KB.

Each figure comes with the text of its source (folder, rows used) for the spec's ``ref``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import InputError

BIG_GEMM = 4096
BIG_KV_BYTES = 512 * 2**20
BIG_COPY_BYTES = 256 * 2**20
BIG_MESSAGE = 256 * 2**20
SMALL_MESSAGE = 16 * 1024
# every table measures 4 GPUs (an NVL72 tray's, an HGX board's half): the one world size all parts share, so the
# all-reduce figures compare across parts (the transfer rules take their ratios)
COMPARE_WORLD = 4


def measure(folder: str | Path) -> dict[str, tuple[float, str]]:
    """{key: (SI value, source text)} for the keys of :data:`perfmodel.spec.SUSTAINED_FIELDS` the rows allow."""
    from .backtest import folder_rows
    from .fit.collectives import comm_rows
    from .fit.directory import match_spec, read_environment
    from .fit.latency import load_cases
    from .cost.comm import bus_factor
    from .cost.gemm import quant_prologue
    from .profile import DEFAULTS, load_profile

    d = Path(folder)
    rows = folder_rows(d)
    hw = match_spec(read_environment(d / "environment.json"), None)
    prof = load_profile(d) if (d / "profile.json").is_file() else DEFAULTS
    cases, _, _, _ = load_cases(rows, 0.0, 0)
    out: dict[str, tuple[float, str]] = {}
    where = f"{d.name}: " + _origin(d)
    for key, dtype, scaling in (("bf16", "bf16", None), ("fp8", "fp8", "tensor"), ("fp4", "fp4", "nvfp4")):
        rates = []
        for c in cases:
            p = c.params
            if c.kind != "gemm" or p["dtype"] != dtype or min(p["m"], p["n"], p["k"]) < BIG_GEMM:
                continue
            if (p.get("scaling") or ("tensor" if dtype == "fp8" else None)) not in (scaling, "rowwise"):
                continue
            t = c.time_s
            if p.get("quant_input"):
                t -= float(quant_prologue(p["m"], p["k"], dtype if dtype != "fp8" else "fp8", dtype,
                                          hw.hbm_bandwidth, prof))
            if t > 0:
                rates.append(2.0 * p["m"] * p["n"] * p["k"] / t)
        if len(rates) >= 3:
            out[key] = (float(np.median(rates)), f"{where} median of {len(rates)} {key} GEMMs with M, N, K >= {BIG_GEMM}")
    # MLA's decode reads a latent shared by every head, which the attention op's bytes do not describe (they
    # read as 5 TB/s on an H100): the ceiling is read off the attention that streams its KV cache as counted
    bws = [float(c.op.bytes) / c.time_s for c in cases
           if c.kind == "attention" and c.params.get("packed") and float(c.op.bytes) >= BIG_KV_BYTES
           and getattr(c, "backend", None) != "mla"]
    what = f"decode attention (not MLA) over >= {BIG_KV_BYTES >> 20} MB of KV cache"
    if len(bws) < 3:
        bws = [2.0 * c.params["bytes"] / c.time_s for c in cases
               if c.kind == "copy" and c.params.get("bytes", 0) >= BIG_COPY_BYTES]
        what = f"device copies of >= {BIG_COPY_BYTES >> 20} MB (bytes read plus written)"
    if len(bws) >= 3:
        out["bandwidth"] = (float(np.median(bws)), f"{where} median of {len(bws)} {what}")
    comms = [r for r in comm_rows(rows) if r["params"].get("backend") == "nccl" and r["params"]["op"] == "all_reduce"
             and int(r["params"]["world_size"]) <= hw.scaleup_domain]
    if comms:
        worlds = {int(r["params"]["world_size"]) for r in comms}
        w = COMPARE_WORLD if COMPARE_WORLD in worlds else max(worlds)
        at = [r for r in comms if int(r["params"]["world_size"]) == w]
        big = [bus_factor("all_reduce", w) * float(r["params"]["bytes"]) / float(r["time_s"]) for r in at
               if float(r["params"]["bytes"]) >= BIG_MESSAGE]
        small = [float(r["time_s"]) for r in at if float(r["params"]["bytes"]) <= SMALL_MESSAGE]
        if len(big) >= 2:
            out["allreduce_busbw"] = (float(np.median(big)), f"{where} NCCL all_reduce x{w}, median bus bandwidth of "
                                                             f"{len(big)} messages >= {BIG_MESSAGE >> 20} MB")
        if len(small) >= 2:
            out["allreduce_latency"] = (float(np.median(small)), f"{where} NCCL all_reduce x{w}, median time of "
                                                                 f"{len(small)} messages <= {SMALL_MESSAGE >> 10} KB")
    if not out:
        raise InputError("no rows here to read a sustained ceiling from", file=str(d))
    return out


def _origin(d: Path) -> str:
    """The measurements' origin in words: the imported package and tables, or the suite's device run."""
    import json

    env = d / "environment.json"
    try:
        doc = json.loads(env.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "measured"
    imp = doc.get("import") if isinstance(doc, dict) else None
    if isinstance(imp, dict):
        return (f"measured, {imp.get('source')} {imp.get('package_version')} {imp.get('system')} "
                f"{imp.get('engine')} {imp.get('engine_version')};")
    return "measured on the lent device (this project's suite);"


def yaml_text(figures: dict[str, tuple[float, str]]) -> str:
    """The ``sustained:`` block for a hardware spec, every figure marked measured with its source."""
    def tf(x):
        return f"{x / 1e12:.0f} TFLOPS"

    lines = ["sustained:"]
    tensor = [k for k in ("bf16", "fp8", "fp4") if k in figures]
    if tensor:
        lines.append("  tensor:")
        for k in tensor:
            v, ref = figures[k]
            lines.append(f"    {k}: {{value: {tf(v)}, source: measured, ref: \"{ref}\"}}")
    for k, fmt in (("bandwidth", lambda x: f"{x / 1e12:.2f} TB/s"), ("allreduce_busbw", lambda x: f"{x / 1e9:.0f} GB/s"),
                   ("allreduce_latency", lambda x: f"{x * 1e6:.1f} us")):
        if k in figures:
            v, ref = figures[k]
            lines.append(f"  {k}: {{value: {fmt(v)}, source: measured, ref: \"{ref}\"}}")
    return "\n".join(lines) + "\n"
