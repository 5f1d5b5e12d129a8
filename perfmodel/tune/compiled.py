"""What the compiler reported for the kernels that were timed: registers, spills and shared memory per
configuration, for the resource model to use instead of its formula where the compiler has spoken.

    python -m perfmodel.tune.compiled --from calibration/h200-tune --out perfmodel/tune/data/compiled_sm90.jsonl

A measurement run records, for every configuration it compiles, Triton's own figures for the compiled
kernel (``regs``, ``spills``: 32-bit words of local memory a thread, ``smem_bytes``). They depend on the
configuration and on how Triton specialised the kernel (K a multiple of 16 or not, K a multiple of
BLOCK_K x SPLIT_K or not, split-K's fp32 output), never on the shape's sizes otherwise, nor on any
timing: this table is compiler output, like ``data/compile_sm90.jsonl``, but of the kernel exactly as the
device compiled it for timing (the probe's kernel is specialised differently and reports fewer registers
for the large wgmma tiles). It serves the Triton version and architecture it was made with; elsewhere the
formula of :mod:`.resources` is used.
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

from .. import generations

TABLE = Path(__file__).resolve().parent / "data" / "compiled_sm90.jsonl"
TABLE_SM = 90  # the compute capability the table was compiled for (sm_90: its file name)


def _gemm_key(block_m, block_n, block_k, num_warps, num_stages, split: bool, aligned: bool, even_k: bool) -> tuple:
    return ("gemm", block_m, block_n, block_k, num_warps, num_stages, bool(split), bool(aligned), bool(even_k))


def _attention_key(block_m, block_n, num_warps, num_stages, causal: bool, head_dim: int) -> tuple:
    return ("attention", block_m, block_n, num_warps, num_stages, bool(causal), head_dim)


def records_from_rows(rows) -> list[dict]:
    """One record per compiled kernel variant (the largest figures where runs disagree by a few registers)."""
    from .space import parse_attention_key, parse_gemm_key

    table: dict[tuple, dict] = {}
    for r in rows:
        if not isinstance(r, dict) or not r.get("config") or "regs" not in r or r.get("spills") is None:
            continue
        s = r.get("shape") or {}
        try:
            if r["kind"] == "gemm":
                c = parse_gemm_key(r["key"])
                rec = {"kind": "gemm", "block_m": c.block_m, "block_n": c.block_n, "block_k": c.block_k,
                       "num_warps": c.num_warps, "num_stages": c.num_stages, "split": c.split_k > 1,
                       "aligned": s["k"] % 16 == 0, "even_k": s["k"] % (c.block_k * c.split_k) == 0}
                key = _gemm_key(*(rec[f] for f in ("block_m", "block_n", "block_k", "num_warps", "num_stages",
                                                   "split", "aligned", "even_k")))
            elif r["kind"] == "attention":
                c = parse_attention_key(r["key"])
                rec = {"kind": "attention", "block_m": c.block_m, "block_n": c.block_n, "num_warps": c.num_warps,
                       "num_stages": c.num_stages, "causal": bool(s["causal"]), "head_dim": int(s["head_dim"])}
                key = _attention_key(*(rec[f] for f in ("block_m", "block_n", "num_warps", "num_stages", "causal",
                                                        "head_dim")))
            else:
                continue
        except (KeyError, ValueError, TypeError):
            continue
        old = table.get(key)
        figures = {"regs": int(r["regs"]), "spills": int(r["spills"]), "smem_bytes": int(r.get("smem_bytes") or 0)}
        if old is not None:
            figures = {k: max(old[k], v) for k, v in figures.items()}
        table[key] = {**rec, **figures}
    return [table[k] for k in sorted(table)]


@functools.lru_cache(maxsize=4)
def _load(path: str) -> dict[tuple, tuple[int, int]]:
    out: dict[tuple, tuple[int, int]] = {}
    p = Path(path)
    if not p.is_file():
        return out
    for line in p.read_text().splitlines():
        try:
            r = json.loads(line)
            if r["kind"] == "gemm":
                key = _gemm_key(r["block_m"], r["block_n"], r["block_k"], r["num_warps"], r["num_stages"], r["split"],
                                r["aligned"], r["even_k"])
            else:
                key = _attention_key(r["block_m"], r["block_n"], r["num_warps"], r["num_stages"], r["causal"],
                                     r["head_dim"])
            out[key] = (int(r["regs"]), int(r["spills"]))
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
    return out


def _usable(hw, dtype: str) -> bool:
    return generations.sm_version(getattr(hw, "generation", "")) == TABLE_SM and dtype in ("bf16", "fp16")


def gemm_resources(hw, cfg, dtype: str, aligned: bool, even_k: bool) -> tuple[int, int] | None:
    """(registers, spilled words) the compiler reported for this kernel variant, or None. A variant
    measured only with the other EVEN_K, or another num_stages, stands in for it (registers move by a
    few at most between those in the table)."""
    if not _usable(hw, dtype):
        return None
    table = _load(str(TABLE))
    split = cfg.split_k > 1
    for ek in (even_k, not even_k):
        hit = table.get(_gemm_key(cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_warps, cfg.num_stages, split,
                                  aligned, ek))
        if hit:
            return hit
    for st in sorted({2, 3, 4, 5} - {cfg.num_stages}, key=lambda s: abs(s - cfg.num_stages)):
        for ek in (even_k, not even_k):
            hit = table.get(_gemm_key(cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_warps, st, split, aligned, ek))
            if hit:
                return hit
    return None


def attention_resources(hw, cfg, head_dim: int, dtype: str, causal: bool) -> tuple[int, int] | None:
    if not _usable(hw, dtype):
        return None
    table = _load(str(TABLE))
    for c in (causal, not causal):
        hit = table.get(_attention_key(cfg.block_m, cfg.block_n, cfg.num_warps, cfg.num_stages, c, head_dim))
        if hit:
            return hit
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfmodel.tune.compiled", description=__doc__.split("\n")[0])
    ap.add_argument("--from", dest="src", required=True, help="folder (or file) of tuning measurements")
    ap.add_argument("--out", default=str(TABLE))
    args = ap.parse_args(argv)
    from ..measure.store import iter_rows
    from ..io import write_text_atomic
    from .dataset import measurement_files

    rows = [r for f in measurement_files(args.src) for r in iter_rows(f)]
    recs = records_from_rows(rows)
    write_text_atomic(Path(args.out), "".join(json.dumps(r, sort_keys=True) + "\n" for r in recs))
    print(f"{len(recs)} compiled kernel variants from {len(rows)} rows -> {args.out}", file=sys.stderr)
    _load.cache_clear()
    return 0


if __name__ == "__main__":
    sys.exit(main())
