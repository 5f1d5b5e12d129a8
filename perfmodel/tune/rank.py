"""Rank a kernel's configurations for one shape by predicted time: what ``perfmodel tune`` prints."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..dtypes import bytes_per_element
from ..errors import InputError
from .attention_model import predict_attention_space
from .gemm_model import Prediction, predict_gemm_space, rank_key
from .machine import machine
from .resources import check_generation
from .space import attention_space, gemm_space

TUNE_DTYPES = ("bf16", "fp16", "fp8")


@dataclass
class Ranking:
    kernel: str  # gemm | attention
    shape: dict
    hardware: str
    calibration: str
    ranked: list[Prediction]  # valid configurations, fastest first
    invalid: list[Prediction]
    constants: str = "estimates"  # where the model's constants come from (a tune profile, or the estimates)

    @property
    def considered(self) -> int:
        return len(self.ranked) + len(self.invalid)

    def invalid_reasons(self) -> dict[str, int]:
        """How many configurations each limit ruled out (the limit's kind, not its numbers)."""
        return dict(Counter(p.reasons[0].split(" ")[0] + " " + p.reasons[0].split(" ")[1] for p in self.invalid))


def _positive(name: str, v: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise InputError(f"expected a positive integer, got {v!r}", field=f"--{name.replace('_', '-')}")
    return v


def _dtype(dtype: str) -> str:
    if dtype not in TUNE_DTYPES:
        raise InputError(f"expected one of {', '.join(TUNE_DTYPES)}, got {dtype!r}", field="--dtype")
    return dtype


def rank_gemm(hw, prof, m: int, n: int, k: int, dtype: str = "bf16", grid: str = "full", consts=None,
              source: str = "estimates") -> Ranking:
    """``consts``: the model's constants (:mod:`.constants`); None: the estimates, with the profile's."""
    for name, v in (("m", m), ("n", n), ("k", k)):
        _positive(name, v)
    check_generation(hw)
    _dtype(dtype)
    mach = machine(hw, prof, dtype, consts)
    preds = predict_gemm_space(m, n, k, gemm_space(m, n, k, hw.sm_count, grid), mach, hw, dtype)
    if dtype == "fp8":  # fp8 MMAs take K in steps of 32
        preds = [p for p in preds if p.config.block_k >= 32]
    preds.sort(key=rank_key)
    return Ranking("gemm", {"m": m, "n": n, "k": k, "dtype": dtype}, hw.key, prof.label,
                   [p for p in preds if p.valid], [p for p in preds if not p.valid], source)


def rank_attention(hw, prof, batch: int, heads_q: int, heads_kv: int, seq_q: int, seq_kv: int, head_dim: int,
                   causal: bool, dtype: str = "bf16", consts=None, source: str = "estimates") -> Ranking:
    for name, v in (("batch", batch), ("heads", heads_q), ("kv_heads", heads_kv), ("seq_q", seq_q),
                    ("seq_kv", seq_kv), ("head_dim", head_dim)):
        _positive(name, v)
    if heads_q % heads_kv:
        raise InputError(f"--kv-heads {heads_kv} must divide --heads {heads_q}", field="--kv-heads")
    if head_dim not in (16, 32, 64, 128, 256):
        raise InputError(f"expected a power of two from 16 to 256, got {head_dim}", field="--head-dim")
    if causal and seq_q > seq_kv:
        raise InputError(f"causal attention needs seq_q <= seq_kv, got {seq_q} > {seq_kv}", field="--seq-q")
    check_generation(hw)
    _dtype(dtype)
    if dtype == "fp8":
        raise InputError("the flash-attention kernel runs bf16 or fp16", field="--dtype")
    mach = machine(hw, prof, dtype, consts)
    shape = {"batch": batch, "heads_q": heads_q, "heads_kv": heads_kv, "seq_q": seq_q, "seq_kv": seq_kv,
             "head_dim": head_dim, "causal": causal, "dtype": dtype}
    preds = predict_attention_space(shape, attention_space(seq_q), mach, hw, dtype)
    preds.sort(key=rank_key)
    return Ranking("attention", shape, hw.key, prof.label, [p for p in preds if p.valid],
                   [p for p in preds if not p.valid], source)


# Families whose best member is predicted within this fraction of the best configuration compete for the
# proposals before second members of any family do. With the fitted constants of calibration/h200-tune
# plain predicted order (0) holds the exhaustive best within 2% on more shapes of the 5-fold
# cross-validation than any band tried (52 of 62 shapes at 0, 51 at 0.03 and 0.08, 49 at 0.15 to 1.0):
# the stage and GROUP_M variants of the best family are worth their places.
PROPOSAL_BAND = 0.0


def family_of(cfg) -> tuple:
    """The knobs that change the kernel's structure (tile, warps, split); stages and GROUP_M are second order."""
    return (cfg.block_m, cfg.block_n, getattr(cfg, "block_k", 0), cfg.num_warps, getattr(cfg, "split_k", 1))


def proposals(r: Ranking, k: int, band: float | None = None) -> list[Prediction]:
    """The k configurations to measure: the best member of each structurally different family predicted
    within ``band`` (PROPOSAL_BAND) of the best, fastest first; then the remaining configurations in
    predicted order."""
    band = PROPOSAL_BAND if band is None else band
    if not r.ranked:
        return []
    best = r.ranked[0].time_s
    picked: list[Prediction] = []
    seen = set()
    for p in r.ranked:
        if len(picked) >= k or p.time_s > best * (1.0 + band):
            break
        fam = family_of(p.config)
        if fam not in seen:
            seen.add(fam)
            picked.append(p)
    chosen = {id(p) for p in picked}
    for p in r.ranked:
        if len(picked) >= k:
            break
        if id(p) not in chosen:
            picked.append(p)
    return sorted(picked, key=lambda p: r.ranked.index(p))


def _flops(r: Ranking) -> float:
    s = r.shape
    if r.kernel == "gemm":
        return 2.0 * s["m"] * s["n"] * s["k"]
    from ..ops import causal_pairs

    return 4.0 * s["batch"] * s["heads_q"] * causal_pairs(s["seq_q"], s["seq_kv"], s["causal"]) * s["head_dim"]


def ranking_dict(r: Ranking, top: int) -> dict:
    flops = _flops(r)
    rows = []
    for i, p in enumerate(proposals(r, top), start=1):
        parts = {k: (round(v, 9) if isinstance(v, float) else v) for k, v in p.parts.items()}
        rows.append({"rank": i, "config": p.config.as_dict(), "key": p.config.key, "time_s": p.time_s,
                     "tflops": flops / p.time_s / 1e12, "bound": p.bound, "parts": parts, "reasons": p.reasons})
    return {"kernel": r.kernel, "shape": r.shape, "proposal_band": PROPOSAL_BAND, "hardware": r.hardware,
            "calibration": r.calibration, "constants": r.constants, "considered": r.considered,
            "valid": len(r.ranked), "invalid": len(r.invalid), "invalid_reasons": r.invalid_reasons(), "top": rows}


def ranking_table(r: Ranking, top: int) -> str:
    flops = _flops(r)
    shape = ", ".join(f"{k} {v}" for k, v in r.shape.items())
    lines = [f"Triton {r.kernel} on {r.hardware} ({shape}); calibration: {r.calibration}; constants: {r.constants}",
             f"{r.considered} configurations, {len(r.ranked)} valid; ruled out: "
             + (", ".join(f"{n} by {why}" for why, n in sorted(r.invalid_reasons().items())) or "none"), ""]
    if r.kernel == "gemm":
        head = f"{'#':>3}  {'BM':>4} {'BN':>4} {'BK':>4} {'GM':>3} {'W':>2} {'S':>2} {'SK':>3}"
    else:
        head = f"{'#':>3}  {'BM':>4} {'BN':>4} {'W':>2} {'S':>2}"
    lines.append("proposals: in predicted order" if PROPOSAL_BAND <= 0 else
                 f"proposals: the best of each tile/warps/split family within {PROPOSAL_BAND:.0%} of the best "
                 f"prediction, then the rest in predicted order")
    lines.append(f"{head}  {'time':>10} {'TFLOP/s':>8}  {'CTA/SM':>6}  reasons")
    for i, p in enumerate(proposals(r, top), start=1):
        c = p.config
        if r.kernel == "gemm":
            cols = (f"{i:>3}  {c.block_m:>4} {c.block_n:>4} {c.block_k:>4} {c.group_m:>3} {c.num_warps:>2} "
                    f"{c.num_stages:>2} {c.split_k:>3}")
        else:
            cols = f"{i:>3}  {c.block_m:>4} {c.block_n:>4} {c.num_warps:>2} {c.num_stages:>2}"
        lines.append(f"{cols}  {p.time_s * 1e6:>8.1f}us {flops / p.time_s / 1e12:>8.1f}  "
                     f"{p.footprint.ctas_per_sm:>6}  {'; '.join(p.reasons)}")
    return "\n".join(lines)


def element_bytes(dtype: str) -> float:
    return bytes_per_element(dtype)
