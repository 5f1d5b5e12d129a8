"""The cases each family measures, for the "quick" (CPU, a minute) and "full" (H200, minutes) suites.

Pure Python, no torch: ``plan(suite, device)`` returns ``{family: [Case, ...]}`` in run order, with
shapes deduplicated by id. Every case carries a deterministic ``group`` (which model layer or sweep
it came from) so a fitter can hold out whole shapes. ``python -m perfmodel.measure.shapes --suite
full`` prints case counts and a rough H200 time estimate per family.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from typing import Any

from .store import make_id

FAMILIES = ("launch", "copy", "reduce", "gemm", "attention", "rmsnorm", "swiglu", "rotary",
            "residual", "instream", "layer", "power", "train", "collective")

MB = 1 << 20
GB = 1 << 30


@dataclass
class Case:
    kind: str
    params: dict[str, Any]
    group: str
    id: str = field(init=False)

    def __post_init__(self) -> None:
        self.id = make_id(self.kind, self.params)


class Cases:
    """An ordered, id-deduplicated list of cases (first group wins)."""

    def __init__(self) -> None:
        self.items: list[Case] = []
        self.ids: set[str] = set()

    def add(self, kind: str, params: dict[str, Any], group: str) -> bool:
        c = Case(kind, params, group)
        if c.id in self.ids:
            return False
        self.ids.add(c.id)
        self.items.append(c)
        return True


# ---------------------------------------------------------------------------------------------
# copy / reduce
# ---------------------------------------------------------------------------------------------

def stream_sizes(suite: str) -> list[int]:
    if suite == "quick":
        return [1 * MB, 4 * MB, 16 * MB, 64 * MB]
    # 16 log-spaced sizes 1 MB .. 4 GB, rounded to 64 KB
    out = []
    for i in range(16):
        b = 2 ** (20 + 12 * i / 15)
        out.append(int(round(b / 65536)) * 65536)
    return sorted(set(out))


def copy_cases(suite: str) -> list[Case]:
    cs = Cases()
    for b in stream_sizes(suite):
        cs.add("copy", {"bytes": b}, "stream")
    return cs.items


def reduce_cases(suite: str) -> list[Case]:
    cs = Cases()
    for b in stream_sizes(suite):
        cs.add("reduce", {"bytes": b}, "stream")
    return cs.items


# ---------------------------------------------------------------------------------------------
# gemm
# ---------------------------------------------------------------------------------------------

M_DECODE = (1, 2, 4, 8, 16, 32, 64, 128, 256)
M_PREFILL = (512, 1024, 2048, 4096, 8192, 16384)
TPS = (1, 2, 4, 8)
VOCAB = 128256

# name: hidden, qkv output width, intermediate
DENSE_MODELS = {
    "llama8b": (4096, 6144, 14336),
    "llama70b": (8192, 10240, 28672),
    "llama405b": (16384, 18432, 53248),
}
# expert FFNs (expert-parallel: unsharded): name: hidden, expert intermediate
EXPERTS = {
    "mixtral": (4096, 14336),
    "deepseek": (7168, 2048),
}
CORE = {"llama8b-tp1", "llama70b-tp8"}  # these (N, K) pairs get every M


def model_linears() -> list[tuple[str, int, int]]:
    """(group, N, K) for every projection of the real models at every TP degree."""
    out: list[tuple[str, int, int]] = []
    for name, (h, qkv, inter) in DENSE_MODELS.items():
        for tp in TPS:
            g = f"{name}-tp{tp}"
            out += [
                (f"{g}-qkv", qkv // tp, h),
                (f"{g}-o", h, h // tp),
                (f"{g}-gate_up", 2 * inter // tp, h),
                (f"{g}-down", h, inter // tp),
                (f"{g}-lmhead", VOCAB // tp, h),
            ]
    for name, (h, inter) in EXPERTS.items():
        out += [
            (f"{name}-expert-gate_up", 2 * inter, h),
            (f"{name}-expert-down", h, inter),
        ]
    return out


def _rot(seq: tuple[int, ...], i: int, n: int, stride: int) -> list[int]:
    return [seq[(i * stride + j * (len(seq) // n + 1)) % len(seq)] for j in range(n)]


def gemm_model_shapes() -> list[tuple[str, int, int, int]]:
    """(group, m, n, k): core pairs at all 15 M, the others at 2 decode + 2 prefill M (rotating)."""
    out = []
    for i, (g, n, k) in enumerate(model_linears()):
        base = g.rsplit("-", 1)[0]
        if base in CORE:
            ms = list(M_DECODE) + list(M_PREFILL)
        else:
            ms = _rot(M_DECODE, i, 2, 2) + _rot(M_PREFILL, i, 2, 1)
        for m in ms:
            out.append((g, m, n, k))
    return out


def gemm_square_shapes() -> list[tuple[str, int, int, int]]:
    return [("square", s, s, s) for s in (256, 512, 1024, 2048, 4096, 8192, 16384)]


def gemm_awkward_shapes(sm_count: int = 132) -> list[tuple[str, int, int, int]]:
    out: list[tuple[str, int, int, int]] = []
    odd = (1000, 1536, 2304, 4095, 4097, 6144 + 64, 127, 129, 1023, 1025, 8191, 8193)
    for n in odd:  # awkward N at decode, mid and prefill M
        for m in (16, 4096):
            out.append(("awkward-n", m, n, 4096))
    for m in (127, 129, 1000, 1023, 1025, 4095, 4097, 6208):  # awkward M
        out.append(("awkward-m", m, 4096, 4096))
    out.append(("awkward-k", 2048, 4096, 4095))
    out.append(("awkward-k", 2048, 4096, 4097))
    out.append(("awkward-k", 2048, 4096, 1000))
    # wave quantization: output tiles just below / at / above a multiple of the SM count
    for n in (4096, 8192):
        for tile_m, tile_n in ((128, 128), (128, 256)):
            cols = math.ceil(n / tile_n)
            for waves in (1, 2, 4):
                rows = (sm_count * waves) // cols
                for r, extra in ((rows, 0), (rows + 1, 0), (rows, 1)):
                    m = r * tile_m + extra
                    if m > 0:
                        out.append((f"waves-{tile_m}x{tile_n}", m, n, 8192))
    return out


def gemm_random_shapes(count: int, seed: int = 2026) -> list[tuple[str, int, int, int]]:
    """(dtype, m, n, k) drawn log-uniformly: m 1..16384, n and k 256..32768, capped at 2e12 FLOPs."""
    import random

    rng = random.Random(seed)
    out: list[tuple[str, int, int, int]] = []
    while len(out) < count:
        m = max(1, int(round(2 ** rng.uniform(0, 14))))
        dtype = "bf16" if len(out) % 4 else "fp8"
        align = (16 if dtype == "fp8" else 8) if rng.random() < 0.2 else 64  # _scaled_mm needs 16
        n = max(align, int(round(2 ** rng.uniform(8, 15) / align)) * align)
        k = max(align, int(round(2 ** rng.uniform(8, 15) / align)) * align)
        if 2.0 * m * n * k > 2e12:
            continue
        out.append((dtype, m, n, k))
    return out


def gemm_flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


def gemm_cases(suite: str, device: str, *, fp8: bool = True, sm_count: int = 132) -> list[Case]:
    cs = Cases()

    def add(dtype: str, g: str, m: int, n: int, k: int) -> None:
        cs.add("gemm", {"m": m, "n": n, "k": k, "dtype": dtype}, g)

    if suite == "quick":
        small = [("quick", 1, 256, 256), ("quick", 8, 512, 256), ("quick", 64, 256, 512),
                 ("quick", 128, 128, 128), ("quick", 256, 256, 256), ("quick", 129, 255, 256)]
        for s in small:
            add("fp32", *s)
        for s in small[:4]:
            add("bf16", *s)
        if device.startswith("cuda"):
            for s in small[:3]:
                add("fp16", *s)
                add("tf32", *s)
                if fp8:
                    add("fp8", *s)
        return cs.items

    model = gemm_model_shapes()
    square = gemm_square_shapes()
    awkward = gemm_awkward_shapes(sm_count)
    for s in model + square + awkward:
        add("bf16", *s)
    # shapes no model table produced: log-uniform, seeded, mostly 64-aligned (some only 8-aligned)
    for s in gemm_random_shapes(160):
        add(s[0], "random", *s[1:])
    # fp16: every 4th model shape, the squares, a few awkward ones
    for i, s in enumerate(model):
        if i % 5 == 0:
            add("fp16", *s)
    for s in square:
        add("fp16", *s)
    for s in awkward[::6]:
        add("fp16", *s)
    # fp8: every 4th model shape (offset), squares; _scaled_mm wants K and N multiples of 16
    if fp8:
        for i, s in enumerate(model):
            if i % 5 == 2 and s[2] % 16 == 0 and s[3] % 16 == 0:
                add("fp8", *s)
        for s in square:
            add("fp8", *s)
        for s in awkward:
            if s[0].startswith("waves") and s[2] % 16 == 0 and s[3] % 16 == 0 and len(cs.items) % 3 == 0:
                add("fp8", *s)
        # rowwise scales (a scale per row of A and per column of B): the fp8 recipe serving engines run
        for i, s in enumerate(model):
            if i % 10 == 7 and s[2] % 16 == 0 and s[3] % 16 == 0:
                cs.add("gemm", {"m": s[1], "n": s[2], "k": s[3], "dtype": "fp8", "scaling": "rowwise"}, s[0])
        for s in square[2:]:
            cs.add("gemm", {"m": s[1], "n": s[2], "k": s[3], "dtype": "fp8", "scaling": "rowwise"}, s[0])
    # tf32 / fp32: fewer, and capped in size (fp32 on vector units is ~15x slower than bf16)
    for i, s in enumerate(model):
        if i % 8 == 1 and gemm_flops(*s[1:]) <= 4e12:
            add("tf32", *s)
    for s in square:
        if s[1] <= 8192:
            add("tf32", *s)
    for i, s in enumerate(model):
        if i % 16 == 3 and gemm_flops(*s[1:]) <= 1e12:
            add("fp32", *s)
    for s in square:
        if s[1] <= 4096:
            add("fp32", *s)
    return cs.items


# ---------------------------------------------------------------------------------------------
# attention
# ---------------------------------------------------------------------------------------------

HEAD_CONFIGS = ((32, 8, 128), (64, 8, 128), (8, 1, 128), (16, 2, 128), (32, 32, 128), (28, 4, 128),
                (64, 64, 128))
PREFILL_SEQS = (128, 512, 1024, 2048, 4096, 8192, 16384)
DECODE_CONTEXTS = (128, 512, 1024, 2048, 4096, 8192, 16384, 32768)
DECODE_BATCHES = (1, 4, 16, 64, 128, 256)
KV_LIMIT_BYTES = 40e9
PREFILL_TOKENS = 16384


def kv_cache_bytes(batch: int, heads_kv: int, seq_kv: int, head_dim: int, elem: int = 2) -> int:
    return 2 * batch * heads_kv * seq_kv * head_dim * elem


MLA_PREFILL = (16, 16, 192, 128)  # DeepSeek-V3 prefill at TP 8: 16 heads, 192-wide QK, 128-wide V
LONG_PREFILL = ((64, 8, 128), (32, 8, 128), (8, 1, 128))
LONG_SEQ = 32768


def attention_shapes(suite: str) -> list[tuple[str, dict[str, Any]]]:
    """(group, shape params) of every attention shape, without the backend."""
    out: list[tuple[str, dict[str, Any]]] = []

    def add(g, b, hq, hkv, sq, skv, d, causal, dv=None):
        shape = {"batch": b, "heads_q": hq, "heads_kv": hkv, "seq_q": sq, "seq_kv": skv, "head_dim": d,
                 "causal": causal, "dtype": "bf16"}
        if dv is not None and dv != d:
            shape["head_dim_v"] = dv
        out.append((g, shape))

    if suite == "quick":
        add("prefill", 1, 4, 2, 64, 64, 64, True)
        add("prefill", 2, 4, 4, 128, 128, 64, True)
        add("decode", 2, 4, 1, 1, 256, 64, False)
        add("decode", 4, 8, 2, 1, 512, 64, False)
        return out
    for hq, hkv, d in HEAD_CONFIGS:
        g = f"h{hq}-kv{hkv}-d{d}"
        for s in PREFILL_SEQS:
            for b in sorted({max(1, PREFILL_TOKENS // s), 1}, reverse=True):
                add(f"prefill-{g}", b, hq, hkv, s, s, d, True)
    for hq, hkv, d in LONG_PREFILL:
        add(f"prefill-h{hq}-kv{hkv}-d{d}", 1, hq, hkv, LONG_SEQ, LONG_SEQ, d, True)
    hq, hkv, d, dv = MLA_PREFILL
    for s in (1024, 4096, 16384):
        for b in sorted({max(1, PREFILL_TOKENS // s), 1}, reverse=True):
            add(f"prefill-mla-h{hq}", b, hq, hkv, s, s, d, True, dv)
    for hq, hkv, d in HEAD_CONFIGS:
        g = f"h{hq}-kv{hkv}-d{d}"
        for ctx in DECODE_CONTEXTS:
            for b in DECODE_BATCHES:
                if kv_cache_bytes(b, hkv, ctx, d) > KV_LIMIT_BYTES:
                    continue
                add(f"decode-{g}", b, hq, hkv, 1, ctx, d, False)
    return out


def sdpa_backends_for(device: str) -> tuple[str, ...]:
    """What the suite measures on ``device``: the plain call ("default") and each SDPA backend forced
    that can exist there (perfmodel.measure.sdpa)."""
    if device.startswith("cuda"):
        return ("default", "flash", "cudnn", "efficient")
    return ("default", "flash")  # CPU: math (the default) and the CPU flash kernel


def attention_cases(suite: str, device: str = "cuda") -> list[Case]:
    """Every shape under plain dispatch ("default", whose kernels the row records) and under each SDPA
    backend forced; the slow memory-efficient backend on every third shape only."""
    cs = Cases()
    for i, (g, shape) in enumerate(attention_shapes(suite)):
        for backend in sdpa_backends_for(device):
            if backend == "efficient" and suite == "full" and i % 3:
                continue
            cs.add("attention", {"backend": backend, **shape}, g)
    return cs.items


def attention_flops(p: dict[str, Any]) -> float:
    """2 x (QK^T and PV) multiply-adds over the (query, key) pairs evaluated (a causal triangle)."""
    d, dv = p["head_dim"], p.get("head_dim_v") or p["head_dim"]
    pairs = p["seq_q"] * p["seq_kv"]
    if p["causal"] and p["seq_q"] == p["seq_kv"]:
        pairs = p["seq_q"] * (p["seq_q"] + 1) / 2.0
    return 2.0 * p["batch"] * p["heads_q"] * pairs * (d + dv)


def attention_bytes(p: dict[str, Any], elem: int = 2) -> float:
    """Q read, O written, K and V read once each."""
    d, dv = p["head_dim"], p.get("head_dim_v") or p["head_dim"]
    qo = p["batch"] * p["heads_q"] * p["seq_q"] * (d + dv) * elem
    return qo + p["batch"] * p["heads_kv"] * p["seq_kv"] * (d + dv) * elem


# ---------------------------------------------------------------------------------------------
# elementwise families
# ---------------------------------------------------------------------------------------------

TOKENS = (1, 8, 64, 256, 1024, 4096, 16384, 65536)
HIDDENS = (2048, 4096, 5120, 8192, 16384)
WIDTHS = (1792, 3584, 7168, 14336, 28672, 53248)


def rmsnorm_cases(suite: str) -> list[Case]:
    cs = Cases()
    if suite == "quick":
        for t, h in ((1, 256), (64, 1024), (1024, 2048), (4096, 1024)):
            cs.add("rmsnorm", {"tokens": t, "hidden": h, "dtype": "bf16"}, "quick")
        return cs.items
    for h in HIDDENS:
        for t in TOKENS:
            cs.add("rmsnorm", {"tokens": t, "hidden": h, "dtype": "bf16"}, f"hidden{h}")
    return cs.items


def swiglu_cases(suite: str) -> list[Case]:
    cs = Cases()
    if suite == "quick":
        for t, w in ((1, 256), (64, 1792), (1024, 1792), (2048, 3584)):
            cs.add("swiglu", {"tokens": t, "width": w, "dtype": "bf16"}, "quick")
        return cs.items
    for w in WIDTHS:
        for t in TOKENS:
            cs.add("swiglu", {"tokens": t, "width": w, "dtype": "bf16"}, f"width{w}")
    return cs.items


def rotary_cases(suite: str) -> list[Case]:
    cs = Cases()
    if suite == "quick":
        for t, h, d in ((1, 8, 64), (64, 8, 128), (1024, 8, 128)):
            cs.add("rotary", {"tokens": t, "heads": h, "head_dim": d, "dtype": "bf16"}, "quick")
        return cs.items
    for h, d in ((32, 128), (8, 128), (64, 128), (4, 128)):
        for t in (1, 64, 1024, 8192, 32768):
            cs.add("rotary", {"tokens": t, "heads": h, "head_dim": d, "dtype": "bf16"}, f"heads{h}")
    return cs.items


def residual_cases(suite: str) -> list[Case]:
    cs = Cases()
    if suite == "quick":
        for t, h in ((1, 256), (64, 1024), (1024, 2048), (4096, 4096)):
            cs.add("residual", {"tokens": t, "hidden": h, "dtype": "bf16"}, "quick")
        return cs.items
    for h in HIDDENS:
        for t in TOKENS:
            cs.add("residual", {"tokens": t, "hidden": h, "dtype": "bf16"}, f"hidden{h}")
    return cs.items


def launch_cases(suite: str, device: str) -> list[Case]:
    cs = Cases()
    cs.add("launch", {"mode": "eager"}, "launch")
    if device.startswith("cuda"):
        cs.add("launch", {"mode": "graph"}, "launch")
        cs.add("launch", {"mode": "queued"}, "launch")  # perfmodel.measure.launch
        cs.add("launch", {"mode": "driver"}, "launch")
        for vocab in (32000, 128256, 151936):  # Llama-2, Llama-3, Qwen vocabularies
            for sampling in ("greedy", "top_p"):
                cs.add("launch", {"mode": "round_trip", "vocab": vocab, "sampling": sampling}, "launch")
    return cs.items


# ---------------------------------------------------------------------------------------------
# in-stream: the same operators run back to back inside one CUDA graph
# ---------------------------------------------------------------------------------------------

def instream_cases(suite: str) -> list[Case]:
    """Per-op time of ``copies`` instances (distinct inputs) replayed back to back in one CUDA graph.

    A standalone event timing includes the launch latency of its one kernel and, for multi-kernel
    eager ops, host dispatch; a decoder layer replayed from a graph pays neither. These cases measure
    what an op costs inside such a stream, so the model can tell the two apart. (CPU: eager, back to back.)
    """
    cs = Cases()

    def add(op: str, params: dict[str, Any], group: str, copies: int = 8) -> None:
        cs.add("instream", {"op": op, **params, "copies": copies}, f"instream-{group}")

    if suite == "quick":
        add("gemm", {"m": 1, "n": 256, "k": 256, "dtype": "bf16"}, "gemm", 2)
        add("rmsnorm", {"tokens": 8, "hidden": 256, "dtype": "bf16"}, "rmsnorm", 2)
        add("swiglu", {"tokens": 8, "width": 256, "dtype": "bf16"}, "swiglu", 2)
        add("rotary", {"tokens": 8, "heads": 4, "head_dim": 64, "dtype": "bf16"}, "rotary", 2)
        add("residual", {"tokens": 8, "hidden": 256, "dtype": "bf16"}, "residual", 2)
        add("copy", {"bytes": 65536}, "copy", 2)
        add("attention", {"backend": "default", "batch": 1, "heads_q": 4, "heads_kv": 2, "seq_q": 1, "seq_kv": 64,
                          "head_dim": 64, "causal": False, "dtype": "bf16"}, "attention", 2)
        return cs.items
    widths = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),  # Llama-3.1-8B
              (1280, 8192), (8192, 1024), (7168, 8192), (8192, 3584))  # Llama-3.1-70B, TP 8
    for m in (1, 16, 64, 256):
        for n, k in widths:
            add("gemm", {"m": m, "n": n, "k": k, "dtype": "bf16"}, "gemm")
    for m in (1, 64):
        for n, k in ((6144, 4096), (28672, 4096)):
            add("gemm", {"m": m, "n": n, "k": k, "dtype": "fp8"}, "gemm-fp8")
    for hq, hkv in ((32, 8), (8, 1)):
        for ctx in (1024, 4096):
            for b in (1, 8, 32, 128):
                add("attention", {"backend": "default", "batch": b, "heads_q": hq, "heads_kv": hkv, "seq_q": 1,
                                  "seq_kv": ctx + 1, "head_dim": 128, "causal": False, "dtype": "bf16"},
                    "attention-decode")
        for s in (512, 2048):
            add("attention", {"backend": "default", "batch": 1, "heads_q": hq, "heads_kv": hkv, "seq_q": s,
                              "seq_kv": s, "head_dim": 128, "causal": True, "dtype": "bf16"}, "attention-prefill", 4)
    tokens = (1, 8, 32, 128, 512, 2048)
    for h in (4096, 8192):
        for t in tokens:
            add("rmsnorm", {"tokens": t, "hidden": h, "dtype": "bf16"}, "rmsnorm")
    for w in (14336, 3584):
        for t in tokens:
            add("swiglu", {"tokens": t, "width": w, "dtype": "bf16"}, "swiglu")
    for heads in (32, 8, 1):
        for t in tokens:
            add("rotary", {"tokens": t, "heads": heads, "head_dim": 128, "dtype": "bf16"}, "rotary")
    for h in (4096, 8192):
        for t in (1, 8, 128, 2048):
            add("residual", {"tokens": t, "hidden": h, "dtype": "bf16"}, "residual")
    for nbytes in (8 * 1024, 64 * 1024, MB, 16 * MB):
        add("copy", {"bytes": nbytes}, "copy")
    return cs.items


# ---------------------------------------------------------------------------------------------
# layers
# ---------------------------------------------------------------------------------------------

LAYER_MODELS = {
    # name: hidden, heads, kv_heads, head_dim, intermediate
    "llama-3.1-8b": (4096, 32, 8, 128, 14336),
    "llama-3.1-70b": (8192, 64, 8, 128, 28672),
    "tiny": (256, 4, 2, 64, 512),
}


def _layer(model: str, tp: int, phase: str, batch: int, seq: int, context: int, graph: bool) -> dict:
    h, nh, nkv, d, inter = LAYER_MODELS[model]
    return {"model": model, "hidden": h, "heads": nh, "kv_heads": nkv, "head_dim": d,
            "intermediate": inter, "tp": tp, "phase": phase, "batch": batch, "seq": seq,
            "context": context, "dtype": "bf16", "graph": graph}


def layer_cases(suite: str, device: str) -> list[Case]:
    cs = Cases()
    graph = device.startswith("cuda")
    if suite == "quick":
        cs.add("layer", _layer("tiny", 1, "prefill", 1, 32, 0, False), "tiny")
        cs.add("layer", _layer("tiny", 2, "prefill", 2, 64, 0, False), "tiny")
        cs.add("layer", _layer("tiny", 1, "decode", 2, 1, 64, graph), "tiny")
        return cs.items
    full_grid = [("llama-3.1-8b", 1), ("llama-3.1-70b", 8)]
    partial = [("llama-3.1-70b", 1), ("llama-3.1-70b", 2), ("llama-3.1-70b", 4)]
    for model, tp in full_grid:
        g = f"{model}-tp{tp}"
        for s in (512, 2048, 8192):
            cs.add("layer", _layer(model, tp, "prefill", 1, s, 0, False), g)
        for ctx in (1024, 4096):
            for b in (1, 8, 32, 128):
                cs.add("layer", _layer(model, tp, "decode", b, 1, ctx, graph), g)
    for model, tp in partial:
        g = f"{model}-tp{tp}"
        cs.add("layer", _layer(model, tp, "prefill", 1, 2048, 0, False), g)
        for b in (1, 32):
            cs.add("layer", _layer(model, tp, "decode", b, 1, 4096, graph), g)
    cs.add("layer", _layer("llama-3.1-70b", 8, "prefill", 4, 2048, 0, False), "llama-3.1-70b-tp8")
    cs.add("layer", _layer("llama-3.1-70b", 8, "decode", 8, 1, 16384, graph), "llama-3.1-70b-tp8")
    # more batch and context at every layout (added 2026-12-03 for validation)
    for model, tp, phase, b, s, c in (("llama-3.1-8b", 1, "prefill", 4, 1024, 0), ("llama-3.1-8b", 1, "decode", 64, 1, 8192),
                                      ("llama-3.1-8b", 1, "decode", 256, 1, 2048), ("llama-3.1-70b", 4, "decode", 64, 1, 2048),
                                      ("llama-3.1-70b", 2, "decode", 128, 1, 1024), ("llama-3.1-70b", 8, "prefill", 8, 1024, 0),
                                      ("llama-3.1-70b", 8, "decode", 256, 1, 4096), ("llama-3.1-70b", 1, "prefill", 2, 4096, 0)):
        cs.add("layer", _layer(model, tp, phase, b, s, c, graph and phase == "decode"), f"{model}-tp{tp}")
    return cs.items


# ---------------------------------------------------------------------------------------------
# power: sustained loops with the energy they take (perfmodel.measure.power)
# ---------------------------------------------------------------------------------------------

def power_cases(suite: str, device: str, *, fp8: bool = True) -> list[Case]:
    """Workloads the power model is fitted to (compute-bound and memory-bound kernels per format, idle),
    and whole decoder layers it is checked against (``held_out``: never fitted)."""
    cs = Cases()

    def add(workload: str, params: dict[str, Any], held_out: bool = False) -> None:
        cs.add("power", {"workload": workload, **params, "held_out": held_out}, f"power-{workload}")

    add("idle", {})
    if suite == "quick":
        add("gemm", {"m": 128, "n": 256, "k": 256, "dtype": "fp32"})
        add("layer", _layer("tiny", 1, "prefill", 1, 32, 0, False), held_out=True)
        return cs.items
    for m, n, k in ((8192, 8192, 8192), (1024, 8192, 8192), (16, 28672, 8192), (256, 8192, 8192),
                    (128, 28672, 8192)):
        add("gemm", {"m": m, "n": n, "k": k, "dtype": "bf16"})
    if fp8:  # compute-bound at the power limit, and mid intensity below it
        for m, n, k in ((8192, 8192, 8192), (512, 8192, 8192), (64, 28672, 8192)):
            add("gemm", {"m": m, "n": n, "k": k, "dtype": "fp8"})
    add("copy", {"bytes": 1 << 30})
    add("attention", {"backend": "default", "batch": 1, "heads_q": 64, "heads_kv": 8, "seq_q": 8192, "seq_kv": 8192,
                      "head_dim": 128, "causal": True, "dtype": "bf16"})
    add("attention", {"backend": "default", "batch": 64, "heads_q": 32, "heads_kv": 8, "seq_q": 1, "seq_kv": 8192,
                      "head_dim": 128, "causal": False, "dtype": "bf16"})
    graph = device.startswith("cuda")
    for params in (_layer("llama-3.1-8b", 1, "prefill", 1, 2048, 0, False),
                   _layer("llama-3.1-70b", 2, "prefill", 1, 2048, 0, False),
                   _layer("llama-3.1-70b", 8, "decode", 32, 1, 4096, graph),
                   _layer("llama-3.1-8b", 1, "decode", 128, 1, 1024, graph),
                   _layer("llama-3.1-8b", 1, "decode", 32, 1, 4096, graph),
                   _layer("llama-3.1-70b", 4, "decode", 64, 1, 2048, graph),
                   _layer("llama-3.1-70b", 8, "prefill", 4, 2048, 0, False),
                   _layer("llama-3.1-8b", 1, "prefill", 4, 1024, 0, False)):
        add("layer", params, held_out=True)
    return cs.items


# ---------------------------------------------------------------------------------------------
# collectives
# ---------------------------------------------------------------------------------------------

COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")
# GEMM-collective overlap (perfmodel.measure.collectives): "stream" runs a GEMM and an independent
# collective on two streams; "decomposed" splits a GEMM's rows into chunks and reduces each chunk's output
# while the next chunk computes (async TP / Flux-style pipelining, done here with NCCL on a second stream)
OVERLAP_METHODS = ("stream", "decomposed")


def collective_sizes(suite: str, device: str) -> list[int]:
    """Per-rank input buffer sizes: 4 KB .. 4 MB (x4 steps) on a CPU or in the quick suite, 4 KB .. 4 GB
    (x2 steps, 21 sizes) in the full suite on GPUs. The worker drops the sizes whose buffers do not fit."""
    if suite == "quick" or not device.startswith("cuda"):
        return [4096 * 4 ** i for i in range(6)]  # 4 KB .. 4 MB
    return [4096 * 2 ** i for i in range(21)]  # 4 KB .. 4 GB


def collective_passes(sizes: list[int]) -> list[list[int]]:
    """The sizes in two passes, every other size first, so a run cut by its time budget still spans the
    whole range at half the resolution; --resume fills in the rest."""
    return [sizes[0::2], sizes[1::2]]


def collective_worlds(nproc: int) -> list[int]:
    """World sizes 2 .. nproc (sub-communicators of the first w ranks), most useful first: all ranks,
    the pair, the powers of two, then the others."""
    if nproc < 2:
        return []
    first = [nproc, 2] + [2 ** i for i in range(2, 8) if 2 ** i < nproc]
    rest = [w for w in range(3, nproc) if w not in first]
    out: list[int] = []
    for w in first + rest:
        if w not in out:
            out.append(w)
    return out


def overlap_worlds(nproc: int) -> list[int]:
    """Overlap runs at the full world and the pair (the SM share NCCL takes barely depends on the world)."""
    return [w for w in dict.fromkeys([nproc, 2]) if w >= 2]


def overlap_cases(suite: str, device: str) -> list[dict[str, Any]]:
    """Parameters of the overlap cases (world size and backend added by the worker). GEMM m x n x k in the
    suite's dtype; ``bytes`` is the collective's per-rank input (stream) or the GEMM output (decomposed)."""
    cases: list[dict[str, Any]] = []
    if suite == "quick" or not device.startswith("cuda"):
        # tiny: on a CPU the numbers mean nothing, the code path is what is exercised
        for op, nbytes in (("all_reduce", 64 * 1024), ("all_gather", 16 * 1024)):
            cases.append({"method": "stream", "op": op, "bytes": nbytes, "m": 96, "n": 96, "k": 96, "chunks": 1})
        for op, chunks in (("all_reduce", 1), ("all_reduce", 2), ("reduce_scatter", 2)):
            cases.append({"method": "decomposed", "op": op, "bytes": 128 * 64 * 4, "m": 128, "n": 64, "k": 64,
                          "chunks": chunks})
        return cases
    # one long GEMM (8192^3 bf16, ~1.4 ms on an H200) beside collectives from ~10x shorter to ~4x longer
    # than it, and a short one (4096^3, ~0.2 ms): both orders of finishing pin the SM share and interference
    for op, sizes in (("all_reduce", (8 * MB, 32 * MB, 128 * MB, 512 * MB)), ("all_gather", (4 * MB, 64 * MB)),
                      ("reduce_scatter", (32 * MB, 512 * MB)), ("all_to_all", (32 * MB, 256 * MB))):
        for nbytes in sizes:
            cases.append({"method": "stream", "op": op, "bytes": nbytes, "m": 8192, "n": 8192, "k": 8192,
                          "chunks": 1})
    cases.append({"method": "stream", "op": "all_reduce", "bytes": 32 * MB, "m": 4096, "n": 4096, "k": 4096,
                  "chunks": 1})
    # row-parallel projections of a TP-8 Llama-3.1-70B layer: o_proj (K = 8192 / 8) and down_proj
    # (K = 28672 / 8) at 4k and 8k tokens, their output all-reduced (or reduce-scattered: sequence parallel)
    for m, n, k in ((4096, 8192, 1024), (8192, 8192, 3584), (4096, 8192, 3584)):
        for op in ("all_reduce", "reduce_scatter"):
            for chunks in (1, 2, 4, 8):
                cases.append({"method": "decomposed", "op": op, "bytes": m * n * 2, "m": m, "n": n, "k": k,
                              "chunks": chunks})
    return cases


def tp_layer_worlds(nproc: int) -> list[int]:
    """Tensor-parallel degrees of the whole-layer validation cases: the powers of two 2..nproc."""
    return [w for w in (2, 4, 8, 16) if w <= nproc]


def tp_layer_cases(suite: str, device: str) -> list[dict[str, Any]]:
    """Whole decoder layers with their two all-reduces, at TP = the world size (set by the worker), for
    validation only: the layer family's shapes (``_layer``), prefill eager, decode eager and replayed from a
    CUDA graph on GPUs (NCCL collectives captured in it)."""
    graph = device.startswith("cuda")
    if suite == "quick" or not graph:
        return [_layer("tiny", 0, "prefill", 1, 32, 0, False), _layer("tiny", 0, "decode", 2, 1, 64, graph)]
    return ([_layer("llama-3.1-70b", 0, "prefill", 1, s, 0, False) for s in (512, 2048, 8192)]
            + [_layer("llama-3.1-70b", 0, "decode", b, 1, 4096, False) for b in (1, 32)]
            + [_layer("llama-3.1-70b", 0, "decode", b, 1, 4096, True) for b in (1, 32, 128)])


# ---------------------------------------------------------------------------------------------
# the plan
# ---------------------------------------------------------------------------------------------

# share of the total time budget (full suite); unused time rolls over to later families
BUDGET_WEIGHTS = {
    "launch": 1, "copy": 2, "reduce": 2, "gemm": 30, "attention": 40, "rmsnorm": 2, "swiglu": 2,
    "rotary": 2, "residual": 2, "instream": 5, "layer": 5, "power": 6, "train": 8, "collective": 10,
}


def _training_cases(suite: str, device: str) -> list[Case]:
    """Backward kernels, the optimizer, the loss and whole training steps (perfmodel.measure.training)."""
    from .training import training_cases

    return training_cases(suite, device)


def plan(suite: str, device: str, *, fp8: bool = True, sm_count: int = 132) -> dict[str, list[Case]]:
    if suite not in ("quick", "full"):
        raise ValueError(f"suite must be 'quick' or 'full', not {suite!r}")
    return {
        "launch": launch_cases(suite, device),
        "copy": copy_cases(suite),
        "reduce": reduce_cases(suite),
        "gemm": gemm_cases(suite, device, fp8=fp8, sm_count=sm_count),
        "attention": attention_cases(suite, device),
        "rmsnorm": rmsnorm_cases(suite),
        "swiglu": swiglu_cases(suite),
        "rotary": rotary_cases(suite),
        "residual": residual_cases(suite),
        "instream": instream_cases(suite),
        "layer": layer_cases(suite, device),
        "power": power_cases(suite, device, fp8=fp8),
        "train": _training_cases(suite, device),
        # collective cases depend on the world size; they are made by collectives.py
        "collective": [],
    }


# ---------------------------------------------------------------------------------------------
# rough H200 estimate (planning only)
# ---------------------------------------------------------------------------------------------

H200 = {"bw": 4.3e12, "bf16": 790e12, "fp16": 790e12, "fp8": 1450e12, "tf32": 380e12,
        "fp32": 50e12, "attn": 450e12, "launch": 6e-6}
OVERHEAD_S = 0.05      # inputs, correctness check, Python, per case
TARGET_S = 0.08        # timed region per case (reps chosen to fill it, >= 10 reps)
WARMUP_S = 0.025


def estimate_call_s(case: Case) -> float:
    p = case.params
    r = H200
    if case.kind == "copy":
        return 2 * p["bytes"] / r["bw"] + r["launch"]
    if case.kind == "reduce":
        return p["bytes"] / r["bw"] + r["launch"]
    if case.kind == "gemm":
        m, n, k = p["m"], p["n"], p["k"]
        e = {"fp8": 1, "fp32": 4, "tf32": 4}.get(p["dtype"], 2)
        oe = 2 if p["dtype"] in ("fp8", "bf16", "fp16") else 4
        byt = (m * k + k * n) * e + m * n * oe
        return max(gemm_flops(m, n, k) / r[p["dtype"]], byt / r["bw"]) + r["launch"]
    if case.kind == "attention":
        return max(attention_flops(p) / r["attn"], attention_bytes(p) / r["bw"]) + r["launch"]
    if case.kind == "rmsnorm" or case.kind == "residual":
        n = 3 if case.kind == "residual" else 2
        return n * p["tokens"] * p["hidden"] * 2 / r["bw"] + r["launch"]
    if case.kind == "swiglu":
        return 5 * p["tokens"] * p["width"] * 2 / r["bw"] + 2 * r["launch"]
    if case.kind == "rotary":
        return 8 * p["tokens"] * p["heads"] * p["head_dim"] * 2 / r["bw"] + 8 * r["launch"]
    if case.kind == "launch":
        return 1000 * r["launch"]
    if case.kind == "instream":
        inner = {k: v for k, v in p.items() if k not in ("op", "copies")}
        return p["copies"] * estimate_call_s(Case(p["op"], inner, ""))
    if case.kind == "layer":
        h, nh, nkv, d, inter, tp = (p[x] for x in ("hidden", "heads", "kv_heads", "head_dim",
                                                      "intermediate", "tp"))
        t = p["batch"] * p["seq"]
        w = h * (nh // tp + 2 * max(1, nkv // tp)) * d + (nh // tp) * d * h + 3 * h * inter // tp
        fl = 2 * t * w
        kv = kv_cache_bytes(p["batch"], max(1, nkv // tp), p["context"] + p["seq"], d)
        return max(fl / r["bf16"], (2 * w + kv) / r["bw"]) + 20 * r["launch"]
    return 1e-3


def estimate_case_s(case: Case) -> float:
    if case.kind in ("train_kernel", "train_step"):
        from .training import estimate_case_s as training_estimate

        return training_estimate(case)
    if case.kind == "power":
        return 2.0  # a sustained loop of 1.5 s, plus set-up
    call = estimate_call_s(case)
    if case.kind == "launch":
        return OVERHEAD_S + 8 * call
    reps = max(10, min(200, round(TARGET_S / call)))
    flush = 256 * MB / H200["bw"]
    warm = max(WARMUP_S, 2 * call) + 3 * (call + flush)
    return OVERHEAD_S + warm + reps * (call + flush)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="print the calibration plan: cases and H200 estimate")
    ap.add_argument("--suite", default="full", choices=("quick", "full"))
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    total_n = 0
    total_s = 0.0
    print(f"{'family':<12}{'cases':>7}{'est_s':>9}")
    for fam, cases in plan(args.suite, args.device).items():
        s = sum(estimate_case_s(c) for c in cases)
        total_n += len(cases)
        total_s += s
        extra = ""
        if fam == "gemm":
            by: dict[str, int] = {}
            for c in cases:
                by[c.params["dtype"]] = by.get(c.params["dtype"], 0) + 1
            extra = "  " + " ".join(f"{k}={v}" for k, v in by.items())
        print(f"{fam:<12}{len(cases):>7}{s:>9.1f}{extra}")
    print(f"{'total':<12}{total_n:>7}{total_s:>9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
